"""Credit hyperparameters (:class:`CreditConfig`): the paper's shared values, declared here, and each estimator's
own, declared once on its registration (``EstimatorSpec.hyperparameters``: type, range, default). ``CreditConfig`` is
one frozen dataclass whose fields are built from those declarations; every field is checked by the one rule of every
config (``core.config_values``: pydantic, strict), so a bad value is one ``ValueError`` naming ``credit.<field>`` and
its range."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from annotated_types import Ge

from ecpo_train.core.config_values import coerce_value, field_types, shown
from ecpo_train.core.credit import estimators  # noqa: F401  (the built-in estimators register their hyperparameters)
from ecpo_train.core.credit.estimators.gigpo import COMPAT_MODES  # noqa: F401  (re-exported)
from ecpo_train.core.credit.registry import (
    Discount,
    Hyperparameter,
    NonNegative,
    Positive,
    Unit,
    declared_hyperparameters,
    estimator_credit_keys,
    freeze_credit_fields,
)

# The paper's shared values, every estimator's (ECPO App. A.1, ALFWorld and WebShop alike): a preset sets them once
# for every estimator it compares. Ranges: registry's (the papers' where they state one).
SHARED = (
    Hyperparameter("gamma", Discount, 0.95, "the discount of the future return G"),
    Hyperparameter("omega", NonNegative, 1.0, "the weight of the step term"),
    Hyperparameter("kappa", Positive, 2.0, "ECA's shrinkage strength (eq. eca_shrinkage)"),
    Hyperparameter("tau", Positive, 2.0, "VarGate's visit-count scale (eq. vargate)"),
    Hyperparameter("d_min", Annotated[int, Ge(1)], 7, "StrictValid's least first-visit step (steps start at 1)"),
    Hyperparameter("rho_min", Unit, 0.5, "the reliability floor of a StrictValid anchor (App. A)"),
    Hyperparameter("eps", Positive, 1e-6, "the guard added to every std"),
)


def _check(self: Any) -> None:
    """Every field against its declared type and range (``credit.<name>`` in the one-line error), kept as the plain
    Python value it checked (a numpy scalar becomes its number)."""
    for name, hint in field_types(type(self)).items():
        object.__setattr__(self, name, coerce_value(f"credit.{name}", hint, getattr(self, name)))


def _from_kwargs(cls: type, **hyperparameters: Any) -> Any:
    """A ``CreditConfig`` from keyword values; an unknown name is one error listing the valid ones."""
    valid = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(hyperparameters) - set(valid))
    if unknown:
        raise ValueError(f"unknown credit hyperparameter(s) {shown(unknown)}; valid ones: {', '.join(valid)}")
    return cls(**hyperparameters)


def _doc(declarations: tuple[Hyperparameter, ...]) -> str:
    lines = [f"    ``{h.name}`` (default {h.default!r}): {h.meaning}" for h in declarations]
    return ("Credit hyperparameters; defaults are each paper's (ECPO App. A.1; PGPO, HGPO, GraphGPO and PACE as "
            "``docs/paper_notes.md`` reads them). Built from the shared values and the estimators' declarations:\n\n"
            + "\n".join(lines) + "\n")


_DECLARED = (*SHARED, *declared_hyperparameters())
CreditConfig = dataclasses.make_dataclass(
    "CreditConfig", [(h.name, h.type, dataclasses.field(default=h.default)) for h in _DECLARED], frozen=True,
    namespace={"__post_init__": _check, "from_kwargs": classmethod(_from_kwargs), "__doc__": _doc(_DECLARED)})
CreditConfig.__module__ = __name__  # pickled (RLlib's configs) and named by where it lives
freeze_credit_fields()
# The fields only some estimators read (each declares which on its registration): a run refuses one its estimator
# does not read. The others are the paper's shared values.
ESTIMATOR_CREDIT_KEYS = estimator_credit_keys()
