"""Credit study, the statistics: per-run scalars, mean and 95% intervals over seeds, and a verdict per paper claim.

Cell intervals are Student-t intervals over seeds (``benchmarks.stats.mean_ci``). Methods of one (env, N) train
on the same seed ids, so a method difference is a *paired* interval over the per-seed differences, paired by the
seed id stored with each run (``benchmarks.stats``; misaligned cells are refused); differences across N are Welch.
All comparisons of a summary form one Holm family: a comparison *holds* when Holm rejects 0 on the claimed side,
is *contradicted* when Holm rejects it on the other side, and is otherwise *not significant* (right sign) or *not
supported* (wrong sign), with the minimum detectable effect stored beside it.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmarks.stats import (
    MisalignedCells,
    apply_holm,
    claim_verdict,
    mean_ci,
    paired_diff,
    paired_values,
    pearson,
    welch_diff,
)

# The two readings of ECPO's eq. eca_adv (issue 17): sigma_act as written, and the anchor's occurrence-level std
# (the scale App. C's bound is stated on). Compared head to head by summarize()'s "readings" entry.
PAPER_READING, ANCHOR_READING = "ecpo", "ecpo_anchor_scale"


def _segment(curve: Sequence[float], fraction: float, late: bool) -> np.ndarray:
    x = np.asarray(curve, dtype=float)
    k = max(2, round(len(x) * fraction))
    return x[-k:] if late else x[:k]


def run_metrics(run: dict[str, Any], early_fraction: float, late_fraction: float) -> dict[str, float]:
    """Per-run scalars: final success, late-stage reward std, diagnostics averaged over training."""
    c = run["curves"]

    def nanmean(x):
        x = np.asarray(x, dtype=float)
        return float(np.nanmean(x)) if np.isfinite(x).any() else float("nan")

    return {
        "final_success": float(run.get("final_success", c["eval_success"][-1])),
        "late_reward_std": float(np.std(_segment(c["train_return"], late_fraction, True), ddof=1)),
        "late_eval_std": float(np.std(_segment(c["eval_success"], late_fraction, True), ddof=1)),
        "late_eval_return_std": nanmean(_segment(c.get("eval_return_std", [float("nan")] * 2), late_fraction, True)),
        "final_best_prob": float(c["best_action_prob"][-1]) if c.get("best_action_prob") else float("nan"),
        "divergent_early": nanmean(_segment(c["divergent_fraction"], early_fraction, False)),
        "divergent_late": nanmean(_segment(c["divergent_fraction"], late_fraction, True)),
        "mean_rho": nanmean(c["mean_rho"]),
        "mean_rho_strict_valid": nanmean(c.get("mean_rho_strict_valid", [float("nan")])),
        "adv_range": nanmean(c["adv_range"]),
        "adv_std": nanmean(c["adv_std"]),
        "misranked": nanmean(c["misranked_fraction"]),
        "misranked_late": nanmean(_segment(c["misranked_fraction"], late_fraction, True)),
    }


def _cells_by_seed(runs: Sequence[dict[str, Any]], early: float, late: float) -> dict[tuple, dict[Any, dict]]:
    """(env, method, N) -> {seed: per-run scalars}; a seed twice in one cell is refused (it would pair twice)."""
    metrics: dict[tuple, dict[Any, dict[str, float]]] = {}
    for run in runs:
        cell = metrics.setdefault((run["env_name"], run["method"], run["group_size"]), {})
        if run["seed"] in cell:
            raise MisalignedCells(f"seed {run['seed']} appears twice in cell {run['env_name']} {run['method']} "
                                  f"N={run['group_size']}")
        cell[run["seed"]] = run_metrics(run, early, late)
    return metrics


def summarize(runs: Sequence[dict[str, Any]], protocol: dict[str, Any]) -> dict[str, Any]:
    """Table cells (mean, 95% CI per env x method x N, with the seeds), the verdict of every paper claim.

    Methods of one (env, N) share their seed ids, so method comparisons are paired by seed id (cells whose seeds
    differ are refused); comparisons across N are Welch (different runs). Every comparison of the summary (claims
    and the ECPO-readings section) is one Holm family."""
    early, late = float(protocol.get("early_fraction", 0.25)), float(protocol.get("late_fraction", 0.25))
    metrics = _cells_by_seed(runs, early, late)
    envs = sorted({k[0] for k in metrics}, key=lambda e: [x["name"] for x in protocol["envs"]].index(e))
    sizes = sorted({k[2] for k in metrics})
    methods = [m for m in protocol["methods"] if any(k[1] == m for k in metrics)]

    def col(env, method, n, name) -> dict[Any, float]:
        return {seed: m[name] for seed, m in metrics.get((env, method, n), {}).items()}

    cells = {}
    for env in envs:
        for method in methods:
            for n in sizes:
                if (env, method, n) not in metrics:
                    continue
                names = next(iter(metrics[(env, method, n)].values())).keys()
                cells[f"{env}|{method}|{n}"] = {name: mean_ci(list(col(env, method, n, name).values()))
                                                for name in names}
                cells[f"{env}|{method}|{n}"]["seeds"] = sorted(metrics[(env, method, n)], key=str)

    claims, family = [], []

    def add(claim_id, text, env, parts):
        claims.append({"id": claim_id, "claim": text, "env": env, "parts": parts})

    def part(label, n, metric, a, b, direction, result, seeds=None):
        entry = {"label": label, "N": n, "metric": metric, "a": a, "b": b, "direction": direction, **result}
        if seeds is not None:
            entry["seeds"] = seeds
        family.append(entry)
        return entry

    def compare(env, n, metric, a, b, direction, label):
        seeds, diffs = paired_values(col(env, a, n, metric), col(env, b, n, metric),
                                     label=f"{env} N={n} {a} vs {b} ({metric})")
        return part(label, n, metric, a, b, direction, paired_diff(diffs), seeds)

    for env in envs:
        has = lambda m: m in methods
        if has("gigpo_std"):
            parts = []
            for n in sizes:
                seeds, diffs = paired_values(col(env, "gigpo_std", n, "divergent_late"),
                                             col(env, "gigpo_std", n, "divergent_early"))
                parts.append(part("GiGPO divergent-anchor fraction, late - early", n, "divergent_late-early", "late",
                                  "early", +1, paired_diff(diffs), seeds))
            add("C1", "Divergent anchors become more frequent as training proceeds", env, parts)
        if has("gigpo_std") and has("ecpo") and env == "diagnostic":
            add("C2", "GiGPO over-rewards rare lucky actions (a truly worse action out-scores the best one at an "
                      "anchor more often than under ECPO)", env,
                [compare(env, n, "misranked", "gigpo_std", "ecpo", +1, "misranked-anchor fraction, GiGPO - ECPO")
                 for n in sizes])
        if has("gigpo_std") and has("ecpo"):
            add("C3", "ECPO beats GiGPO in final success at every group size N", env,
                [compare(env, n, "final_success", "ecpo", "gigpo_std", +1, "final success, ECPO - GiGPO")
                 for n in sizes])
            add("C5", "ECPO lowers late-stage oscillation vs GiGPO (late sigma: iteration-to-iteration std of "
                      "eval success)", env,
                [compare(env, n, "late_eval_std", "ecpo", "gigpo_std", -1, "late sigma, ECPO - GiGPO")
                 for n in sizes])
            add("C6", "ECPO lowers the advantage range vs GiGPO", env,
                [compare(env, n, "adv_range", "ecpo", "gigpo_std", -1, "advantage range, ECPO - GiGPO")
                 for n in sizes])
        if all(has(m) for m in ("gigpo_std", "ecpo", "ecpo_eca_only", "ecpo_vargate_only")):
            parts = []
            for n in sizes:
                for a, b, label in (("ecpo_eca_only", "gigpo_std", "ECA-only - GiGPO"),
                                    ("ecpo_vargate_only", "gigpo_std", "VarGate-only - GiGPO"),
                                    ("ecpo", "ecpo_eca_only", "ECPO - ECA-only"),
                                    ("ecpo", "ecpo_vargate_only", "ECPO - VarGate-only")):
                    parts.append(compare(env, n, "final_success", a, b, +1, f"final success, {label}"))
            add("C4", "ECA-only and VarGate-only each beat GiGPO, and ECPO beats both", env, parts)
        if has("ecpo") and len(sizes) >= 2:
            parts = []
            for small, large in itertools.pairwise(sizes):
                for name, what in (("mean_rho", "mean rho, all anchors"),
                                   ("mean_rho_strict_valid", "mean rho, StrictValid anchors")):
                    d = welch_diff(list(col(env, "ecpo", large, name).values()),
                                   list(col(env, "ecpo", small, name).values()))
                    parts.append(part(f"ECPO {what}, N={large} - N={small}", small, name, f"N={large}",
                                      f"N={small}", +1, d))
            add("C7", "VarGate's mean rho is lower at smaller N", env, parts)
    readings_parts = []
    if PAPER_READING in methods and ANCHOR_READING in methods:
        readings_parts = [{"env": env, **compare(env, n, "final_success", ANCHOR_READING, PAPER_READING, +1,
                                                 "final success, anchor scale - ECPO")} for env in envs for n in sizes]
        readings_parts += [{"env": env, **compare(env, n, "misranked", ANCHOR_READING, PAPER_READING, -1,
                                                  "misranked-anchor fraction, anchor scale - ECPO")}
                           for env in envs if env == "diagnostic" for n in sizes]
        family[-len(readings_parts):] = readings_parts  # the copies carrying "env" are the family's members
    apply_holm(family)
    for claim in claims:
        claim["verdict"] = claim_verdict([p["verdict"] for p in claim["parts"]])
    claims.sort(key=lambda c: (c["id"], envs.index(c["env"])))
    readings = reading_verdict(readings_parts) if readings_parts else None
    confounds = {}
    for env in envs:  # does a low late-stage std just mean a converged (successful) policy?
        rows = [m for (e, _, _), ms in metrics.items() if e == env for m in ms.values()]
        final = [m["final_success"] for m in rows]
        confounds[env] = {f"corr_final_success_{name}": pearson(final, [m[name] for m in rows])
                          for name in ("late_reward_std", "late_eval_std")}
    return {"envs": envs, "methods": methods, "group_sizes": sizes, "cells": cells, "claims": claims,
            "confounds": confounds, "readings": readings, "seeds": int(protocol["seeds"]),
            "comparisons": len(family), "same_as_grpo": same_as_grpo(runs), "quick": bool(protocol.get("quick", False))}


def same_as_grpo(runs: Sequence[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per env: in how many (N, seed) cells ECPO's eval curve equals GRPO's exactly (ECPO's gate never opened)."""
    curves = {(r["env_name"], r["method"], r["group_size"], r["seed"]): r["curves"]["eval_success"] for r in runs}
    out: dict[str, dict[str, int]] = {}
    for (env, method, n, seed), curve in curves.items():
        other = curves.get((env, "grpo", n, seed))
        if method == "ecpo" and other is not None:
            entry = out.setdefault(env, {"equal": 0, "total": 0})
            entry["total"] += 1
            entry["equal"] += int(np.allclose(curve, other, rtol=0, atol=1e-12, equal_nan=True))
    return out


def reading_verdict(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Which ECPO reading the comparisons favour, by the claims' own rule: a part counts for the anchor-scale
    reading when it *holds* (its interval lies on the anchor scale's better side of 0), for ``ecpo`` when it is
    *contradicted*; the rest are within noise. Favoured: the reading with significant parts when only one has
    any; "mixed" when both do; "cannot tell" when none is significant."""
    for_anchor = sum(p["verdict"] == "holds" for p in parts)
    for_paper = sum(p["verdict"] == "contradicted" for p in parts)
    favours = ("mixed" if for_anchor and for_paper else ANCHOR_READING if for_anchor else
               PAPER_READING if for_paper else "cannot tell")
    return {"parts": list(parts), "favours": favours, "for_anchor_scale": for_anchor, "for_ecpo": for_paper,
            "total": sum(p["verdict"] != "no data" for p in parts)}
