"""ECPO inside RLlib (ray 2.60 new API stack): two algorithms and their parts.

``llm/``: the LLM algorithm, ``ECPOConfig().environment("ecpo/...").rl_module(model_config={"model": DIR, ...})
.build_algo()`` gives ``ECPO`` (``LLMEnvRunner`` actors, ``ECPOLLMLearner`` learners). ``candidate/``: the
classic-RL example, ``CandidateECPOConfig`` / ``CandidateECPO`` (``CandidateScorerModule`` over
``CandidateActionEnv``); ``ECPOConfig()`` without a model builds it too. ``base_config.py`` and
``base_algorithm.py`` hold what the two share; each algorithm lives with its config (``config.py``). Importing this package imports ray; ``import ecpo_train`` does not.
"""

from ecpo_train.integrations.rllib.candidate.config import CandidateECPO, CandidateECPOConfig, split_groups
from ecpo_train.integrations.rllib.candidate.connector import ECPOAdvantages, batch_from_episodes
from ecpo_train.integrations.rllib.candidate.env import CandidateActionEnv, hashed_text_features
from ecpo_train.integrations.rllib.llm.config import ECPO, ECPOConfig
from ecpo_train.integrations.rllib.llm.connector import StepTableCredit
from ecpo_train.integrations.rllib.llm.learner import ECPOLLMLearner
from ecpo_train.integrations.rllib.llm.runner import LLMEnvRunner

__all__ = [
    "ECPO",
    "CandidateActionEnv",
    "CandidateECPO",
    "CandidateECPOConfig",
    "ECPOAdvantages",
    "ECPOConfig",
    "ECPOLLMLearner",
    "LLMEnvRunner",
    "StepTableCredit",
    "batch_from_episodes",
    "hashed_text_features",
    "split_groups",
]
