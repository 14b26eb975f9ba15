"""Statistics shared by the benchmark reports: pairing by seed id, paired t-intervals, Holm, the MDE, McNemar's
exact interval and power for paired binary outcomes, and the intervals of success rates (Wilson for one
proportion; Newcombe and Wald for a difference of two).

Every method of a study trains on the same seeds (or, in the counterfactual benchmark, updates on the same
batches), so method differences are paired: the interval of ``a - b`` is a one-sample t-interval over the
per-seed differences, which removes the between-seed variance a Welch interval keeps. Pairing is by the seed
id stored with each value, never by list position: a cell whose seeds do not match its partner's is refused.

Several comparisons in one report are corrected together with Holm's step-down procedure (family-wise error
0.05). Beside every "not significant" the report prints the minimum detectable effect (MDE): the true paired
difference the comparison would detect with 80 % power at the (Bonferroni, i.e. Holm's first-step) level,
``(t_{1 - alpha/2m} + t_{0.8}) * se`` (paired: se = sd / sqrt(n), df = n - 1) -- the effect size below which a
null result says nothing. With fewer than ``MIN_UNITS_FOR_MDE`` units (seeds, checkpoints) the sample SD rests on
too few degrees of freedom for that number to mean anything, and the report says "no MDE (n seeds)" instead.

Paired binary outcomes (one validation episode before and after training, or under two methods) are not
t-tested: where few episodes change, the t-interval over the mostly-zero differences is too narrow. Their
interval is McNemar's, built from the discordant counts alone (:func:`mcnemar_exact`), and their power is
Connor's (:func:`mcnemar_pairs_needed`, :func:`mcnemar_mde`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy import optimize, stats

ALPHA = 0.05
POWER = 0.8
MIN_UNITS_FOR_MDE = 5  # a t-based MDE from fewer units (df < 4) is not reported


class MisalignedCells(ValueError):
    """Two cells to be paired do not hold the same seed ids."""


def paired_values(a: Mapping[Any, float], b: Mapping[Any, float], *, label: str = "") -> tuple[list, np.ndarray]:
    """``(seeds, a[seed] - b[seed])`` over the seeds both cells hold, finite on both sides.

    ``a`` and ``b`` map seed id -> value. Their seed sets must be equal: a seed one side lacks means the two
    cells were not run on the same seeds, and pairing them would compare different things (raises
    :class:`MisalignedCells`). A NaN on either side drops that seed's pair (a metric undefined for that batch).
    """
    if set(a) != set(b):
        only_a, only_b = sorted(set(a) - set(b), key=str), sorted(set(b) - set(a), key=str)
        raise MisalignedCells(f"cannot pair {label or 'cells'}: seeds only in the first {only_a}, "
                              f"only in the second {only_b}")
    seeds = [s for s in sorted(a, key=str) if _finite(a[s]) and _finite(b[s])]
    return seeds, np.asarray([float(a[s]) - float(b[s]) for s in seeds], dtype=float)


def _finite(x: Any) -> bool:
    return x is not None and math.isfinite(float(x))


def keyed(values: Sequence[float], seeds: Sequence[Any]) -> dict[Any, float]:
    """``{seed: value}`` from parallel lists; a repeated seed is refused (it would pair ambiguously)."""
    if len(values) != len(seeds):
        raise MisalignedCells(f"{len(values)} values for {len(seeds)} seeds")
    if len(set(seeds)) != len(seeds):
        raise MisalignedCells(f"repeated seed ids in {list(seeds)}")
    return dict(zip(seeds, values))


def mde(se: float, df: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """Minimum detectable difference for a t-test with standard error ``se`` and ``df`` degrees of freedom:
    two-sided level ``alpha``, power ``power``. NaN below ``MIN_UNITS_FOR_MDE - 1`` degrees of freedom: with 3-4
    seeds the t quantiles and the SD are too unstable for the number to say what a null result rules out."""
    if not (df >= MIN_UNITS_FOR_MDE - 1 and math.isfinite(se)):
        return float("nan")
    return float((stats.t.ppf(1 - alpha / 2, df) + stats.t.ppf(power, df)) * se)


def _t_result(mean: float, se: float, df: float, n: int, sd: float, m: int) -> dict[str, float]:
    half = float(stats.t.ppf(0.975, df)) * se
    if se > 0:
        p = float(2 * stats.t.sf(abs(mean) / se, df))
    else:
        p = 0.0 if mean != 0 else 1.0
    return {"diff": mean, "low": mean - half, "high": mean + half, "sd": sd, "se": se, "df": df, "n": n, "p": p,
            "mde": mde(se, df, ALPHA / max(1, m))}


_NO_DATA = {"low": float("nan"), "high": float("nan"), "sd": float("nan"), "se": float("nan"), "df": float("nan"),
            "p": float("nan"), "mde": float("nan")}


def paired_diff(diffs: Sequence[float], *, m: int = 1) -> dict[str, float]:
    """Mean paired difference, its 95 % t-interval, paired SD, n, two-sided p, and the MDE at level 0.05 / m."""
    d = np.asarray([x for x in diffs if math.isfinite(x)], dtype=float)
    n = len(d)
    if n < 2:
        return _NO_DATA | {"diff": float(d.mean()) if n else float("nan"), "n": n}
    sd = float(d.std(ddof=1))
    return _t_result(float(d.mean()), sd / math.sqrt(n), n - 1, n, sd, m)


def welch_diff(a: Sequence[float], b: Sequence[float], *, m: int = 1) -> dict[str, float]:
    """mean(a) - mean(b) for independent samples (runs that share no seed): Welch's t with Welch-Satterthwaite df."""
    x = np.asarray([v for v in a if math.isfinite(v)], dtype=float)
    y = np.asarray([v for v in b if math.isfinite(v)], dtype=float)
    if len(x) < 2 or len(y) < 2:
        return _NO_DATA | {"diff": float("nan"), "n": min(len(x), len(y))}
    va, vb = x.var(ddof=1) / len(x), y.var(ddof=1) / len(y)
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(x) - 1) + vb**2 / (len(y) - 1)) if se > 0 else float(min(len(x), len(y)) - 1)
    return _t_result(float(x.mean() - y.mean()), se, float(df), min(len(x), len(y)), float("nan"), m)


