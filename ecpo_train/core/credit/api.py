"""The public entry point :func:`compute_advantages`: one call form for every estimator and every caller."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ecpo_train.core.batch import TrajectoryBatch
from ecpo_train.core.config_values import coerce_value, shown
from ecpo_train.core.credit.config import CreditConfig
from ecpo_train.core.credit.estimators.base import AdvantageOverflow
from ecpo_train.core.credit.estimators.gigpo import COMPAT
from ecpo_train.core.credit.history import TaskHistory
from ecpo_train.core.credit.registry import (
    EstimatorInputs,
    EstimatorSpec,
    available_estimators,
    estimator_spec,
)
from ecpo_train.core.rows import CreditRows, host_values, prepare_rows

# The step columns, by name, in the order prepare_rows takes them
STEP_COLUMNS = ("group_ids", "traj_ids", "steps", "anchor_keys", "action_keys", "rewards")
# a credit value this large is what overflows (the rewards are bounded far below it, core.rows.MAX_RETURN_MAGNITUDE)
_HUGE_CREDIT_VALUE = 1e100


def compute_advantages(name: str, rows: TrajectoryBatch | CreditRows | Mapping[str, Any],
                       credit: CreditConfig | Mapping[str, Any] | None = None, *, values: Any = None,
                       hidden_states: Any = None, history: Sequence[TaskHistory] | None = None
                       ) -> tuple[Any, dict[str, float]]:
    """Per-row advantages of estimator ``name`` and its diagnostics: ``compute_advantages(name, rows, credit)``.

    ``name``: a registered estimator (``available_estimators()``; the package docstring lists them).

    ``rows``, the step rows, one entry per environment step: a ``TrajectoryBatch``, the ``CreditRows`` of
    :func:`prepare_rows` (rows validated and coded once), or a mapping of the six step columns by name,
    ``group_ids, traj_ids, steps, anchor_keys, action_keys, rewards`` (sequences, arrays or tensors). Ids and keys
    are str or int; a trajectory is identified by ``(group_id, traj_id)`` and its ``steps`` must be exactly
    ``1..T``; rows may come in any order. ``anchor_keys`` are the anchor keys (an anchor is ``(group_id,
    anchor_key)``; see the package docstring on the name). ``rewards`` are floats: a torch tensor gives a float64
    tensor on its device, anything else a float64 numpy array.

    ``credit``: the hyperparameters, a ``CreditConfig`` (the object the configs carry) or a mapping of its fields
    (defaults = each paper's): the paper's shared values, gamma, omega, kappa, tau, d_min, rho_min, eps, and those
    the estimators declare (``compat``, ``pgpo_*``, ``hgpo_*``, ``graph_*``, ``pace_cosine``); a mapping may also
    hold the estimator's options (``gae_lambda`` for ``ppo``; a ``CreditConfig`` leaves them at their defaults).

    What an estimator asks for beyond the rows (its registration, ``EstimatorSpec``): ``values=`` one critic value
    ``V(s)`` per row (``ppo``, GAE on a learned critic); ``hidden_states=`` one vector per row (``pace``'s
    clustering); ``history=`` one :class:`~ecpo_train.core.credit.history.TaskHistory` per row, the row's task as
    earlier updates left it (``tigpo``, which also reads the rows' state keys: pass a ``TrajectoryBatch`` or the
    columns). An estimator that does not ask for one refuses it.

    Bad input raises ``ValueError``: a hyperparameter of the wrong type or out of its range (named, with the
    range), and finite rewards so large that float64 arithmetic on them overflows (rejected rather than
    returned as inf/NaN: finite input gives finite advantages or this error).
    """
    spec, config, options = check_credit(name, credit)
    if spec.needs_values and values is None:
        raise ValueError(f"estimator {name!r} needs values=: one critic value V(s) per step row")
    if not spec.needs_values and values is not None:
        raise ValueError(f"estimator {name!r} is critic-free: it takes no values=")
    if spec.hidden_states == "none" and hidden_states is not None:
        raise ValueError(f"estimator {name!r} reads no hidden states: it takes no hidden_states=")
    if spec.keeps_state and history is None:
        raise ValueError(f"estimator {name!r} keeps state across updates: it needs history=, one TaskHistory per step "
                         "row (a TaskGraphMemory gives them; TaskHistory() is a task with no history yet)")
    if not spec.keeps_state and history is not None:
        raise ValueError(f"estimator {name!r} keeps no state across updates: it takes no history=")
    coded, keys = _step_rows(rows)
    if spec.keeps_state and keys is None:
        raise ValueError(f"estimator {name!r} reads the rows' state keys: pass a TrajectoryBatch, or the columns")
    state_keys = np.asarray(host_values(keys, "anchor_keys"), dtype=object) if spec.keeps_state else None
    inputs = EstimatorInputs(values=values, hidden_states=hidden_states, history=history, anchor_keys=state_keys,
                             options=options)
    try:
        with np.errstate(over="ignore", invalid="ignore"):  # an overflow raises AdvantageOverflow in finish instead
            return spec.fn(coded, config, inputs)
    except AdvantageOverflow as error:
        raise ValueError(_overflow_cause(error, config, name)) from None


def check_credit(name: str, credit: CreditConfig | Mapping[str, Any] | None = None
                 ) -> tuple[EstimatorSpec, CreditConfig, dict[str, Any]]:
    """The estimator ``name`` and the hyperparameters ``credit`` of a :func:`compute_advantages` call, checked
    without rows (``ValueError`` naming the bad one): what a trainer checks when it is built, before its first
    rollout. Returns the estimator's spec, its ``CreditConfig`` and its options."""
    spec = estimator_spec(name)
    config, options = _settings(spec, credit)
    if config.compat != COMPAT.default and COMPAT.name not in (spec.credit_keys or ()):
        aware = sorted(n for n in available_estimators() if COMPAT.name in (estimator_spec(n).credit_keys or ()))
        raise ValueError(f"compat={shown(config.compat)} applies only to {aware}, not {shown(name)}")
    return spec, config, options


def _settings(spec: EstimatorSpec, credit: CreditConfig | Mapping[str, Any] | None
              ) -> tuple[CreditConfig, dict[str, Any]]:
    """The ``CreditConfig`` and the estimator's options (by name, checked against their declarations) that
    ``credit`` gives."""
    if isinstance(credit, CreditConfig):
        return credit, dict(spec.options)
    if credit is not None and not isinstance(credit, Mapping):
        raise TypeError(f"credit must be a CreditConfig or a mapping of its fields, got {type(credit).__name__}")
    given = dict(credit or {})
    options = {h.name: coerce_value(h.name, h.type, given.pop(h.name, h.default))
               for h in spec.hyperparameters or () if h.option}
    return CreditConfig.from_kwargs(**given), options


def _step_rows(rows: Any) -> tuple[CreditRows, Any]:
    """``rows`` validated and coded (:func:`compute_advantages`' three spellings of them), and their state keys
    where it has them (``None`` for ``CreditRows``, which holds only their codes)."""
    if isinstance(rows, TrajectoryBatch):  # the table's rows, validated and coded when it was built
        return rows.credit_rows(), rows.anchor_key
    if isinstance(rows, CreditRows):
        return rows, None
    if not isinstance(rows, Mapping):
        raise TypeError(f"rows must be a TrajectoryBatch, CreditRows (from prepare_rows) or a mapping of the step "
                        f"columns {', '.join(STEP_COLUMNS)}, got {type(rows).__name__}")
    unknown = sorted(map(str, set(rows) - set(STEP_COLUMNS)))
    if unknown:
        raise ValueError(f"unknown step column(s) {shown(unknown)}; the step columns: {', '.join(STEP_COLUMNS)}")
    missing = [column for column in STEP_COLUMNS if column not in rows]
    if missing:
        raise TypeError(f"compute_advantages needs the step columns {', '.join(missing)}")
    return prepare_rows(*(rows[column] for column in STEP_COLUMNS)), rows["anchor_keys"]


def _overflow_cause(error: AdvantageOverflow, config: CreditConfig, name: str) -> str:
    """The one line naming why the advantages overflowed: the credit values the estimator reads that are huge
    (kappa=1e308 is not blamed on omega), else the rewards' scale."""
    spec = estimator_spec(name)
    huge = [f"credit.{f.name}={getattr(config, f.name):g}" for f in dataclasses.fields(config)
            if spec.reads_credit_key(f.name) and isinstance(getattr(config, f.name), float)
            and abs(getattr(config, f.name)) >= _HUGE_CREDIT_VALUE]
    if huge:
        return (f"{error.what}: {', '.join(huge)} {'takes' if len(huge) == 1 else 'take'} the {name} advantages "
                "past float64's range (~1.8e308); lower it")
    return (f"{error.what}: rewards as large as |r| = {error.reward_peak:.3g} make the returns, or their squared "
            f"deviations, exceed float64's range (~1.8e308) once weighted by omega={config.omega:g}; rescale the "
            "rewards or lower omega")
