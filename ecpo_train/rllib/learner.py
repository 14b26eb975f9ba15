"""ECPO's torch learner: PPO's clipped loss on credit.py advantages, no critic, no GAE."""

from __future__ import annotations

from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
from ray.rllib.connectors.learner import AddOneTsToEpisodesAndTruncate, GeneralAdvantageEstimation

from ecpo_train.rllib.connector import ECPOAdvantages


def install_ecpo_connector(learner) -> None:
    """Replace GAE (and its bootstrap timestep) in ``learner``'s pipeline by one ``ECPOAdvantages`` piece.

    Prepended so the default pieces that follow batch and tensorise its columns like any other.
    """
    pipeline = learner._learner_connector
    if pipeline is None:
        return
    for piece in (AddOneTsToEpisodesAndTruncate, GeneralAdvantageEstimation):
        if any(isinstance(c, piece) for c in pipeline.connectors):
            pipeline.remove(piece)
    config = learner.config
    pipeline.prepend(ECPOAdvantages(
        estimator=config.estimator,
        group_size=config.group_size,
        hyperparameters=config.credit_hyperparameters(),
    ))


class ECPOTorchLearner(PPOTorchLearner):
    """``PPOTorchLearner`` whose advantages come from ``credit.compute_advantages`` over whole groups."""

    def build(self) -> None:
        super().build()
        install_ecpo_connector(self)

    @classmethod
    def rl_module_required_apis(cls) -> list[type]:
        return []  # critic-free: no ValueFunctionAPI
