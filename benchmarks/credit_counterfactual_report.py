"""Counterfactual credit updates, the statistics and the report: paired comparisons against gigpo_std per
(arm, concentration), Holm-corrected across the whole report, each with its paired SD, 95 % interval and MDE."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from paired_stats import apply_holm, fmt_part, keyed, paired_diff, paired_values

BASELINE = "gigpo_std"
METRICS = ("delta_j", "lucky", "lucky_sv", "rare_sv", "term_lucky")
# (claim id, text, metric, estimators tested against gigpo_std, direction of the claim)
CLAIMS = (
    ("B1", "At a lucky singleton, one update raises log pi(rare|s) less than GiGPO w/std's (App. C's bound)",
     "lucky", ("ecpo", "ecpo_anchor_scale", "ecpo_eca_only", "ecpo_anchor_scale_eca_only"), -1),
    ("B2", "One update improves exact success J more than GiGPO w/std's", "delta_j",
     ("ecpo", "ecpo_anchor_scale", "ecpo_eca_only", "ecpo_anchor_scale_eca_only"), +1),
    ("R", "Reference: GRPO (no step term) against GiGPO w/std", "lucky", ("grpo",), -1),
    ("R", "Reference: GRPO (no step term) against GiGPO w/std", "delta_j", ("grpo",), +1),
)
SCALE = {"delta_j": 1000.0}  # one update moves exact success by ~1e-3..1e-6: shown in thousandths
LABELS = {"delta_j": "Delta J x 1000 (exact success, T=0.4)", "lucky": "Delta log pi(rare|s), lucky singletons",
          "lucky_sv": "Delta log pi(rare|s), StrictValid lucky singletons",
          "rare_sv": "Delta log pi(a|s), every non-good door at StrictValid anchors",
          "term_lucky": "step term at the lucky singleton's row"}


def column(batches: Sequence[dict[str, Any]], estimator: str, metric: str) -> dict[Any, float]:
    """``{batch seed: value}`` of one estimator's metric (pairing is by these seed ids)."""
    return keyed([b["estimators"][estimator][metric] for b in batches], [b["seed"] for b in batches])


def cell_mean(values: dict[Any, float]) -> dict[str, float]:
    x = np.asarray([v for v in values.values() if math.isfinite(v)], dtype=float)
    if len(x) < 2:
        return {"mean": float(x.mean()) if len(x) else float("nan"), "sd": float("nan"), "n": len(x)}
    return {"mean": float(x.mean()), "sd": float(x.std(ddof=1)), "n": len(x)}


