"""TrajectoryBatch: flat step rows, the one data structure between rollout and learner.

One row per environment step: ``group_id`` (task group), ``traj_id``, ``step`` (1-based), ``anchor_key``
(the credit's anchor: the info field the rollout's ``anchor_key`` names), ``action_key``, ``reward``
(penalties included), ``is_action_valid``. The rollout attaches per-row fields (prompt ids, response ids, old
log-probs, the env's structured ``state_key``, ...) as extra columns: plain lists / object arrays with one entry
per row, carried untouched. The rows are validated and their keys coded once, when the batch is built
(:meth:`TrajectoryBatch.credit_rows`, ``core/rows.py``); credit reads those codes
(``compute_advantages(name, rows=batch)``), or the plain columns (:meth:`TrajectoryBatch.credit_arrays`). The
table does not know credit; credit reads the table.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ecpo_gym.canonical import INVALID_ACTION
from ecpo_train.core.rows import CreditRows, prepare_rows

_TRAJECTORY_FIELDS = ("group_id", "traj_id", "anchor_keys", "action_keys", "rewards", "is_action_valid", "extras")
_REQUIRED_TRAJECTORY_FIELDS = ("group_id", "anchor_keys", "action_keys", "rewards")


def _object_array(values: Sequence[Any]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


class StepTableBuilder:
    """The step-row table filled one environment step at a time: ``append`` a row as soon as the step happens
    (trajectories may interleave, as the copies of a group vector env do), ``build`` once at the end.

    Steps are numbered per trajectory in append order; the built batch holds each trajectory's rows
    contiguously, trajectories in order of their first row. ``extra_names`` are the per-row columns beyond the
    core ones (token ids, sampling log-probs, ...), each given to every ``append``.
    """

    def __init__(self, extra_names: Sequence[str] = ()) -> None:
        self.extra_names = tuple(extra_names)
        self._core: dict[str, list[Any]] = {name: [] for name in TrajectoryBatch.column_names()}
        self._extras: dict[str, list[Any]] = {name: [] for name in self.extra_names}
        self._steps: dict[Any, int] = {}

    def append(self, *, group_id: Any, traj_id: Any, anchor_key: Any, action_key: Any, reward: float,
               is_action_valid: bool, **extras: Any) -> int:
        """Add one step row; returns its 1-based step within the trajectory."""
        if set(extras) != set(self.extra_names):
            raise ValueError(f"a row needs the extra columns {list(self.extra_names)}, got {sorted(extras)}")
        step = self._steps.get(traj_id, 0) + 1
        self._steps[traj_id] = step
        for name, value in (("group_id", group_id), ("traj_id", traj_id), ("step", step), ("anchor_key", anchor_key),
                            ("action_key", action_key), ("reward", float(reward)),
                            ("is_action_valid", bool(is_action_valid))):
            self._core[name].append(value)
        for name, value in extras.items():
            self._extras[name].append(value)
        return step

    def __len__(self) -> int:
        return len(self._core["reward"])

    def build(self) -> TrajectoryBatch:
        """The validated, key-coded batch (each trajectory's rows contiguous, in step order)."""
        first = {traj: index for index, traj in reversed(list(enumerate(self._core["traj_id"])))}
        order = sorted(range(len(self)), key=lambda r: (first[self._core["traj_id"][r]], self._core["step"][r]))
        take = lambda values: [values[r] for r in order]
        core = {name: take(values) for name, values in self._core.items()}
        return TrajectoryBatch(
            reward=np.asarray(core.pop("reward"), dtype=np.float64), step=np.asarray(core.pop("step"), dtype=np.int64),
            is_action_valid=np.asarray(core.pop("is_action_valid"), dtype=bool),
            extras={name: take(values) for name, values in self._extras.items()}, **core)


@dataclass(frozen=True, eq=False)
class TrajectoryBatch:
    """Flat step rows as numpy arrays (object arrays for ids/keys) plus optional extra per-row columns.

    Construct with :meth:`from_trajectories` (per-trajectory lists) or directly from row arrays; either
    way the rows are validated (equal lengths, non-empty, finite rewards, 1-based steps, each trajectory's
    steps exactly ``1..T``) and a clear ``ValueError`` is raised otherwise. Validation is
    :func:`ecpo_train.core.credit.prepare_rows`, whose integer codes the batch keeps for the credit step.
    """

    group_id: np.ndarray
    traj_id: np.ndarray
    step: np.ndarray
    anchor_key: np.ndarray
    action_key: np.ndarray
    reward: np.ndarray
    is_action_valid: np.ndarray
    extras: dict[str, Any] = field(default_factory=dict)
    _credit_rows: CreditRows = field(init=False, repr=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        n = len(self.reward) if hasattr(self.reward, "__len__") else -1
        for name in ("group_id", "traj_id", "anchor_key", "action_key"):
            set_(self, name, _object_array(getattr(self, name)))
        set_(self, "reward", np.asarray(self.reward))
        set_(self, "step", np.asarray(self.step))
        set_(self, "is_action_valid", np.asarray(self.is_action_valid))
        lengths = {name: len(getattr(self, name)) for name in self.column_names()}
        lengths |= {f"extras[{k!r}]": len(v) for k, v in self.extras.items()}
        if n <= 0 or min(lengths.values()) == 0:
            raise ValueError("empty batch: a TrajectoryBatch needs at least one step row")
        if len(set(lengths.values())) != 1:
            raise ValueError(f"every column needs one entry per step row; got lengths {lengths}")
        if self.reward.ndim != 1 or self.reward.dtype.kind not in "fiu":
            raise ValueError(f"rewards must be a flat list of numbers, got dtype {self.reward.dtype}")
        set_(self, "reward", self.reward.astype(np.float64))
        if not np.isfinite(self.reward).all():
            row = int(np.flatnonzero(~np.isfinite(self.reward))[0])
            raise ValueError(f"reward of row {row} (traj_id={self.traj_id[row]!r}) is {self.reward[row]}, not finite")
        if self.step.dtype.kind not in "iu":
            raise ValueError(f"steps must be integers, got dtype {self.step.dtype}")
        if self.is_action_valid.dtype.kind != "b":
            raise ValueError(f"is_action_valid must be booleans, got dtype {self.is_action_valid.dtype}")
        for name in ("group_id", "traj_id", "anchor_key", "action_key"):
            missing = [i for i, v in enumerate(getattr(self, name)) if v is None]
            if missing:
                raise ValueError(f"{name} is missing (None) at row {missing[0]}")
        # Steps/trajectory structure: credit's own check (one message for both callers), whose codes are kept
        # so that the credit step does not factorise the keys a second time.
        set_(self, "_credit_rows", prepare_rows(self.group_id, self.traj_id, self.step, self.anchor_key,
                                                self.action_key, self.reward))

    @staticmethod
    def column_names() -> tuple[str, ...]:
        return ("group_id", "traj_id", "step", "anchor_key", "action_key", "reward", "is_action_valid")

    @classmethod
    def from_trajectories(cls, trajectories: Sequence[Mapping[str, Any]]) -> TrajectoryBatch:
        """Build the flat rows from per-trajectory records.

        Each record is a mapping with ``group_id`` and the per-step lists ``anchor_keys``, ``action_keys``,
        ``rewards`` (all the same length T >= 1); optional: ``traj_id`` (default: the record's index in
        ``trajectories``), ``is_action_valid`` (default: ``action_key != "<invalid>"``) and ``extras``
        (``{column: per-step list}``; every record must carry the same extra columns). Steps are numbered
        1..T in list order.
        """
        if isinstance(trajectories, Mapping) or not isinstance(trajectories, Sequence) or not trajectories:
            raise ValueError("from_trajectories needs a non-empty sequence of per-trajectory mappings")
        columns: dict[str, list[Any]] = {name: [] for name in cls.column_names()}
        extra_names: tuple[str, ...] | None = None
        extras: dict[str, list[Any]] = {}
        for index, record in enumerate(trajectories):
            where = f"trajectory {index}"
            if not isinstance(record, Mapping):
                raise ValueError(f"{where} must be a mapping, got {type(record).__name__}")  # noqa: TRY004
            unknown = sorted(set(record) - set(_TRAJECTORY_FIELDS))
            if unknown:
                raise ValueError(f"{where} has unknown field(s) {unknown}; valid: {', '.join(_TRAJECTORY_FIELDS)}")
            missing = [name for name in _REQUIRED_TRAJECTORY_FIELDS if name not in record]
            if missing:
                raise ValueError(f"{where} lacks required field(s) {missing}")
            per_step = {name: record[name] for name in ("anchor_keys", "action_keys", "rewards")}
            if "is_action_valid" in record:
                per_step["is_action_valid"] = record["is_action_valid"]
            record_extras = dict(record.get("extras") or {})
            for name, values in list(per_step.items()) + [(f"extras[{k!r}]", v) for k, v in record_extras.items()]:
                if isinstance(values, (str, bytes)) or not isinstance(values, Sequence | np.ndarray):
                    raise ValueError(f"{where}: {name} must be a per-step list, got {type(values).__name__}")  # noqa: TRY004
            lengths = {name: len(values) for name, values in per_step.items()}
            lengths |= {f"extras[{k!r}]": len(v) for k, v in record_extras.items()}
            if len(set(lengths.values())) != 1:
                raise ValueError(f"{where} is ragged: per-step lengths {lengths}")
            length = lengths["rewards"]
            if length == 0:
                raise ValueError(f"{where} has no steps")
            if extra_names is None:
                extra_names = tuple(sorted(record_extras))
                extras = {name: [] for name in extra_names}
            elif tuple(sorted(record_extras)) != extra_names:
                raise ValueError(f"{where} has extra columns {sorted(record_extras)}, others have {list(extra_names)}")
            action_keys = list(per_step["action_keys"])
            valid = per_step.get("is_action_valid", [a != INVALID_ACTION for a in action_keys])
            columns["group_id"] += [record["group_id"]] * length
            columns["traj_id"] += [record.get("traj_id", index)] * length
            columns["step"] += range(1, length + 1)
            columns["anchor_key"] += list(per_step["anchor_keys"])
            columns["action_key"] += action_keys
            columns["reward"] += list(per_step["rewards"])
            columns["is_action_valid"] += [bool(v) for v in valid]
            for name in extra_names:
                extras[name] += list(record_extras[name])
        try:
            reward = np.asarray(columns.pop("reward"), dtype=np.float64)
        except (TypeError, ValueError) as err:
            raise ValueError(f"rewards must be numbers: {err}") from None
        return cls(
            reward=reward,
            step=np.asarray(columns.pop("step"), dtype=np.int64),
            is_action_valid=np.asarray(columns.pop("is_action_valid"), dtype=bool),
            extras=extras,
            **columns,
        )

    def __len__(self) -> int:
        return len(self.reward)

    def credit_arrays(self) -> dict[str, Any]:
        """The step columns :func:`ecpo_train.core.credit.compute_advantages` takes, as keyword arguments (for callers
        that need them as arrays, e.g. rewards as a torch tensor; :meth:`advantages` reuses the batch's codes)."""
        return {
            "group_ids": self.group_id,
            "traj_ids": self.traj_id,
            "steps": self.step,
            "anchor_keys": self.anchor_key,
            "action_keys": self.action_key,
            "rewards": self.reward,
        }

    def credit_rows(self) -> CreditRows:
        """The rows validated and coded once, when the batch was built (``compute_advantages(rows=...)``)."""
        return self._credit_rows

    def with_columns(self, **columns: Sequence[Any]) -> TrajectoryBatch:
        """A copy with extra per-row columns added or replaced (e.g. ``response_ids=..., old_logprobs=...``).

        The core columns are shared with this batch, so their validation and codes are not redone."""
        clash = sorted(set(columns) & set(self.column_names()))
        if clash:
            raise ValueError(f"{clash} are core columns, not extras")
        lengths = {f"extras[{name!r}]": len(values) for name, values in columns.items() if len(values) != len(self)}
        if lengths:
            raise ValueError(f"every column needs one entry per step row ({len(self)}); got lengths {lengths}")
        out = copy.copy(self)
        object.__setattr__(out, "extras", self.extras | {name: list(values) for name, values in columns.items()})
        return out

    # ------------------------------------------------------------------ rows across processes
    @classmethod
    def concat(cls, batches: Sequence[TrajectoryBatch]) -> TrajectoryBatch:
        """One batch holding every row of ``batches``, in order (e.g. groups sampled by several env runners).

        The batches must carry the same extra columns; trajectories must not collide (``(group_id, traj_id)``
        unique across batches: see :meth:`renumbered`), which the rebuilt batch's validation checks.
        """
        if not batches:
            raise ValueError("concat needs at least one TrajectoryBatch")
        if len(batches) == 1:
            return batches[0]
        names = sorted(batches[0].extras)
        for index, batch in enumerate(batches):
            if sorted(batch.extras) != names:
                raise ValueError(f"batch {index} has extra columns {sorted(batch.extras)}, batch 0 has {names}")
        columns = {name: np.concatenate([getattr(b, name) for b in batches]) for name in cls.column_names()}
        extras = {name: [v for b in batches for v in b.extras[name]] for name in names}
        return cls(extras=extras, **columns)

    def select(self, rows: Sequence[int] | np.ndarray) -> TrajectoryBatch:
        """The batch of ``rows`` (whole trajectories, so the steps stay ``1..T``), in the order given."""
        rows = np.asarray(rows, dtype=np.int64)
        columns = {name: getattr(self, name)[rows] for name in self.column_names()}
        extras = {name: [values[i] for i in rows] for name, values in self.extras.items()}
        return type(self)(extras=extras, **columns)

    def by_group(self) -> list[TrajectoryBatch]:
        """One batch per group, in order of first appearance (a learner gets whole groups: anchors and group
        baselines never cross groups, so credit on each equals credit on the whole)."""
        order: dict[Any, list[int]] = {}
        for row, group in enumerate(self.group_id):
            order.setdefault(group, []).append(row)
        return [self.select(rows) for rows in order.values()]

    def renumbered(self, group_offset: int, traj_offset: int) -> TrajectoryBatch:
        """The same rows with integer group and trajectory ids shifted (a runner's local ids made global)."""
        return type(self)(
            group_id=[int(g) + group_offset for g in self.group_id], traj_id=[int(t) + traj_offset for t in self.traj_id],
            step=self.step, anchor_key=self.anchor_key, action_key=self.action_key, reward=self.reward,
            is_action_valid=self.is_action_valid, extras=self.extras,
        )
