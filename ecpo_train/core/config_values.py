"""How a config value is checked: one strict rule at every depth against the type a config dataclass declares
(``TrainConfig``'s fields, ``CreditConfig``'s, an estimator's declared hyperparameters), and the one-line error that
names the key and the declared range.

- **Checking**: pydantic in strict mode against the field's annotation, ``Field(ge=..., le=...)``, ``annotated_types``
  bounds and ``Literal`` included: an int is a float, nothing else converts (a quoted ``'1'`` stays a string, a bool
  is never a number), and nan or infinity is no number. A numpy scalar counts as the Python number it holds.
- **Refusing**: one ``ValueError`` naming the key, its value echoed cut at ``SHOWN_CHARS`` characters:
  ``name=value; valid: a, b`` for a choice, ``name=value is invalid: it must be <range> (<note>)`` for a range
  (the note is the field's ``description``), ``config key 'name' expects <type>, got value (type)`` for a type.

Reading YAML (the presets, ``key=value`` overrides, a run's recorded ``config.yaml``) is ``runtime.config_values``'.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Annotated, Any, Literal

import numpy as np
from annotated_types import GroupedMetadata
from pydantic import ConfigDict, TypeAdapter, ValidationError

from ecpo_gym.kwargs import SHOWN_CHARS, shown  # noqa: F401  (the one rule for quoting input, re-exported)

_BOUNDS = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
_KINDS = {int: "an integer", float: "a number", list: "a non-empty list"}
_RANGE_ERRORS = {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "finite_number", "too_short",
                 "string_pattern_mismatch"}


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    """A config dataclass's resolved annotations, ranges included (the modules use postponed annotations)."""
    return typing.get_type_hints(cls, include_extras=True)


@functools.cache
def _validator(hint: Any) -> TypeAdapter:
    return TypeAdapter(hint, config=ConfigDict(strict=True, allow_inf_nan=False))


def _options(hint: Any) -> list[Any]:
    """The members of a union (``None`` left out), or ``[hint]``."""
    union = isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union
    return [o for o in typing.get_args(hint) if o is not type(None)] if union else [hint]


def _split(option: Any) -> tuple[Any, list[Any]]:
    """An annotated type as (its base type, its metadata: ``FieldInfo`` objects)."""
    if typing.get_origin(option) is Annotated:
        base, *extras = typing.get_args(option)
        return base, extras
    return option, []


def _type_name(hint: Any) -> str:
    """What a value of ``hint`` is, for a type error: ``float``, ``int or auto``, ``int or None``, ``a mapping``."""
    names = []
    for option in _options(hint):
        base = _split(option)[0]
        if typing.get_origin(base) is Literal:
            names.append(" or ".join(map(str, typing.get_args(base))))
        else:
            names.append("a mapping" if dataclasses.is_dataclass(base) else getattr(base, "__name__", str(base)))
    if type(None) in typing.get_args(hint):
        names.append("None")
    return " or ".join(names)


def _constraints(extras: list[Any]) -> Any:
    """The single bounds (``Ge``, ``Lt``, ...) of an annotation's metadata: a pydantic ``Field``'s, an
    ``annotated_types.Interval``'s (``CreditConfig``'s fields), or the bound itself."""
    for info in extras:
        if isinstance(info, GroupedMetadata):
            yield from info
        else:
            yield from getattr(info, "metadata", None) or [info]


def _range(option: Any) -> str:
    """The declared range of one annotated type: ``an integer in [0, 8] (0 = ...)``, ``a number > 0``, ``auto``."""
    base, extras = _split(option)
    if typing.get_origin(base) is Literal:
        return " or ".join(map(str, typing.get_args(base)))
    notes = [info.description for info in extras if getattr(info, "description", None)]
    if base is str:  # a pattern: its description names what matches
        return ", ".join(notes) or "text"
    bounds = {name: getattr(item, name) for item in _constraints(extras) for name in _BOUNDS
              if getattr(item, name, None) is not None}
    low = next(((k, v) for k, v in bounds.items() if k in ("ge", "gt")), None)
    high = next(((k, v) for k, v in bounds.items() if k in ("le", "lt")), None)
    text = _KINDS.get(base, getattr(base, "__name__", ""))
    if low and high:
        text += f" in {'[' if low[0] == 'ge' else '('}{low[1]}, {high[1]}{']' if high[0] == 'le' else ')'}"
    elif low or high:
        name, bound = low or high
        text += f" {_BOUNDS[name]} {bound}"
    return text + "".join(f" ({note})" for note in notes)


def coerce_value(key: str, hint: Any, value: Any) -> Any:
    """The one coercion rule, at every depth: ``value`` checked against the annotation ``hint`` (module
    docstring). A config dataclass (``CreditConfig``) is a mapping whose entries follow the same rule, named
    ``key.entry`` (an unknown entry is left for the dataclass's own check to name)."""
    if dataclasses.is_dataclass(hint):
        if isinstance(value, hint):
            return value
        if not isinstance(value, dict):
            raise ValueError(f"config key {key!r} expects a mapping, got {shown(value)} ({type(value).__name__})")
        hints = field_types(hint)
        return {name: coerce_value(f"{key}.{name}", hints[name], entry) if name in hints else entry
                for name, entry in value.items()}
    if isinstance(value, np.generic):  # numpy's bool, int, float: the Python value it holds
        value = value.item()
    try:
        return _validator(hint).validate_python(value)
    except ValidationError as error:
        kinds = {e["type"] for e in error.errors()}
        options = _options(hint)
        base = _split(options[0])[0]
        if kinds == {"literal_error"} and len(options) == 1 and typing.get_origin(base) is Literal:
            raise ValueError(f"{key}={shown(value)}; valid: {', '.join(map(str, typing.get_args(base)))}") from None
        if kinds & _RANGE_ERRORS:
            valid = " or ".join(_range(option) for option in options)
            raise ValueError(f"{key}={shown(value)} is invalid: it must be {valid}") from None
        raise ValueError(f"config key {key!r} expects {_type_name(hint)}, got {shown(value)} "
                         f"({type(value).__name__})") from None
