"""ECPO inside RLlib (ray 2.60 new API stack): one algorithm and its parts.

``llm/``: the LLM algorithm, ``ECPOConfig().environment("ecpo/...").rl_module(model_config={"model": DIR, ...})
.build_algo()`` gives ``ECPO`` (``LLMEnvRunner`` actors, ``ECPOLLMLearner`` learners). ``base_config.py``,
``base_algorithm.py`` and ``base_module.py`` hold what any algorithm of group credit in RLlib needs (the
classic-RL example in ``examples/rllib_candidate`` builds on them too). Importing this package imports ray;
``import ecpo_train`` does not.
"""

from ecpo_train.integrations.rllib.llm.config import ECPO, ECPOConfig
from ecpo_train.integrations.rllib.llm.connector import StepTableCredit
from ecpo_train.integrations.rllib.llm.learner import ECPOLLMLearner
from ecpo_train.integrations.rllib.llm.runner import LLMEnvRunner

__all__ = [
    "ECPO",
    "ECPOConfig",
    "ECPOLLMLearner",
    "LLMEnvRunner",
    "StepTableCredit",
]
