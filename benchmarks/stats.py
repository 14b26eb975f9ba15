"""The statistics of the benchmark reports, in one module. The protocol and the choices: docs/training.md ("How the
reports compute intervals"). In brief: methods of a study train on the same seeds, so their differences are paired by
the seed id stored with each value (never list position); the seed is the unit of a comparison of training
procedures; a report's comparisons are corrected together by Holm, with the MDE at Holm's first-step level by the
exact power of the test beside every null (the normal-approximation formula gives 0.75-0.79 power at these levels).
Paired binary outcomes are not t-tested: where few episodes change, that interval is too narrow.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from scipy import optimize, stats

ALPHA = 0.05
POWER = 0.8
MIN_UNITS_FOR_MDE = 5  # a t-based MDE from fewer units (df < 4) is not reported


class MisalignedCells(ValueError):
    """Two cells to be paired do not hold the same seed ids."""


def paired_values(a: Mapping[Any, float], b: Mapping[Any, float], *, label: str = "") -> tuple[list, np.ndarray]:
    """``(seeds, a[seed] - b[seed])`` over the seeds both cells (seed id -> value) hold, finite on both sides.
    Unequal seed sets are refused (:class:`MisalignedCells`: the cells did not run on the same seeds); a NaN on
    either side drops that seed's pair (a metric undefined for that batch)."""
    if set(a) != set(b):
        only_a, only_b = sorted(set(a) - set(b), key=str), sorted(set(b) - set(a), key=str)
        raise MisalignedCells(f"cannot pair {label or 'cells'}: seeds only in the first {only_a}, "
                              f"only in the second {only_b}")
    seeds = [s for s in sorted(a, key=str) if all(x is not None and math.isfinite(float(x)) for x in (a[s], b[s]))]
    return seeds, np.asarray([float(a[s]) - float(b[s]) for s in seeds], dtype=float)


def keyed(values: Sequence[float], seeds: Sequence[Any]) -> dict[Any, float]:
    """``{seed: value}`` from parallel lists; a repeated seed is refused (it would pair ambiguously)."""
    if len(values) != len(seeds):
        raise MisalignedCells(f"{len(values)} values for {len(seeds)} seeds")
    if len(set(seeds)) != len(seeds):
        raise MisalignedCells(f"repeated seed ids in {list(seeds)}")
    return dict(zip(seeds, values))


def t_power(effect: float, se: float, df: float, alpha: float = ALPHA) -> float:
    """The exact power of the two-sided t-test at level ``alpha`` against a true difference ``effect`` (standard
    error ``se``, ``df`` degrees of freedom): the noncentral t's mass beyond ``+-t_{1-alpha/2}``."""
    crit, shift = float(stats.t.ppf(1 - alpha / 2, df)), effect / se
    lower = float(stats.nct.cdf(-crit, df, shift))
    return float(stats.nct.sf(crit, df, shift)) + (lower if math.isfinite(lower) else 0.0)


