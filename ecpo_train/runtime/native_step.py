"""The native trainer's sampler and learner: what ``core.iteration.run_iteration`` drives in this process.

    ``EnvGroupSampler``  step A on the trainer's ``GroupVectorEnv``: under FSDP this process's contiguous share of
                         whole groups (each copy keeps the env seed of the full batch), the full weights gathered
                         for sampling; after the update the vLLM engine gets the new weights; the iteration's
                         metrics are averaged over the processes (counts added up)
    ``TrainerLearner``   steps B-E on the trainer's policy: the critic's values and fit (PPO), ``credit_step``,
                         then ``update_on_table`` with AdamW, the rows shuffled by ``shuffle_plan``; it counts
                         the trainer's iterations (its updates)
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from ecpo_train.core.credit import gae_targets
from ecpo_train.core.iteration import (
    Draw,
    Learned,
    Sampled,
    credit_step,
    first_copy_seed,
    shuffle_generator,
    shuffle_plan,
    update_rows,
)
from ecpo_train.core.rollout import training_rollout
from ecpo_train.policies.critic import critic_update, critic_values
from ecpo_train.runtime.builders import update_on_table, update_settings


class EnvGroupSampler:
    """Step A on ``trainer``'s env group (``runtime.trainer.Trainer``), this process's share of the groups."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer

    def sample(self, draw: Draw, iteration: int) -> Sampled:
        trainer, cfg, dp = self.trainer, self.trainer.config, self.trainer.dp
        trainer.policy.eval()
        task_ids, env_seed = draw(iteration)
        if dp is not None:  # this process's whole groups; each copy keeps the env seed of the full batch
            task_ids = dp.local_share(task_ids)
            env_seed = first_copy_seed(env_seed, dp.rank * trainer.local_groups, cfg.group_size)
        trainer.phase(f"iteration {iteration + 1}: rollout of {cfg.n_groups} x {cfg.group_size} episodes")
        with trainer.gathered():  # pi_old: the current policy before this update
            rollout = training_rollout(trainer.envs, trainer.policy, task_ids, cfg, env_seed)
        trainer.last_rollout = rollout
        return Sampled([rollout.batch], rollout.metrics,
                       {"generation": rollout.generation_seconds, "env": rollout.env_seconds}, played=rollout)

    def sync(self) -> dict[str, float]:
        started = time.perf_counter()
        self.trainer.policy.sync_generation_weights()  # vLLM generation: the next rollout samples the new weights
        return {"sync": time.perf_counter() - started}

    def combined(self, metrics: dict[str, float]) -> dict[str, float]:
        dp = self.trainer.dp
        if dp is None:
            return metrics
        # equal shares of whole groups: the mean over processes is the batch mean, and counts (steps, groups,
        # anchors) add up
        counts = {k: v for k, v in metrics.items() if k == "num_steps" or k.startswith("credit/num_")}
        return dp.mean_stats(metrics) | {k: v * dp.world_size for k, v in dp.mean_stats(counts).items()}


class TrainerLearner:
    """Steps B-E on ``trainer``'s policy, optimizer(s), critic and reference."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer

    def learn(self, sampled: Sampled, rng: np.random.Generator) -> Learned:
        trainer, cfg, dp = self.trainer, self.trainer.config, self.trainer.dp
        (batch,) = sampled.tables
        # Steps B-D: anchors, ECA, VarGate -> one advantage per step row (or PPO's GAE on the critic's values)
        started = time.perf_counter()
        prompts, keys = batch.prompt_ids, batch.extras["state_key"]
        critic = trainer.critic
        values = critic_values(critic, prompts, keys, cfg.micro_batch_size) if critic is not None else None
        step_advantages, credit = credit_step(cfg, batch, values)
        if critic is not None:  # PPO: then V is fitted to the lambda-returns of eq. gae
            _, targets = gae_targets(batch.credit_rows(), values, cfg.credit, cfg.gae_lambda)
            credit |= critic_update(critic, trainer.critic_optimizer, prompts, keys, targets, generator=rng,
                                    mini_batch_size=cfg.mini_batch_size, micro_batch_size=cfg.micro_batch_size,
                                    max_grad_norm=cfg.max_grad_norm)
        credit_seconds = time.perf_counter() - started
        trainer.last_advantages = advantages = np.asarray(step_advantages)
        nonzero = float(np.count_nonzero(advantages))
        nonzero = dp.sum(nonzero) if dp is not None else nonzero

        # Step E: optimise eq. ecpo_objective; every token of an action gets its step's advantage. The policy
        # stays in eval mode (dropout off) so the learner scores the very distribution the rollout sampled
        # from: at theta = theta_old the ratio is exactly 1 and the KL to the (eval-mode) reference is 0.
        started = time.perf_counter()
        trainer.phase(f"iteration {trainer.iteration + 1}: update on {len(batch)} steps")
        plan = shuffle_plan(rng, update_rows(cfg, [batch]), update_settings(cfg).num_epochs,
                            dp.world_size if dp is not None else 1)
        stats = update_on_table(trainer.policy, cfg, batch, torch.as_tensor(advantages, dtype=torch.float32),
                                trainer.optimizer, shuffle_generator(plan, dp.rank if dp is not None else 0),
                                reference=trainer.reference, reducer=dp)
        trainer.iteration += 1  # the updates so far
        return Learned(credit, stats, {"credit": credit_seconds, "update": time.perf_counter() - started},
                       int(nonzero))
