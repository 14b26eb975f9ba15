"""Trajectory-level credit: GRPO (each trajectory's return against its group's, eq. grpo_adv) and RLOO (against the
mean of the group's other rollouts)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ecpo_train.core.credit.equations import rloo_advantage
from ecpo_train.core.credit.estimators.base import finish, grpo_rows, returns_of
from ecpo_train.core.credit.registry import Advantages, EstimatorInputs, register_estimator
from ecpo_train.core.rows import CreditRows

if TYPE_CHECKING:
    from ecpo_train.core.credit import CreditConfig  # the type (the package builds it after these register)


@register_estimator("grpo", hyperparameters=(), grpo_trajectory=True)
def grpo_estimator(rows: CreditRows, config: CreditConfig, inputs: EstimatorInputs) -> Advantages:
    """GRPO: every row of trajectory i gets ``A^GRPO_i`` (eq. grpo_adv)."""
    ret = returns_of(rows, config)
    return finish(rows, ret, grpo_rows(rows, ret, config))


@register_estimator("rloo", hyperparameters=())
def rloo_estimator(rows: CreditRows, config: CreditConfig, inputs: EstimatorInputs) -> Advantages:
    """RLOO: every row of trajectory i gets ``R_i - mean_{j != i} R_j`` over its group."""
    ret = returns_of(rows, config)
    adv = rloo_advantage(ret.trajectory, rows.dev["traj_group"], rows.n_groups)[rows.dev["traj"]]
    return finish(rows, ret, adv)

