"""The native engine: the paper's Algorithm 1 as ``core.iteration.run_iteration`` runs it (the one order of the
steps, both engines), with the sampler and learner of this process (``runtime/native_step.py``: the environments,
FSDP), its validation and its checkpoints. The run around it -- the folder, the loop, the records, the progress --
is the run shell's (``runtime/run.py``): ``run.train(Trainer, config)`` or ``ecpo train``.

Each iteration reads top to bottom:

    A  rollout   ``collect_rollout``: G groups x N copies of one task each, sampled from pi_old
    B-D credit   ``compute_advantages(estimator, ...)``: anchors (B), ECA (C), VarGate (D) -- all inside
                 ``ecpo_train/core/credit/``; the ``ppo`` estimator takes a critic's values (GAE), and the
                 critic is then fitted to its targets
    E  update    ``policy_update``: eq. ecpo_objective (clipped ratio, k3 KL to pi_ref), AdamW
    then         validation at temperature 0.4 on a fixed task list, metrics, checkpoint.

The data flows one way: env -> ``collect_rollout`` -> ``TrajectoryBatch`` -> ``credit.compute_advantages`` ->
``loss.policy_update`` -> policy. Hyperparameters: ``ecpo_train.runtime.config.TrainConfig`` (presets in
``ecpo_train/runtime/configs/*.yaml``). The run folder (``config.yaml``, ``metrics.jsonl``, ...) is the run
shell's to write; this engine writes only its checkpoint (``save``).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ecpo_gym.group import GroupVectorEnv
from ecpo_train.core.iteration import Observe, run_iteration, seed_streams
from ecpo_train.core.task_memory import TaskGraphMemory, task_memory_for
from ecpo_train.core.tasks import task_lists, validation_seed
from ecpo_train.policies.choose import own_generator, seed_sampling
from ecpo_train.runtime.builders import (
    build_critic,
    build_policy,
    update_on_table,
    validation_envs,
    validation_metrics,
    validation_outcome,
)
from ecpo_train.runtime.checkpoint_io import (
    check_policy_state,
    load_checkpoint,
    load_policy_state,
    save_checkpoint,
    state_fits,
)
from ecpo_train.runtime.config import TrainConfig, config_dict
from ecpo_train.runtime.models import model_folder
from ecpo_train.runtime.native_step import EnvGroupSampler, PolicyLearner
from ecpo_train.runtime.policy_kinds import policy_spec
from ecpo_train.runtime.progress import no_phase
from ecpo_train.runtime.run_dir import RunFolder
from ecpo_train.runtime.threads import apply_threads


class Trainer:
    """The native engine (``runtime.run.Engine``): owns the policy, reference, optimizer(s), environments and RNGs.

    Under ``fsdp=true`` (K processes started by ``torchrun``; ``ecpo_train/runtime/distributed.py``) every process
    draws the same task groups (same seed, same ``self.rng``), plays its contiguous share of whole groups,
    computes credit on them, and the update's gradient is the one-process gradient (``reducer=``); metrics
    are averaged over processes and only process 0 writes the run folder (``writes``).
    """

    name = "native"

    def __init__(self, config: TrainConfig) -> None:
        self.config = config
        self.dp: Any = None  # ecpo_train.runtime.distributed.DataParallel under fsdp=true
        if config.fsdp:
            from ecpo_train.runtime.distributed import DataParallel, check_fsdp_request, check_whole_groups

            check_fsdp_request(config.fsdp, config.estimator, config.policy)
            if config.generation_backend == "vllm":
                raise ValueError("fsdp=true samples with the gathered transformers weights: use "
                                 "generation_backend=transformers")
            self.dp = DataParallel(config.resolved_device())
            check_whole_groups(config.n_groups, self.dp.world_size)
        self.writes = self.dp is None or self.dp.is_main
        # building writes nothing (a refused start leaves the folder as it was): the run shell writes
        self.rng = seed_streams(config.seed)
        # the environment first: its errors (unknown id, bad env_kwargs, missing data) surface before a model loads
        local_groups = config.n_groups // (self.dp.world_size if self.dp is not None else 1)
        self.envs = GroupVectorEnv(config.env_id, local_groups, config.group_size,
                                   num_workers=config.env_workers, env_kwargs=config.env_kwargs)
        self.train_tasks, self.val_tasks = task_lists(config, list(self.envs.task_ids))  # refused here, before anything is written
        self.val_envs: GroupVectorEnv | None = None
        apply_threads(config.threads)  # the run's torch threads from its first rollout on, not from its first update
        self.policy = build_policy(config, device=self.dp.device if self.dp is not None else None)
        self.reference = self.policy.frozen_copy() if config.kl_coef > 0 else None
        if self.dp is not None:  # shard after the reference copy, before the optimizer sees the parameters
            self.dp.shard(self.policy.model, config.mixed_precision)
            if self.reference is not None and not config.lora:
                self.dp.shard(self.reference.model, config.mixed_precision)  # (LoRA: the policy, adapter off)
        # under LoRA only the adapter trains: AdamW keeps no state for the frozen base weights
        self.optimizer = torch.optim.AdamW([p for p in self.policy.parameters() if p.requires_grad], lr=config.lr,
                                           weight_decay=config.weight_decay)
        self.critic, self.critic_optimizer = build_critic(config, self.policy)  # (None, None): a critic-free estimator
        self.iteration = 0
        self.memory = task_memory_for(config)  # tigpo's task graphs and revisit schedule (None: no state kept)
        self.validation_episodes: list[Any] = []
        self.on_phase: Callable[[str], None] = no_phase
        self.sampler = EnvGroupSampler(config, self.envs, self.policy, self.dp, phase=self._phase)
        self.learner = PolicyLearner(config, self.policy, self.optimizer, reference=self.reference,
                                     critic=self.critic, critic_optimizer=self.critic_optimizer, dp=self.dp,
                                     phase=self._phase)

    def _phase(self, text: str) -> None:
        self.on_phase(text)

    # ------------------------------------------------------------------ Algorithm 1, one iteration
    def train_iteration(self, observe: Observe | None = None) -> dict[str, float]:
        """One iteration (``core.iteration.run_iteration``) with this process's env group and update
        (``runtime.native_step``); it validates on the run's tasks where the run's rule says so."""
        metrics = run_iteration(self.config, self.iteration, self.rng, self.train_tasks, self.sampler, self.learner,
                                self._validate_in_iteration, speaks=self.writes, observe=observe, memory=self.memory)
        self.iteration += 1  # the updates so far
        return metrics

    def _validate_in_iteration(self) -> dict[str, float]:
        self.on_phase(f"iteration {self.iteration + 1}: validation on {len(self.val_tasks)} tasks")
        metrics, _ = self.validate(self.val_tasks, validation_seed(self.config.seed))
        return metrics

    @torch.no_grad()
    def validate(self, tasks: Sequence[str], seed: int) -> tuple[dict[str, float], list[Any]]:
        """Success on ``tasks`` at the validation temperature (``val_episodes_per_task`` each), the copies reset
        from ``seed`` on: its metrics and its episodes (kept in ``validation_episodes``). The run shell records
        them (``runtime.run.Run.validate``)."""
        cfg, tasks = self.config, [str(t) for t in tasks]
        if self.dp is not None:  # a contiguous slice per process; each copy keeps its one-process env seed
            start = len(tasks) * self.dp.rank // self.dp.world_size
            tasks = tasks[start : len(tasks) * (self.dp.rank + 1) // self.dp.world_size]
            seed += start * cfg.val_episodes_per_task
        episodes, exact = [], None
        if tasks:
            self.val_envs = validation_envs(cfg, len(tasks), self.val_envs)
            self.policy.eval()
            with self.sampler.gathered():
                episodes, exact = validation_outcome(self.policy, cfg, self.val_envs, tasks, seed)
        if self.dp is not None:  # every process's episodes; exact success weighted by its number of tasks
            import torch.distributed as dist

            parts: list[Any] = [None] * self.dp.world_size
            dist.all_gather_object(parts, (episodes, exact, len(tasks)))
            episodes = [episode for part in parts for episode in part[0]]
            shares = [(value, n) for _, value, n in parts if n]
            exact = None if not shares or any(value is None for value, _ in shares) else \
                sum(value * n for value, n in shares) / sum(n for _, n in shares)
        self.validation_episodes = list(episodes)
        return validation_metrics(episodes, exact), self.validation_episodes

    # ------------------------------------------------------------------ one step at a time, for studies
    def act_with(self, actor: Any = None) -> None:
        """Step A of the coming iterations (and of :meth:`sample`) is played by ``actor``; ``None``: by the trained
        policy again. ``actor`` must act and score as the trained policy does (e.g. a wrapper that rewrites some
        actions before the env sees them): the update still runs on the trained policy."""
        self.sampler.policy = self.policy if actor is None else actor

    def sample(self, task_ids: Sequence[str], seed: int, sampling_seed: int | None = None) -> Any:
        """Step A once, outside an iteration: one group of ``group_size`` copies per task of ``task_ids`` on this
        process's environments, copy ``n`` of group ``g`` reset with ``seed + g * group_size + n``, at the rollout
        temperature, exactly as an iteration samples the same draw (``core.iteration.draw_iteration``). Returns
        the ``core.rollout.Rollout`` (its ``batch``, the ``TrajectoryBatch``, and its ``episodes``). It moves only
        the sampling streams (the policy's, the envs'), not the trainer's iteration count or its task stream;
        ``sampling_seed`` seeds them first (torch's and the policy's own generator), so that the batch is fixed
        by the seeds alone, whatever was sampled before."""
        if sampling_seed is not None:
            seed_sampling(self.policy, sampling_seed)
        return self.sampler.sample(lambda _: ([str(t) for t in task_ids], int(seed)), self.iteration).played

    def update_policy(self, batch: Any, advantages: Any, generator: np.random.Generator) -> dict[str, float]:
        """Step E once, outside an iteration: ``core.loss.policy_update`` on the rows of ``batch`` (a sampled
        ``TrajectoryBatch``) with one advantage per row, this trainer's AdamW and reference, the rows shuffled by
        ``generator``, exactly as the iteration's learner updates; returns the update's statistics. The iteration
        count does not move."""
        return update_on_table(self.policy, self.config, batch, torch.as_tensor(np.asarray(advantages),
                               dtype=torch.float32), self.optimizer, generator, reference=self.reference,
                               reducer=self.dp)

    def optimizer_step(self, loss: torch.Tensor, lr: float | None = None) -> None:
        """One step of this trainer's AdamW on ``loss``, a scalar of the policy's parameters (a study's own
        objective, e.g. a supervised push): gradients zeroed, ``loss`` backpropagated, clipped to
        ``max_grad_norm``, one step; ``lr`` replaces the learning rate for this step only. One process only: under
        ``fsdp=true`` the gradient would be one shard's (a ``ValueError``)."""
        if self.dp is not None:
            raise ValueError("optimizer_step takes one process's loss: not under fsdp=true")
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in self.policy.parameters() if p.requires_grad],
                                       self.config.max_grad_norm)
        groups = self.optimizer.param_groups
        kept = [g["lr"] for g in groups]
        for g in groups if lr is not None else ():
            g["lr"] = lr
        self.optimizer.step()
        for g, value in zip(groups, kept):
            g["lr"] = value

    def clear_optimizer_moments(self) -> None:
        """Forget AdamW's moments and step counts (the next step starts them afresh), e.g. so that no momentum of
        a study's own steps carries into the training iterations after them."""
        self.optimizer.state.clear()

    # ------------------------------------------------------------------ checkpoint / exact resume
    def checkpoint_state(self) -> dict[str, Any]:
        """What an exact resume needs, each tensor once: the policy (a frozen pi_ref is rebuilt from the config's
        model, except where the policy kind saves it, ``PolicySpec.saves_reference``: the tabular one's reference
        grows with the states seen), AdamW unless
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
            "reference": self.reference.state_dict()
            if self.reference is not None and policy_spec(cfg.policy).saves_reference else None,
            "critic": self.critic.state_dict() if self.critic is not None else None,
            "critic_optimizer": self.critic_optimizer.state_dict()
            if self.critic_optimizer is not None and keep_optimizer else None,
            "numpy_rng": self.rng.bit_generator.state,
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None,
            "python_rng": random.getstate(),
            "numpy_global_rng": np.random.get_state(),
            "policy_rng": self._chooser_stream(policy_state),
            "task_memory": self.memory.state_dict() if self.memory is not None else None,
            "config": config_dict(cfg),
        }

    def _chooser_stream(self, policy_state: dict[str, Any]) -> Any:
        """The state of the policy's own generator (``policies.choose``) where its state dict does not carry it (the
        scoring policy's; the text and tabular policies keep theirs in their ``_extra_state``), else ``None``."""
        own = own_generator(self.policy)
        return own.get_state() if own is not None and "_extra_state" not in policy_state else None

    def save(self, checkpoint: Path) -> Path:
        """The state (:meth:`checkpoint_state`) into ``checkpoint`` (returned); under LoRA the adapter and the
        merged model beside it (``adapter/``, ``merged/``: vLLM and evaluation read them)."""
        checkpoint = Path(checkpoint)
        state = self.checkpoint_state()  # under FSDP a collective: every process gathers, process 0 writes
        if self.writes:
            save_checkpoint(state, checkpoint)
        if self.config.lora:
            from ecpo_train.policies.lora import save_lora_checkpoint

            full_state = None
            if self.dp is not None:  # the adapter's weights unsharded (peft's key names)
                full_state = {f"base_model.model.{name}": param.full_tensor() if hasattr(param, "full_tensor")
                              else param for name, param in self.policy.model.named_parameters() if "lora_" in name}
            lora_folder = RunFolder(checkpoint.parent)  # (beside the checkpoint, wherever it was saved)
            save_lora_checkpoint(self.policy, model_folder(self.config.model), lora_folder.adapter,
                                 lora_folder.merged, dtype=self.config.dtype, full_state=full_state,
                                 write=self.writes)
        if self.dp is not None:
            self.dp.barrier()
        return checkpoint

    def load(self, checkpoint: Path | None) -> None:
        """Continue the run saved in ``checkpoint`` (read and checked once: a damaged file is a ``ValueError``);
        ``None``: start afresh (nothing to do)."""
        if checkpoint is not None:
            self.load_state(_checked_checkpoint(Path(checkpoint)), Path(checkpoint))

    def load_state(self, state: dict[str, Any], path: Path = Path("checkpoint.pt")) -> None:
        """A checkpoint's state (:meth:`checkpoint_state`, read from ``path``) into the policy, optimizers, critic
        and RNG streams; a policy state that does not fit is one ``ValueError`` naming ``path``."""
        if self.dp is not None:  # full states (read by every process) into the shards, checked as unsharded ones are
            check_policy_state(state["policy"], path)
            with state_fits(path):
                if state.get("optimizer") is not None:
                    self.dp.load_checkpoint_states(self.policy, self.optimizer, state["policy"], state["optimizer"])
                else:
                    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

                    set_model_state_dict(self.policy, state["policy"], options=StateDictOptions(full_state_dict=True))
        else:
            load_policy_state(self.policy, state["policy"], path)
            if state.get("optimizer") is not None:
                self.optimizer.load_state_dict(state["optimizer"])
        self.policy.sync_generation_weights()
        if state.get("reference") is not None and self.reference is not None:
            load_policy_state(self.reference, state["reference"], path, "reference")
        if state.get("critic") is not None and self.critic is not None:
            self.critic.load_state_dict(state["critic"])
            if state.get("critic_optimizer") is not None:
                self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        try:  # (a damaged stream is refused before the run goes on from it)
            self.rng.bit_generator.state = state["numpy_rng"]
            torch.set_rng_state(state["torch_rng"])
            if state.get("cuda_rng") is not None and torch.cuda.is_available():
                torch.cuda.set_rng_state_all(state["cuda_rng"])  # the LLM policy samples on the GPU
            random.setstate(state["python_rng"])
            np.random.set_state(state["numpy_global_rng"])
            if state.get("policy_rng") is not None:  # (_chooser_stream)
                own_generator(self.policy).set_state(state["policy_rng"])
            self.iteration = int(state["iteration"])
        except (KeyError, TypeError, ValueError, RuntimeError, OverflowError, AttributeError) as err:
            raise ValueError(f"checkpoint {path}: its random streams cannot be restored ({type(err).__name__}: "
                             f"{' '.join(str(err).split())[:100]}): restore it from a copy, or delete it to start "
                             "over") from None
        if self.memory is not None:
            if state.get("task_memory") is None:
                raise ValueError(f"the checkpoint keeps no task memory, which estimator={self.config.estimator} "
                                 "continues from: it was saved by a run of another estimator")
            self.memory = TaskGraphMemory.from_state(state["task_memory"])

    def agree(self, refusal: ValueError | None) -> None:
        """Under FSDP every process refuses the start if any does (process 0's refusal names the reason)."""
        if self.dp is not None and self.dp.max(float(refusal is not None)):
            raise refusal or ValueError("process 0 refused the start (its error is above)")

    def close(self) -> None:
        self.envs.close()
        if self.val_envs is not None:
            self.val_envs.close()
        if self.dp is not None:
            self.dp.close()


def _checked_checkpoint(path: Path) -> dict[str, Any]:
    """The run's checkpoint, read once; a damaged file, or one another program wrote, is a ``ValueError``."""
    state = load_checkpoint(path)
    if not isinstance(state, dict) or "iteration" not in state or "policy" not in state:
        raise ValueError(f"{path} is not an ECPO trainer checkpoint")
    return state