def holm(p_values: Sequence[float], alpha: float = ALPHA) -> list[bool]:
    """Holm's step-down rejections (family-wise error ``alpha``); NaN p-values are never rejected."""
    order = sorted((p, i) for i, p in enumerate(p_values) if math.isfinite(p))
    m = len(order)
    rejected = [False] * len(p_values)
    for rank, (p, i) in enumerate(order):
        if p > alpha / (m - rank):
            break
        rejected[i] = True
    return rejected


def verdict(part: Mapping[str, float], direction: int, significant: bool) -> str:
    """'holds' / 'contradicted' when Holm rejects 0 on the claimed / the other side, else 'not significant'
    (right sign) or 'not supported' (wrong sign); 'no data' without a difference."""
    diff = part["diff"] * direction
    if not math.isfinite(diff):
        return "no data"
    if significant and math.isfinite(part.get("p", float("nan"))):
        return "holds" if diff > 0 else "contradicted"
    return "not significant" if diff > 0 else "not supported"


def apply_holm(parts: list[dict[str, Any]], directions: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """Holm-correct a report's comparisons in place: each part gets ``holm_significant``, its ``verdict`` and
    the MDE at Holm's first-step level (``mde``, :func:`detectable`), with ``m`` the number of comparisons
    corrected together."""
    m = sum(math.isfinite(p.get("p", float("nan"))) for p in parts)
    rejected = holm([p.get("p", float("nan")) for p in parts])
    for k, (part, flag) in enumerate(zip(parts, rejected)):
        direction = directions[k] if directions is not None else int(part.get("direction", 1))
        part["holm_significant"] = bool(flag)
        part["m"] = m
        part["mde"] = detectable(part, ALPHA / max(1, m))
        part["verdict"] = verdict(part, direction, flag)
    return parts


def detectable(part: Mapping[str, Any], alpha: float = ALPHA) -> float:
    """The MDE of one comparison at two-sided level ``alpha``: McNemar's (:func:`mcnemar_mde`) for paired
    binary outcomes (a part with ``gained`` / ``lost`` / ``episodes``), the t-based :func:`mde` otherwise."""
    if "gained" in part:
        return mcnemar_mde(part["episodes"], (part["gained"] + part["lost"]) / max(1, part["episodes"]), alpha)
    return mde(part.get("se", float("nan")), part.get("df", float("nan")), alpha)


def mde_text(part: Mapping[str, Any], digits: int = 3) -> str:
    """``MDE 0.117``, or ``no MDE (3 seeds)`` where too few units allow none (``part["unit"]``, default seeds), or
    ``no MDE (7 of 96 changed)`` where so few paired outcomes changed that even a difference as large as their
    share is not detected with 80 % power; empty where there is no MDE for another reason (no data, none changed)."""
    if math.isfinite(part.get("mde", float("nan"))):
        return f"MDE {part['mde']:.{digits}f}"
    if "gained" in part and part["gained"] + part["lost"]:  # so few changed that no difference has 80 % power
        return f"no MDE ({part['gained'] + part['lost']} of {part['episodes']} changed)"
    n = part.get("n", 0)
    if "gained" not in part and 0 < n < MIN_UNITS_FOR_MDE:
        return f"no MDE ({n} {part.get('unit', 'seeds')})"
    return ""


def fmt_part(part: Mapping[str, Any], digits: int = 3) -> str:
    """``+d [low, high]`` and, when not significant, the MDE (or why there is none) beside it."""
    if not math.isfinite(part.get("diff", float("nan"))):
        return "n/a"
    if not math.isfinite(part.get("low", float("nan"))):
        return f"{part['diff']:+.{digits}f} (n = {part.get('n', 0)}: no interval)"
    text = f"{part['diff']:+.{digits}f} [{part['low']:+.{digits}f}, {part['high']:+.{digits}f}]"
    beside = mde_text(part, digits)
    if not part.get("holm_significant") and beside:
        text += f" ({beside})"
    return text


def claim_verdict(status: Sequence[str]) -> str:
    """A claim over its parts' verdicts: *holds* (every part holds), *contradicted* (some part contradicted and
    none holds), *mixed* (both), *partly holds* (some hold, none contradicted), and *not shown* when no part is
    significant: a null at this power does not say the claimed effect is absent (the parts' MDEs say how large
    an effect could have gone unseen). Parts marked ``saturated`` are not judged and do not count."""
    status = [s for s in status if s != "saturated"]
    if status and all(s == "holds" for s in status):
        return "holds"
    if any(s == "contradicted" for s in status):
        return "mixed" if any(s == "holds" for s in status) else "contradicted"
    return "partly holds" if any(s == "holds" for s in status) else "not shown"


# ------------------------------------------------------------------------------------------ paired episodes
def paired_outcomes(before: Mapping[Any, Any], after: Mapping[Any, Any], *, label: str = "") -> dict[str, Any]:
    """Two validations' binary outcomes paired episode by episode (``key -> won``; the keys must match).

    Validation fixes every choice's uniform draw by (seed, copy, step), so the same episode under two policies
    differs only where the policies do. Returned: :func:`mcnemar_exact` of ``after - before`` (``gained`` /
    ``lost`` discordant pairs, the exact interval and p) with ``n`` the number of episodes and the MDE at level
    0.05 for the observed share of changing episodes (:func:`mcnemar_mde`)."""
    if set(before) != set(after):
        raise MisalignedCells(f"cannot pair {label or 'validations'}: {len(set(before) ^ set(after))} episodes "
                              "are in only one of them (pair only the same validation)")
    keys = sorted(before, key=str)
    gained = sum(1 for k in keys if after[k] and not before[k])
    lost = sum(1 for k in keys if before[k] and not after[k])
    out = mcnemar_exact(gained, lost, len(keys))
    return out | {"mde": detectable(out)}


def mcnemar_exact(gained: int, lost: int, n: int, level: float = 0.95) -> dict[str, Any]:
    """McNemar-consistent exact interval and p of a difference of paired success rates, from its discordant counts.

    ``gained`` pairs went 0 -> 1, ``lost`` 1 -> 0, of ``n`` pairs; the difference is ``(gained - lost) / n``.
    Conditional on the ``D = gained + lost`` discordant pairs, ``gained ~ Binomial(D, q)`` and the difference is
    ``D / n * (2 q - 1)``. The interval is the exact Clopper-Pearson interval of ``q`` (``Beta(alpha/2; b, c + 1)``
    to ``Beta(1 - alpha/2; b + 1, c)``) mapped through that line, and p is the exact McNemar test (two-sided
    binomial test of ``q = 1/2``), so the interval excludes 0 exactly when the test rejects at its level. Unlike
    the paired t-interval over the n mostly-zero differences, it does not shrink with the unchanged pairs: WebShop
    LoRA seed 0 (7 gained, 1 lost, n 96) gives +0.062 [-0.004, +0.083], p 0.070 (the t-interval said
    [+0.005, +0.120]). Without a discordant pair there is no interval (``low``/``high`` NaN) and p is 1.
    ``se``/``df`` are NaN: this interval has none."""
    if not (0 <= gained and 0 <= lost and gained + lost <= n and n >= 1):
        raise ValueError(f"discordant counts {gained} gained, {lost} lost do not fit {n} pairs")
    d = gained + lost
    out = {"diff": (gained - lost) / n, "gained": int(gained), "lost": int(lost), "episodes": int(n), "n": int(n),
           "discordant_share": d / n, "se": float("nan"), "df": float("nan"), "sd": float("nan"),
           "low": float("nan"), "high": float("nan"), "p": 1.0}
    if d == 0:
        return out
    tail = (1 - level) / 2
    q_low = float(stats.beta.ppf(tail, gained, lost + 1)) if gained > 0 else 0.0
    q_high = float(stats.beta.ppf(1 - tail, gained + 1, lost)) if lost > 0 else 1.0
    return out | {"low": d / n * (2 * q_low - 1), "high": d / n * (2 * q_high - 1),
                  "p": float(stats.binomtest(gained, d, 0.5).pvalue)}


def mcnemar_pairs_needed(diff: float, discordant_share: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """Pairs needed for McNemar's test to detect a difference ``diff`` of paired success rates with ``power`` at
    two-sided level ``alpha`` when a share ``discordant_share`` (psi) of pairs changes (Connor 1987):
    ``n = (z_{1-alpha/2} sqrt(psi) + z_{power} sqrt(psi - diff^2))^2 / diff^2``. A 2-point gain when 12 % of
    episodes change: about 2,350 pairs (the interval's half-width +-0.02 needs only ~1,100: that is not power).
    ``|diff|`` cannot exceed psi (every discordant pair one way); outside ``0 < |diff| <= psi`` it is NaN."""
    if not (0 < abs(diff) <= discordant_share <= 1):
        return float("nan")
    z_a, z_b = stats.norm.ppf(1 - alpha / 2), stats.norm.ppf(power)
    return float((z_a * math.sqrt(discordant_share) + z_b * math.sqrt(discordant_share - diff**2)) ** 2 / diff**2)


def mcnemar_mde(n: int, discordant_share: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest difference :func:`mcnemar_pairs_needed` says ``n`` pairs detect at this share of changing
    pairs (the inverse of Connor's formula, solved numerically: the pairs needed fall as the difference grows).
    NaN when nothing changes, or when even a difference of psi (every changing pair one way) needs more pairs."""
    if not (n >= 1 and 0 < discordant_share <= 1):
        return float("nan")
    needed = lambda d: mcnemar_pairs_needed(d, discordant_share, alpha, power) - n
    if needed(discordant_share) > 0:
        return float("nan")
    return float(optimize.brentq(needed, 1e-9, discordant_share, xtol=1e-10))


# ---------------------------------------------------------------------------------------------- success rates
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