def mde(se: float, df: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """The difference whose exact power (:func:`t_power`) at two-sided level ``alpha`` is ``power``. NaN below
    ``MIN_UNITS_FOR_MDE - 1`` degrees of freedom (docs/training.md, "Units") and where ``se`` is 0."""
    if not (df >= MIN_UNITS_FOR_MDE - 1 and math.isfinite(se) and se > 0):
        return float("nan")
    approx = float((stats.t.ppf(1 - alpha / 2, df) + stats.t.ppf(power, df)) * se)  # within a few % of the root
    return float(optimize.brentq(lambda d: t_power(d, se, df, alpha) - power, 0.5 * approx, 2 * approx, xtol=1e-12))


def seeds_for_mde(sd: float, target: float, alpha: float = ALPHA, power: float = POWER, fewest: int = 2) -> int:
    """The fewest seeds (at least ``fewest`` and ``MIN_UNITS_FOR_MDE``) whose paired t-test, with paired-difference
    SD ``sd``, has an MDE (:func:`mde`) of at most ``target``."""
    n = max(fewest, MIN_UNITS_FOR_MDE)
    while mde(sd / math.sqrt(n), n - 1, alpha, power) > target:
        n += 1
    return n


def _t_result(mean: float, se: float, df: float, n: int, sd: float, m: int) -> dict[str, float]:
    half = float(stats.t.ppf(0.975, df)) * se
    p = float(2 * stats.t.sf(abs(mean) / se, df)) if se > 0 else (0.0 if mean != 0 else 1.0)
    return {"diff": mean, "low": mean - half, "high": mean + half, "sd": sd, "se": se, "df": df, "n": n, "p": p,
            "mde": mde(se, df, ALPHA / max(1, m))}


_NO_DATA = dict.fromkeys(("low", "high", "sd", "se", "df", "p", "mde"), float("nan"))


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
    """Holm's step-down rejections (family-wise error ``alpha``): the adjusted p (:func:`holm_adjusted`) at most
    ``alpha``; NaN p-values are never rejected."""
    return [p <= alpha for p in holm_adjusted(p_values)]


def holm_adjusted(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (the k-th smallest p times ``m - k + 1``, made monotone, capped at 1);
    NaN stays NaN and does not count in ``m``."""
    order = sorted((p, i) for i, p in enumerate(p_values) if math.isfinite(p))
    m, running = len(order), 0.0
    adjusted = [float("nan")] * len(p_values)
    for rank, (p, i) in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted


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
    """Holm-correct a report's comparisons in place: each part gets ``holm_significant``, ``p_holm``, ``m`` (the
    comparisons corrected together), its ``verdict`` and the MDE at Holm's first-step level."""
    p_values = [p.get("p", float("nan")) for p in parts]
    m = sum(math.isfinite(p) for p in p_values)
    for k, (part, flag, adjusted) in enumerate(zip(parts, holm(p_values), holm_adjusted(p_values))):
        direction = directions[k] if directions is not None else int(part.get("direction", 1))
        part["holm_significant"], part["p_holm"], part["m"] = bool(flag), adjusted, m
        part["mde"] = detectable(part, ALPHA / max(1, m))
        part["verdict"] = verdict(part, direction, flag)
    return parts


def detectable(part: Mapping[str, Any], alpha: float = ALPHA) -> float:
    """The MDE of one comparison at two-sided level ``alpha``: McNemar's (:func:`mcnemar_mde`) for paired
    binary outcomes (a part with ``gained`` / ``lost`` / ``episodes``), the t-based :func:`mde` otherwise."""
    if "gained" in part:
        return mcnemar_mde(part["episodes"], (part["gained"] + part["lost"]) / max(1, part["episodes"]), alpha)
    return mde(part.get("se", float("nan")), part.get("df", float("nan")), alpha)


def _excludes_zero(part: Mapping[str, Any]) -> bool:
    low, high = part.get("low"), part.get("high")
    return low is not None and high is not None and (low > 0 or high < 0)


def holm_p_text(part: Mapping[str, Any]) -> str:
    """``Holm-adjusted p 0.030`` beside an unadjusted 95 % interval that excludes 0 (``p 0.070`` in a family of one):
    the figure the verdict rests on. Empty where the interval holds 0 or the part has no ``p_holm``."""
    p_holm = part.get("p_holm")
    if p_holm is None or not math.isfinite(p_holm) or not _excludes_zero(part):
        return ""
    name = "p" if part.get("m") == 1 else "Holm-adjusted p"
    return f"{name} < 0.001" if p_holm < 0.001 else f"{name} {p_holm:.3f}"


def holm_miss_text(part: Mapping[str, Any]) -> str:
    """``p 0.041 misses Holm's level, Holm-adjusted p 0.287`` where an unadjusted 95 % interval excludes 0 while
    Holm keeps the null; empty otherwise."""
    if part.get("holm_significant", True) or not _excludes_zero(part):
        return ""
    adjusted = holm_p_text(part)
    return f"p {part.get('p', float('nan')):.3f} misses Holm's level" + (f", {adjusted}" if adjusted else "")


def mde_text(part: Mapping[str, Any], digits: int = 3) -> str:
    """``MDE 0.117``, ``no MDE (3 seeds)`` (too few units; ``part["unit"]``, default seeds), ``no MDE (7 of 96
    changed)`` (too few paired outcomes changed for 80 % power), or empty (no data, none changed)."""
    if math.isfinite(part.get("mde", float("nan"))):
        return f"MDE {part['mde']:.{digits}f}"
    if "gained" in part and part["gained"] + part["lost"]:  # so few changed that no difference has 80 % power
        return f"no MDE ({part['gained'] + part['lost']} of {part['episodes']} changed)"
    n = part.get("n", 0)
    if "gained" not in part and 0 < n < MIN_UNITS_FOR_MDE:
        return f"no MDE ({n} {part.get('unit', 'seeds')})"
    return ""


def fmt_part(part: Mapping[str, Any], digits: int = 3) -> str:
    """``+d [low, high]`` with Holm's adjusted p beside it (:func:`holm_p_text`) and, when not significant, the
    MDE or why there is none."""
    if not math.isfinite(part.get("diff", float("nan"))):
        return "n/a"
    if not math.isfinite(part.get("low", float("nan"))):
        return f"{part['diff']:+.{digits}f} (n = {part.get('n', 0)}: no interval)"
    text = f"{part['diff']:+.{digits}f} [{part['low']:+.{digits}f}, {part['high']:+.{digits}f}]"
    beside = [holm_p_text(part)] + ([mde_text(part, digits)] if not part.get("holm_significant") else [])
    if beside := "; ".join(b for b in beside if b):
        text += f" ({beside})"
    return text


def fmt_clustered(part: Mapping[str, Any], digits: int = 3) -> str:
    """``[low, high] (16 tasks, design effect 1.48)``: the task-clustered interval (empty where none)."""
    c = part.get("clustered")
    if not c:
        return ""
    return (f"[{c['low']:+.{digits}f}, {c['high']:+.{digits}f}] ({c['clusters']} {c.get('unit', 'task')}s, "
            f"design effect {c['design_effect']:.2f})")


def claim_verdict(status: Sequence[str]) -> str:
    """A claim over its parts' verdicts: *holds* (every part), *contradicted* (some, none holds), *mixed* (both),
    *partly holds* (some hold, none contradicted), *not shown* when no part is significant (a null at this power
    does not say the effect is absent). Parts marked ``saturated`` do not count."""
    status = [s for s in status if s != "saturated"]
    if status and all(s == "holds" for s in status):
        return "holds"
    if any(s == "contradicted" for s in status):
        return "mixed" if any(s == "holds" for s in status) else "contradicted"
    return "partly holds" if any(s == "holds" for s in status) else "not shown"


# ------------------------------------------------------------------------------------------ paired episodes
def paired_outcomes(before: Mapping[Any, Any], after: Mapping[Any, Any], *, label: str = "",
                    task_of: Callable[[Any], Any] | None = None) -> dict[str, Any]:
    """Two validations' binary outcomes paired episode by episode (``key -> won``; the keys must match):
    :func:`paired_binary` of ``after - before`` and, where ``task_of(key)`` names each episode's task, some task
    repeats and there are two tasks or more, the task-clustered interval (``clustered``)."""
    if set(before) != set(after):
        raise MisalignedCells(f"cannot pair {label or 'validations'}: {len(set(before) ^ set(after))} episodes "
                              "are in only one of them (pair only the same validation)")
    keys = sorted(before, key=str)
    diffs = [int(bool(after[k])) - int(bool(before[k])) for k in keys]
    both_won = sum(1 for k in keys if after[k] and before[k])
    out = paired_binary(diffs.count(1), diffs.count(-1), len(keys), both_won=both_won)
    if task_of is not None:
        tasks = [task_of(k) for k in keys]
        if 2 <= len(set(tasks)) < len(tasks):
            out["clustered"] = clustered(diffs, tasks)
    return out


def paired_binary(gained: int, lost: int, n: int, *, both_won: int | None = None,
                  level: float = 1 - ALPHA) -> dict[str, Any]:
    """``(gained - lost) / n`` of a paired 2x2 table (``gained`` pairs went 0 -> 1, ``lost`` 1 -> 0) with the fields
    docs/training.md names (McNemar's ``p`` is 1 when none changed); ``se``/``df`` are NaN."""
    if not (0 <= gained and 0 <= lost and gained + lost <= n and n >= 1):
        raise ValueError(f"discordant counts {gained} gained, {lost} lost do not fit {n} pairs")
    d = gained + lost
    low, high = tango(gained, lost, n, level)
    out = {"diff": (gained - lost) / n, "gained": int(gained), "lost": int(lost), "episodes": int(n), "n": int(n),
           "discordant_share": d / n, "se": float("nan"), "df": float("nan"), "sd": float("nan"),
           "low": low, "high": high, "interval": "Tango score",
           "p": float(stats.binomtest(gained, d, 0.5).pvalue) if d else 1.0}
    if both_won is not None:
        out["both_won"] = int(both_won)
        out["newcombe_low"], out["newcombe_high"] = newcombe_paired(both_won, gained, lost, n, level)
    return out | {"mde": mcnemar_mde(n, d / n)}


def _tango_z(delta: np.ndarray, b: np.ndarray, c: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Tango's score statistic of ``(b - c) / n = delta``, the variance of ``b - c`` at the restricted MLE of the
    0 -> 1 cell's probability (the root of ``2 n q^2 + w q - c delta (1 - delta) = 0``)."""
    w = -b - c + (2 * n - b + c) * delta
    q = (-w + np.sqrt(np.maximum(w * w + 8 * n * c * delta * (1 - delta), 0.0))) / (4 * n)
    var = n * (2 * q + delta * (1 - delta))
    num = b - c - n * delta
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(var > 0, num / np.sqrt(np.where(var > 0, var, 1.0)),
                        np.where(num == 0, 0.0, np.sign(num) * np.inf))


def _tango_bounds(b: Any, c: Any, n: Any, z: Any) -> tuple[np.ndarray, np.ndarray]:
    """Both ends of Tango's interval by bisection, vectorised: the statistic falls as delta grows, so ``low`` solves
    Z = z on [-1, estimate], ``high`` Z = -z on [estimate, 1]. 60 halvings leave an error below 1e-17."""
    b, c, n, z = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (b, c, n, z)))
    estimate = (b - c) / n
    ends = []
    for lo, hi, target in ((np.full_like(b, -1.0), estimate, z), (estimate, np.full_like(b, 1.0), -z)):
        lo, hi = lo.copy(), hi.copy()
        for _ in range(60):
            mid = (lo + hi) / 2
            above = _tango_z(mid, b, c, n) > target
            lo, hi = np.where(above, mid, lo), np.where(above, hi, mid)
        ends.append((lo + hi) / 2)
    return ends[0], ends[1]


