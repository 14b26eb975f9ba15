"""ecpo_train: credit estimators (GRPO, RLOO, GiGPO, ECPO), rollouts, objective and trainers."""