def summarize(arms: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per (arm, concentration): each estimator's mean of every metric, and the paired comparisons vs gigpo_std
    (Holm-corrected over every comparison of the report); a verdict per claim."""
    cells, parts = {}, []
    for arm, data in arms.items():
        for level in data["checkpoints"]:
            key = f"{level['target']:.2f}"
            batches = data["batches"].get(key, [])
            if not batches:
                continue
            estimators = list(batches[0]["estimators"])
            cells[f"{arm}|{key}"] = {
                "K": len(batches), "concentration": level["concentration"], "exact_success": level["exact_success"],
                "iteration": level["iteration"],
                "batches_with_lucky": int(sum(b["n_lucky"] > 0 for b in batches)),
                "lucky_per_batch": float(np.mean([b["n_lucky"] for b in batches])),
                "rollout_success": float(np.mean([b["success"] for b in batches])),
                "estimators": {e: {m: cell_mean(column(batches, e, m)) for m in METRICS} for e in estimators}}
            for claim_id, _text, metric, tested, direction in CLAIMS:
                for estimator in tested:
                    if estimator not in estimators or BASELINE not in estimators:
                        continue
                    seeds, diffs = paired_values(column(batches, estimator, metric), column(batches, BASELINE, metric),
                                                 label=f"{arm} {key} {estimator} vs {BASELINE} {metric}")
                    parts.append({"claim": claim_id, "arm": arm, "target": key, "metric": metric, "a": estimator,
                                  "b": BASELINE, "direction": direction, "seeds": seeds, **paired_diff(diffs)})
    apply_holm(parts)
    claims = []
    for claim_id, text, metric, _tested, _direction in CLAIMS:
        mine = [p for p in parts if p["claim"] == claim_id and p["metric"] == metric]
        if not mine or claim_id == "R":
            continue
        by_estimator = {}
        for estimator in sorted({p["a"] for p in mine}):
            status = [p["verdict"] for p in mine if p["a"] == estimator]
            by_estimator[estimator] = overall(status)
        claims.append({"id": claim_id, "claim": text, "metric": metric, "verdicts": by_estimator})
    return {"cells": cells, "comparisons": parts, "claims": claims, "m": len(parts)}


def overall(status: Sequence[str]) -> str:
    if status and all(s == "holds" for s in status):
        return "holds"
    if any(s == "contradicted" for s in status):
        return "contradicted" if not any(s == "holds" for s in status) else "mixed"
    return "partly holds" if any(s == "holds" for s in status) else "not shown"


def render(summary: dict[str, Any], protocol: dict[str, Any], runtime_s: float) -> str:
    quick = "QUICK SMOKE RUN (tiny budget, not evidence)" if protocol.get("quick") else "committed protocol"
    lines = [
        "# Counterfactual credit updates: ECPO vs GiGPO on identical batches", "",
        (f"Run: **{quick}**, {runtime_s / 60:.1f} min of arm time (arms run side by side, niced, on a shared 2-core "
         "machine); written by `benchmarks/credit_counterfactual.py`"
         f"{' --quick' if protocol.get('quick') else ''} (raw per-batch records in the JSON next to this file)."), "",
        ("Protocol: each arm (a policy on a corridor whose good door itself sometimes fails) is trained with GRPO by "
         "the native `Trainer`, which saves a checkpoint (weights, AdamW state, RNGs) the first time the mean "
         "pi(good door | room) at T = 1 reaches each target (an arm whose protocol says `reach: supervised` gets "
         "there by supervised steps toward the good door, then clears AdamW's moments and settles with GRPO "
         "iterations before saving; see the notes). From each checkpoint, K rollout batches are drawn, each "
         "with its own seed; on every batch each estimator computes its advantages (`compute_advantages`) and ONE "
         "update is applied from the same weights and optimizer state with the same shuffle seed "
         "(`Trainer.update_policy` -> `policy_update`). Every metric is therefore paired by batch seed across "
         "estimators. Intervals are 95 % paired t-intervals over batches; verdicts use Holm's correction across all "
         f"{summary['m']} comparisons of this report (family-wise alpha 0.05); MDE = the paired difference detectable "
         "with 80 % power at Holm's first-step level, printed beside every result that is not significant."), ""]
    lines += ["## Verdicts", "", "| Claim | " + " | ".join(_estimators(summary)) + " |",
              "|---|" + "---|" * len(_estimators(summary))]
    for claim in summary["claims"]:
        lines.append(f"| {claim['id']}: {claim['claim']} | "
                     + " | ".join(claim["verdicts"].get(e, "—") for e in _estimators(summary)) + " |")
    lines += ["", ("A claim *holds* for an estimator when every (arm, concentration) comparison is Holm-significant "
                   "on the claimed side, *partly holds* when some are and none contradicts, *contradicted* when "
                   "significant ones lie on the other side, and is *not shown* when none is significant."), ""]
    for cell_key, cell in summary["cells"].items():
        arm, target = cell_key.split("|")
        lines += [f"## {arm}, pi(good) target {target}", "",
                  (f"Checkpoint at GRPO iteration {cell['iteration']}: mean pi(good) = {cell['concentration']:.3f}, "
                   f"exact success {cell['exact_success']:.3f}. K = {cell['K']} batches (rollout success "
                   f"{cell['rollout_success']:.3f}); {cell['batches_with_lucky']} hold a lucky singleton "
                   f"({cell['lucky_per_batch']:.2f} per batch)."), "",
                  "| estimator | " + " | ".join(LABELS[m] for m in METRICS) + " |", "|---|" + "---|" * len(METRICS)]
        for estimator, metrics in cell["estimators"].items():
            lines.append(f"| {estimator} | " + " | ".join(_mean_text(metrics[m], m) for m in METRICS) + " |")
        lines += ["", "Paired against gigpo_std (estimator − gigpo_std, per batch):", "",
                  "| comparison | n | paired SD | difference [95% CI] | Holm verdict |", "|---|---|---|---|---|"]
        for part in summary["comparisons"]:
            if part["arm"] == arm and part["target"] == target:
                shown = _scaled(part, SCALE.get(part["metric"], 1.0))
                lines.append(f"| {part['a']}: {LABELS[part['metric']]} | {part['n']} | {shown['sd']:.3f} | "
                             f"{fmt_part(shown, 3)} | {part['verdict']} |")
        lines.append("")
    lines += ["## Arms", ""]
    for name, arm in protocol["arms"].items():
        lines.append(f"- **{name}**: {arm['policy']} policy on `{arm['env_id']}` {arm['env_kwargs']}, trainer settings "
                     f"{arm['config']}, K = {arm['K']} batches per checkpoint, targets {arm['targets']}"
                     + (f", reached by supervised steps at lr {arm.get('reach_lr')} then {arm.get('settle', 0)} GRPO "
                        "iterations" if arm.get("reach") == "supervised" else ", reached by GRPO") + ".")
    lines += ["", *[f"- {note}" for note in protocol.get("notes", [])], ""]
    return "\n".join(lines)


def _estimators(summary: dict[str, Any]) -> list[str]:
    return sorted({e for c in summary["claims"] for e in c["verdicts"]})


def _scaled(part: dict[str, Any], scale: float) -> dict[str, Any]:
    return part | {k: part[k] * scale for k in ("diff", "low", "high", "sd", "mde") if k in part}


def _mean_text(cell: dict[str, float], metric: str) -> str:
    if not math.isfinite(cell["mean"]):
        return "n/a"
    return f"{cell['mean'] * SCALE.get(metric, 1.0):+.3f} (n={cell['n']})"