def tango(gained: Any, lost: Any, n: Any, level: float = 1 - ALPHA) -> tuple[Any, Any]:
    """Tango's (1998) score interval for ``(gained - lost) / n``: every delta whose score statistic lies within the
    normal quantile; inside [-1, 1], ``±z^2 / (n + z^2)`` with no changed pair. Arrays in, arrays out."""
    low, high = _tango_bounds(gained, lost, n, stats.norm.ppf(1 - (1 - level) / 2))
    return (float(low), float(high)) if low.ndim == 0 else (low, high)


def newcombe_paired(both_won: int, gained: int, lost: int, n: int, level: float = 1 - ALPHA) -> tuple[float, float]:
    """Newcombe's (1998) hybrid score interval, method 10: the two marginal rates' Wilson intervals combined with
    their correlation phi (shrunk to 0 for ``0 <= ad - bc <= n/2``); p1 = (both + gained) / n."""
    z = float(stats.norm.ppf(1 - (1 - level) / 2))
    both_lost = n - both_won - gained - lost
    p1, p2 = (both_won + gained) / n, (both_won + lost) / n

    def wilson(p: float) -> tuple[float, float]:  # Wilson's score interval of a rate p over the n pairs
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return centre - half, centre + half

    (l1, u1), (l2, u2) = wilson(p1), wilson(p2)
    margins = (both_won + gained) * (lost + both_lost) * (both_won + lost) * (gained + both_lost)
    a = both_won * both_lost - gained * lost
    phi = 0.0
    if margins > 0:
        phi = (a - n / 2) / math.sqrt(margins) if a > n / 2 else (a / math.sqrt(margins) if a < 0 else 0.0)
    diff = p1 - p2
    return (diff - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2)),
            diff + math.sqrt((p2 - l2) ** 2 + (u1 - p1) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1)))


