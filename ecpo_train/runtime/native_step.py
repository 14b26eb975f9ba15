"""The native engine's sampler and learner: what ``core.iteration.run_iteration`` drives in this process. Each holds
the pieces it works with (envs, policy, optimizer, ...), not the engine: neither changes the engine's state.

    ``EnvGroupSampler``  step A on a ``GroupVectorEnv``: under FSDP this process's contiguous share of whole
                         groups (each copy keeps the env seed of the full batch), the full weights gathered for
                         sampling; after the update the vLLM engine gets the new weights; the iteration's metrics
                         are averaged over the processes (counts added up)
    ``PolicyLearner``    steps B-E on the policy: the critic's values and fit (PPO), ``credit_step``, then
                         ``update_on_table`` with AdamW on the rows of the iteration's ``UpdatePlan``
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ecpo_train.core.credit import gae_targets
from ecpo_train.core.iteration import (
    Draw,
    Learned,
    Sampled,
    UpdatePlan,
    credit_step,
    first_copy_seed,
    shuffle_generator,
)
from ecpo_train.core.rollout import training_rollout
from ecpo_train.policies.critic import critic_update, critic_values
from ecpo_train.runtime.builders import update_on_table
from ecpo_train.runtime.progress import no_phase

Phase = Callable[[str], None]



class EnvGroupSampler:
    """Step A on ``envs`` (this process's ``local_groups`` groups) with ``policy``; ``dp``: the FSDP process group
    (``runtime.distributed.DataParallel``) or ``None``."""

    def __init__(self, config: Any, envs: Any, policy: Any, dp: Any = None, phase: Phase = no_phase) -> None:
        self.config, self.envs, self.policy, self.dp, self.phase = config, envs, policy, dp, phase

    def gathered(self) -> Any:
        """Sampling under FSDP: the policy's full weights on every process (no collective per token)."""
        return self.dp.gathered(self.policy.model) if self.dp is not None else contextlib.nullcontext()

    def sample(self, draw: Draw, iteration: int) -> Sampled:
        cfg, dp = self.config, self.dp
        self.policy.eval()
        task_ids, env_seed = draw(iteration)
        if dp is not None:  # this process's whole groups; each copy keeps the env seed of the full batch
            task_ids = dp.local_share(task_ids)
            env_seed = first_copy_seed(env_seed, dp.rank * len(task_ids), cfg.group_size)
        self.phase(f"iteration {iteration + 1}: rollout of {cfg.n_groups} x {cfg.group_size} episodes")
        with self.gathered():  # pi_old: the current policy before this update
            rollout = training_rollout(self.envs, self.policy, task_ids, cfg, env_seed)
        return Sampled([rollout.batch], rollout.metrics,
                       {"generation": rollout.generation_seconds, "env": rollout.env_seconds}, played=rollout)

    def sync(self) -> dict[str, float]:
        started = time.perf_counter()
        self.policy.sync_generation_weights()  # vLLM generation: the next rollout samples the new weights
        return {"sync": time.perf_counter() - started}

    def combined(self, metrics: dict[str, float]) -> dict[str, float]:
        dp = self.dp
        if dp is None:
            return metrics
        # equal shares of whole groups: the mean over processes is the batch mean, and counts (steps, groups,
        # anchors) add up
        counts = {k: v for k, v in metrics.items() if k == "num_steps" or k.startswith("credit/num_")}
        return dp.mean_stats(metrics) | {k: v * dp.world_size for k, v in dp.mean_stats(counts).items()}


class PolicyLearner:
    """Steps B-E on ``policy`` with ``optimizer``, the frozen ``reference`` (KL) and the ``critic`` (PPO)."""

    def __init__(self, config: Any, policy: Any, optimizer: Any, *, reference: Any = None, critic: Any = None,
                 critic_optimizer: Any = None, dp: Any = None, phase: Phase = no_phase) -> None:
        self.config, self.policy, self.optimizer, self.reference = config, policy, optimizer, reference
        self.critic, self.critic_optimizer, self.dp, self.phase = critic, critic_optimizer, dp, phase
        self.shards = dp.world_size if dp is not None else 1

    def learn(self, plan: UpdatePlan, rng: np.random.Generator) -> Learned:
        cfg, dp, critic = self.config, self.dp, self.critic
        (batch,) = plan.tables
        # Steps B-D: anchors, ECA, VarGate -> one advantage per step row (or PPO's GAE on the critic's values)
        started = time.perf_counter()
        prompts, keys = batch.prompt_ids, batch.extras["state_key"]
        values = critic_values(critic, prompts, keys, cfg.micro_batch_size) if critic is not None else None
        step_advantages, credit = credit_step(cfg, batch, values)
        if critic is not None:  # PPO: then V is fitted to the lambda-returns of eq. gae
            _, targets = gae_targets(batch.credit_rows(), values, cfg.credit, cfg.gae_lambda)
            credit |= critic_update(critic, self.critic_optimizer, prompts, keys, targets, generator=rng,
                                    mini_batch_size=cfg.mini_batch_size, micro_batch_size=cfg.micro_batch_size,
                                    max_grad_norm=cfg.max_grad_norm)
        credit_seconds = time.perf_counter() - started
        advantages = np.asarray(step_advantages)
        nonzero = float(np.count_nonzero(advantages))
        nonzero = dp.sum(nonzero) if dp is not None else nonzero

        # Step E: optimise eq. ecpo_objective; every token of an action gets its step's advantage. The policy
        # stays in eval mode (dropout off) so the learner scores the very distribution the rollout sampled
        # from: at theta = theta_old the ratio is exactly 1 and the KL to the (eval-mode) reference is 0.
        started = time.perf_counter()
        self.phase(f"update on {len(batch)} steps")
        stats = update_on_table(self.policy, cfg, batch, torch.as_tensor(advantages, dtype=torch.float32),
                                self.optimizer, shuffle_generator(plan.shuffle, dp.rank if dp is not None else 0),
                                reference=self.reference, reducer=dp)
        return Learned(credit, stats, {"credit": credit_seconds, "update": time.perf_counter() - started},
                       int(nonzero), advantages)
