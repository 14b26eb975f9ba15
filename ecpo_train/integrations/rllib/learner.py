"""ECPO's torch learners: credit.py advantages instead of a critic and GAE.

``ECPOTorchLearner`` keeps PPO's clipped loss (the candidate path); ``TokenLevelECPOLearner`` uses the native
trainer's token-level objective, ``loss.ecpo_objective_loss`` (eq. ecpo_objective; the step advantage is
broadcast to the step's reply tokens), on ``CausalLMRLModule``'s log-probs (the LLM path).
"""

from __future__ import annotations

from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
from ray.rllib.connectors.learner import AddOneTsToEpisodesAndTruncate, GeneralAdvantageEstimation
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.evaluation.postprocessing import Postprocessing

from ecpo_train.integrations.rllib.connector import ECPOAdvantages
from ecpo_train.integrations.rllib.module import REF_TOKEN_LOGP, RESPONSE_MASK, TOKEN_ENTROPY, TOKEN_LOGP


def ecpo_connector(config) -> ECPOAdvantages:
    """The ``ECPOAdvantages`` piece an ``ECPOConfig`` asks for: its estimator, group size, credit and anchor."""
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


class TokenLevelECPOLearner(TorchLearner):
    """Token-level clipped objective (``loss.ecpo_objective_loss``) on credit.py's step advantages.

    The optimizer holds the trainable parameters only: under LoRA (``ECPOConfig.training(lora=...)``) that is
    the adapter, and the frozen base weights get neither optimizer state nor (``None``) gradients.
    """

    def build(self) -> None:
        super().build()
        install_ecpo_connector(self)

    def compute_loss_for_module(self, *, module_id, config, batch, fwd_out):
        from ecpo_train.core.loss import assign_step_advantage, ecpo_objective_loss

        mask = batch[RESPONSE_MASK].float()
        advantages = assign_step_advantage(batch[Postprocessing.ADVANTAGES], mask)
        ref_logp = batch.get(REF_TOKEN_LOGP) if config.use_kl_loss else None
        loss, stats = ecpo_objective_loss(
            fwd_out[TOKEN_LOGP], batch[TOKEN_LOGP].float(), ref_logp, advantages, mask,
            clip_eps=config.clip_param, kl_coef=config.kl_coeff,
            entropy=fwd_out[TOKEN_ENTROPY], entropy_coef=float(config.entropy_coeff),
        )
        self.metrics.log_dict({k: float(v) for k, v in stats.items()}, key=module_id, window=1)
        return loss

    @classmethod
    def rl_module_required_apis(cls) -> list[type]:
        return []

    def get_parameters(self, module):
        return [param for param in module.parameters() if param.requires_grad]
