"""The LLM algorithm in RLlib: ``ECPOConfig`` and ``ECPO`` (``config.py``, the config's spelling in ``settings.py``,
the iteration in ``step.py``: ``core.iteration.run_iteration`` with the runner pool of ``sampler.py`` and
``groups.py``, pipelined in ``pipeline.py``), ``LLMEnvRunner`` (``runner.py``), ``ECPOLLMLearner`` (``learner.py``,
credit in ``connector.py``), ``CausalLMRLModule`` (``module.py``), RLlib's result keys (``results.py``) and
``ecpo train --engine rllib`` (``engine.py``)."""