def design_effect(diffs: Sequence[float], tasks: Sequence[Any]) -> float:
    """docs/training.md's design effect, ``G/(G-1) sum_k (S_k - n_k dbar)^2 / n^2`` over the independent variance; 1
    with one episode per task or no pair differing, and floored at 1 (disagreeing tasks earn no narrower interval)."""
    d = np.asarray(diffs, dtype=float)
    index = {t: i for i, t in enumerate(dict.fromkeys(tasks))}
    labels = np.asarray([index[t] for t in tasks])
    g, n = len(index), len(d)
    resid = d - d.mean()
    independent = float((resid**2).sum()) / (n * (n - 1)) if n > 1 else 0.0
    if independent <= 0 or g < 2:
        return 1.0
    by_task = np.bincount(labels, weights=resid, minlength=g)
    return max(1.0, g / (g - 1) * float((by_task**2).sum()) / n**2 / independent)


def clustered(diffs: Sequence[int], tasks: Sequence[Any], level: float = 1 - ALPHA) -> dict[str, Any]:
    """The task-clustered interval of a paired difference (``diffs`` in {-1, 0, 1}, ``tasks`` the task of each), as
    docs/training.md describes it. Chosen over a cluster bootstrap: it needs no seed, keeps the score interval's
    range and asymmetry, and a bootstrap over 4 or 16 tasks is too coarse to trust. ``mde`` at the effective n."""
    gained, lost, n = list(diffs).count(1), list(diffs).count(-1), len(diffs)
    g = len(set(tasks))
    deff = design_effect(diffs, tasks)
    z = float(stats.t.ppf(1 - (1 - level) / 2, max(g - 1, 1)))
    low, high = _tango_bounds(gained / deff, lost / deff, n / deff, z)
    return {"unit": "task", "clusters": g, "design_effect": deff, "low": float(low), "high": float(high),
            "mde": mcnemar_mde(n / deff, (gained + lost) / n)}


