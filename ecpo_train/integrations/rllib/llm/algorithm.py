"""``ECPO``: ECPO as an RLlib ``Algorithm`` (new API stack): ``train()``, ``save_to_path``/``from_checkpoint``,
Tune, env-runner fault tolerance, a ``LearnerGroup``.

An LLM agent (the main use)::

    from ecpo_train.rllib import ECPOConfig

    algo = (ECPOConfig()
            .environment("ecpo/ALFWorldGen-v0", env_config={"env_kwargs": {"max_steps": 12}})
            .rl_module(model_config={"model": "~/.cache/ecpo/models/smollm2-135m-instruct", "policy_mode": "score",
                                     "prompt_style": "compact", "history_length": 1})
            .training(group_size=8, groups_per_batch=4, estimator="ecpo", credit={"kappa": 2.0}, lr=2e-5)
            .env_runners(num_env_runners=2)
            .learners(num_learners=1, num_gpus_per_learner=1)
            .build_algo())
    result = algo.train()  # result["ecpo"]: success, val/..., credit/..., update/..., time/..., sampling/...

Its ``training_step`` is ``llm_step.llm_training_step`` (the native trainer's iteration on RLlib's actors).
The classic-RL example (``environment("ecpo/...")`` without a model) trains ``CandidateScorerModule`` with
PPO's loop: no critic and no GAE (``ECPOTorchLearner`` computes advantages with ``credit.compute_advantages``);
complete episodes only; every env runner samples whole groups (each task repeated for ``group_size``
consecutive resets by ``CandidateActionEnv``) and the learner group receives one object per group, so a group
is never split across learners.
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

import numpy as np
import ray
from ray.rllib.algorithms.ppo import PPO
from ray.rllib.core import (
    COMPONENT_ENV_RUNNER,
    COMPONENT_ENV_TO_MODULE_CONNECTOR,
    COMPONENT_MODULE_TO_ENV_CONNECTOR,
)
from ray.rllib.utils import force_list
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

from ecpo_train.integrations.rllib.config import ECPOConfig
from ecpo_train.integrations.rllib.connector import group_sizes


class ECPO(PPO):
    """PPO's loop with group sampling and group-preserving learner updates (see the module docstring)."""

    @classmethod
    def get_default_config(cls) -> ECPOConfig:
        return ECPOConfig()

    # ------------------------------------------------------------------ the LLM path (llm_step.py)
    def setup(self, config) -> None:
        if config.is_llm:  # outside Tune nothing reserves the actors' resources: Ray would wait for them forever
            bundles = PPO.default_resource_request(config).bundles
            check_fits_cluster([{}, *bundles[1:]], "this algorithm's runner and learner actors")
        super().setup(config)
        if not self.config.is_llm:
            return
        train = self.config.to_train_config()
        self.ecpo_train_config = train
        self.ecpo_rng = np.random.default_rng(train.seed)  # the native trainer's task/seed/shuffle stream
        self.ecpo_iteration = 0
        self.ecpo_validation_episodes: list[Any] = []  # the last validation's outcomes (run_dir.EpisodeOutcome)
        group = self.env_runner_group
        if group.num_remote_env_runners() == 0:
            all_tasks = group.local_env_runner.env_task_ids()
        else:
            all_tasks = group.foreach_env_runner(lambda r: r.env_task_ids(), local_env_runner=False)[0]
        self.ecpo_train_tasks = [str(t) for t in (train.train_tasks or all_tasks)]
        self.ecpo_val_tasks = [str(t) for t in (train.val_tasks or all_tasks[: train.val_num_tasks])]

    def validate(self) -> dict[str, float]:
        """Validation success (``val/success``, and ``val/exact_success`` where it exists) of the current
        weights on the run's fixed validation tasks, played on an env runner (the LLM path). Each episode's
        outcome is kept in ``ecpo_validation_episodes`` (the engine writes them to ``validation.jsonl``)."""
        from ecpo_train.integrations.rllib.llm_step import validate_on_runner

        if not self.config.is_llm:
            raise ValueError("validate() plays the LLM path's validation tasks; this config trains the candidate scorer")
        metrics, self.ecpo_validation_episodes = validate_on_runner(self)
        return metrics

    def get_state(self, components=None, *, not_components=None, **kwargs):
        """RLlib's state; on the LLM path without the env runner component (the runners rebuild their policy
        from the config and get the learner's weights) and with ECPO's own: the driver's generator, the iteration
        and every runner's sampling RNG streams, so a restored run continues exactly."""
        if not self.config.is_llm:
            return super().get_state(components, not_components=not_components, **kwargs)
        skip = [COMPONENT_ENV_RUNNER, COMPONENT_ENV_TO_MODULE_CONNECTOR, COMPONENT_MODULE_TO_ENV_CONNECTOR]
        not_components = [*(force_list(not_components) if not_components else []), *skip]
        state = super().get_state(components, not_components=not_components, **kwargs)
        if components is None or "ecpo" in force_list(components):
            state["ecpo"] = {"rng": self.ecpo_rng.bit_generator.state, "iteration": self.ecpo_iteration,
                             "runner_rng": self._runner_sampling_states()}
        return state

    def set_state(self, state) -> None:
        super().set_state(state)
        ecpo = state.get("ecpo") if self.config.is_llm else None
        if ecpo:
            self.ecpo_rng.bit_generator.state = ecpo["rng"]
            self.ecpo_iteration = int(ecpo["iteration"])
            saved = ecpo["runner_rng"]
            group = self.env_runner_group
            if group.num_remote_env_runners() == 0:
                group.local_env_runner.set_sampling_state(saved[0])
            else:
                group.foreach_env_runner(lambda r: r.set_sampling_state(saved.get(r.worker_index)),
                                         local_env_runner=False)

    def _runner_sampling_states(self) -> dict[int, Any]:
        group = self.env_runner_group
        if group.num_remote_env_runners() == 0:
            return {0: group.local_env_runner.sampling_state()}
        pairs = group.foreach_env_runner(lambda r: (r.worker_index, r.sampling_state()), local_env_runner=False)
        return dict(pairs)

    def get_checkpointable_components(self):
        components = super().get_checkpointable_components()
        if self.config.is_llm:  # the runners rebuild everything but the weights from the config
            skip = (COMPONENT_ENV_RUNNER, COMPONENT_ENV_TO_MODULE_CONNECTOR, COMPONENT_MODULE_TO_ENV_CONNECTOR)
            components = [(name, part) for name, part in components if name not in skip]
        return components

    def training_step(self) -> None:
        config: ECPOConfig = self.config
        if config.is_llm:
            from ecpo_train.integrations.rllib.llm_step import llm_training_step

            metrics = llm_training_step(self)  # also logs RLlib's own result keys (results.py)
            self.metrics.log_dict(metrics, key="ecpo", window=1)
            self._warn_if_no_signal(metrics)
            return
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

    def _warn_if_no_signal(self, metrics: dict[str, float]) -> None:
        """The native trainer's all-zero-advantage warning, on every learner's advantages of this iteration."""
        from ray.rllib.core import DEFAULT_MODULE_ID

        from ecpo_train.integrations.rllib.learner import NONZERO_ADVANTAGES
        from ecpo_train.runtime.builders import warn_if_no_signal

        nonzero = self.metrics.peek((LEARNER_RESULTS, DEFAULT_MODULE_ID, NONZERO_ADVANTAGES), default=None)
        if nonzero is not None:
            sampled = SimpleNamespace(metrics=metrics)  # the rollout's metrics: the invalid-action rate says why
            warn_if_no_signal(sampled, np.full(1, float(nonzero)), int(metrics["iteration"]))

    # ------------------------------------------------------------------ RLlib's surface
    def save_to_path(self, path=None, *args, **kwargs):
        """RLlib's ``save_to_path``; a relative local path is taken from the working directory (pyarrow,
        underneath, refuses a path without a scheme)."""
        return super().save_to_path(_absolute(path), *args, **kwargs)

    @classmethod
    def from_checkpoint(cls, path, *args, **kwargs):
        """RLlib's ``from_checkpoint``; a relative local path is taken from the working directory."""
        return super().from_checkpoint(_absolute(path), *args, **kwargs)

    @classmethod
    def default_resource_request(cls, config):
        """RLlib's request (what Tune reserves for a trial), refused with one line when it can never fit Ray's
        cluster: Tune would keep the trial PENDING forever."""
        request = super().default_resource_request(config)
        check_fits_cluster(request.bundles, "this trial")
        return request

    def _sample_groups(self) -> tuple[list, list]:
        """``groups_per_env_runner * group_size`` complete episodes from every env runner."""
        config: ECPOConfig = self.config
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


