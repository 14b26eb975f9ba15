"""TrajectoryBatch: flat step rows, the one data structure between rollout and learner.

One row per environment step: ``group_id`` (task group), ``traj_id``, ``step`` (1-based), ``anchor_key``
(the credit's anchor: the info field the rollout's ``anchor_key`` names), ``action_key``, ``reward``
(penalties included), ``is_action_valid``. A sampled table (``collect_rollout``) also has the typed token
columns the learner needs (``core/token_columns.py``): ``prompt_ids`` and ``response_ids`` (one int sequence
per row) and ``old_logprobs``, the sampling log-probs padded once into a float32 ``[rows, L]`` array with its
``old_logprob_mask``; a credit-only table (``from_trajectories`` without them, or plain arrays) has ``None``
there. ``policy_version`` (int64, one per row; 0 unless set) is the version of the weights that sampled the row
(``with_policy_version``; a pipelined driver plays a group with weights one update behind the learner's). Any
other per-row field (the env's structured ``state_key``, the raw reply, ...) is an extra column: a
plain list with one entry per row, carried untouched. The rows are validated, their keys coded and their
log-probs padded once, when the batch is built (:meth:`TrajectoryBatch.credit_rows`, ``core/rows.py``);
credit reads those codes (``compute_advantages(name, rows=batch)``), or the plain columns
(:meth:`TrajectoryBatch.credit_arrays`). The table does not know credit; credit reads the table.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ecpo_gym.canonical import INVALID_ACTION
from ecpo_gym.kwargs import shown
from ecpo_train.core.rows import CreditRows, prepare_rows
from ecpo_train.core.token_columns import TOKEN_COLUMNS, joined_logprobs, token_columns

_TRAJECTORY_FIELDS = ("group_id", "traj_id", "anchor_keys", "action_keys", "rewards", "is_action_valid", "extras",
                      *TOKEN_COLUMNS)
_REQUIRED_TRAJECTORY_FIELDS = ("group_id", "anchor_keys", "action_keys", "rewards")


def _policy_versions(values: Any, rows: int) -> np.ndarray:
    """The ``policy_version`` column as int64: 0 for every row when not given, else one integer >= 0 per row."""
    if values is None:
        return np.zeros(rows, dtype=np.int64)
    versions = np.asarray(values)
    if versions.shape != (rows,) or (rows and versions.dtype.kind not in "iu"):
        raise ValueError(f"policy_version needs one integer per step row ({rows}), got {versions.dtype} of shape "
                         f"{versions.shape}")
    if rows and versions.min() < 0:
        raise ValueError(f"policy_version must be >= 0, got {int(versions.min())}")
    return versions.astype(np.int64)


def _object_array(values: Sequence[Any]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


class StepTableBuilder:
    """The step-row table filled one environment step at a time: ``append`` a row as soon as the step happens
    (trajectories may interleave, as the copies of a group vector env do), ``build`` once at the end.

    Steps are numbered per trajectory in append order; the built batch holds each trajectory's rows
    contiguously, trajectories in order of their first row. With ``tokens=True`` every ``append`` gives the
    token columns (``prompt_ids``, ``response_ids``, ``old_logprobs``: the row's int sequences and its response's
    log-probs); ``extra_names`` are the further per-row columns, each given to every ``append``.
    """

    def __init__(self, extra_names: Sequence[str] = (), *, tokens: bool = False) -> None:
        self.extra_names = tuple(extra_names)
        self.tokens = bool(tokens)
        self._core: dict[str, list[Any]] = {name: [] for name in TrajectoryBatch.column_names()}
        self._tokens: dict[str, list[Any]] = {name: [] for name in TOKEN_COLUMNS} if self.tokens else {}
        self._extras: dict[str, list[Any]] = {name: [] for name in self.extra_names}
        self._steps: dict[Any, int] = {}

    def append(self, *, group_id: Any, traj_id: Any, anchor_key: Any, action_key: Any, reward: float,
               is_action_valid: bool, prompt_ids: Sequence[int] | None = None,
               response_ids: Sequence[int] | None = None, old_logprobs: Sequence[float] | None = None,
               **extras: Any) -> int:
        """Add one step row; returns its 1-based step within the trajectory."""
        tokens = {"prompt_ids": prompt_ids, "response_ids": response_ids, "old_logprobs": old_logprobs}
        given = sorted(name for name, value in tokens.items() if value is not None)
        if given != (sorted(TOKEN_COLUMNS) if self.tokens else []):
            want = f"the token columns {list(TOKEN_COLUMNS)}" if self.tokens else "no token columns (tokens=False)"
            raise ValueError(f"a row of this table needs {want}, got {given}")
        if set(extras) != set(self.extra_names):
            raise ValueError(f"a row needs the extra columns {list(self.extra_names)}, got {sorted(extras)}")
        step = self._steps.get(traj_id, 0) + 1
        self._steps[traj_id] = step
        for name, value in (("group_id", group_id), ("traj_id", traj_id), ("step", step), ("anchor_key", anchor_key),
                            ("action_key", action_key), ("reward", float(reward)),
                            ("is_action_valid", bool(is_action_valid))):
            self._core[name].append(value)
        for name in self._tokens:
            self._tokens[name].append(tokens[name])
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
            extras={name: take(values) for name, values in self._extras.items()},
            **{name: take(values) for name, values in self._tokens.items()}, **core)


@dataclass(frozen=True, eq=False)
class TrajectoryBatch:
    """Flat step rows as numpy arrays (object arrays for ids/keys), the optional token columns, and optional
    extra per-row columns.

    Construct with :meth:`from_trajectories` (per-trajectory lists) or directly from row arrays; either
    way the rows are validated (equal lengths, non-empty, finite rewards, 1-based steps, each trajectory's
    steps exactly ``1..T``) and a clear ``ValueError`` is raised otherwise. Validation is
    :func:`ecpo_train.core.credit.prepare_rows`, whose integer codes the batch keeps for the credit step.
    The token columns (all three or none) are checked and the old log-probs padded by
    :func:`ecpo_train.core.token_columns.token_columns`: ``old_logprobs`` is given as per-row sequences (each as
    long as its response) or as another batch's padded array, and is held as the padded float32 ``[rows, L]``
    array beside ``old_logprob_mask``. ``policy_version`` (default: 0 for every row) is held as an int64 array.
    """

    group_id: np.ndarray
    traj_id: np.ndarray
    step: np.ndarray
    anchor_key: np.ndarray
    action_key: np.ndarray
    reward: np.ndarray
    is_action_valid: np.ndarray
    extras: dict[str, Any] = field(default_factory=dict)
    prompt_ids: Any = field(default=None, repr=False)
    response_ids: Any = field(default=None, repr=False)
    old_logprobs: Any = field(default=None, repr=False)
    policy_version: Any = field(default=None, repr=False)
    old_logprob_mask: np.ndarray | None = field(init=False, default=None, repr=False)
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
        lengths |= {f"extras[{shown(k)}]": len(v) for k, v in self.extras.items()}
        if n <= 0 or min(lengths.values()) == 0:
            raise ValueError("empty batch: a TrajectoryBatch needs at least one step row")
        if len(set(lengths.values())) != 1:
            raise ValueError(f"every column needs one entry per step row; got lengths {lengths}")
        clash = sorted(set(self.extras) & {*TOKEN_COLUMNS, *self.column_names(), "policy_version"})
        if clash:
            raise ValueError(f"{clash} are typed columns of the table, not extras")
        if self.reward.ndim != 1 or self.reward.dtype.kind not in "fiu":
            raise ValueError(f"rewards must be a flat list of numbers, got dtype {self.reward.dtype}")
        set_(self, "reward", self.reward.astype(np.float64))
        if not np.isfinite(self.reward).all():
            row = int(np.flatnonzero(~np.isfinite(self.reward))[0])
            raise ValueError(f"reward of row {row} (traj_id={shown(self.traj_id[row])}) is {self.reward[row]}, not finite")
        if self.step.dtype.kind not in "iu":
            raise ValueError(f"steps must be integers, got dtype {self.step.dtype}")
        if self.is_action_valid.dtype.kind != "b":
            raise ValueError(f"is_action_valid must be booleans, got dtype {self.is_action_valid.dtype}")
        for name in ("group_id", "traj_id", "anchor_key", "action_key"):
            missing = [i for i, v in enumerate(getattr(self, name)) if v is None]
            if missing:
                raise ValueError(f"{name} is missing (None) at row {missing[0]}")
        self._set_tokens(self.prompt_ids, self.response_ids, self.old_logprobs)
        set_(self, "policy_version", _policy_versions(self.policy_version, n))
        # Steps/trajectory structure: credit's own check (one message for both callers), whose codes are kept
        # so that the credit step does not factorise the keys a second time.
        set_(self, "_credit_rows", prepare_rows(self.group_id, self.traj_id, self.step, self.anchor_key,
                                                self.action_key, self.reward))

    def _set_tokens(self, prompt_ids: Any, response_ids: Any, old_logprobs: Any) -> None:
        columns = token_columns(prompt_ids, response_ids, old_logprobs, self.traj_id)
        for name, value in zip((*TOKEN_COLUMNS, "old_logprob_mask"), columns or (None,) * 4):
            object.__setattr__(self, name, value)

    @staticmethod
    def column_names() -> tuple[str, ...]:
        return ("group_id", "traj_id", "step", "anchor_key", "action_key", "reward", "is_action_valid")

    def has_tokens(self) -> bool:
        """Whether the batch carries the token columns (a sampled table) or not (a credit-only one)."""
        return self.response_ids is not None

    def tokens(self) -> dict[str, Any]:
        """``{prompt_ids, response_ids, old_logprobs}`` (padded) to build a batch of the same rows; ``{}`` if none."""
        return {name: getattr(self, name) for name in TOKEN_COLUMNS} if self.has_tokens() else {}

    @classmethod
    def from_trajectories(cls, trajectories: Sequence[Mapping[str, Any]]) -> TrajectoryBatch:
        """Build the flat rows from per-trajectory records.

        Each record is a mapping with ``group_id`` and the per-step lists ``anchor_keys``, ``action_keys``,
        ``rewards`` (all the same length T >= 1); optional: ``traj_id`` (default: the record's index in
        ``trajectories``), ``is_action_valid`` (default: ``action_key != "<invalid>"``), the token columns
        ``prompt_ids``, ``response_ids``, ``old_logprobs`` (per-step lists; all three or none) and ``extras``
        (``{column: per-step list}``). Every record must carry the same token and extra columns. Steps are
        numbered 1..T in list order.
        """
        if isinstance(trajectories, Mapping) or not isinstance(trajectories, Sequence) or not trajectories:
            raise ValueError("from_trajectories needs a non-empty sequence of per-trajectory mappings")
        columns: dict[str, list[Any]] = {name: [] for name in cls.column_names()}
        extra_names: tuple[str, ...] | None = None
        extras: dict[str, list[Any]] = {}
        token_names = tuple(name for name in TOKEN_COLUMNS if isinstance(trajectories[0], Mapping) and name in
                            trajectories[0])
        tokens: dict[str, list[Any]] = {name: [] for name in token_names}
        for index, record in enumerate(trajectories):
            where = f"trajectory {index}"
            if not isinstance(record, Mapping):
                raise ValueError(f"{where} must be a mapping, got {type(record).__name__}")  # noqa: TRY004
            unknown = sorted(set(record) - set(_TRAJECTORY_FIELDS))
            if unknown:
                raise ValueError(f"{where} has unknown field(s) {shown(unknown)}; valid: {', '.join(_TRAJECTORY_FIELDS)}")
            missing = [name for name in _REQUIRED_TRAJECTORY_FIELDS if name not in record]
            if missing:
                raise ValueError(f"{where} lacks required field(s) {missing}")
            per_step = {name: record[name] for name in ("anchor_keys", "action_keys", "rewards")}
            if "is_action_valid" in record:
                per_step["is_action_valid"] = record["is_action_valid"]
            if tuple(name for name in TOKEN_COLUMNS if name in record) != token_names:
                raise ValueError(f"{where} has token columns {[n for n in TOKEN_COLUMNS if n in record]}, "
                                 f"trajectory 0 has {list(token_names)}")
            per_step |= {name: record[name] for name in token_names}
            record_extras = dict(record.get("extras") or {})
            for name, values in list(per_step.items()) + [(f"extras[{shown(k)}]", v) for k, v in record_extras.items()]:
                if isinstance(values, (str, bytes)) or not isinstance(values, Sequence | np.ndarray):
                    raise ValueError(f"{where}: {name} must be a per-step list, got {type(values).__name__}")  # noqa: TRY004
            lengths = {name: len(values) for name, values in per_step.items()}
            lengths |= {f"extras[{shown(k)}]": len(v) for k, v in record_extras.items()}
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
            for name in token_names:
                tokens[name] += list(record[name])
        try:
            reward = np.asarray(columns.pop("reward"), dtype=np.float64)
        except (TypeError, ValueError) as err:
            raise ValueError(f"rewards must be numbers: {err}") from None
        return cls(
            reward=reward,
            step=np.asarray(columns.pop("step"), dtype=np.int64),
            is_action_valid=np.asarray(columns.pop("is_action_valid"), dtype=bool),
            extras=extras,
            **tokens,
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
        """A copy with per-row columns added or replaced: token columns (``prompt_ids=..., response_ids=...,
        old_logprobs=...``, checked as the constructor checks them) or extras (e.g. ``response=...``).

        The core columns are shared with this batch, so their validation and codes are not redone."""
        clash = sorted(set(columns) & {*self.column_names(), "policy_version"})
        if clash:
            raise ValueError(f"{clash} are core columns, not extras")
        new_tokens = {name: columns.pop(name) for name in TOKEN_COLUMNS if name in columns}
        lengths = {f"extras[{shown(name)}]": len(values) for name, values in columns.items() if len(values) != len(self)}
        if lengths:
            raise ValueError(f"every column needs one entry per step row ({len(self)}); got lengths {lengths}")
        out = copy.copy(self)
        if new_tokens:
            merged = self.tokens() | new_tokens
            out._set_tokens(*(merged.get(name) for name in TOKEN_COLUMNS))
        object.__setattr__(out, "extras", self.extras | {name: list(values) for name, values in columns.items()})
        return out

    def with_policy_version(self, version: int) -> TrajectoryBatch:
        """A copy whose every row was sampled by weights of version ``version`` (an integer >= 0)."""
        if isinstance(version, bool) or not isinstance(version, int | np.integer) or version < 0:
            raise ValueError(f"policy_version={shown(version)} must be an integer >= 0")
        out = copy.copy(self)
        object.__setattr__(out, "policy_version", np.full(len(self), int(version), dtype=np.int64))
        return out

    # ------------------------------------------------------------------ rows across processes
    @classmethod
    def concat(cls, batches: Sequence[TrajectoryBatch]) -> TrajectoryBatch:
        """One batch holding every row of ``batches``, in order (e.g. groups sampled by several env runners).

        The batches must carry the same extra columns, and all or none the token columns (the padded old
        log-probs are joined as they are, as wide as the widest); trajectories must not collide (``(group_id, traj_id)``
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
        with_tokens = [batch.has_tokens() for batch in batches]
        if len(set(with_tokens)) != 1:
            raise ValueError(f"batch {with_tokens.index(not with_tokens[0])} {'lacks' if with_tokens[0] else 'has'} "
                             f"the token columns {list(TOKEN_COLUMNS)}, batch 0 {'has' if with_tokens[0] else 'lacks'}")
        columns = {name: np.concatenate([getattr(b, name) for b in batches]) for name in cls.column_names()}
        if with_tokens[0]:
            columns |= {name: np.concatenate([getattr(b, name) for b in batches]) for name in TOKEN_COLUMNS[:2]}
            columns["old_logprobs"] = joined_logprobs([b.old_logprobs for b in batches])
        extras = {name: [v for b in batches for v in b.extras[name]] for name in names}
        return cls(extras=extras, policy_version=np.concatenate([b.policy_version for b in batches]), **columns)

    def select(self, rows: Sequence[int] | np.ndarray) -> TrajectoryBatch:
        """The batch of ``rows`` (whole trajectories, so the steps stay ``1..T``), in the order given."""
        rows = np.asarray(rows, dtype=np.int64)
        columns = {name: getattr(self, name)[rows] for name in (*self.column_names(), *self.tokens())}
        extras = {name: [values[i] for i in rows] for name, values in self.extras.items()}
        return type(self)(extras=extras, policy_version=self.policy_version[rows], **columns)

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
            is_action_valid=self.is_action_valid, extras=self.extras, policy_version=self.policy_version,
            **self.tokens(),
        )
