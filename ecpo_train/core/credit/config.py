"""Credit hyperparameters (:class:`CreditConfig`) with their types and ranges checked once."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

COMPAT_MODES = ("native", "verl-agent")
# The real-valued hyperparameters: (test on the value, the valid range in words). Ranges are the paper's where it
# states one (kappa > 0 and eps > 0 in Sec. 4.1, tau > 0 in Sec. 4.2, omega >= 0 in Sec. 4.3); gamma is a discount
# factor in (0, 1] and rho_min a floor on a weight in [0, 1] (App. A).
_REAL_RANGES: dict[str, tuple[Callable[[float], bool], str]] = {
    "gamma": (lambda v: 0.0 < v <= 1.0, "in (0, 1]"),
    "omega": (lambda v: v >= 0.0, ">= 0"),
    "kappa": (lambda v: v > 0.0, "> 0"),
    "tau": (lambda v: v > 0.0, "> 0"),
    "rho_min": (lambda v: 0.0 <= v <= 1.0, "in [0, 1]"),
    "eps": (lambda v: v > 0.0, "> 0"),
}


@dataclass(frozen=True)
class CreditConfig:
    """Credit hyperparameters; defaults are the paper's (App. A.1, ALFWorld and WebShop alike).

    ``compat="verl-agent"`` (GiGPO estimators only) reproduces verl-agent's GiGPO episode term; see
    :func:`verl_agent_episode_advantage` for exactly what changes.
    """

    gamma: float = 0.95
    omega: float = 1.0
    kappa: float = 2.0
    tau: float = 2.0
    d_min: int = 7
    rho_min: float = 0.5
    eps: float = 1e-6
    compat: str = "native"

    def __post_init__(self) -> None:
        for name, (in_range, valid) in _REAL_RANGES.items():
            value = getattr(self, name)
            is_real = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
            if not is_real or not math.isfinite(value) or not in_range(float(value)):
                raise ValueError(f"credit hyperparameter {name}={value!r} is invalid: it must be a number {valid}")
        is_int = isinstance(self.d_min, (int, np.integer)) and not isinstance(self.d_min, (bool, np.bool_))
        if not is_int or self.d_min < 1:
            raise ValueError(
                f"credit hyperparameter d_min={self.d_min!r} is invalid: it must be an integer >= 1 (step numbers start at 1)"
            )
        if not isinstance(self.compat, str) or self.compat not in COMPAT_MODES:
            raise ValueError(f"credit hyperparameter compat={self.compat!r} is invalid; valid values: {', '.join(COMPAT_MODES)}")

    @classmethod
    def from_kwargs(cls, **hyperparameters: Any) -> CreditConfig:
        valid = [f.name for f in fields(cls)]
        unknown = sorted(set(hyperparameters) - set(valid))
        if unknown:
            raise ValueError(f"unknown credit hyperparameter(s) {unknown}; valid ones: {', '.join(valid)}")
        return cls(**hyperparameters)
