"""What every estimator shares: the returns ``G`` and ``R`` of the rows, GRPO's trajectory term, success per
trajectory, and the diagnostics every estimator reports (with the overflow check on its advantages)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ecpo_train.core.backend import ops_of
from ecpo_train.core.credit.equations import (
    future_return,
    grpo_advantage,
    moments,
    trajectory_return,
    trajectory_success,
)
from ecpo_train.core.rows import CreditRows

if TYPE_CHECKING:
    from ecpo_train.core.credit import CreditConfig  # the type (the package builds it after these register)


class AdvantageOverflow(ValueError):
    """Finite input whose advantages overflow float64; :func:`compute_advantages` names the cause (a credit value or
    the rewards' scale)."""

    def __init__(self, what: str, reward_peak: float) -> None:
        super().__init__(what)
        self.what, self.reward_peak = what, reward_peak


@dataclass(frozen=True, eq=False)
class Returns:
    """The returns every estimator starts from (eqs. future_return and the trajectory return)."""

    future: Any  # G per row
    trajectory: Any  # R per trajectory


def returns_of(rows: CreditRows, config: CreditConfig) -> Returns:
    """``G`` per row (discounted by ``gamma``) and ``R`` per trajectory."""
    dev = rows.dev
    g = future_return(rows.reward, dev["traj"], rows.ops.index(rows.position), rows.n_trajs, rows.horizon, config.gamma)
    return Returns(future=g, trajectory=trajectory_return(rows.reward, dev["traj"], rows.n_trajs))


def grpo_rows(rows: CreditRows, ret: Returns, config: CreditConfig) -> Any:
    """GRPO's trajectory advantage (eq. grpo_adv), on every row of the trajectory."""
    dev = rows.dev
    return grpo_advantage(ret.trajectory, dev["traj_group"], rows.n_groups, config.eps)[dev["traj"]]


def _structure_diagnostics(rows: CreditRows) -> dict[str, float]:
    is_anchor = rows.anchor_sizes >= 2
    n_anchors = int(is_anchor.sum())
    fewest = np.full(rows.n_anchors, np.iinfo(np.int64).max)
    np.minimum.at(fewest, rows.action_anchor, rows.action_counts)
    divergent = is_anchor & (rows.anchor_top_action_count >= 2) & (fewest == 1)
    return {
        "num_rows": float(rows.n_rows),
        "num_trajectories": float(rows.n_trajs),
        "num_groups": float(rows.n_groups),
        "num_anchors": float(n_anchors),
        "anchor_hit_rate": float(is_anchor[rows.anchor].mean()),
        "divergent_anchor_fraction": float(divergent.sum() / n_anchors) if n_anchors else 0.0,
    }


def _advantage_diagnostics(rows: CreditRows, adv: Any) -> dict[str, float]:
    values = rows.ops.host(adv)
    if not np.isfinite(values).all():
        rewards = rows.ops.host(rows.reward)
        raise AdvantageOverflow(f"advantages overflow float64 (row {int(np.argmin(np.isfinite(values)))} is "
                                f"{values[~np.isfinite(values)][0]})", float(np.abs(rewards).max()))
    peak = float(np.abs(values).max())
    # squaring advantages beyond ~1e154 overflows: take their std on a rescaled copy then
    std = peak * float((values / peak).std()) if peak > 1e150 else float(values.std())
    return {
        "advantage_std": std,
        "advantage_min": float(values.min()),
        "advantage_max": float(values.max()),
    }


def _lucky_singletons(rows: CreditRows, ret: Returns) -> int:
    """Lucky singletons in the batch: the situation ECA and VarGate exist for (the paper's fig. 1). One per
    canonical action taken exactly once at a divergent anchor (another action there was taken at least twice)
    whose one visit returned more than the anchor's mean return ``mu_s``: a rare action that got lucky, whose
    single return GiGPO credits at face value."""
    g = np.asarray(rows.ops.host(ret.future), dtype=np.float64)
    mu = moments(g, rows.anchor, rows.n_anchors, ops_of(g)).mean
    lucky = ((rows.action_counts[rows.action] == 1) & (rows.anchor_top_action_count[rows.anchor] >= 2)
             & (g > mu[rows.anchor] + 1e-12))
    return int(lucky.sum())


def finish(rows: CreditRows, ret: Returns, adv: Any, extra: dict[str, float] | None = None
            ) -> tuple[Any, dict[str, float]]:
    diagnostics = _structure_diagnostics(rows) | {"num_lucky_singletons": float(_lucky_singletons(rows, ret))}
    diagnostics |= (extra or {}) | _advantage_diagnostics(rows, adv)
    return adv, diagnostics


def last_rows(rows: CreditRows) -> tuple[np.ndarray, np.ndarray]:
    """``(whether each row is its trajectory's last step, each trajectory's length)``, host arrays."""
    length = np.zeros(rows.n_trajs, dtype=np.int64)
    np.maximum.at(length, rows.traj, rows.position + 1)
    return rows.position == length[rows.traj] - 1, length


def successes(rows: CreditRows) -> np.ndarray:
    """Success per trajectory (eq. trajectory_success on its last step's reward), host bool array."""
    is_last, _ = last_rows(rows)
    last_reward = np.zeros(rows.n_trajs)
    last_reward[rows.traj[is_last]] = np.asarray(rows.ops.host(rows.reward), dtype=np.float64)[is_last]
    return trajectory_success(last_reward)

