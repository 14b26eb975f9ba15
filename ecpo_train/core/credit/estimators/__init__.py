"""The built-in estimators, one module per family, registered in this order (``available_estimators`` lists them
so): trajectory-level (:mod:`.group`: grpo, rloo), GiGPO (:mod:`.gigpo`), ECPO and its ablations (:mod:`.ecpo`),
PGPO, HGPO, the state-graph ones (:mod:`.graph`: graphgpo, tigpo), PACE and PPO. What they share is :mod:`.base`;
each calls the paper's equations (``core.credit.equations``), one function per equation."""

from ecpo_train.core.credit.estimators import group, gigpo, ecpo, pgpo, hgpo, graph, pace, ppo  # noqa: F401, I001
from ecpo_train.core.credit.estimators.ecpo import ecpo_gate, gate_diagnostics
from ecpo_train.core.credit.estimators.ppo import gae_targets

__all__ = ["ecpo_gate", "gae_targets", "gate_diagnostics"]
