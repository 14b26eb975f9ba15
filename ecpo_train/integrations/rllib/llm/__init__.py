"""The LLM algorithm in RLlib: ``ECPOConfig`` (``config.py``, its spelling in ``settings.py``), ``ECPO``
(``algorithm.py``, its iteration in ``step.py``), ``LLMEnvRunner`` (``runner.py``), ``ECPOLLMLearner``
(``learner.py``, credit in ``connector.py``), ``CausalLMRLModule`` (``module.py``), RLlib's result keys
(``results.py``) and ``ecpo train --engine rllib`` (``engine.py``)."""
