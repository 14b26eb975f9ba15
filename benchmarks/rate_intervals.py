"""Intervals of one success rate, or of the difference of two independent ones (different episodes on each side):
Wilson's score interval, Newcombe's hybrid score interval built from two of them, and the Wald interval that
older reports quote beside them. Paired outcomes (the same episodes under two policies) take
``benchmarks.paired_stats`` instead."""

from __future__ import annotations

import math


def wilson(successes: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of the proportion ``successes / n`` (``(0, 1)`` without trials)."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (centre - half, centre + half)


def newcombe(k1: int, n1: int, k2: int, n2: int) -> tuple[float, float]:
    """95 % interval of p2 - p1 = k2/n2 - k1/n1 (Newcombe's hybrid score interval, from the two Wilson ones)."""
    p1, p2 = k1 / n1, k2 / n2
    (l1, u1), (l2, u2) = wilson(k1, n1), wilson(k2, n2)
    diff = p2 - p1
    return (diff - math.sqrt((p2 - l2) ** 2 + (u1 - p1) ** 2), diff + math.sqrt((u2 - p2) ** 2 + (p1 - l1) ** 2))


def wald_diff(before: float, after: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wald interval of ``after - before`` for two independent proportions over ``n`` trials each."""
    se = math.sqrt(before * (1 - before) / n + after * (1 - after) / n)
    return (after - before - z * se, after - before + z * se)
