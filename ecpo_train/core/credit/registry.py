"""The estimator registry: one entry per estimator name, with what it asks of the caller beyond the rows and the
hyperparameters it reads (each declared once, on its registration, with its type, range and default)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from annotated_types import Ge, Gt, Interval

from ecpo_gym.kwargs import shown

Advantages = tuple[Any, dict[str, float]]  # an advantage per row and the diagnostics
Estimator = Callable[..., Advantages]
HIDDEN_STATE_USES = ("none", "optional")
# The ranges declarations are written in. They are the papers' where they state one (ECPO: kappa > 0 and eps > 0 in
# Sec. 4.1, tau > 0 in Sec. 4.2, omega >= 0 in Sec. 4.3); gamma is a discount factor in (0, 1] and rho_min a floor on
# a weight in [0, 1] (App. A); a weight's exponent or scale is >= 0.
Discount = Annotated[float, Interval(gt=0, le=1)]
NonNegative = Annotated[float, Ge(0)]
Positive = Annotated[float, Gt(0)]
Unit = Annotated[float, Interval(ge=0, le=1)]


@dataclass(frozen=True)
class Hyperparameter:
    """One hyperparameter an estimator reads beyond the paper's shared values: its name, its type with its range
    (``Annotated[float, Interval(...)]``, a ``Literal`` of choices; checked by ``core.config_values``, the one rule
    of every config), its default and what it is for. ``option``: a keyword of the run itself (``gae_lambda``, the
    top-level setting of that name) rather than a ``CreditConfig`` field (``credit.<name>``). Estimators that read the
    same value register the same declaration."""

    name: str
    type: Any
    default: Any
    meaning: str
    option: bool = False


@dataclass(frozen=True)
class EstimatorInputs:
    """What a call gives an estimator beyond the rows and the config (``None`` where not given): one critic value
    ``V(s)`` per row (``values``, an estimator that ``needs_values``), one hidden-state vector per row
    (``hidden_states``, an estimator that reads them), one ``TaskHistory`` per row and the rows' state keys
    (``history``, ``anchor_keys``: an estimator that ``keeps_state``), and its ``option`` hyperparameters by name."""

    values: Any = None
    hidden_states: Any = None
    history: Any = None
    anchor_keys: Any = None
    options: dict[str, Any] | None = None


@dataclass(frozen=True)
class EstimatorSpec:
    """A registered estimator and what it asks of the caller beyond the step rows.

    ``fn(rows, config, inputs)``: every estimator takes the coded rows (``CreditRows``), the ``CreditConfig`` and an
    :class:`EstimatorInputs`, and returns ``(advantage per row, diagnostics)``;
    ``needs_values``: it takes one critic value ``V(s)`` per row (``compute_advantages(..., values=)``);
    ``hidden_states``: whether it reads one hidden-state vector per row (``compute_advantages(...,
    hidden_states=)``): ``"none"``, or ``"optional"`` (used where the policy exposes them, identity keys
    otherwise);
    ``keeps_state``: whether it keeps state across updates (TIGPO's task graphs, in the run folder's checkpoint):
    ``inputs.history`` is one ``TaskHistory`` per row (the run's ``core.task_memory.TaskGraphMemory`` gives them) and
    ``inputs.anchor_keys`` the rows' state keys;
    ``group_relative``: its baseline comes from the other rollouts of a group, so it needs >= 2 per task;
    ``hyperparameters``: the :class:`Hyperparameter` declarations it reads beyond the paper's shared values (the
    ``CreditConfig`` fields it reads, ``compat`` included where it has a compatibility mode, and its ``option``
    keywords); ``None``: every estimator-specific ``CreditConfig`` field (an estimator registered without saying).
    A run's config refuses one it does not read set to a value other than its default;
    ``grpo_trajectory``: its advantage is GRPO's trajectory advantage plus a step term (under ``compat="native"``),
    so ``A - A_GRPO`` is its step credit (``core.credit.diagnostics``).
    """

    fn: Estimator
    needs_values: bool = False
    group_relative: bool = True
    hidden_states: str = "none"
    keeps_state: bool = False
    hyperparameters: tuple[Hyperparameter, ...] | None = None
    grpo_trajectory: bool = False

    @property
    def options(self) -> tuple[tuple[str, Any], ...]:
        """``(name, default)`` of its ``option`` hyperparameters: the keywords it takes beyond ``CreditConfig``."""
        return tuple((h.name, h.default) for h in self.hyperparameters or () if h.option)

    @property
    def credit_keys(self) -> tuple[str, ...] | None:
        """The estimator-specific ``CreditConfig`` fields it reads (``None``: every one)."""
        if self.hyperparameters is None:
            return None
        return tuple(h.name for h in self.hyperparameters if not h.option)

    def reads_credit_key(self, name: str) -> bool:
        """Whether this estimator reads the ``CreditConfig`` field ``name``: a shared value, or one it declares."""
        return self.credit_keys is None or name not in estimator_credit_keys() or name in self.credit_keys


_ESTIMATORS: dict[str, EstimatorSpec] = {}
_DECLARED: dict[str, Hyperparameter] = {}  # every hyperparameter an estimator declares, by name
_FROZEN = False  # the credit fields are fixed once CreditConfig is built (core.credit.config)


def register_estimator(name: str, *, needs_values: bool = False, group_relative: bool = True,
                       hidden_states: str = "none", keeps_state: bool = False,
                       hyperparameters: tuple[Hyperparameter, ...] | None = None,
                       grpo_trajectory: bool = False) -> Callable[[Estimator], Estimator]:
    """Decorator: register ``fn(rows, config, inputs) -> (advantage per row, diagnostics)`` under ``name``
    (:class:`EstimatorSpec` says what each argument declares). A hyperparameter two estimators read is one
    declaration, registered by both."""
    if hidden_states not in HIDDEN_STATE_USES:
        raise ValueError(f"hidden_states={shown(hidden_states)}; valid: {', '.join(HIDDEN_STATE_USES)}")
    for item in hyperparameters or ():
        known = _DECLARED.get(item.name)
        if known is not None and known != item:
            raise ValueError(f"hyperparameter {item.name!r} is already declared differently (by another estimator); "
                             "estimators that read one value register the same declaration")
        if known is None and _FROZEN and not item.option:
            raise ValueError(f"hyperparameter {item.name!r} is not a credit field: an estimator registered after the "
                             f"package reads the existing ones ({', '.join(_DECLARED)}) or options")

    def decorate(fn: Estimator) -> Estimator:
        if name in _ESTIMATORS:
            raise ValueError(f"estimator {shown(name)} is already registered")
        for item in hyperparameters or ():
            _DECLARED.setdefault(item.name, item)
        _ESTIMATORS[name] = EstimatorSpec(fn, needs_values, group_relative, hidden_states, keeps_state,
                                          None if hyperparameters is None else tuple(hyperparameters),
                                          grpo_trajectory)
        return fn

    return decorate


def declared_hyperparameters(*, option: bool = False) -> list[Hyperparameter]:
    """Every hyperparameter the registered estimators declare (``option=True``: the run-level keywords instead of
    the credit fields), in registration order."""
    return [h for h in _DECLARED.values() if h.option == option]


def declared_hyperparameter(name: str) -> Hyperparameter:
    """The declaration of the hyperparameter ``name`` (``gae_lambda``: the run setting's type and default)."""
    return _DECLARED[name]


def estimator_credit_keys() -> tuple[str, ...]:
    """The ``CreditConfig`` fields only some estimators read (those the registrations declare); the others are the
    paper's shared values, every estimator's."""
    return tuple(h.name for h in declared_hyperparameters())


def freeze_credit_fields() -> None:
    """``CreditConfig`` is built from the declarations: later registrations may add options, not credit fields."""
    global _FROZEN
    _FROZEN = True


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

