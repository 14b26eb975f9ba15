"""``CandidateECPOConfig`` and ``CandidateECPO``: the classic-RL example's config (hashed features, a small scorer,
PPO's loop) and the algorithm it builds (one module, as RLlib keeps an algorithm with its config).

``environment("ecpo/...")`` wraps the text env in ``CandidateActionEnv`` (``env_config``: ``env_kwargs``,
``max_candidates``, ``feature_dim``, ``task_ids``, ``seed``), ``CandidateScorerModule`` is the policy and
``ECPOTorchLearner`` (PPO's clipped loss, advantages from ``credit.compute_advantages``) the learner;
``groups_per_batch`` groups are split evenly over the env runners.

``CandidateECPO`` trains ``CandidateScorerModule`` with PPO's loop: no critic and no GAE (``ECPOTorchLearner``
computes advantages with ``credit.compute_advantages``); complete episodes only; every env runner samples whole
groups (each task repeated for ``group_size`` consecutive resets by ``CandidateActionEnv``) and the learner group
receives one object per group, so a group is never split across learners.
"""

from __future__ import annotations

from typing import Any

import ray
from ray.rllib.algorithms.algorithm_config import NotProvided
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.utils.metrics import (
    ALL_MODULES,
    ENV_RUNNER_RESULTS,
    ENV_RUNNER_SAMPLING_TIMER,
    LEARNER_RESULTS,
    LEARNER_UPDATE_TIMER,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    NUM_MODULE_STEPS_TRAINED_LIFETIME,
    SYNCH_WORKER_WEIGHTS_TIMER,
    TIMERS,
)

from ecpo_train.integrations.rllib.base_algorithm import GroupCreditAlgorithm
from ecpo_train.integrations.rllib.base_config import GroupCreditConfig
from examples.rllib_candidate.connector import group_sizes
from examples.rllib_candidate.env import CandidateActionEnv


class CandidateECPOConfig(GroupCreditConfig):
    """``GroupCreditConfig`` for the classic-RL example (see the module docstring). Set its ``lr`` yourself: the
    shared default, 1e-6, is an LLM's step."""

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or CandidateECPO)

    def training(self, **kwargs: Any) -> CandidateECPOConfig:
        super().training(**kwargs)
        self._sync_env_config()
        return self

    def environment(self, env: Any = NotProvided, **kwargs: Any) -> CandidateECPOConfig:
        super().environment(env, **kwargs)
        if isinstance(env, str):
            self.text_env_id = env
        if isinstance(self.env, str) and _is_text_env_id(self.env):
            self.env = CandidateActionEnv
        self._sync_env_config()
        return self

    def _sync_env_config(self) -> None:
        """Keep the adapter's ``env_id`` and ``group_size`` in ``env_config`` whatever order calls came in."""
        if self.env is CandidateActionEnv:
            env_config = dict(self.env_config or {})
            if self.text_env_id is not None:
                env_config.setdefault("env_id", self.text_env_id)
            env_config["group_size"] = self.group_size
            self.env_config = env_config

    def get_default_rl_module_spec(self) -> RLModuleSpec:
        from examples.rllib_candidate.module import CandidateScorerModule

        return RLModuleSpec(module_class=CandidateScorerModule)

    def get_default_learner_class(self):
        from examples.rllib_candidate.learner import ECPOTorchLearner

        return ECPOTorchLearner

    def validate(self) -> None:
        super().validate()
        if self.env is CandidateActionEnv and int(self.env_config.get("group_size", -1)) != int(self.group_size):
            self._value_error("env_config['group_size'] disagrees with training(group_size=...)")


def _is_text_env_id(env_id: str) -> bool:
    try:
        from ecpo_gym import ENV_ENTRY_POINTS
    except ImportError:
        return False
    return env_id in ENV_ENTRY_POINTS or env_id.startswith("ecpo/")


