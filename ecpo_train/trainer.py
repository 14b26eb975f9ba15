"""The native single-process ECPO trainer: the paper's Algorithm 1, CleanRL-style.

Each iteration reads top to bottom:

    A  rollout   ``collect_rollout``: G groups x N copies of one task each, sampled from pi_old
    B-D credit   ``compute_advantages(algorithm, ...)``: anchors (B), ECA (C), VarGate (D) -- all inside
                 ``ecpo_train/credit.py``; PPO instead fits a critic and uses GAE
    E  update    ``policy_update``: eq. ecpo_objective (clipped ratio, k3 KL to pi_ref), AdamW
    then         validation at temperature 0.4 on a fixed task list, metrics, checkpoint.

All hyperparameters live in ``TrainConfig`` (presets in ``ecpo_train/configs/*.yaml``); ``load_config``
applies ``key=value`` overrides with type checks. A run directory holds ``config.yaml``,
``metrics.jsonl`` (one line per iteration), TensorBoard events, ``checkpoint.pt`` and ``curves.png``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import random
import time
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from ecpo_gym.group import GroupVectorEnv
from ecpo_train.credit import CreditConfig, available_estimators, compute_advantages
from ecpo_train.loss import UpdateSettings, policy_update
from ecpo_train.policies.base import Policy
from ecpo_train.rollout import ANCHOR_KEYS, Rollout, collect_rollout, episode_metrics

CONFIG_DIR = Path(__file__).resolve().parent / "configs"


@dataclass
class TrainConfig:
    """Every knob of a training run (defaults = the paper's ALFWorld values, App. A)."""

    # run
    run_dir: str = "runs/ecpo"
    seed: int = 0
    iterations: int = 150
    device: str = "cpu"
    # environment
    env_id: str = "ecpo/ALFWorldGen-v0"
    env_kwargs: dict = field(default_factory=dict)  # e.g. {max_steps: 50}
    env_workers: int = 0  # 0 = every copy in this process
    train_tasks: list | None = None  # None = every task id of the environment
    val_tasks: list | None = None  # None = the first val_num_tasks of the environment's task ids
    val_num_tasks: int = 16
    val_every: int = 10  # iterations between validations, plus the first and last iteration (0 = never)
    val_episodes_per_task: int = 1
    # group rollout (step A)
    n_groups: int = 16
    group_size: int = 8
    rollout_temperature: float = 1.0
    val_temperature: float = 0.4
    history_length: int = 2
    # policy
    policy: str = "llm"  # "llm" (transformers) | "tabular"
    model: str = ""  # local path or hub id of a causal LM (policy=llm)
    dtype: str = "float32"
    max_prompt_length: int = 2048
    max_response_length: int = 512
    generation_backend: str = "transformers"  # "transformers" | "vllm" (GPU; weights synced after each update)
    vllm_kwargs: dict = field(default_factory=dict)  # extra vllm.LLM arguments, e.g. {gpu_memory_utilization: 0.5}
    # credit (steps B-D)
    algorithm: str = "ecpo"  # a credit estimator name, or "ppo" (learned critic + GAE)
    anchor_key: str = "state_key"  # "state_key" | "observation_key" (the paper's text anchor)
    # the paper's defaults live once, in credit.CreditConfig
    gamma: float = CreditConfig.gamma
    omega: float = CreditConfig.omega
    kappa: float = CreditConfig.kappa
    tau: float = CreditConfig.tau
    d_min: int = CreditConfig.d_min
    rho_min: float = CreditConfig.rho_min
    gae_lambda: float = 0.95  # ppo only
    # update (step E)
    lr: float = 1e-6
    critic_lr: float = 1e-5  # ppo only
    weight_decay: float = 0.0
    kl_coef: float = 0.01
    clip_eps: float = 0.2
    entropy_coef: float = 0.0
    mini_batch_size: int = 256
    micro_batch_size: int = 8
    update_epochs: int = 1
    max_grad_norm: float = 1.0
    # bookkeeping
    checkpoint_every: int = 10  # 0 = only at the end
    tensorboard: bool = True
    progress: bool = True

    def __post_init__(self) -> None:
        algorithms = available_estimators() + ["ppo"]
        if self.algorithm not in algorithms:
            raise ValueError(f"algorithm={self.algorithm!r}; valid: {', '.join(algorithms)}")
        if self.anchor_key not in ANCHOR_KEYS:
            raise ValueError(f"anchor_key={self.anchor_key!r}; valid: {', '.join(ANCHOR_KEYS)}")
        if self.policy not in ("llm", "tabular"):
            raise ValueError(f"policy={self.policy!r}; valid: llm, tabular")
        if self.policy == "llm" and not self.model:
            raise ValueError("policy=llm needs model=<local path or hub id>")
        if self.generation_backend not in ("transformers", "vllm"):
            raise ValueError(f"generation_backend={self.generation_backend!r}; valid: transformers, vllm")
        if self.generation_backend == "vllm" and self.policy != "llm":
            raise ValueError("generation_backend=vllm needs policy=llm (the tabular policy samples in torch)")
        for name in ("n_groups", "group_size", "iterations", "mini_batch_size", "micro_batch_size", "update_epochs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    def credit_hyperparameters(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(CreditConfig) if hasattr(self, f.name)}

    def update_settings(self) -> UpdateSettings:
        return UpdateSettings(clip_eps=self.clip_eps, kl_coef=self.kl_coef, entropy_coef=self.entropy_coef,
                              mini_batch_size=self.mini_batch_size, micro_batch_size=self.micro_batch_size,
                              epochs=self.update_epochs, max_grad_norm=self.max_grad_norm)


# ---------------------------------------------------------------------------------------------- config I/O
def _check_type(name: str, value: Any, annotation: Any) -> Any:
    """Coerce/validate one config value against its dataclass annotation (clear error otherwise)."""
    hint = eval(annotation, {}, {}) if isinstance(annotation, str) else annotation
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    for option in options:
        base = typing.get_origin(option) or option
        if option is type(None) and value is None:
            return None
        if base is bool and isinstance(value, bool):
            return value
        if base is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if base is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if base is float and isinstance(value, str):  # YAML 1.1 reads "1e-6" (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
        if base in (str, dict, list) and isinstance(value, base):
            return value
    expected = " or ".join(getattr(o, "__name__", str(o)) for o in options)
    raise ValueError(f"config key {name!r} expects {expected}, got {value!r} ({type(value).__name__})")


def apply_overrides(values: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Apply ``key=value`` strings (values parsed as YAML; ``env_kwargs.max_steps=10`` sets a dict entry)."""
    valid = {f.name for f in dataclasses.fields(TrainConfig)}
    values = dict(values)
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"override {item!r} is not key=value")
        key, raw = item.split("=", 1)
        key = key.strip()
        value = yaml.safe_load(raw) if raw.strip() else ""
        head, _, sub = key.partition(".")
        if head not in valid:
            raise ValueError(f"unknown config key {head!r}; valid keys: {', '.join(sorted(valid))}")
        if sub:
            nested = dict(values.get(head) or {})
            nested[sub] = value
            values[head] = nested
        else:
            values[key] = value
    return values


def make_config(values: dict[str, Any]) -> TrainConfig:
    """A ``TrainConfig`` from a plain dict, rejecting unknown keys and wrong types."""
    fields_by_name = {f.name: f for f in dataclasses.fields(TrainConfig)}
    unknown = sorted(set(values) - set(fields_by_name))
    if unknown:
        raise ValueError(f"unknown config key(s) {unknown}; valid keys: {', '.join(sorted(fields_by_name))}")
    checked = {name: _check_type(name, value, fields_by_name[name].type) for name, value in values.items()}
    return TrainConfig(**checked)


def load_config(path: str | Path | None = None, overrides: Sequence[str] = ()) -> TrainConfig:
    """Read a YAML preset (a path, or a preset name in ``ecpo_train/configs/``) and apply overrides."""
    values: dict[str, Any] = {}
    if path is not None:
        file = Path(path)
        if not file.exists() and (CONFIG_DIR / f"{path}.yaml").exists():
            file = CONFIG_DIR / f"{path}.yaml"
        if not file.exists():
            presets = ", ".join(sorted(p.stem for p in CONFIG_DIR.glob("*.yaml")))
            raise FileNotFoundError(f"config {path} not found (presets in {CONFIG_DIR}: {presets})")
        values = yaml.safe_load(file.read_text()) or {}
        if not isinstance(values, dict):
            raise ValueError(f"config {file} must be a YAML mapping of key: value")
    return make_config(apply_overrides(values, overrides))


# ---------------------------------------------------------------------------------------------- building blocks
def build_policy(config: TrainConfig) -> Policy:
    if config.policy == "tabular":
        from ecpo_train.policies.tabular import TabularSoftmaxPolicy

        return TabularSoftmaxPolicy(seed=config.seed)
    from ecpo_train.policies.llm import TransformersPolicy

    return TransformersPolicy(
        config.model, env_name=config.env_id, max_prompt_length=config.max_prompt_length,
        max_response_length=config.max_response_length, device=config.device, dtype=config.dtype,
        history_length=config.history_length, generation_backend=config.generation_backend,
        vllm_kwargs=config.vllm_kwargs, seed=config.seed,
    )


def build_critic(config: TrainConfig, policy: Policy) -> torch.nn.Module:
    from ecpo_train.policies.critic import LLMValueCritic, TabularCritic

    if config.policy == "tabular":
        return TabularCritic()
    return LLMValueCritic(config.model, pad_token_id=policy.pad_token_id,  # type: ignore[attr-defined]
                          dtype=getattr(torch, config.dtype), device=config.device)


def exact_success(policy: Policy, env_id: str, env_kwargs: dict, task_ids: Sequence[str],
                  temperature: float) -> float | None:
    """Noise-free validation: the exact mean success probability over ``task_ids`` at ``temperature``.

    Only where both sides allow it: an environment exposing its exact MDP (``transition_model`` and
    ``initial_state``, the diagnostic corridors) and a policy giving its action distribution
    (``action_probabilities``, the tabular policy). Success is computed by finite-horizon dynamic programming
    over the env's ``max_steps`` (``ecpo_gym.diagnostic.dp``); otherwise ``None``.
    """
    import gymnasium as gym

    from ecpo_gym.diagnostic.dp import success_probability

    if not hasattr(policy, "action_probabilities"):
        return None
    entry = gym.spec(env_id).entry_point
    env_class = gym.envs.registration.load_env_creator(entry) if isinstance(entry, str) else entry
    if not (hasattr(env_class, "transition_model") and hasattr(env_class, "initial_state")):
        return None
    env = env_class(**env_kwargs)
    try:
        wins = []
        for task_id in task_ids:
            model = env.transition_model(task_id)
            distribution = {state: policy.action_probabilities(state, list(actions), temperature=temperature)
                            for state, actions in model.items()}
            wins.append(success_probability(model, env.initial_state(task_id), horizon=env.max_steps,
                                            policy=distribution))
    finally:
        env.close()
    return float(np.mean(wins)) if wins else None


def pad_logprobs(old_logprobs: Sequence[Sequence[float]]) -> tuple[torch.Tensor, torch.Tensor]:
    """``[rows, L]`` old log-probs and their response mask from per-row lists."""
    width = max((len(r) for r in old_logprobs), default=1) or 1
    values = torch.zeros(len(old_logprobs), width)
    mask = torch.zeros(len(old_logprobs), width)
    for row, logp in enumerate(old_logprobs):
        if len(logp):
            values[row, : len(logp)] = torch.as_tensor(list(logp), dtype=torch.float32)
            mask[row, : len(logp)] = 1.0
    return values, mask



@contextlib.contextmanager
def _sampling_state_restored(policy: Any):
    """Put back every random stream a policy samples from (torch CPU/CUDA, a policy's own generator)."""
    cpu = torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    own = getattr(policy, "generator", None)
    own_state = own.get_state() if isinstance(own, torch.Generator) else None
    try:
        yield
    finally:
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
        if own_state is not None:
            own.set_state(own_state)

class Trainer:
    """Owns the policy, reference, optimizer(s), environments, RNGs and the run directory."""

    def __init__(self, config: TrainConfig) -> None:
        self.config = config
        self.run_dir = Path(config.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        random.seed(config.seed)
        np.random.seed(config.seed)
        torch.manual_seed(config.seed)
        self.rng = np.random.default_rng(config.seed)
        self.policy = build_policy(config)
        self.reference = self.policy.frozen_copy() if config.kl_coef > 0 else None
        self.optimizer = torch.optim.AdamW(self.policy.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        self.critic = self.critic_optimizer = None
        if config.algorithm == "ppo":
            self.critic = build_critic(config, self.policy)
            self.critic_optimizer = torch.optim.AdamW(self.critic.parameters(), lr=config.critic_lr,
                                                      weight_decay=config.weight_decay)
        self.envs = GroupVectorEnv(config.env_id, config.n_groups, config.group_size,
                                   num_workers=config.env_workers, env_kwargs=config.env_kwargs)
        all_tasks = list(self.envs.task_ids)
        self.train_tasks = [str(t) for t in (config.train_tasks or all_tasks)]
        self.val_tasks = [str(t) for t in (config.val_tasks or all_tasks[: config.val_num_tasks])]
        self.val_envs: GroupVectorEnv | None = None
        self.iteration = 0
        self.history: list[dict[str, float]] = []
        self._writer: Any = None
        (self.run_dir / "config.yaml").write_text(yaml.safe_dump(dataclasses.asdict(config), sort_keys=False))

    # ------------------------------------------------------------------ Algorithm 1, one iteration
    def train_iteration(self) -> dict[str, float]:
        cfg = self.config
        started = time.perf_counter()
        self.policy.eval()
        task_ids = [self.train_tasks[int(k)] for k in self.rng.integers(len(self.train_tasks), size=cfg.n_groups)]
        env_seed = int(self.rng.integers(2**31 - 1))

        # Step A: group rollout collection from pi_old (= the current policy before this update)
        rollout = collect_rollout(self.envs, self.policy, task_ids, env_name=cfg.env_id,
                                  temperature=cfg.rollout_temperature, seed=env_seed,
                                  anchor_key=cfg.anchor_key, history_length=cfg.history_length)
        batch = rollout.batch

        # Steps B-D: anchors, ECA, VarGate -> one advantage per step row (or PPO's GAE on a learned critic)
        credit_started = time.perf_counter()
        if cfg.algorithm == "ppo":
            step_advantages, credit_diag = self.ppo_advantages(rollout)
        else:
            step_advantages, credit_diag = compute_advantages(cfg.algorithm, **batch.credit_arrays(),
                                                              **cfg.credit_hyperparameters())
        credit_seconds = time.perf_counter() - credit_started

        # Step E: optimise eq. ecpo_objective; every token of an action gets its step's advantage. The policy
        # stays in eval mode (dropout off) so the learner scores the very distribution the rollout sampled
        # from: at theta = theta_old the ratio is exactly 1 and the KL to the (eval-mode) reference is 0.
        update_started = time.perf_counter()
        update_stats = self.update_policy(rollout, torch.as_tensor(np.asarray(step_advantages), dtype=torch.float32))
        self.policy.sync_generation_weights()  # vLLM generation: the next rollout samples from the new weights
        update_seconds = time.perf_counter() - update_started
        self.iteration += 1

        metrics: dict[str, float] = {"iteration": float(self.iteration), "num_steps": float(len(batch))}
        metrics |= rollout.metrics
        metrics |= {f"credit/{k}": float(v) for k, v in credit_diag.items()}
        metrics |= {f"update/{k}": float(v) for k, v in update_stats.items()}
        metrics |= {"time/generation": rollout.generation_seconds, "time/env": rollout.env_seconds,
                    "time/credit": credit_seconds, "time/update": update_seconds}
        if cfg.val_every and (self.iteration % cfg.val_every == 0 or self.iteration in (1, cfg.iterations)):
            val_started = time.perf_counter()
            metrics |= self.validate()
            metrics["time/validation"] = time.perf_counter() - val_started
        metrics["time/iteration"] = time.perf_counter() - started
        return metrics

    def ppo_advantages(self, rollout: Rollout) -> tuple[np.ndarray, dict[str, float]]:
        """PPO baseline: fit V on GAE targets from the current critic, return whitened GAE advantages."""
        from ecpo_train.policies.critic import critic_update, gae_advantages

        assert self.critic is not None and self.critic_optimizer is not None
        batch, cfg = rollout.batch, self.config
        prompts, keys = batch.extras["prompt_ids"], batch.extras["policy_state_key"]
        with torch.no_grad():
            values = np.concatenate([
                self.critic.values(prompts[i : i + cfg.micro_batch_size], keys[i : i + cfg.micro_batch_size]).cpu().numpy()
                for i in range(0, len(batch), cfg.micro_batch_size)
            ])
        advantages, targets = gae_advantages(batch.traj_id.astype(np.int64), batch.step, batch.reward, values,
                                             cfg.gamma, cfg.gae_lambda)
        stats = critic_update(self.critic, self.critic_optimizer, prompts, keys, targets,
                              mini_batch_size=cfg.mini_batch_size, micro_batch_size=cfg.micro_batch_size,
                              max_grad_norm=cfg.max_grad_norm, generator=self.rng)
        whitened = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        return whitened, stats | {"value_mean": float(values.mean()), "advantage_std": float(advantages.std())}

    def update_policy(self, rollout: Rollout, step_advantages: torch.Tensor) -> dict[str, float]:
        extras = rollout.batch.extras
        prompts, responses = extras["prompt_ids"], extras["response_ids"]
        old_logp, old_mask = pad_logprobs(extras["old_logprobs"])
        want_entropy = self.config.entropy_coef > 0

        def logprob_fn(rows: np.ndarray):
            return self.policy.logprobs([prompts[i] for i in rows], [responses[i] for i in rows],
                                        temperature=self.config.rollout_temperature, with_entropy=want_entropy)

        ref_fn = None
        if self.reference is not None:
            def ref_fn(rows: np.ndarray) -> torch.Tensor:
                with torch.no_grad():
                    return self.reference.logprobs([prompts[i] for i in rows], [responses[i] for i in rows],
                                                   temperature=self.config.rollout_temperature)[0]

        return policy_update(logprob_fn, ref_fn, list(self.policy.parameters()), self.optimizer, old_logp, old_mask,
                             step_advantages, self.config.update_settings(), self.rng,
                             before_step=lambda: self.policy.grow_optimizer_state(self.optimizer))

    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        """Success on the fixed validation tasks at the validation temperature (``val_episodes_per_task`` each)."""
        cfg = self.config
        if self.val_envs is None:
            self.val_envs = GroupVectorEnv(cfg.env_id, len(self.val_tasks), cfg.val_episodes_per_task,
                                           num_workers=cfg.env_workers,
                                           env_kwargs=cfg.env_kwargs)
        self.policy.eval()
        with _sampling_state_restored(self.policy):  # validating must not change the training run
            rollout = collect_rollout(self.val_envs, self.policy, self.val_tasks, env_name=cfg.env_id,
                                      temperature=cfg.val_temperature, seed=cfg.seed + 7919,
                                      anchor_key=cfg.anchor_key, history_length=cfg.history_length)
        metrics = episode_metrics(rollout.episodes, prefix="val/")
        exact = exact_success(self.policy, cfg.env_id, cfg.env_kwargs, self.val_tasks, cfg.val_temperature)
        if exact is not None:
            metrics["val/exact_success"] = exact
        return metrics

    # ------------------------------------------------------------------ the loop
    def train(self, iterations: int | None = None, on_iteration: Any = None) -> list[dict[str, float]]:
        """Run until ``config.iterations`` (or ``iterations`` more); log, checkpoint, plot at the end."""
        cfg = self.config
        target = cfg.iterations if iterations is None else self.iteration + iterations
        if self.iteration == 0:
            self._keep_metrics_through(0)  # a fresh run in a used run directory starts a fresh log
        progress = _Progress(enabled=cfg.progress, total=target, done=self.iteration, label=cfg.algorithm)
        with progress:
            while self.iteration < target:
                metrics = self.train_iteration()
                self.log(metrics)
                progress.update(metrics)
                if on_iteration is not None:
                    on_iteration(metrics)
                if cfg.checkpoint_every and self.iteration % cfg.checkpoint_every == 0:
                    self.save_checkpoint()
        self.save_checkpoint()
        if self._writer is not None:
            self._writer.flush()
        return self.history

    def log(self, metrics: dict[str, float]) -> None:
        self.history.append(metrics)
        with open(self.run_dir / "metrics.jsonl", "a") as fh:
            fh.write(json.dumps(metrics) + "\n")
        if self.config.tensorboard:
            if self._writer is None:
                from torch.utils.tensorboard import SummaryWriter

                # purge events of this step and later: a resumed (or restarted) run replaces them
                self._writer = SummaryWriter(str(self.run_dir / "tensorboard"), purge_step=self.iteration)
            for key, value in metrics.items():
                if key != "iteration":
                    self._writer.add_scalar(key, value, self.iteration)

    # ------------------------------------------------------------------ checkpoint / exact resume
    def save_checkpoint(self, path: str | Path | None = None) -> Path:
        path = Path(path) if path is not None else self.run_dir / "checkpoint.pt"
        state = {
            "iteration": self.iteration,
            "policy": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "reference": self.reference.state_dict() if self.reference is not None and self.config.policy == "tabular"
            else None,
            "critic": self.critic.state_dict() if self.critic is not None else None,
            "critic_optimizer": self.critic_optimizer.state_dict() if self.critic_optimizer is not None else None,
            "numpy_rng": self.rng.bit_generator.state,
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None,
            "python_rng": random.getstate(),
            "numpy_global_rng": np.random.get_state(),
            "config": dataclasses.asdict(self.config),
        }
        tmp = path.with_suffix(".tmp")
        torch.save(state, tmp)
        tmp.replace(path)
        return path

    def load_checkpoint(self, path: str | Path | None = None) -> None:
        path = Path(path) if path is not None else self.run_dir / "checkpoint.pt"
        if not path.exists():
            raise FileNotFoundError(f"checkpoint {path} not found (runs write it every checkpoint_every iterations)")
        state = torch.load(path, map_location="cpu", weights_only=False)
        self.policy.load_state_dict(state["policy"])
        self.policy.sync_generation_weights()
        self.optimizer.load_state_dict(state["optimizer"])
        if state.get("reference") is not None and self.reference is not None:
            self.reference.load_state_dict(state["reference"])
        if state.get("critic") is not None and self.critic is not None:
            self.critic.load_state_dict(state["critic"])
            self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.rng.bit_generator.state = state["numpy_rng"]
        torch.set_rng_state(state["torch_rng"])
        if state.get("cuda_rng") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])  # the LLM policy samples on the GPU
        random.setstate(state["python_rng"])
        np.random.set_state(state["numpy_global_rng"])
        self.iteration = int(state["iteration"])
        self._keep_metrics_through(self.iteration)

    def _keep_metrics_through(self, iteration: int) -> None:
        """Drop ``metrics.jsonl`` lines after ``iteration`` (logged after the checkpoint, or by an earlier run
        in this run directory), so a resumed run's log holds each iteration once."""
        path = self.run_dir / "metrics.jsonl"
        if not path.exists():
            return
        kept = [line for line in path.read_text().splitlines()
                if line.strip() and json.loads(line).get("iteration", 0) <= iteration]
        path.write_text("".join(line + "\n" for line in kept))
        self.history = [json.loads(line) for line in kept]

    def close(self) -> None:
        self.envs.close()
        if self.val_envs is not None:
            self.val_envs.close()
        if self._writer is not None:
            self._writer.close()


class _Progress:
    """A rich progress bar with the latest success / validation success / KL in its description."""

    def __init__(self, enabled: bool, total: int, done: int, label: str) -> None:
        self.enabled, self.total, self.done, self.label = enabled, total, done, label
        self._progress: Any = None

    def __enter__(self) -> typing.Self:
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), TextColumn("{task.fields[status]}"))
            self._progress.__enter__()
            self._task = self._progress.add_task(self.label, total=self.total, completed=self.done, status="")
        return self

    def update(self, metrics: dict[str, float]) -> None:
        if self._progress is None:
            return
        status = f"success {metrics.get('success', 0):.2f}"
        if "val/success" in metrics:
            status += f" | val {metrics['val/success']:.2f}"
        status += f" | kl {metrics.get('update/kl', 0):.4f} | {metrics.get('time/iteration', 0):.1f}s/it"
        self._progress.update(self._task, advance=1, status=status)

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)


def train(config: TrainConfig, resume: bool = False) -> list[dict[str, float]]:
    """Build a trainer, optionally resume from ``run_dir/checkpoint.pt``, train, and plot the curves."""
    trainer = Trainer(config)
    try:
        if resume and (trainer.run_dir / "checkpoint.pt").exists():
            trainer.load_checkpoint()
        history = trainer.train()
    finally:
        trainer.close()
    from ecpo_train.plotting import plot_run

    plot_run(trainer.run_dir)
    return history
