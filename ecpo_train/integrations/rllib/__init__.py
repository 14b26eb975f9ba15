"""ECPO inside RLlib (ray 2.60 new API stack): ``ECPOConfig``, ``ECPO`` and their parts.

An LLM run: ``ECPOConfig().environment("ecpo/...").rl_module(model_config={"model": DIR, ...}).build_algo()``
(``LLMEnvRunner`` actors, ``ECPOLLMLearner`` learners); the classic-RL example trains ``CandidateScorerModule``
over ``CandidateActionEnv``. Importing this package imports ray; ``import ecpo_train`` does not.
"""

from ecpo_train.integrations.rllib.algorithm import ECPO, split_groups
from ecpo_train.integrations.rllib.candidate_env import CandidateActionEnv, hashed_text_features
from ecpo_train.integrations.rllib.config import ECPOConfig
from ecpo_train.integrations.rllib.connector import ECPOAdvantages, StepTableCredit, batch_from_episodes
from ecpo_train.integrations.rllib.learner import ECPOLLMLearner
from ecpo_train.integrations.rllib.llm_runner import LLMEnvRunner

__all__ = [
    "ECPO",
    "CandidateActionEnv",
    "ECPOAdvantages",
    "ECPOConfig",
    "ECPOLLMLearner",
    "LLMEnvRunner",
    "StepTableCredit",
    "batch_from_episodes",
    "hashed_text_features",
    "split_groups",
]