class CandidateECPO(GroupCreditAlgorithm):
    """PPO's loop with group sampling and group-preserving learner updates (see the module docstring)."""

    @classmethod
    def get_default_config(cls) -> CandidateECPOConfig:
        return CandidateECPOConfig()

    def training_step(self) -> None:
        config: CandidateECPOConfig = self.config
        with self.metrics.log_time((TIMERS, ENV_RUNNER_SAMPLING_TIMER)):
            episodes, runner_metrics = self._sample_groups()
            if not episodes:
                return
            self.metrics.aggregate(runner_metrics, key=ENV_RUNNER_RESULTS)
        groups = split_groups(episodes, config.group_size)
        self.metrics.log_value(("ecpo_sampling", "success_rate"), episode_success_rate(episodes), window=1)
        self.metrics.log_value(("ecpo_sampling", "num_groups"), len(groups), window=1)

        with self.metrics.log_time((TIMERS, LEARNER_UPDATE_TIMER)):
            timesteps = {
                NUM_ENV_STEPS_SAMPLED_LIFETIME: self.metrics.peek(
                    (ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME)),
                NUM_MODULE_STEPS_TRAINED_LIFETIME: self.metrics.peek(
                    (LEARNER_RESULTS, ALL_MODULES, NUM_MODULE_STEPS_TRAINED_LIFETIME), default=0),
            }
            learner_results = update_on_groups(self.learner_group, groups, config, timesteps=timesteps)
            self.metrics.aggregate(learner_results, key=LEARNER_RESULTS)

        with self.metrics.log_time((TIMERS, SYNCH_WORKER_WEIGHTS_TIMER)):
            modules_to_update = set(learner_results[0].keys()) - {ALL_MODULES, "ecpo"}
            self.env_runner_group.sync_weights(from_worker_or_learner_group=self.learner_group,
                                               policies=modules_to_update, inference_only=True)

    def _sample_groups(self) -> tuple[list, list]:
        """``groups_per_env_runner * group_size`` complete episodes from every env runner."""
        config: CandidateECPOConfig = self.config
        num_episodes = config.groups_per_env_runner * int(config.group_size)
        if self.env_runner_group.num_remote_env_runners() == 0:
            runner = self.env_runner_group.local_env_runner
            results = [(runner.sample(num_episodes=num_episodes, explore=True), runner.get_metrics())]
        else:
            results = self.env_runner_group.foreach_env_runner(
                lambda runner: (runner.sample(num_episodes=num_episodes, explore=True), runner.get_metrics()),
                local_env_runner=False,
                timeout_seconds=config.group_sample_timeout_s,
            )
        episodes = [episode for sampled, _ in results for episode in sampled]
        return episodes, [m for _, m in results]


def update_on_groups(learner_group, groups: list[list], config: CandidateECPOConfig, *, timesteps=None) -> list:
    """One learner-group update on whole groups; with several learners each gets whole groups only.

    Several learners receive one object ref per group (the learner group shards the list of refs, never
    a group) and the same ``num_total_minibatches``, so their data-parallel steps stay in lockstep.
    """
    kwargs = {"timesteps": timesteps or {}, "num_epochs": config.num_epochs,
              "minibatch_size": config.minibatch_size, "shuffle_batch_per_epoch": config.shuffle_batch_per_epoch}
    num_learners = max(1, int(config.num_learners))
    if num_learners == 1:
        return learner_group.update(episodes=[e for group in groups for e in group], **kwargs)
    if len(groups) < num_learners:
        raise ValueError(f"{len(groups)} groups cannot feed {num_learners} learners without splitting a group")
    total_steps = sum(len(e) for group in groups for e in group)
    minibatches = 0
    if config.minibatch_size:
        minibatches = max(1, int(config.num_epochs * total_steps / (num_learners * config.minibatch_size)))
    return learner_group.update(episodes_refs=[ray.put(group) for group in groups],
                                num_total_minibatches=minibatches, **kwargs)


def split_groups(episodes: list, group_size: int) -> list[list]:
    """Episodes grouped by ``info['group_key']`` (first-seen order); every group must hold ``group_size``."""
    groups: dict[str, list] = {}
    for episode in episodes:
        groups.setdefault(str(episode.get_infos(0).get("group_key")), []).append(episode)
    bad = {k: len(v) for k, v in groups.items() if len(v) != group_size}
    if bad:
        raise RuntimeError(
            f"sampling returned incomplete groups {bad} (expected {group_size} episodes each; "
            f"all sizes: {group_sizes(episodes)}): the env must repeat each task for group_size resets "
            "and each runner must sample a multiple of group_size episodes from one env"
        )
    return list(groups.values())


def episode_success_rate(episodes: list) -> float:
    """Fraction of episodes whose last info says ``won``."""
    if not episodes:
        return 0.0
    return sum(bool(e.get_infos(-1).get("won", False)) for e in episodes) / len(episodes)
