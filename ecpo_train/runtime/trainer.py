"""The native single-process ECPO trainer: the paper's Algorithm 1 as ``core.iteration.run_iteration`` runs it
(the one order of the steps, both engines), with the sampler and learner of this process
(``runtime/native_step.py``: the environments, FSDP), and the run's checkpoints.

Each iteration reads top to bottom:

    A  rollout   ``collect_rollout``: G groups x N copies of one task each, sampled from pi_old
    B-D credit   ``compute_advantages(estimator, ...)``: anchors (B), ECA (C), VarGate (D) -- all inside
                 ``ecpo_train/core/credit/``; the ``ppo`` estimator takes a critic's values (GAE), and the
                 critic is then fitted to its targets
    E  update    ``policy_update``: eq. ecpo_objective (clipped ratio, k3 KL to pi_ref), AdamW
    then         validation at temperature 0.4 on a fixed task list, metrics, checkpoint.

The data flows one way: env -> ``collect_rollout`` -> ``TrajectoryBatch`` -> ``credit.compute_advantages`` ->
``loss.policy_update`` -> policy. Hyperparameters: ``ecpo_train.runtime.config.TrainConfig`` (presets in
``ecpo_train/runtime/configs/*.yaml``). The run folder (``config.yaml``, ``metrics.jsonl``, ``checkpoint.pt``,
...) is written through ``ecpo_train.runtime.run_dir``, as the RLlib engine's is.
"""

from __future__ import annotations

import contextlib
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ecpo_gym.group import GroupVectorEnv
from ecpo_train.core.iteration import run_iteration, seed_streams
from ecpo_train.core.rollout import Rollout
from ecpo_train.core.tasks import task_lists, validation_seed
from ecpo_train.runtime.builders import build_critic, build_policy, validation_metrics, validation_outcome
from ecpo_train.runtime.checkpoint_io import checkpoint_size, load_checkpoint, save_checkpoint
from ecpo_train.runtime.config import TrainConfig, config_dict
from ecpo_train.runtime.models import model_folder
from ecpo_train.runtime.native_step import EnvGroupSampler, TrainerLearner
from ecpo_train.runtime.progress import Progress
from ecpo_train.runtime.run import run_iterations
from ecpo_train.runtime.run_dir import (
    VALIDATION_TASKS,
    MetricsLog,
    RunFolder,
    check_writable_folder,
)


class _HistoryOnly(MetricsLog):
    """The metrics of an FSDP process other than the main one: kept in memory, never written."""

    def keep_through(self, iteration: int) -> None:
        self.history = [m for m in self.history if m.get("iteration", 0) <= iteration]

    def append(self, metrics: dict[str, float], step: int) -> None:
        self.history.append(metrics)

    def append_validation(self, iteration: int, episodes: Any, tasks: str = VALIDATION_TASKS) -> None:
        pass


