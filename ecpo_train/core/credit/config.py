"""Credit hyperparameters (:class:`CreditConfig`): each field declares its type and range where it is typed, and
one check reads those declarations."""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass, fields
from typing import Annotated, Any, Literal

import numpy as np
from annotated_types import Ge, Gt, Interval

from ecpo_gym.kwargs import shown

COMPAT_MODES = ("native", "verl-agent")
Compat = Literal["native", "verl-agent"]
# Ranges are the papers' where they state one (ECPO: kappa > 0 and eps > 0 in Sec. 4.1, tau > 0 in Sec. 4.2,
# omega >= 0 in Sec. 4.3); gamma is a discount factor in (0, 1] and rho_min a floor on a weight in [0, 1] (App. A);
# a weight's exponent or scale is >= 0, GraphGPO's distance discount in (0, 1) (its 10 * gamma^d must fall with d).
Discount = Annotated[float, Interval(gt=0, le=1)]
NonNegative = Annotated[float, Ge(0)]
Positive = Annotated[float, Gt(0)]
Unit = Annotated[float, Interval(ge=0, le=1)]
# HGPO's history depth: an episode has at most this many steps (every environment's step limit, ecpo_gym.core), so a
# deeper history gives no group; the bound refuses 10**30 when the config is built, not after the first rollout
MAX_HGPO_HISTORY = 100_000
# The fields only some estimators read (each declares which in its registration, ``credit_keys``): a run refuses one
# its estimator does not read. The others are the paper's shared values (gamma, omega, kappa, tau, d_min, rho_min,
# eps): a preset sets them once for every estimator it compares.
ESTIMATOR_CREDIT_KEYS = ("compat", "pgpo_alpha", "pgpo_beta", "pgpo_gamma", "hgpo_history", "hgpo_alpha", "hgpo_std",
                         "hgpo_base_group", "graph_gamma", "graph_success_return", "pace_cosine")


@dataclass(frozen=True)
class CreditConfig:
    """Credit hyperparameters; defaults are each paper's (ECPO App. A.1, ALFWorld and WebShop alike; PGPO, HGPO,
    GraphGPO and PACE as ``docs/paper_notes.md`` reads them).

    ``compat="verl-agent"`` (GiGPO estimators and GraphGPO only) reproduces verl-agent's GiGPO episode term, which
    its GraphGPO recipe uses too; see :func:`verl_agent_episode_advantage` for exactly what changes.

    ``pgpo_*``: PGPO's weight ``beta (1 - p_succ)^alpha`` on its potential term and the potential's discount;
    ``hgpo_*``: HGPO's history depth K (groups share the last k = 1..K+1 anchors), the exponent of its weights
    ``(k + 1)^alpha``, whether each level is std-normalised (its ``mean_std_norm``) and whether the episode
    advantage joins the levels as k = 0 (its ``base_group``); ``graph_*``: GraphGPO's step return
    ``success_return * gamma^d``; ``pace_cosine``: PACE's hidden-state clustering threshold (cosine similarity),
    used only where hidden states are passed.
    """

    gamma: Discount = 0.95
    omega: NonNegative = 1.0
    kappa: Positive = 2.0
    tau: Positive = 2.0
    d_min: Annotated[int, Ge(1)] = 7  # step numbers start at 1
    rho_min: Unit = 0.5
    eps: Positive = 1e-6
    compat: Compat = "native"
    pgpo_alpha: NonNegative = 2.0
    pgpo_beta: NonNegative = 1.0
    pgpo_gamma: Unit = 1.0
    hgpo_history: Annotated[int, Interval(ge=0, le=MAX_HGPO_HISTORY)] = 2
    hgpo_alpha: NonNegative = 1.0
    hgpo_std: bool = True
    hgpo_base_group: bool = False
    graph_gamma: Annotated[float, Interval(gt=0, lt=1)] = 0.1
    graph_success_return: Positive = 10.0
    pace_cosine: Annotated[float, Interval(ge=-1, le=1)] = 0.95

    def __post_init__(self) -> None:
        for name, hint in typing.get_type_hints(type(self), include_extras=True).items():
            _check_field(name, getattr(self, name), hint)

    @classmethod
    def from_kwargs(cls, **hyperparameters: Any) -> CreditConfig:
        valid = [f.name for f in fields(cls)]
        unknown = sorted(set(hyperparameters) - set(valid))
        if unknown:
            raise ValueError(f"unknown credit hyperparameter(s) {shown(unknown)}; valid ones: {', '.join(valid)}")
        return cls(**hyperparameters)


def _range_text(bounds: list[Any]) -> str:
    """``in (0, 1]``, ``> 0``, ``>= 1``: the range the field's declarations give, in words."""
    low = next(((b.gt, "(") if getattr(b, "gt", None) is not None else (b.ge, "[") for b in bounds
                if getattr(b, "gt", None) is not None or getattr(b, "ge", None) is not None), None)
    high = next(((b.lt, ")") if getattr(b, "lt", None) is not None else (b.le, "]") for b in bounds
                 if getattr(b, "lt", None) is not None or getattr(b, "le", None) is not None), None)
    fmt = lambda v: f"{v:g}"
    if low and high:
        return f"in {low[1]}{fmt(low[0])}, {fmt(high[0])}{high[1]}"
    if low:
        return f"{'>' if low[1] == '(' else '>='} {fmt(low[0])}"
    return f"{'<' if high[1] == ')' else '<='} {fmt(high[0])}" if high else "finite"


def _within(value: float, bounds: list[Any]) -> bool:
    checks = (("gt", lambda v, b: v > b), ("ge", lambda v, b: v >= b), ("lt", lambda v, b: v < b),
              ("le", lambda v, b: v <= b))
    return all(test(value, getattr(b, key)) for b in bounds for key, test in checks
               if getattr(b, key, None) is not None)


def _check_field(name: str, value: Any, hint: Any) -> None:
    """One rule for every field: its declared type (a real number, an integer, a bool, one of a Literal's
    choices) and its declared range; a bad value is one ValueError naming the field and what it must be."""
    base, bounds = hint, []
    if typing.get_origin(hint) is Annotated:
        base, *extras = typing.get_args(hint)
        bounds = [b for extra in extras for b in (extra if isinstance(extra, Interval) else [extra])]
    is_bool = isinstance(value, (bool, np.bool_))
    if typing.get_origin(base) is Literal:
        if not isinstance(value, str) or value not in typing.get_args(base):
            raise ValueError(f"credit hyperparameter {name}={shown(value)} is invalid; valid values: "
                             f"{', '.join(typing.get_args(base))}")
        return
    if base is bool:
        if not is_bool:
            raise ValueError(f"credit hyperparameter {name}={shown(value)} is invalid: it must be true or false")
        return
    if base is int:
        if not isinstance(value, (int, np.integer)) or is_bool or not _within(int(value), bounds):
            raise ValueError(f"credit hyperparameter {name}={shown(value)} is invalid: it must be an integer "
                             f"{_range_text(bounds)}")
        return
    is_real = isinstance(value, (int, float, np.integer, np.floating)) and not is_bool
    if not is_real or not math.isfinite(value) or not _within(float(value), bounds):
        raise ValueError(f"credit hyperparameter {name}={shown(value)} is invalid: it must be a number {_range_text(bounds)}")
