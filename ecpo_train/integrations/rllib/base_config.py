"""What an RLlib config of group credit holds: PPO's config plus ECPO's group rollout and credit settings.

``GroupCreditConfig`` holds ``group_size`` (N), ``groups_per_batch``, ``estimator`` (a credit registry name),
``credit`` (a ``CreditConfig``) and ``anchor_key``, with the checks both algorithms need (critic-free, complete
episodes, whole groups). The LLM algorithm's config (``llm/config.py``, ``ECPOConfig``) subclasses it, as the
classic-RL example outside the library does (``examples/rllib_candidate``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from ray.rllib.algorithms.algorithm_config import NotProvided
from ray.rllib.algorithms.ppo import PPOConfig

from ecpo_gym.kwargs import shown
from ecpo_train.core.credit import CreditConfig, available_estimators, check_group_size
from ecpo_train.core.rollout import check_anchor_key
from ecpo_train.integrations.rllib.base_algorithm import check_gpu_request
from ecpo_train.runtime.config import TrainConfig

SECONDS_PER_GROUP_STEP = 30.0  # the derived sampling timeout's budget for one step of one group (N copies at once)
MIN_SAMPLE_TIMEOUT_S = 300.0
UNDECLARED_STEP_LIMIT = 50  # an env whose step limit is not declared (ecpo_gym.families) gets this budget


def native_update_defaults() -> dict[str, Any]:
    """``TrainConfig``'s field defaults (group_size, n_groups, estimator, anchor_key, lr, num_epochs,
    mini_batch_size, max_grad_norm, kl_coef, clip_eps, ...): both configs start from them, so a bare LLM config
    trains as the native trainer does."""
    return {f.name: f.default for f in dataclasses.fields(TrainConfig) if f.default is not dataclasses.MISSING}


class GroupCreditConfig(PPOConfig):
    """PPO's config plus ECPO's: ``group_size`` (N), ``groups_per_batch``, ``estimator`` (a credit registry
    name), ``credit`` (a ``credit.CreditConfig``: gamma, omega, kappa, tau, d_min, rho_min, eps, compat;
    its defaults are the paper's) and ``anchor_key`` (``"state_key"``, the env's structured key, or
    ``"observation_key"``, the normalised observation text; as in ``rollout.collect_rollout``).

    ``training(credit=CreditConfig(...))`` replaces the credit configuration; ``training(credit={"kappa": 3.0})``
    changes only the fields named. ECPO's discount is the credit's: ``config.gamma`` reads and
    ``training(gamma=...)`` writes ``config.credit.gamma``.
    """

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class)
        # The group rollout's and the update's defaults are the native trainer's (TrainConfig's), not PPO's: one
        # run, two spellings, each default typed once.
        native = native_update_defaults()
        self.group_size = native["group_size"]
        self.groups_per_batch = native["n_groups"]
        self.estimator = native["estimator"]
        self.credit = CreditConfig()
        self.anchor_key = native["anchor_key"]
        self.text_env_id = None  # the text env id given to environment("ecpo/...")
        # Critic off, whole episodes, one env per runner (so its resets stay grouped).
        self.use_critic = False
        self.use_gae = False
        self.batch_mode = "complete_episodes"
        self.num_env_runners = 0
        self.num_envs_per_env_runner = 1
        self.lr = native["lr"]
        self.num_epochs = native["num_epochs"]
        self.minibatch_size = native["mini_batch_size"]
        self.grad_clip = native["max_grad_norm"]
        self.use_kl_loss = native["kl_coef"] > 0
        self.kl_coeff = native["kl_coef"]
        self.clip_param = native["clip_eps"]
        self.entropy_coeff = native["entropy_coef"]
        self.sample_timeout_s = None  # None: derived from the env's step limit (group_sample_timeout_s)

    @property
    def gamma(self) -> float:
        return self.credit.gamma

    @gamma.setter
    def gamma(self, value: float) -> None:
        # AlgorithmConfig.__init__ assigns RLlib's default before __init__ here creates the credit config
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
        **kwargs: Any,
    ) -> GroupCreditConfig:
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
                raise TypeError(f"credit must be a credit.CreditConfig or a dict of its fields, got {shown(credit)}")
            self.credit = credit
        super().training(**kwargs)
        for name, value in (("group_size", group_size), ("groups_per_batch", groups_per_batch),
                            ("estimator", estimator), ("anchor_key", anchor_key)):
            if value is not NotProvided:
                setattr(self, name, value)
        return self

    def to_dict(self) -> dict[str, Any]:
        return super().to_dict() | {"gamma": self.gamma}  # a property, so not among vars(self)

    def _value_error(self, errmsg: str) -> None:
        """RLlib's, as one line (RLlib appends a second one on how to switch validation off)."""
        if self._validate_config:
            raise ValueError(errmsg)
        super()._value_error(errmsg)

    def update_from_dict(self, config_dict: dict) -> GroupCreditConfig:
        """RLlib's dict form; a ``credit`` entry (a dict after ``serialize()``) goes through ``training``."""
        config_dict = dict(config_dict)
        if "credit" in config_dict:
            self.training(credit=config_dict.pop("credit"))
        return super().update_from_dict(config_dict)

    def validate(self) -> None:
        try:  # GPUs that cannot be had would leave the actors waiting forever: refused before any starts
            check_gpu_request(self)
        except ValueError as error:
            self._value_error(str(error))
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
            self._value_error(f"estimator={shown(self.estimator)}; valid: {', '.join(critic_free)}")
        if not isinstance(self.credit, CreditConfig):
            self._value_error(f"credit must be a credit.CreditConfig (use training(credit=...)), got {shown(self.credit)}")
        try:
            check_anchor_key(self.anchor_key)
        except ValueError as error:
            self._value_error(str(error))
        try:
            check_group_size(self.group_size, self.estimator)
        except ValueError as error:
            self._value_error(str(error))
        if int(self.groups_per_batch) < max(1, int(self.num_learners)):
            self._value_error(f"groups_per_batch ({self.groups_per_batch}) must be >= num_learners "
                              f"({self.num_learners}): groups are never split across learners")

    @property
    def groups_per_env_runner(self) -> int:
        return math.ceil(int(self.groups_per_batch) / max(1, int(self.num_env_runners)))

    @property
    def group_sample_timeout_s(self) -> float:
        """How long one runner call may play its groups: ``env_runners(sample_timeout_s=...)`` when set, else
        the env's step limit x the groups one runner plays x ``SECONDS_PER_GROUP_STEP`` (at least
        ``MIN_SAMPLE_TIMEOUT_S``): RLlib's 60 s is one PPO fragment, not a group of whole episodes."""
        if self.sample_timeout_s is not None:
            return float(self.sample_timeout_s)
        steps = UNDECLARED_STEP_LIMIT
        kwargs = dict((self.env_config or {}).get("env_kwargs") or {})
        if kwargs.get("max_steps"):
            steps = int(kwargs["max_steps"])
        else:
            try:
                from ecpo_gym.families import declared_max_steps

                steps = declared_max_steps(self.text_env_id)
            except (KeyError, ValueError, ImportError):
                pass
        return max(MIN_SAMPLE_TIMEOUT_S, steps * self.groups_per_env_runner * SECONDS_PER_GROUP_STEP)
