"""Step rows -> integer codes: keys factorised once, structure checked once (:class:`CreditRows`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from ecpo_gym.kwargs import shown
from ecpo_train.core.backend import is_torch, ops_of

# Largest sum of |reward| a trajectory may have (prepare_rows rejects more). Every return is bounded by it, and the
# statistics sum squared deviations of returns: n * (2e150)^2 stays below float64's ~1.8e308 up to n ~ 4e7 rows.
# Beyond it finite rewards would give inf/NaN advantages; the estimators' output is checked as well.
MAX_RETURN_MAGNITUDE = 1e150


def host_values(values: Any, name: str) -> Any:
    if is_torch(values):
        return values.detach().cpu().numpy()
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise ValueError(f"{name} must be a sequence with one entry per step row, got {type(values).__name__}")
    return values


def factorize_keys(keys: Any, name: str = "keys") -> tuple[np.ndarray, int]:
    """Map each key to a dense integer code (first-seen order for hashable keys).

    Integer arrays/tensors go through ``np.unique``; anything else (strings, mixed ids) through one dict
    pass, which hashes each Python string once -- measured faster than ``np.unique`` on a fixed-width
    unicode array for long observation strings (see ``benchmarks/speed.py``, ``credit``).
    """
    keys = host_values(keys, name)
    if isinstance(keys, np.ndarray):
        if keys.ndim != 1:
            raise ValueError(f"{name} must be one-dimensional, got shape {keys.shape}")
        if keys.dtype.kind in "iub":
            uniques, codes = np.unique(keys, return_inverse=True)
            return codes.reshape(-1).astype(np.int64, copy=False), len(uniques)
        keys = keys.tolist()
    try:
        lookup = dict.fromkeys(keys)
    except TypeError as err:
        raise ValueError(f"{name} must hold hashable ids (str or int): {err}") from None
    missing = next((key for key in lookup if key is None or (isinstance(key, float) and math.isnan(key))), False)
    if missing is not False:  # (every None would be one id: rows of missing keys shared one anchor)
        raise ValueError(f"{name} must hold ids (str or int), and one is {missing}: a missing key is no id")
    for code, key in enumerate(lookup):
        lookup[key] = code
    codes = np.fromiter(map(lookup.__getitem__, keys), dtype=np.int64, count=len(keys))
    return codes, len(lookup)


def _combine(outer: np.ndarray, inner: np.ndarray, n_inner: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Codes of the pairs (outer, inner); returns (pair code per row, outer code per pair, number of pairs)."""
    pairs, codes = np.unique(outer * n_inner + inner, return_inverse=True)
    return codes.reshape(-1), pairs // n_inner, len(pairs)


@dataclass(frozen=True, eq=False)
class CreditRows:
    """Step rows reduced to integer codes (host numpy) plus the rewards on the compute backend.

    Built by :func:`prepare_rows`; estimators only read it. Per-row code arrays: ``traj``, ``anchor``,
    ``action`` (canonical action within its anchor). Per-segment maps: ``traj_group``, ``anchor_group``,
    ``action_anchor``. ``position`` is ``step - 1``; ``horizon`` the longest trajectory.
    """

    ops: Any
    reward: Any
    step: np.ndarray
    position: np.ndarray
    horizon: int
    traj: np.ndarray
    traj_group: np.ndarray
    n_trajs: int
    n_groups: int
    anchor: np.ndarray
    anchor_group: np.ndarray
    n_anchors: int
    action: np.ndarray
    action_anchor: np.ndarray
    n_actions: int
    action_key: np.ndarray | None = None  # the action key's own code per row, across anchors (PACE's clusters)

    @property
    def n_rows(self) -> int:
        return len(self.step)

    @cached_property
    def dev(self) -> dict[str, Any]:
        """The code arrays on the compute device (for gathers and scatters there)."""
        ops = self.ops
        return {
            "traj": ops.index(self.traj),
            "traj_group": ops.index(self.traj_group),
            "row_group": ops.index(self.traj_group[self.traj]),
            "anchor": ops.index(self.anchor),
            "action": ops.index(self.action),
            "action_anchor": ops.index(self.action_anchor),
            "flat": ops.index(self.traj * self.horizon + self.position),
        }

    @cached_property
    def anchor_sizes(self) -> np.ndarray:
        """``n_s``: occurrences per anchor key."""
        return np.bincount(self.anchor, minlength=self.n_anchors)

    @cached_property
    def action_counts(self) -> np.ndarray:
        """``n_{s,u}``: occurrences per canonical action of an anchor."""
        return np.bincount(self.action, minlength=self.n_actions)

    @cached_property
    def anchor_top_action_count(self) -> np.ndarray:
        """``max_u n_{s,u}``: visits of each anchor's most-taken canonical action."""
        most = np.zeros(self.n_anchors, dtype=np.int64)
        np.maximum.at(most, self.action_anchor, self.action_counts)
        return most

    @cached_property
    def anchor_action_counts(self) -> np.ndarray:
        """``|U_s|``: distinct canonical actions per anchor."""
        return np.bincount(self.action_anchor, minlength=self.n_anchors)

    @cached_property
    def anchor_depth(self) -> np.ndarray:
        """``depth(s)``: the smallest step number at which the anchor occurs in its group."""
        depth = np.full(self.n_anchors, np.iinfo(np.int64).max)
        np.minimum.at(depth, self.anchor, self.step)
        return depth