class Trainer:
    """Owns the policy, reference, optimizer(s), environments, RNGs and the run directory.

    Under ``fsdp=true`` (K processes started by ``torchrun``; ``ecpo_train/runtime/distributed.py``) every process
    draws the same task groups (same seed, same ``self.rng``), plays its contiguous share of whole groups,
    computes credit on them, and the update's gradient is the one-process gradient (``reducer=``); metrics
    are averaged over processes and only process 0 writes the run folder.
    """

    def __init__(self, config: TrainConfig) -> None:
        self.config = config
        self.run_dir = Path(config.run_dir)
        self.folder = RunFolder(self.run_dir)
        self.dp: Any = None  # ecpo_train.runtime.distributed.DataParallel under fsdp=true
        if config.fsdp:
            from ecpo_train.runtime.distributed import DataParallel, check_fsdp_request

            check_fsdp_request(config.fsdp, config.estimator, config.policy)
            if config.generation_backend == "vllm":
                raise ValueError("fsdp=true samples with the gathered transformers weights: use "
                                 "generation_backend=transformers")
            self.dp = DataParallel(config.resolved_device())
            if config.n_groups % self.dp.world_size:
                raise ValueError(f"n_groups={config.n_groups} must be a multiple of the {self.dp.world_size} "
                                 "processes (each plays whole groups)")
        self.is_main = self.dp is None or self.dp.is_main
        # building writes nothing (a refused start leaves the folder as it was): config.yaml is written with the
        # first metrics (MetricsLog), once ecpo_train.runtime.resume.open_run has checked the start
        check_writable_folder(self.run_dir, f"run_dir={str(self.run_dir)!r}")
        self.rng = seed_streams(config.seed)
        # the environment first: its errors (unknown id, bad env_kwargs, missing data) surface before a model loads
        self.local_groups = config.n_groups // (self.dp.world_size if self.dp is not None else 1)
        self.envs = GroupVectorEnv(config.env_id, self.local_groups, config.group_size,
                                   num_workers=config.env_workers, env_kwargs=config.env_kwargs)
        self.train_tasks, self.val_tasks = task_lists(config, list(self.envs.task_ids))  # refused here, before anything is written
        self.val_envs: GroupVectorEnv | None = None
        self.policy = build_policy(config, device=self.dp.device if self.dp is not None else None)
        self.reference = self.policy.frozen_copy() if config.kl_coef > 0 else None
        if self.dp is not None:  # shard after the reference copy, before the optimizer sees the parameters
            self.dp.shard(self.policy.model, config.mixed_precision)
            if self.reference is not None and getattr(self.policy, "lora_model", None) is None:
                self.dp.shard(self.reference.model, config.mixed_precision)  # (LoRA: the policy, adapter off)
        # under LoRA only the adapter trains: AdamW keeps no state for the frozen base weights
        self.optimizer = torch.optim.AdamW([p for p in self.policy.parameters() if p.requires_grad], lr=config.lr,
                                           weight_decay=config.weight_decay)
        self.critic, self.critic_optimizer = build_critic(config, self.policy)  # (None, None): a critic-free estimator
        self.iteration = 0
        self.metrics_log = (MetricsLog(self.run_dir, tensorboard=config.tensorboard, config=config_dict(config))
                            if self.is_main else _HistoryOnly(self.run_dir, tensorboard=config.tensorboard))
        self.progress: Progress | None = None
        # the last iteration's rollout and its step advantages, for callers that measure the credit itself
        # (benchmarks/credit_study_protocol.py: how often a truly worse action out-scored the best one)
        self.last_rollout: Rollout | None = None
        self.last_advantages: np.ndarray | None = None

    @property
    def history(self) -> list[dict[str, float]]:
        return self.metrics_log.history

    # ------------------------------------------------------------------ Algorithm 1, one iteration
    def train_iteration(self) -> dict[str, float]:
        """One iteration (``core.iteration.run_iteration``) with this process's env group and update
        (``runtime.native_step``)."""
        return run_iteration(self.config, self.iteration, self.rng, self.train_tasks, EnvGroupSampler(self),
                             TrainerLearner(self), self._validate_in_iteration, speaks=self.is_main)

    def _validate_in_iteration(self) -> dict[str, float]:
        self.phase(f"iteration {self.iteration}: validation on {len(self.val_tasks)} tasks")
        return self.validate()

    def gathered(self) -> Any:
        """Sampling under FSDP: the policy's full weights on every process (no collective per token)."""
        return self.dp.gathered(self.policy.model) if self.dp is not None else contextlib.nullcontext()

    @torch.no_grad()
    def validate(self, tasks: Sequence[str] | None = None, label: str = VALIDATION_TASKS) -> dict[str, float]:
        """Success on the fixed validation tasks at the validation temperature (``val_episodes_per_task`` each).
        Every call records its episodes' outcomes in the run folder's ``validation.jsonl`` at the current
        iteration (a validation is a measurement worth keeping, whoever asks for it).

        ``tasks``: another task set (e.g. the training tasks), validated the same way (seed, temperature, copies)
        and recorded under ``label``, so that the configured set's lines still pair by iteration
        (``run_dir.read_validation_file(path, tasks=label)`` reads the others)."""
        cfg = self.config
        if (tasks is None) != (label == VALIDATION_TASKS):
            raise ValueError(f"validate: give another task set a label of its own (not {VALIDATION_TASKS!r}), "
                             "and the configured one (tasks=None) none")
        configured = tasks is None
        tasks, seed = self.val_tasks if configured else [str(t) for t in tasks], validation_seed(cfg.seed)
        if self.dp is not None:  # a contiguous slice per process; each copy keeps its one-process env seed
            start = len(tasks) * self.dp.rank // self.dp.world_size
            tasks = tasks[start : len(tasks) * (self.dp.rank + 1) // self.dp.world_size]
            seed += start * cfg.val_episodes_per_task
        episodes, exact = [], None
        if tasks:
            envs = self.val_envs if configured else None
            if envs is None:  # the configured set's envs are kept for the next validation, another set's closed
                envs = GroupVectorEnv(cfg.env_id, len(tasks), cfg.val_episodes_per_task,
                                      num_workers=cfg.env_workers, env_kwargs=cfg.env_kwargs)
                if configured:
                    self.val_envs = envs
            self.policy.eval()
            try:
                with self.gathered():
                    episodes, exact = validation_outcome(self.policy, cfg, envs, tasks, seed)
            finally:
                if not configured:
                    envs.close()
        if self.dp is not None:  # every process's episodes; exact success weighted by its number of tasks
            import torch.distributed as dist

            parts: list[Any] = [None] * self.dp.world_size
            dist.all_gather_object(parts, (episodes, exact, len(tasks)))
            episodes = [episode for part in parts for episode in part[0]]
            shares = [(value, n) for _, value, n in parts if n]
            exact = None if not shares or any(value is None for value, _ in shares) else \
                sum(value * n for value, n in shares) / sum(n for _, n in shares)
        self.metrics_log.append_validation(self.iteration, episodes, tasks=label)
        return validation_metrics(episodes, exact)

    # ------------------------------------------------------------------ the loop
    def phase(self, text: str) -> None:
        if self.progress is not None:
            self.progress.phase(text)

    def train(self, iterations: int | None = None, on_iteration: Any = None) -> list[dict[str, float]]:
        """Run until ``config.iterations`` (or ``iterations`` more); log, checkpoint, plot at the end."""
        cfg = self.config
        target = cfg.iterations if iterations is None else self.iteration + iterations
        if self.iteration == 0:
            self.metrics_log.keep_through(-1)  # a fresh run in a used run directory starts a fresh log
        with Progress(enabled=cfg.progress and self.is_main, total=target, done=self.iteration, label=cfg.estimator) as progress:
            self.progress = progress

            def shown(metrics: dict[str, float]) -> None:
                progress.update(metrics)
                if on_iteration is not None:
                    on_iteration(metrics)

            try:
                run_iterations(cfg, position=lambda: self.iteration, target=target, iterate=self.train_iteration,
                               validate=self.validate, log=self.log, checkpoint=self.save_checkpoint,
                               on_iteration=shown)
            finally:
                self.progress = None
        self.metrics_log.flush()
        return self.history

    def log(self, metrics: dict[str, float]) -> None:
        self.metrics_log.append(metrics, step=self.iteration)

    # ------------------------------------------------------------------ checkpoint / exact resume
    def checkpoint_state(self) -> dict[str, Any]:
        """What an exact resume needs, each tensor once: the policy (a frozen pi_ref is rebuilt from the config's
        model, except the tabular one, whose reference grows with the states seen), AdamW unless
        ``save_optimizer: false``, the critic, every RNG stream, and the config."""
        cfg = self.config
        keep_optimizer = cfg.save_optimizer
        if self.dp is not None:  # full (unsharded) states on process 0, gathered by every process
            policy_state, optimizer_state = self.dp.checkpoint_states(self.policy, self.optimizer)
        else:
            policy_state = self.policy.state_dict()
            optimizer_state = self.optimizer.state_dict() if keep_optimizer else None
        return {
            "iteration": self.iteration,
            "policy": policy_state,
            "optimizer": optimizer_state if keep_optimizer else None,
            "reference": self.reference.state_dict() if self.reference is not None and cfg.policy == "tabular"
            else None,
            "critic": self.critic.state_dict() if self.critic is not None else None,
            "critic_optimizer": self.critic_optimizer.state_dict()
            if self.critic_optimizer is not None and keep_optimizer else None,
            "numpy_rng": self.rng.bit_generator.state,
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None,
            "python_rng": random.getstate(),
            "numpy_global_rng": np.random.get_state(),
            "config": config_dict(cfg),
        }

    def save_checkpoint(self, path: str | Path | None = None) -> Path:
        state = self.checkpoint_state()  # under FSDP a collective: every process gathers, process 0 writes
        saved = Path(path) if path is not None else self.folder.checkpoint()
        if self.is_main:
            if path is None:  # the run folder's first write may be its checkpoint: config.yaml comes with it
                self.metrics_log.open_folder()
            saved = save_checkpoint(state, saved)
        if getattr(self.policy, "lora_model", None) is not None:  # + run_dir/adapter and run_dir/merged (vLLM, eval)
            from ecpo_train.policies.lora import save_lora_checkpoint

            full_state = None
            if self.dp is not None:  # the adapter's weights unsharded (peft's key names)
                full_state = {f"base_model.model.{name}": param.full_tensor() if hasattr(param, "full_tensor")
                              else param for name, param in self.policy.model.named_parameters() if "lora_" in name}
            lora_folder = RunFolder(saved.parent)  # (beside the checkpoint, wherever it was saved)
            save_lora_checkpoint(self.policy, model_folder(self.config.model), lora_folder.adapter,
                                 lora_folder.merged, dtype=self.config.dtype, full_state=full_state,
                                 write=self.is_main)
        if self.dp is not None:
            self.dp.barrier()
        return saved

    def load_checkpoint(self, path: str | Path | None = None, state: dict[str, Any] | None = None) -> None:
        if state is None:  # (``state``: a checkpoint already read, e.g. to check it before resuming)
            state = load_checkpoint(Path(path) if path is not None else self.folder.checkpoint())
        if self.dp is not None:  # full states (read by every process) into the shards
            if state.get("optimizer") is not None:
                self.dp.load_checkpoint_states(self.policy, self.optimizer, state["policy"], state["optimizer"])
            else:
                from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

                set_model_state_dict(self.policy, state["policy"], options=StateDictOptions(full_state_dict=True))
        else:
            self.policy.load_state_dict(state["policy"])
            if state.get("optimizer") is not None:
                self.optimizer.load_state_dict(state["optimizer"])
        self.policy.sync_generation_weights()
        if state.get("reference") is not None and self.reference is not None:
            self.reference.load_state_dict(state["reference"])
        if state.get("critic") is not None and self.critic is not None:
            self.critic.load_state_dict(state["critic"])
            if state.get("critic_optimizer") is not None:
                self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.rng.bit_generator.state = state["numpy_rng"]
        torch.set_rng_state(state["torch_rng"])
        if state.get("cuda_rng") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])  # the LLM policy samples on the GPU
        random.setstate(state["python_rng"])
        np.random.set_state(state["numpy_global_rng"])
        self.iteration = int(state["iteration"])
        self.metrics_log.keep_through(self.iteration)

    def close(self) -> None:
        self.envs.close()
        if self.val_envs is not None:
            self.val_envs.close()
        self.metrics_log.close()
        if self.dp is not None:
            self.dp.close()


def run_training(trainer: Trainer, resume: bool = False, overwrite: bool = False) -> list[dict[str, float]]:
    """Start the run (a folder holding a run needs ``resume`` -- continue its checkpoint -- or ``overwrite``),
    train, close, and plot the curves. Every check passes before the folder is touched (``resume.open_run``)."""
    from ecpo_train.runtime.resume import open_run

    try:
        open_run(trainer, resume=resume, overwrite=overwrite)
        history = trainer.train()
    finally:
        trainer.close()
    if not trainer.is_main:  # under FSDP process 0 plots and reports
        return history
    from ecpo_train.runtime.plotting import plot_run

    plot_run(trainer.run_dir)
    checkpoint = trainer.folder.checkpoint()
    if checkpoint.exists() and trainer.config.progress:
        print(f"checkpoint: {checkpoint} ({checkpoint_size(checkpoint)})", file=sys.stderr)
    return history


def train(config: TrainConfig, resume: bool = False, overwrite: bool = False) -> list[dict[str, float]]:
    """Build a trainer for ``config`` and run it (:func:`run_training`)."""
    return run_training(Trainer(config), resume=resume, overwrite=overwrite)
