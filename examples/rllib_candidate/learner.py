"""``ECPOTorchLearner``: the classic-RL example's learner, PPO's clipped loss with ``credit.compute_advantages``
advantages (the ``ECPOAdvantages`` connector piece) instead of a critic and GAE."""

from __future__ import annotations

from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
from ray.rllib.connectors.learner import AddOneTsToEpisodesAndTruncate, GeneralAdvantageEstimation

from examples.rllib_candidate.connector import ECPOAdvantages


def ecpo_connector(config) -> ECPOAdvantages:
    """The ``ECPOAdvantages`` piece a ``CandidateECPOConfig`` asks for: its estimator, group size, credit and anchor."""
    return ECPOAdvantages(estimator=config.estimator, group_size=config.group_size, credit_config=config.credit,
                          anchor_key=config.anchor_key)


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
    pipeline.prepend(ecpo_connector(learner.config))


class ECPOTorchLearner(PPOTorchLearner):
    """``PPOTorchLearner`` whose advantages come from ``credit.compute_advantages`` over whole groups."""

    def build(self) -> None:
        super().build()
        install_ecpo_connector(self)

    @classmethod
    def rl_module_required_apis(cls) -> list[type]:
        return []  # critic-free: no ValueFunctionAPI


