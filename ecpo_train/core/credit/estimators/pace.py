"""PACE, BiPACE's action-counterfactual term (arXiv 2606.25556): GRPO's episode term plus ``omega (Q^(s, a) -
V^(s))``, anchors as identity keys or, given hidden states, cosine clusters of them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import numpy as np
from annotated_types import Interval

from ecpo_train.core.credit.equations import action_value_gap, cosine_clusters, gigpo_advantage
from ecpo_train.core.credit.estimators.base import finish, grpo_rows, returns_of
from ecpo_train.core.credit.registry import Advantages, EstimatorInputs, Hyperparameter, register_estimator
from ecpo_train.core.rows import CreditRows, host_values

if TYPE_CHECKING:
    from ecpo_train.core.credit import CreditConfig  # the type (the package builds it after these register)

PACE_COSINE = Hyperparameter("pace_cosine", Annotated[float, Interval(ge=-1, le=1)], 0.95,
                             "PACE's hidden-state clustering threshold (cosine similarity), used where hidden states "
                             "are passed")


@register_estimator("pace", hidden_states="optional", hyperparameters=(PACE_COSINE,), grpo_trajectory=True)
def pace_estimator(rows: CreditRows, config: CreditConfig, inputs: EstimatorInputs) -> Advantages:
    """PACE, BiPACE's action-counterfactual term (arXiv 2606.25556): ``A^GRPO_i + omega (Q^(s, a) - V^(s))``,
    ``Q^`` the mean return of the row's canonical action at its anchor and ``V^`` the anchor's mean return
    (eq. action_value_gap). Anchors are identity keys; with ``inputs.hidden_states`` (one vector per row) the rows of a
    group are clustered by cosine similarity >= ``pace_cosine`` instead (eq. cosine_clusters, BiGPO's state
    side). Diagnostic: the number of states (anchors or clusters) compared in."""
    ret = returns_of(rows, config)
    hidden_states = inputs.hidden_states
    anchor, action, action_anchor = rows.anchor, rows.action, rows.action_anchor
    n_anchors, n_actions = rows.n_anchors, rows.n_actions
    if hidden_states is not None:
        hidden = np.asarray(host_values(hidden_states, "hidden_states"))
        if (hidden.dtype.kind not in "fiub" or hidden.ndim != 2 or hidden.shape[0] != rows.n_rows
                or not np.isfinite(hidden).all()):
            raise ValueError(f"hidden_states has shape {hidden.shape} ({hidden.dtype}), expected ({rows.n_rows}, d) "
                             "finite numbers: one vector per step row")
        hidden = hidden.astype(np.float64)
        anchor = cosine_clusters(hidden, rows.traj_group[rows.traj], config.pace_cosine)
        n_anchors = int(anchor.max()) + 1
        pairs, action = np.unique(np.stack([anchor, rows.action_key], axis=1), axis=0, return_inverse=True)
        action, action_anchor, n_actions = action.reshape(-1), pairs[:, 0], len(pairs)
    ops = rows.ops
    gap = action_value_gap(ret.future, ops.index(action), n_actions, ops.index(action_anchor), ops.index(anchor),
                           n_anchors)
    adv = gigpo_advantage(grpo_rows(rows, ret, config), gap, config.omega)
    return finish(rows, ret, adv, {"pace_states": float(n_anchors)})

