"""``CandidateECPOConfig``: the classic-RL example's config (hashed features, a small scorer, PPO's loop).

``environment("ecpo/...")`` wraps the text env in ``CandidateActionEnv`` (``env_config``: ``env_kwargs``,
``max_candidates``, ``feature_dim``, ``task_ids``, ``seed``), ``CandidateScorerModule`` is the policy and
``ECPOTorchLearner`` (PPO's clipped loss, advantages from ``credit.compute_advantages``) the learner;
``groups_per_batch`` groups are split evenly over the env runners. ``ECPOConfig()`` without a model becomes
one of these when it is validated or built (``ECPOConfig.for_algorithm``).
"""

from __future__ import annotations

from typing import Any

from ray.rllib.algorithms.algorithm_config import NotProvided
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from ecpo_train.integrations.rllib.base_config import GroupCreditConfig
from ecpo_train.integrations.rllib.candidate.env import CandidateActionEnv

# ECPOConfig's settings that only an LLM run has (ECPOConfig.for_algorithm refuses a set lora by name)
LLM_ONLY_SETTINGS = ("lora", "run_settings", "lost_groups")


class CandidateECPOConfig(GroupCreditConfig):
    """``GroupCreditConfig`` for the classic-RL example (see the module docstring). Set its ``lr`` yourself: the
    shared default, 1e-6, is an LLM's step."""

    def __init__(self, algo_class=None):
        from ecpo_train.integrations.rllib.candidate.algorithm import CandidateECPO

        super().__init__(algo_class=algo_class or CandidateECPO)

    @classmethod
    def from_settings_of(cls, config: GroupCreditConfig) -> CandidateECPOConfig:
        """A candidate config with ``config``'s settings, copied through RLlib's dict form (as Tune copies one)."""
        settings = {key: value for key, value in config.to_dict().items() if key not in LLM_ONLY_SETTINGS}
        settings.pop("class", None)
        out = cls().update_from_dict(settings)
        out.environment(config.text_env_id if config.text_env_id is not None else NotProvided)
        return out

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
        from ecpo_train.integrations.rllib.candidate.module import CandidateScorerModule

        return RLModuleSpec(module_class=CandidateScorerModule)

    def get_default_learner_class(self):
        from ecpo_train.integrations.rllib.candidate.learner import ECPOTorchLearner

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
