"""``ECPOConfig`` / ``ECPO``: ECPO inside RLlib's new API stack (env runners, learner group, connectors).

Usage::

    from ecpo_train.integrations.rllib import ECPOConfig

    algo = (ECPOConfig()
            .environment("ecpo/DivergentAnchor-v0", env_config={"env_kwargs": {"depth": 6}})
            .training(group_size=8, groups_per_batch=4, credit={"kappa": 2.0, "tau": 2.0})
            .build_algo())
    for _ in range(10):
        result = algo.train()

What differs from PPO: no critic and no GAE (``ECPOTorchLearner`` computes advantages with
``credit.compute_advantages``); complete episodes only; every env runner samples whole groups (each task
repeated for ``group_size`` consecutive resets by ``CandidateActionEnv``) and the learner group receives
one object per group, so a group is never split across learners.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import ray
from ray.rllib.algorithms.algorithm_config import NotProvided
from ray.rllib.algorithms.ppo import PPO, PPOConfig
from ray.rllib.core import (
    COMPONENT_ENV_RUNNER,
    COMPONENT_ENV_TO_MODULE_CONNECTOR,
    COMPONENT_MODULE_TO_ENV_CONNECTOR,
)
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
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

from ecpo_train.core.credit import CreditConfig, available_estimators
from ecpo_train.core.rollout import ANCHOR_KEYS
from ecpo_train.integrations.rllib.candidate_env import CandidateActionEnv
from ecpo_train.integrations.rllib.connector import group_sizes
from ecpo_train.integrations.rllib.llm_settings import apply_train_config, is_llm_config, train_config_of


class ECPOConfig(PPOConfig):
    """PPO's config plus ECPO's: ``group_size`` (N), ``groups_per_batch``, ``estimator`` (a credit registry
    name), ``credit`` (a ``credit.CreditConfig``: gamma, omega, kappa, tau, d_min, rho_min, eps, compat;
    its defaults are the paper's) and ``anchor_key`` (``"state_key"``, the env's structured key, or
    ``"observation_key"``, the normalised observation text; as in ``rollout.collect_rollout``).

    ``training(credit=CreditConfig(...))`` replaces the credit configuration; ``training(credit={"kappa": 3.0})``
    changes only the fields named. ECPO's discount is the credit's: ``config.gamma`` reads and
    ``training(gamma=...)`` writes ``config.credit.gamma``.

    ``groups_per_batch`` groups are sampled per iteration, split evenly over the env runners (rounded up
    to a multiple of their number). ``environment("ecpo/...")`` wraps the text env in
    ``CandidateActionEnv``; its ``env_config`` takes ``env_kwargs``, ``max_candidates``, ``feature_dim``,
    ``task_ids`` and ``seed``.

    ``lora`` (``{r, alpha, dropout, target_modules}``, checked by ``lora.check_lora_settings``; ``{}`` = full
    fine-tuning) is for the LLM path (``LLMTrainer``): the learner's ``CausalLMRLModule`` and every
    ``LLMGroupRunner``'s policy get the same adapter, only adapter weights train, and weight sync carries the
    adapter tensors only. The KL reference is then the runner's model with its adapter off.
    """

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or ECPO)
        self.group_size = 8
        self.groups_per_batch = 16
        self.estimator = "ecpo"
        self.credit = CreditConfig()
        self.anchor_key = "state_key"
        self.lora: dict = {}  # LoRA settings of the LLM path (lora.check_lora_settings); {} = full fine-tuning
        self.text_env_id = None  # the ecpo_gym id that environment("ecpo/...") wrapped
        self.run_settings: dict = {}  # LLM path: native TrainConfig keys RLlib has no name for (llm_settings.py)
        self.lost_groups = "top_up"  # LLM path: groups of a lost env runner are re-sampled ("top_up") or refused
        # Critic off, whole episodes, one env per runner (so its resets stay grouped).
        self.use_critic = False
        self.use_gae = False
        self.batch_mode = "complete_episodes"
        self.num_env_runners = 0
        self.num_envs_per_env_runner = 1
        self.use_kl_loss = False
        self.lr = 1e-3
        self.num_epochs = 4
        self.minibatch_size = None
        self.entropy_coeff = 0.0
        self.clip_param = 0.2

    @property
    def gamma(self) -> float:
        return self.credit.gamma

    @gamma.setter
    def gamma(self, value: float) -> None:
        # AlgorithmConfig.__init__ assigns RLlib's default before ECPOConfig.__init__ creates the credit config
        if "credit" in self.__dict__:
            self.credit = dataclasses.replace(self.credit, gamma=value)

    def training(
        self,
        *,
        group_size: int | None = NotProvided,
        groups_per_batch: int | None = NotProvided,
        estimator: str | None = NotProvided,
        credit: CreditConfig | Mapping[str, Any] | None = NotProvided,
        anchor_key: str | None = NotProvided,
        lora: Mapping[str, Any] | None = NotProvided,
        run_settings: Mapping[str, Any] | None = NotProvided,
        lost_groups: str | None = NotProvided,
        **kwargs: Any,
    ) -> ECPOConfig:
        """PPO's ``training`` plus ECPO's settings (see the class docstring); ``gamma`` given here wins over
        ``credit``'s."""
        misplaced = sorted(set(kwargs) & {f.name for f in dataclasses.fields(CreditConfig)} - {"gamma"})
        if misplaced:
            raise TypeError(f"{', '.join(misplaced)} belong to the credit configuration: "
                            f"training(credit={{{', '.join(f'{name!r}: ...' for name in misplaced)}}})")
        if credit is not NotProvided:
            if isinstance(credit, Mapping):
                credit = CreditConfig.from_kwargs(**(dataclasses.asdict(self.credit) | dict(credit)))
            elif not isinstance(credit, CreditConfig):
                raise TypeError(f"credit must be a credit.CreditConfig or a dict of its fields, got {credit!r}")
            self.credit = credit
        if lora is not NotProvided:
            from ecpo_train.policies.lora import check_lora_settings

            self.lora = check_lora_settings(dict(lora) if lora else None)
        super().training(**kwargs)
        if run_settings is not NotProvided:
            self.run_settings = dict(self.run_settings) | dict(run_settings or {})
        for name, value in (("group_size", group_size), ("groups_per_batch", groups_per_batch),
                            ("estimator", estimator), ("anchor_key", anchor_key), ("lost_groups", lost_groups)):
            if value is not NotProvided:
                setattr(self, name, value)
        self._sync_env_config()
        return self

    def to_dict(self) -> dict[str, Any]:
        return super().to_dict() | {"gamma": self.gamma}  # a property, so not among vars(self)

    def update_from_dict(self, config_dict: dict) -> ECPOConfig:
        """RLlib's dict form; a ``credit`` entry (a dict after ``serialize()``) goes through ``training``."""
        config_dict = dict(config_dict)
        if "credit" in config_dict:
            self.training(credit=config_dict.pop("credit"))
        return super().update_from_dict(config_dict)

    def environment(self, env: Any = NotProvided, **kwargs: Any) -> ECPOConfig:
        super().environment(env, **kwargs)
        if isinstance(env, str):
            self.text_env_id = env  # the LLM path plays any registered text env id (an ecpo_gym one, or yours)
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

    # ------------------------------------------------------------------ the LLM path
    @property
    def is_llm(self) -> bool:
        """``rl_module(model_config={"model": ...})`` makes this an LLM config (``llm_settings.py``)."""
        return is_llm_config(self)

    def to_train_config(self):
        """The native ``TrainConfig`` of this LLM config (the runners and learners build their policy from it)."""
        return train_config_of(self)

    @classmethod
    def from_train_config(cls, train) -> ECPOConfig:
        """The native run ``train`` (a ``TrainConfig``, e.g. ``load_config("corridor_llm")``) through RLlib."""
        return apply_train_config(cls(), train)

    def get_default_rl_module_spec(self) -> RLModuleSpec:
        from ecpo_train.integrations.rllib.module import CandidateScorerModule, CausalLMRLModule

        if self.is_llm:
            from ecpo_train.runtime.config import config_dict

            return RLModuleSpec(module_class=CausalLMRLModule,
                                model_config={"train_config": config_dict(train_config_of(self))})
        return RLModuleSpec(module_class=CandidateScorerModule)

    def get_default_learner_class(self):
        from ecpo_train.integrations.rllib.learner import ECPOLLMLearner, ECPOTorchLearner

        return ECPOLLMLearner if self.is_llm else ECPOTorchLearner

    def _validate_llm(self) -> None:
        """One clear error before any actor starts: the run's TrainConfig (ranges, LoRA without peft), the env id,
        scoring on search-QA, learners without whole groups, the lost-group policy."""
        import gymnasium as gym

        from ecpo_train.integrations.rllib.llm_runner import LLMEnvRunner
        from ecpo_train.integrations.rllib.llm_step import LOST_GROUP_POLICIES

        if self.text_env_id is None:
            self._value_error("an LLM config needs environment('ecpo/<id>'), one of ecpo_gym's text env ids")
        try:
            gym.spec(self.text_env_id)
        except gym.error.Error:
            import ecpo_gym

            self._value_error(f"unknown env id {self.text_env_id!r}; registered: {', '.join(sorted(ecpo_gym.ENV_ENTRY_POINTS))}")
        try:  # the TrainConfig's own checks: ranges, scoring on search-QA, LoRA without peft, ...
            train_config_of(self)
        except (ValueError, ImportError) as error:  # ImportError: LoRA asked for without peft installed
            self._value_error(str(error))
        if self._model_config.get("generation_backend") == "vllm":
            from ecpo_train.policies.vllm_backend import import_vllm

            try:
                import_vllm()
            except ImportError as error:
                self._value_error(str(error))
        if self.lost_groups not in LOST_GROUP_POLICIES:
            self._value_error(f"lost_groups={self.lost_groups!r}; valid: {', '.join(LOST_GROUP_POLICIES)}")
        if self.env_runner_cls is None:
            self.env_runner_cls = LLMEnvRunner
        self.create_local_env_runner = int(self.num_env_runners) == 0
        self._dont_auto_sync_env_runner_states = True  # no env-to-module connector states: the rows are the data

    def validate(self) -> None:
        if self.is_llm:
            self._validate_llm()
        super().validate()
        if self.use_critic:
            self._value_error("ECPO is critic-free: set training(use_critic=False)")
        if self.batch_mode != "complete_episodes":
            self._value_error("ECPO needs batch_mode='complete_episodes' (credit is over whole trajectories)")
        if self.num_envs_per_env_runner != 1:
            self._value_error("ECPO needs num_envs_per_env_runner=1 so that each runner's resets stay grouped; "
                              "scale with num_env_runners instead")
        if self.estimator not in available_estimators():
            self._value_error(f"estimator={self.estimator!r}; valid: {', '.join(available_estimators())}")
        if not isinstance(self.credit, CreditConfig):
            self._value_error(f"credit must be a credit.CreditConfig (use training(credit=...)), got {self.credit!r}")
        if self.anchor_key not in ANCHOR_KEYS:
            self._value_error(f"anchor_key={self.anchor_key!r}; valid: {', '.join(ANCHOR_KEYS)}")
        if self.lora:
            from ecpo_train.policies.lora import check_lora_settings

            try:
                check_lora_settings(self.lora)
            except ValueError as error:
                self._value_error(str(error))
            if not self.is_llm:
                self._value_error("lora adapts the LLM path's causal LM (rl_module(model_config={'model': ...})); "
                                  "the candidate scorer has none")
        if int(self.group_size) < 2:
            self._value_error(f"group_size must be >= 2 (group baselines), got {self.group_size}")
        if int(self.groups_per_batch) < max(1, int(self.num_learners)):
            self._value_error(f"groups_per_batch ({self.groups_per_batch}) must be >= num_learners "
                              f"({self.num_learners}): groups are never split across learners")
        if (not self.is_llm and self.env is CandidateActionEnv
                and int(self.env_config.get("group_size", -1)) != int(self.group_size)):
            self._value_error("env_config['group_size'] disagrees with training(group_size=...)")

    @property
    def groups_per_env_runner(self) -> int:
        return math.ceil(int(self.groups_per_batch) / max(1, int(self.num_env_runners)))


