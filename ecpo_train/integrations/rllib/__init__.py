"""ECPO inside RLlib (ray 2.60 new API stack): ``ECPOConfig``, ``ECPO`` and their parts.

Importing this package imports ray; ``import ecpo_train`` does not.
"""

from ecpo_train.integrations.rllib.algorithm import ECPO, ECPOConfig, split_groups
from ecpo_train.integrations.rllib.candidate_env import CandidateActionEnv, hashed_text_features
from ecpo_train.integrations.rllib.connector import ECPOAdvantages, batch_from_episodes
from ecpo_train.integrations.rllib.llm_runner import LLMGroupRunner
from ecpo_train.integrations.rllib.llm_trainer import LLMTrainer

__all__ = [
    "ECPO",
    "CandidateActionEnv",
    "ECPOAdvantages",
    "ECPOConfig",
    "LLMGroupRunner",
    "LLMTrainer",
    "batch_from_episodes",
    "hashed_text_features",
    "split_groups",
]
