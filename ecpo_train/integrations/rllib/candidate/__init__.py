"""The classic-RL example in RLlib: ``CandidateECPOConfig`` / ``CandidateECPO`` train ``CandidateScorerModule``
(``module.py``) over ``CandidateActionEnv`` (``env.py``: hashed text features, ``Discrete(K)`` over the admissible
actions) with PPO's clipped loss (``learner.py``) and ``credit.compute_advantages`` in place of GAE
(``connector.py``)."""