class ECPO(PPO):
    """PPO's loop with group sampling and group-preserving learner updates (see the module docstring)."""

    @classmethod
    def get_default_config(cls) -> ECPOConfig:
        return ECPOConfig()

    # ------------------------------------------------------------------ the LLM path (llm_step.py)
    def setup(self, config) -> None:
        super().setup(config)
        if not self.config.is_llm:
            return
        train = self.config.to_train_config()
        self.ecpo_train_config = train
        self.ecpo_rng = np.random.default_rng(train.seed)  # the native trainer's task/seed/shuffle stream
        self.ecpo_iteration = 0
        group = self.env_runner_group
        if group.num_remote_env_runners() == 0:
            all_tasks = group.local_env_runner.env_task_ids()
        else:
            all_tasks = group.foreach_env_runner(lambda r: r.env_task_ids(), local_env_runner=False)[0]
        self.ecpo_train_tasks = [str(t) for t in (train.train_tasks or all_tasks)]
        self.ecpo_val_tasks = [str(t) for t in (train.val_tasks or all_tasks[: train.val_num_tasks])]

    def validate(self) -> dict[str, float]:
        """Validation success (``val/success``, and ``val/exact_success`` where it exists) of the current
        weights on the run's fixed validation tasks, played on an env runner (the LLM path)."""
        from ecpo_train.integrations.rllib.llm_step import validate_on_runner

        if not self.config.is_llm:
            raise ValueError("validate() plays the LLM path's validation tasks; this config trains the candidate scorer")
        return validate_on_runner(self)

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

            metrics = llm_training_step(self)
            self.metrics.log_dict(metrics, key="ecpo", window=1)
            self.metrics.log_value((ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), metrics["num_steps"],
                                   reduce="lifetime_sum")
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
                timeout_seconds=config.sample_timeout_s,
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


def _is_text_env_id(env_id: str) -> bool:
    try:
        from ecpo_gym import ENV_ENTRY_POINTS
    except ImportError:
        return False
    return env_id in ENV_ENTRY_POINTS or env_id.startswith("ecpo/")
