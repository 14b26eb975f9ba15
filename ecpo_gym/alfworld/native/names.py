"""Displayed names of ALFWorld entities (``cabinet 3``), numbered the way alfworld's demangler numbers them.

An id ``Cabinet_bar__plus_00_dot_49_...`` belongs to class ``cabinet`` (the text before the first
``_bar_``; ids containing ``basin`` get ``basin`` appended, so sinks read ``sinkbasin``). Within a class the
numbers run 1..k over the sorted ids, the alphabetically first id getting the highest number. Ids without
``_bar_`` (``agent1``, type names) keep their text plus a trailing space. Only entities that appear in some
fact are named, as in the reference engine.
"""

from __future__ import annotations

from collections import Counter

from ecpo_gym.kwargs import shown


def _readable(text: str) -> str:
    for raw, char in (("_bar_", "|"), ("_minus_", "-"), ("_plus_", "+"), ("_dot_", "."), ("_comma_", ",")):
        text = text.replace(raw, char)
    return text


def demangle(ids) -> dict[str, str]:
    """Lowercased id -> displayed name for every id in ``ids``."""
    ordered = sorted(set(ids))
    counts: Counter = Counter()
    for ident in ordered:
        head, sep, _ = ident.partition("_bar_")
        if sep:
            counts[head + ("basin" if "basin" in ident else "")] += 1
    remaining = {cls: count for cls, count in counts.items()}
    names = {}
    for ident in ordered:
        text = _readable(ident)
        head, sep, _ = text.partition("|")
        if not sep:
            names[ident] = f"{text} "
            continue
        cls = head + ("basin" if "basin" in ident else "")
        if remaining.get(cls, 0) <= 0:
            raise ValueError(f"cannot number entity {shown(ident)}: its class reads differently once demangled")
        names[ident] = f"{cls} {remaining[cls]}"
        remaining[cls] -= 1
    return names