def mcnemar_pairs_needed(diff: float, discordant_share: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """Pairs needed to detect ``diff`` with ``power`` when a share ``discordant_share`` (psi) of pairs changes, by
    Connor's (1987) formula ``(z_{1-alpha/2} sqrt(psi) + z_{power} sqrt(psi - diff^2))^2 / diff^2`` (for planning:
    a 2-point gain when 12 % change needs about 2,350 pairs). NaN outside ``0 < |diff| <= psi``."""
    if not (0 < abs(diff) <= discordant_share <= 1):
        return float("nan")
    z_a, z_b = stats.norm.ppf(1 - alpha / 2), stats.norm.ppf(power)
    return float((z_a * math.sqrt(discordant_share) + z_b * math.sqrt(discordant_share - diff**2)) ** 2 / diff**2)


def mcnemar_power(diff: float, n: float, discordant_share: float, alpha: float = ALPHA) -> float:
    """The exact power of Tango's interval over ``n`` pairs (rounded), a share psi of which changes (docs/training.md):
    it excludes 0 exactly where ``|gained - lost| > z sqrt(gained + lost)``. NaN outside ``0 < |diff| <= psi <= 1``."""
    n = int(round(n))
    if not (n >= 1 and 0 < abs(diff) <= discordant_share <= 1):
        return float("nan")
    z = float(stats.norm.ppf(1 - alpha / 2))
    k = np.arange(n + 1)
    weight = stats.binom.pmf(k, n, discordant_share)
    gain = (discordant_share + abs(diff)) / (2 * discordant_share)
    above = np.floor((k + z * np.sqrt(k)) / 2)  # more gains than this (or fewer than ``below``) is a detection
    below = np.ceil((k - z * np.sqrt(k)) / 2) - 1
    detected = stats.binom.sf(above, k, gain) + np.where(below >= 0, stats.binom.cdf(below, k, gain), 0.0)
    return float(np.sum(weight * detected))


def mcnemar_mde(n: float, discordant_share: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest true difference that ``n`` pairs, a share psi of which changes, detect with ``power`` by the
    exact power (:func:`mcnemar_power`). NaN when nothing changes, or when even a difference of psi falls short."""
    if not (n >= 1 and 0 < discordant_share <= 1):
        return float("nan")
    short = lambda d: mcnemar_power(d, n, discordant_share, alpha) - power
    if short(discordant_share) < 0:
        return float("nan")
    return float(optimize.brentq(short, 1e-9, discordant_share, xtol=1e-10))


def mde_from_none_won(n: int, alpha: float = ALPHA, power: float = POWER) -> tuple[int, float]:
    """For ``n`` pairs whose first side won none (``gained ~ Binomial(n, d)``): the fewest gains that are shown
    (Tango's interval above 0, McNemar's p below ``alpha``) and the smallest ``d`` reaching them with ``power``."""
    shown = lambda part: part["low"] > 0 and part["p"] < alpha
    fewest = next((k for k in range(1, n + 1) if shown(paired_binary(k, 0, n, level=1 - alpha))), None)
    if fewest is None:
        return n + 1, float("nan")
    return fewest, float(optimize.brentq(lambda d: stats.binom.sf(fewest - 1, n, d) - power, 1e-12, 1 - 1e-12))


# ------------------------------------------------------------------------------- cells and independent rates
def nanmean(x: Sequence[float]) -> float:
    """``np.nanmean``, NaN (without numpy's warning) where no value is finite."""
    x = np.asarray(x, dtype=float)
    return float(np.nanmean(x)) if np.isfinite(x).any() else float("nan")


def t975(df: int) -> float:
    """Two-sided 95% Student-t quantile with ``df`` degrees of freedom (NaN below 1)."""
    return float(stats.t.ppf(0.975, df)) if df >= 1 else float("nan")


def mean_ci(values: Sequence[float]) -> dict[str, float]:
    """Mean and 95% t-interval half-width over seeds (NaNs dropped)."""
    x = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    if len(x) == 0:
        return {"mean": float("nan"), "ci": float("nan"), "n": 0}
    half = t975(len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)) if len(x) > 1 else float("nan")
    return {"mean": float(x.mean()), "ci": float(half), "n": len(x)}


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson correlation over the pairs where both are finite (NaN when undefined)."""
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = np.isfinite(a) & np.isfinite(b)
    a, b = a[keep], b[keep]
    if len(a) < 3 or a.std() == 0 or b.std() == 0:
        return float("nan")
    return float(np.corrcoef(a, b)[0, 1])


def ratio_of_means(a: Sequence[float], b: Sequence[float], level: float = 1 - ALPHA) -> dict[str, float]:
    """``mean(a) / mean(b)`` of two independent samples with Fieller's interval (Welch-Satterthwaite df; NaN ends
    when ``mean(b)`` is not clearly above 0) and the Mann-Whitney p."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    mx, my = float(x.mean()), float(y.mean())
    vx, vy = x.var(ddof=1) / len(x), y.var(ddof=1) / len(y)
    df = (vx + vy) ** 2 / (vx**2 / (len(x) - 1) + vy**2 / (len(y) - 1)) if vx + vy > 0 else float(len(x) + len(y) - 2)
    t = float(stats.t.ppf(1 - (1 - level) / 2, df))
    g = t * t * vy / (my * my)
    out = {"ratio": mx / my, "low": float("nan"), "high": float("nan"), "n_a": len(x), "n_b": len(y), "df": df,
           "p": float(stats.mannwhitneyu(x, y, alternative="two-sided").pvalue)}
    if g < 1:
        centre = mx / my
        half = t / my * math.sqrt(vx + centre * centre * vy - g * vx)
        out["low"], out["high"] = (centre - half) / (1 - g), (centre + half) / (1 - g)
    return out
