"""``ECPO``: ECPO training an LLM agent as an RLlib ``Algorithm`` (new API stack): ``train()``,
``save_to_path``/``from_checkpoint``, Tune, env-runner fault tolerance, a ``LearnerGroup``.

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

Its ``training_step`` is ``step.llm_training_step`` (the native trainer's iteration on RLlib's actors). The
classic-RL example is its own algorithm, ``candidate.algorithm.CandidateECPO``.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
from ray.rllib.algorithms.ppo import PPO
from ray.rllib.core import (
    COMPONENT_ENV_RUNNER,
    COMPONENT_ENV_TO_MODULE_CONNECTOR,
    COMPONENT_MODULE_TO_ENV_CONNECTOR,
)
from ray.rllib.utils import force_list
from ray.rllib.utils.metrics import LEARNER_RESULTS

from ecpo_train.core.tasks import task_lists
from ecpo_train.integrations.rllib.base_algorithm import GroupCreditAlgorithm, check_fits_cluster
from ecpo_train.integrations.rllib.llm.config import ECPOConfig


class ECPO(GroupCreditAlgorithm):
    """The native trainer's iteration on RLlib's runners and learner group (see the module docstring)."""

    @classmethod
    def get_default_config(cls) -> ECPOConfig:
        return ECPOConfig()

    def setup(self, config) -> None:
        if config.for_algorithm() is not config:  # a config without a model: Tune hands it here unswitched
            raise ValueError("ECPO trains an LLM (rl_module(model_config={'model': ...})); the classic-RL example "
                             "is CandidateECPO (tune.Tuner(CandidateECPO, param_space=...))")
        # outside Tune nothing reserves the actors' resources: Ray would wait for them forever
        bundles = PPO.default_resource_request(config).bundles
        check_fits_cluster([{}, *bundles[1:]], "this algorithm's runner and learner actors")
        super().setup(config)
        train = self.config.to_train_config()
        self.ecpo_train_config = train
        self.ecpo_rng = np.random.default_rng(train.seed)  # the native trainer's task/seed/shuffle stream
        self.ecpo_iteration = 0
        self.ecpo_dispatched = None  # max_policy_lag=1: the next iteration's groups (pipeline.Dispatched)
        self.ecpo_validation_episodes: list[Any] = []  # the last validation's outcomes (run_dir.EpisodeOutcome)
        group = self.env_runner_group
        if group.num_remote_env_runners() == 0:
            all_tasks = group.local_env_runner.env_task_ids()
        else:
            all_tasks = group.foreach_env_runner(lambda r: r.env_task_ids(), local_env_runner=False)[0]
        self.ecpo_train_tasks, self.ecpo_val_tasks = task_lists(train, all_tasks)

    def validate(self) -> dict[str, float]:
        """Validation success (``val/success``, and ``val/exact_success`` where it exists) of the current
        weights on the run's fixed validation tasks, played on an env runner (the LLM path). Each episode's
        outcome is kept in ``ecpo_validation_episodes`` (the engine writes them to ``validation.jsonl``)."""
        from ecpo_train.integrations.rllib.llm.pipeline import sync_runner_weights
        from ecpo_train.integrations.rllib.llm.step import validate_on_runner

        if self.config.max_policy_lag and self.env_runner_group.num_remote_env_runners():
            sync_runner_weights(self)  # pipelined, the runners hold the weights one update behind
        metrics, self.ecpo_validation_episodes = validate_on_runner(self)
        return metrics

    def get_state(self, components=None, *, not_components=None, **kwargs):
        """RLlib's state without the env runner component (the runners rebuild their policy from the config and
        get the learner's weights) and with ECPO's own: the driver's generator, the iteration and every runner's
        sampling RNG streams, so a restored run continues exactly. With ``max_policy_lag=1`` the next iteration's
        groups are in flight: their tasks and env seed are kept (``pending``), not their rows, so a restored run
        plays them again with the restored weights (the runners' streams are read after the calls in flight)."""
        skip = [COMPONENT_ENV_RUNNER, COMPONENT_ENV_TO_MODULE_CONNECTOR, COMPONENT_MODULE_TO_ENV_CONNECTOR]
        not_components = [*(force_list(not_components) if not_components else []), *skip]
        state = super().get_state(components, not_components=not_components, **kwargs)
        if components is None or "ecpo" in force_list(components):
            pending = self.ecpo_dispatched
            state["ecpo"] = {"rng": self.ecpo_rng.bit_generator.state, "iteration": self.ecpo_iteration,
                             "runner_rng": self._runner_sampling_states(),
                             "pending": None if pending is None else [pending.task_ids, pending.env_seed]}
        return state

    def set_state(self, state) -> None:
        super().set_state(state)
        ecpo = state.get("ecpo")
        if ecpo:
            self.ecpo_rng.bit_generator.state = ecpo["rng"]
            self.ecpo_iteration = int(ecpo["iteration"])
            from ecpo_train.integrations.rllib.llm.pipeline import Dispatched, drain_dispatched

            if self.ecpo_dispatched is not None and self.ecpo_dispatched.in_flight:
                drain_dispatched(self)  # calls of the state being replaced
            pending = ecpo.get("pending")
            self.ecpo_dispatched = None if pending is None else Dispatched(list(pending[0]), int(pending[1]))
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
        # the runners rebuild everything but the weights from the config
        skip = (COMPONENT_ENV_RUNNER, COMPONENT_ENV_TO_MODULE_CONNECTOR, COMPONENT_MODULE_TO_ENV_CONNECTOR)
        return [(name, part) for name, part in components if name not in skip]

    def training_step(self) -> None:
        from ecpo_train.integrations.rllib.llm.step import llm_training_step

        metrics = llm_training_step(self)  # also logs RLlib's own result keys (results.py)
        self.metrics.log_dict(metrics, key="ecpo", window=1)
        self._warn_if_no_signal(metrics)

    def _warn_if_no_signal(self, metrics: dict[str, float]) -> None:
        """The native trainer's all-zero-advantage warning, on every learner's advantages of this iteration."""
        from ray.rllib.core import DEFAULT_MODULE_ID

        from ecpo_train.integrations.rllib.llm.learner import NONZERO_ADVANTAGES
        from ecpo_train.runtime.builders import warn_if_no_signal

        nonzero = self.metrics.peek((LEARNER_RESULTS, DEFAULT_MODULE_ID, NONZERO_ADVANTAGES), default=None)
        if nonzero is not None:
            sampled = SimpleNamespace(metrics=metrics)  # the rollout's metrics: the invalid-action rate says why
            warn_if_no_signal(sampled, np.full(1, float(nonzero)), int(metrics["iteration"]))
