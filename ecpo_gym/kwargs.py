"""Checks of environment keyword arguments, run by the constructors so ``gym.make`` (not the first ``reset``)
refuses a value of the wrong type, out of range, or too large to build in reasonable time and memory.

Each check returns the value converted (``int``/``float``/``bool``) or raises one ``ValueError`` naming the
argument and its valid range. The bounds themselves live beside what they bound (``MAX_STEPS`` in ``core``,
``MAX_RECEPTACLES`` in ALFWorld's generator); the rules and their words live here. ``check_count``,
``check_int_pair`` and ``check_nonempty`` keep the words ALFWorld's generator has always used
(``num_tasks must be an int in [1, 1000000], got ...``).
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Sequence
from typing import Any

SHOWN_CHARS = 80  # a value echoed in an error is cut here: a 10 MB value must not become a 10 MB error line


def shown(value: Any) -> str:
    """``repr(value)`` for an error line, cut at ``SHOWN_CHARS`` characters (the one rule for quoting input in an
    error, ``ecpo_gym`` and ``ecpo_train`` alike)."""
    try:
        text = repr(value)
    except ValueError:  # an int of more digits than Python converts to text
        return f"an integer of {value.bit_length()} bits" if isinstance(value, int) else type(value).__name__
    return text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]}... ({len(text)} characters)"


LONGEST_WORD = 200  # a path or a value up to this long is echoed whole


def cut_long_words(text: str, keep: int = 80) -> str:
    """``text`` with every run of more than ``LONGEST_WORD`` non-space characters cut to its first ``keep`` and its
    length: a value of 10 MB given on the command line is echoed as a hundred characters, wherever the message
    that names it was written (the rule of :func:`shown` for a message written by another library)."""
    return re.sub(rf"\S{{{LONGEST_WORD + 1},}}", lambda m: f"{m.group(0)[:keep]}... ({len(m.group(0))} characters)",
                  text)


def is_int_in(value: Any, low: int, high: int | None = None) -> bool:
    """The integer rule: an ``int`` in ``[low, high]``; a bool, a float or a string is not (``1.5`` would be
    truncated). :func:`check_int` and :func:`check_count` say it in two wordings."""
    return not isinstance(value, bool) and isinstance(value, int) and low <= value and (high is None or value <= high)


def check_int(name: str, value: Any, low: int, high: int | None = None) -> int:
    """An integer in ``[low, high]`` (:func:`is_int_in`)."""
    if not is_int_in(value, low, high):
        valid = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]"
        raise ValueError(f"{name}={shown(value)} is invalid: it must be {valid}")
    return int(value)


def check_count(name: str, value: Any, low: int, high: int | None = None) -> int:
    """:func:`is_int_in` in ALFWorld's words (``num_tasks must be an int in [1, 1000000], got 0``)."""
    if not is_int_in(value, low, high):
        valid = f"an int >= {low}" if high is None else f"an int in [{low}, {high}]"
        raise ValueError(f"{name} must be {valid}, got {shown(value)}")
    return int(value)


def check_int_pair(name: str, value: Any, low: int, high: int) -> tuple[int, int]:
    """A ``(lo, hi)`` pair of integers with ``low <= lo <= hi <= high`` (``6.5`` is refused, not truncated)."""
    try:
        first, second = (operator.index(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a pair (lo, hi) of ints, got {shown(value)}") from None
    if not low <= first <= second <= high:
        raise ValueError(f"{name} must be (lo, hi) with {low} <= lo <= hi <= {high}, got {value}")
    return first, second


def check_nonempty(name: str, values: Sequence[Any], hint: str) -> Sequence[Any]:
    """A list with at least one item (``hint`` says what to give)."""
    if not values:
        raise ValueError(f"{name} is empty: {hint}")
    return values


def check_optional_int(name: str, value: Any, low: int, high: int | None = None) -> int | None:
    return None if value is None else check_int(name, value, low, high)


def check_real(name: str, value: Any, low: float | None = None, high: float | None = None) -> float:
    """A finite number in ``[low, high]`` (either bound optional)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (low is None or value >= low) and (high is None or value <= high)
    if not ok:
        bounds = {(True, True): "a finite number", (False, True): f"a number >= {low}",
                  (True, False): f"a number <= {high}", (False, False): f"a number in [{low}, {high}]"}
        raise ValueError(f"{name}={shown(value)} is invalid: it must be {bounds[(low is None, high is None)]}")
    return float(value)


def check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name}={shown(value)} is invalid: it must be true or false")  # noqa: TRY004 (one error type)
    return value


def check_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    if value not in choices:
        raise ValueError(f"{name}={shown(value)} is invalid: choose one of {', '.join(map(str, choices))}")
    return value


def check_pair(name: str, value: Any, low: float, high: float) -> tuple[float, float]:
    """A ``(low, high)`` pair of numbers in ``[low, high]`` with the first <= the second."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) != 2:
        raise ValueError(f"{name}={shown(value)} is invalid: it must be a pair (low, high)")
    first, second = (check_real(f"{name}[{i}]", v, low, high) for i, v in enumerate(value))
    if first > second:
        raise ValueError(f"{name}={shown(value)} is invalid: it must be (low, high) with low <= high")
    return first, second