def update_on_groups(learner_group, groups: list[list], config: ECPOConfig, *, timesteps=None) -> list:
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


def _absolute(path: Any) -> Any:
    """A local relative path made absolute; ``None``, URIs (``s3://...``) and absolute paths as given."""
    if path is None or "://" in str(path):
        return path
    return os.path.abspath(os.path.expanduser(str(path)))


def check_fits_cluster(bundles: list[dict[str, float]], what: str) -> None:
    """``ValueError`` naming the resource when ``bundles`` (RLlib's requests: the driver's first, then one per
    actor) ask more CPUs or GPUs than the running Ray cluster has in all; nothing when Ray is not started yet."""
    if not ray.is_initialized():
        return
    available = ray.cluster_resources()
    for resource, setting in (("CPU", "num_cpus_per_env_runner / num_cpus_per_learner"),
                              ("GPU", "num_gpus_per_env_runner / num_gpus_per_learner")):
        needed = sum(float(b.get(resource, 0.0)) for b in bundles)
        have = float(available.get(resource, 0.0))
        if needed > have:
            raise ValueError(f"{what} needs {needed:g} {resource}s ({float(bundles[0].get(resource, 0)):g} for the "
                             f"driver, the rest for {len(bundles) - 1} actors) and the Ray cluster has {have:g}: lower "
                             f"num_env_runners, num_learners or {setting}, or add nodes")
