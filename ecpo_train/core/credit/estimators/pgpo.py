"""PGPO (arXiv 2609.02236; ``docs/paper_notes.md``): GiGPO_w/std's anchor term plus a potential-based term weighted by
how rarely the task's group succeeds, no episode term."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ecpo_train.core.backend import ops_of
from ecpo_train.core.credit.equations import (
    anchor_potential,
    gigpo_anchor_advantage,
    moments,
    pgpo_advantage,
    pgpo_weight,
    potential_difference,
)
from ecpo_train.core.credit.estimators.base import finish, last_rows, returns_of, successes
from ecpo_train.core.credit.registry import (
    Advantages,
    EstimatorInputs,
    Hyperparameter,
    NonNegative,
    Unit,
    register_estimator,
)
from ecpo_train.core.rows import CreditRows

if TYPE_CHECKING:
    from ecpo_train.core.credit import CreditConfig  # the type (the package builds it after these register)

PGPO_HYPERPARAMETERS = (
    Hyperparameter("pgpo_alpha", NonNegative, 2.0, "the exponent of PGPO's task weight beta (1 - p_succ)^alpha"),
    Hyperparameter("pgpo_beta", NonNegative, 1.0, "the scale of PGPO's task weight beta (1 - p_succ)^alpha"),
    Hyperparameter("pgpo_gamma", Unit, 1.0, "the discount of PGPO's potential difference"),
)


@register_estimator("pgpo", hyperparameters=PGPO_HYPERPARAMETERS)
def pgpo_estimator(rows: CreditRows, config: CreditConfig, inputs: EstimatorInputs) -> Advantages:
    """PGPO (arXiv 2609.02236): ``A^S + w(x) A^phi`` with no episode term. ``A^S`` is GiGPO_w/std's anchor term;
    ``A^phi`` the TD-style ``delta_t = gamma_phi Phi(s_{t+1}) - Phi(s_t)`` of the anchor potentials ``Phi``
    (eq. 6, the anchor's mean return; the final reward after the last step), z-scored within the row's anchor
    group; ``w(x) = beta (1 - p_succ)^alpha`` from the group's success rate. Diagnostic: the mean ``w(x)``."""
    ret = returns_of(rows, config)
    ops, dev = rows.ops, rows.dev
    phi = anchor_potential(ret.future, dev["anchor"], rows.n_anchors)
    is_last, _ = last_rows(rows)
    dense = ops.zeros(rows.n_trajs * (rows.horizon + 1))
    flat_next = ops.index(rows.traj * (rows.horizon + 1) + rows.position + 1)
    dense[ops.index(rows.traj * (rows.horizon + 1) + rows.position)] = phi[dev["anchor"]]
    delta = potential_difference(phi[dev["anchor"]], dense[flat_next], rows.reward, ops.mask(is_last), config.pgpo_gamma)
    potential_adv = gigpo_anchor_advantage(delta, dev["anchor"], rows.n_anchors, config.eps, True)
    step_adv = gigpo_anchor_advantage(ret.future, dev["anchor"], rows.n_anchors, config.eps, True)
    success = successes(rows).astype(np.float64)
    success_rate = moments(success, rows.traj_group, rows.n_groups, ops_of(success)).mean
    weight = pgpo_weight(success_rate, config.pgpo_alpha, config.pgpo_beta)
    adv = pgpo_advantage(step_adv, ops.asarray(weight)[dev["row_group"]], potential_adv)
    return finish(rows, ret, adv, {"pgpo_mean_weight": float(weight.mean())})