def check_finite_numbers(values: np.ndarray, name: str) -> None:
    """``ValueError`` naming ``name`` unless the host array ``values`` holds only finite numbers (a column of the
    step rows: the rewards, a critic's values)."""
    if values.dtype.kind not in "fiub":
        raise ValueError(f"{name} must be numbers, got dtype {values.dtype}")
    finite = np.isfinite(values.astype(np.float64))
    if not finite.all():
        raise ValueError(f"{name} must be finite; row {int(np.argmin(finite))} holds {values[~finite][0]}")


def _as_steps(steps: Any, n: int) -> np.ndarray:
    steps = np.asarray(host_values(steps, "steps"))
    if steps.shape != (n,):
        raise ValueError(f"steps has shape {steps.shape}, expected ({n},) like the other columns")
    if steps.dtype.kind == "f":
        if not np.all(np.isfinite(steps)) or not np.all(steps == np.round(steps)):
            raise ValueError("steps must be whole numbers (1-based step index)")
    elif steps.dtype.kind not in "iu":  # (a bool is no step number: True was read as step 1)
        raise ValueError(f"steps must be integers, got dtype {steps.dtype}")
    steps = steps.astype(np.int64)
    if n and steps.min() < 1:
        raise ValueError("steps are 1-based: every step must be >= 1")
    return steps


def prepare_rows(
    group_ids: Any,
    traj_ids: Any,
    steps: Any,
    anchor_keys: Any,
    action_keys: Any,
    rewards: Any,
) -> CreditRows:
    """Validate the step rows and reduce them to :class:`CreditRows` (rows may come in any order)."""
    ops = ops_of(rewards)
    columns = {"group_ids": group_ids, "traj_ids": traj_ids, "anchor_keys": anchor_keys, "action_keys": action_keys}
    host = {name: host_values(values, name) for name, values in columns.items()}
    reward_host = np.asarray(host_values(rewards, "rewards"))
    n = len(reward_host)
    if reward_host.ndim != 1:
        raise ValueError(f"rewards must be one-dimensional, got shape {reward_host.shape}")
    if n == 0:
        raise ValueError("no step rows: credit needs at least one row")
    lengths = {name: len(values) for name, values in host.items()} | {"rewards": n}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"columns must have one entry per step row; got lengths {lengths}")
    check_finite_numbers(reward_host, "rewards")
    step = _as_steps(steps, n)

    group, _ = factorize_keys(host["group_ids"], "group_ids")
    traj_local, n_traj_local = factorize_keys(host["traj_ids"], "traj_ids")
    anchor_local, n_anchor_local = factorize_keys(host["anchor_keys"], "anchor_keys")
    action_local, n_action_local = factorize_keys(host["action_keys"], "action_keys")

    traj, traj_group, n_trajs = _combine(group, traj_local, n_traj_local)
    n_groups = int(group.max()) + 1
    anchor, anchor_group, n_anchors = _combine(group, anchor_local, n_anchor_local)
    action, action_anchor, n_actions = _combine(anchor, action_local, n_action_local)

    lengths_per_traj = np.bincount(traj, minlength=n_trajs)
    last_step = np.zeros(n_trajs, dtype=np.int64)
    np.maximum.at(last_step, traj, step)
    horizon = int(last_step.max())
    bad = lengths_per_traj != last_step
    if not bad.any():
        occupancy = np.bincount(traj * horizon + step - 1, minlength=n_trajs * horizon)
        bad = (occupancy.reshape(n_trajs, horizon) > 1).any(axis=1)
    if bad.any():
        row = int(np.flatnonzero(bad[traj])[0])
        raise ValueError(
            f"trajectory (group_id={shown(host['group_ids'][row])}, traj_id={shown(host['traj_ids'][row])}) must have "
            f"steps exactly 1..T with no gaps or duplicates (it has {lengths_per_traj[traj[row]]} rows, "
            f"last step {last_step[traj[row]]})"
        )
    magnitude = np.bincount(traj, weights=np.abs(reward_host.astype(np.float64)), minlength=n_trajs)
    if not (magnitude <= MAX_RETURN_MAGNITUDE).all():
        row = int(np.flatnonzero(~(magnitude[traj] <= MAX_RETURN_MAGNITUDE))[0])
        raise ValueError(
            f"rewards too large: trajectory (group_id={shown(host['group_ids'][row])}, traj_id={shown(host['traj_ids'][row])}) "
            f"has sum |r| = {magnitude[traj[row]]:.3g} > {MAX_RETURN_MAGNITUDE:.0e}; its returns' squared deviations "
            "would overflow float64 (inf/NaN advantages), so rescale the rewards"
        )
    return CreditRows(
        ops=ops,
        reward=ops.asarray(rewards) if is_torch(rewards) else ops.asarray(reward_host),
        step=step,
        position=step - 1,
        horizon=horizon,
        traj=traj,
        traj_group=traj_group,
        n_trajs=n_trajs,
        n_groups=n_groups,
        anchor=anchor,
        anchor_group=anchor_group,
        n_anchors=n_anchors,
        action=action,
        action_anchor=action_anchor,
        n_actions=n_actions,
        action_key=action_local,
    )
