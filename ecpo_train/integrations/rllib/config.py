"""``ECPOConfig``: PPO's config plus ECPO's group rollout, credit and (for an LLM) the run's policy.

Two kinds of run share it. The LLM path, ``rl_module(model_config={"model": DIR, ...})``: env runners are
``LLMEnvRunner`` actors playing the native policy (``llm_settings.py`` maps the config to the native
``TrainConfig``), learners are ``ECPOLLMLearner``. The classic-RL example: ``environment("ecpo/...")`` wraps the
text env in ``CandidateActionEnv`` and ``CandidateScorerModule`` learns over hashed text features.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from ray.rllib.algorithms.algorithm_config import NotProvided
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from ecpo_train.core.credit import CreditConfig, available_estimators
from ecpo_train.core.rollout import ANCHOR_KEYS
from ecpo_train.integrations.rllib.candidate_env import CandidateActionEnv
from ecpo_train.integrations.rllib.llm_settings import apply_train_config, is_llm_config, train_config_of


class ECPOConfig(PPOConfig):
    """PPO's config plus ECPO's: ``group_size`` (N), ``groups_per_batch``, ``estimator`` (a credit registry
    name), ``credit`` (a ``credit.CreditConfig``: gamma, omega, kappa, tau, d_min, rho_min, eps, compat;
    its defaults are the paper's) and ``anchor_key`` (``"state_key"``, the env's structured key, or
    ``"observation_key"``, the normalised observation text; as in ``rollout.collect_rollout``).

    ``training(credit=CreditConfig(...))`` replaces the credit configuration; ``training(credit={"kappa": 3.0})``
    changes only the fields named. ECPO's discount is the credit's: ``config.gamma`` reads and
    ``training(gamma=...)`` writes ``config.credit.gamma``.

    An LLM run (``rl_module(model_config={"model": DIR, ...})``, ``llm_settings.py``): ``groups_per_batch`` whole
    groups per iteration, shared over the healthy ``LLMEnvRunner``s; ``run_settings`` holds the native keys RLlib
    has no name for; ``lost_groups`` ("top_up" | "refuse") says what happens to a lost runner's groups; ``lora``
    (``{r, alpha, dropout, target_modules}``, or ``model_config["lora"]``) gives learner and runners the same
    adapter, only it trains and weight sync carries only it; the KL reference is the adapter switched off.

    The candidate example: ``environment("ecpo/...")`` without a model wraps the text env in
    ``CandidateActionEnv`` (``env_config``: ``env_kwargs``, ``max_candidates``, ``feature_dim``, ``task_ids``,
    ``seed``); ``groups_per_batch`` groups are split evenly over the env runners.
    """

    def __init__(self, algo_class=None):
        from ecpo_train.integrations.rllib.algorithm import ECPO

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
        critic_free = available_estimators(needs_values=False)  # ECPO in RLlib is critic-free: no "ppo" here
        if self.estimator not in critic_free:
            self._value_error(f"estimator={self.estimator!r}; valid: {', '.join(critic_free)}")
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


def _is_text_env_id(env_id: str) -> bool:
    try:
        from ecpo_gym import ENV_ENTRY_POINTS
    except ImportError:
        return False
    return env_id in ENV_ENTRY_POINTS or env_id.startswith("ecpo/")
