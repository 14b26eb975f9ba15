"""The estimator registry: one entry per estimator name, with what it asks of the caller beyond the rows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ecpo_gym.kwargs import shown
from ecpo_train.core.credit.config import ESTIMATOR_CREDIT_KEYS

Estimator = Callable[..., tuple[Any, dict[str, float]]]


@dataclass(frozen=True)
class EstimatorSpec:
    """A registered estimator and what it asks of the caller beyond the step rows.

    ``needs_values``: it takes one critic value ``V(s)`` per row (``compute_advantages(..., values=)``);
    ``hidden_states``: whether it reads one hidden-state vector per row (``compute_advantages(...,
    hidden_states=)``): ``"none"``, or ``"optional"`` (used where the policy exposes them, identity keys
    otherwise);
    ``keeps_state``: whether it keeps state across updates (TIGPO's task graphs, in the run folder's checkpoint):
    the function is ``fn(rows, config, history=, anchor_keys=)``, ``history`` one ``TaskHistory`` per row (the
    run's ``core.task_memory.TaskGraphMemory`` gives them) and ``anchor_keys`` the rows' state keys;
    ``group_relative``: its baseline comes from the other rollouts of a group, so it needs >= 2 per task;
    ``options``: keyword arguments it takes beyond ``CreditConfig`` (the trainer passes its config's values
    of these names), each with its default;
    ``credit_keys``: the estimator-specific ``CreditConfig`` fields it reads (``config.ESTIMATOR_CREDIT_KEYS``:
    PGPO's, HGPO's, GraphGPO's, PACE's and ``compat``; the paper's shared values are every estimator's); ``None``:
    every field (an estimator registered without saying). A run's config refuses one it does not read set to a
    value other than its default;
    ``grpo_trajectory``: its advantage is GRPO's trajectory advantage plus a step term (under ``compat="native"``),
    so ``A - A_GRPO`` is its step credit (``core.credit.diagnostics``).
    """

    fn: Estimator
    needs_values: bool = False
    group_relative: bool = True
    options: tuple[tuple[str, float], ...] = ()
    hidden_states: str = "none"
    keeps_state: bool = False
    credit_keys: tuple[str, ...] | None = None
    grpo_trajectory: bool = False

    def reads_credit_key(self, name: str) -> bool:
        """Whether this estimator reads the ``CreditConfig`` field ``name`` (``credit_keys``)."""
        return self.credit_keys is None or name not in ESTIMATOR_CREDIT_KEYS or name in self.credit_keys


_ESTIMATORS: dict[str, EstimatorSpec] = {}


HIDDEN_STATE_USES = ("none", "optional")


def register_estimator(name: str, *, needs_values: bool = False, group_relative: bool = True,
                       options: dict[str, float] | None = None, hidden_states: str = "none",
                       keeps_state: bool = False, credit_keys: tuple[str, ...] | None = None,
                       grpo_trajectory: bool = False) -> Callable[[Estimator], Estimator]:
    """Decorator: register ``fn(rows, config) -> (advantage per row, diagnostics)`` under ``name``; with
    ``needs_values=True`` the function is ``fn(rows, config, values, **options)``, with ``hidden_states=
    "optional"`` ``fn(rows, config, hidden_states=None)``, with ``keeps_state=True`` ``fn(rows, config, history,
    anchor_keys)``."""
    if hidden_states not in HIDDEN_STATE_USES:
        raise ValueError(f"hidden_states={shown(hidden_states)}; valid: {', '.join(HIDDEN_STATE_USES)}")
    unknown = sorted(set(credit_keys or ()) - set(ESTIMATOR_CREDIT_KEYS))
    if unknown:
        raise ValueError(f"credit_keys {shown(unknown)} are not estimator-specific credit fields; valid: "
                         f"{', '.join(ESTIMATOR_CREDIT_KEYS)}")

    def decorate(fn: Estimator) -> Estimator:
        if name in _ESTIMATORS:
            raise ValueError(f"estimator {shown(name)} is already registered")
        _ESTIMATORS[name] = EstimatorSpec(fn, needs_values, group_relative, tuple((options or {}).items()),
                                          hidden_states, keeps_state,
                                          None if credit_keys is None else tuple(credit_keys), grpo_trajectory)
        return fn

    return decorate


def available_estimators(*, needs_values: bool | None = None) -> list[str]:
    """Every registered name, or (``needs_values=False``) only the critic-free ones."""
    return [name for name, spec in _ESTIMATORS.items() if needs_values is None or spec.needs_values == needs_values]


def estimator_spec(name: str) -> EstimatorSpec:
    """The :class:`EstimatorSpec` registered under ``name`` (clear ``ValueError`` listing valid names otherwise)."""
    try:
        return _ESTIMATORS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown advantage estimator {shown(name)}; valid: {', '.join(_ESTIMATORS)}") from None


def check_group_size(group_size: int, name: str) -> None:
    """The one group-size rule: a group-relative estimator needs at least 2 rollouts per task (with 1, every
    advantage is 0 and nothing trains); an estimator that is not group-relative (ppo) takes any size."""
    if int(group_size) < 2 and estimator_spec(name).group_relative:
        raise ValueError(f"group_size={group_size} is invalid: group-relative credit ({name}) needs >= 2 rollouts "
                         "per task (with 1 every advantage is 0 and nothing trains)")


def get_estimator(name: str) -> Estimator:
    """The function registered under ``name`` (clear ``ValueError`` listing valid names otherwise)."""
    return estimator_spec(name).fn
