"""Counterfactual credit updates, the statistics and the report: each estimator against GiGPO w/std per checkpoint
(paired over its batches) and, from ``MIN_CHECKPOINTS`` checkpoints per cell, over checkpoints; saturated cells are
not judged (the rules: docs/credit_experiments.md, "Counterfactual updates")."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmarks.credit_counterfactual_claim import claim_lines
from benchmarks.stats import apply_holm, claim_verdict, fmt_part, keyed, nanmean, paired_diff, paired_values

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
MIN_CHECKPOINTS = 3  # verdicts over checkpoints (the checkpoint as the unit) from this many checkpoints per cell
SATURATED_SUCCESS = 0.9  # exact success at or above this: little left for one update to move
DELTA_J_FLOOR = 5e-4  # GiGPO w/std's own |Delta J| below this (0.05 points of success): differences are ~1e-5 or less


def column(batches: Sequence[dict[str, Any]], estimator: str, metric: str) -> dict[Any, float]:
    """``{batch seed: value}`` of one estimator's metric (pairing is by these seed ids)."""
    return keyed([b["estimators"][estimator][metric] for b in batches], [b["seed"] for b in batches])


def cell_mean(values: dict[Any, float]) -> dict[str, float]:
    x = np.asarray([v for v in values.values() if math.isfinite(v)], dtype=float)
    return {"mean": float(x.mean()) if len(x) else float("nan"), "sd": float(x.std(ddof=1)) if len(x) > 1 else float("nan"),
            "n": len(x)}


def checkpoint_cell(level: dict[str, Any], batches: Sequence[dict[str, Any]], seed: int) -> dict[str, Any]:
    """One checkpoint of a cell: where it stands and each estimator's mean of every metric over its batches."""
    estimators = list(batches[0]["estimators"])
    return {"checkpoint_seed": seed, "K": len(batches), "concentration": level["concentration"],
            "exact_success": level["exact_success"], "iteration": level["iteration"],
            "batches_with_lucky": int(sum(b["n_lucky"] > 0 for b in batches)),
            "lucky_per_batch": float(np.mean([b["n_lucky"] for b in batches])),
            "rollout_success": float(np.mean([b["success"] for b in batches])),
            "estimators": {e: {m: cell_mean(column(batches, e, m)) for m in METRICS} for e in estimators}}


def saturation(checkpoints: Sequence[dict[str, Any]]) -> str:
    """Why a cell is saturated ("" when it is not): its mean exact success, or GiGPO w/std's own mean |Delta J|."""
    success = float(np.mean([c["exact_success"] for c in checkpoints]))
    own = [c["estimators"].get(BASELINE, {}).get("delta_j", {}).get("mean", float("nan")) for c in checkpoints]
    own_dj = abs(nanmean(own))
    if success >= SATURATED_SUCCESS:
        return f"exact success {success:.3f} >= {SATURATED_SUCCESS}"
    if math.isfinite(own_dj) and own_dj < DELTA_J_FLOOR:
        return f"GiGPO w/std's own |Delta J| {own_dj:.1e} < {DELTA_J_FLOOR:.0e}"
    return ""


def relative(diff: float, own: float) -> float:
    """A difference as a fraction of the baseline's own effect on the metric (NaN when that effect is 0)."""
    return diff / abs(own) if own and math.isfinite(own) else float("nan")


def summarize(arms: dict[str, Any]) -> dict[str, Any]:
    """Per (arm, concentration) cell, each checkpoint's estimator means and paired comparisons vs gigpo_std, the
    comparisons over checkpoints (:func:`over_checkpoints`), and a verdict per claim on the ``verdict_unit``."""
    cells, parts = {}, []
    for arm, records in arms.items():
        for record in records:  # one per checkpoint seed
            seed = int(record["protocol"]["checkpoint_seed"])
            for level in record["checkpoints"]:
                key = f"{level['target']:.2f}"
                if not (batches := record["batches"].get(key)):
                    continue
                cell = cells.setdefault(f"{arm}|{key}", {"arm": arm, "target": key, "checkpoints": []})
                cell["checkpoints"].append(checkpoint_cell(level, batches, seed))
                estimators = list(batches[0]["estimators"])
                for claim_id, _text, metric, tested, direction in CLAIMS:
                    for estimator in tested:
                        if estimator not in estimators or BASELINE not in estimators:
                            continue
                        pair_seeds, diffs = paired_values(column(batches, estimator, metric),
                                                          column(batches, BASELINE, metric),
                                                          label=f"{arm} {key} ckpt{seed} {estimator} vs {BASELINE} {metric}")
                        own = cell["checkpoints"][-1]["estimators"][BASELINE][metric]["mean"]
                        part = paired_diff(diffs)
                        parts.append({"claim": claim_id, "arm": arm, "target": key, "checkpoint_seed": seed,
                                      "metric": metric, "a": estimator, "b": BASELINE, "direction": direction,
                                      "seeds": pair_seeds, "unit": "batches", **part,
                                      "relative": relative(part["diff"], own)})
    for cell in cells.values():
        cell["checkpoints"].sort(key=lambda c: c["checkpoint_seed"])
        cell["saturated"] = saturation(cell["checkpoints"])
    judged = [p for p in parts if not cells[f"{p['arm']}|{p['target']}"]["saturated"]]
    apply_holm(judged)
    for part in parts:
        if cells[f"{part['arm']}|{part['target']}"]["saturated"]:
            part |= {"verdict": "saturated", "holm_significant": False, "mde": float("nan")}
    over = over_checkpoints(cells, judged)
    unit = "checkpoints" if over and all(len(c["checkpoints"]) >= MIN_CHECKPOINTS for c in cells.values()
                                         if not c["saturated"]) else "batches"
    basis = over if unit == "checkpoints" else parts
    claims = []
    for claim_id, text, metric, _tested, _direction in CLAIMS:
        mine = [p for p in basis if p["claim"] == claim_id and p["metric"] == metric]
        if not mine or claim_id == "R":
            continue
        verdicts = {e: claim_verdict([p["verdict"] for p in mine if p["a"] == e]) for e in sorted({p["a"] for p in mine})}
        claims.append({"id": claim_id, "claim": text, "metric": metric, "verdicts": verdicts})
    return {"cells": cells, "comparisons": parts, "over_checkpoints": over, "claims": claims, "m": len(judged),
            "m_over": len(over), "verdict_unit": unit,
            "checkpoints_per_cell": sorted({len(c["checkpoints"]) for c in cells.values()})}


def over_checkpoints(cells: dict[str, Any], judged: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per unsaturated cell of ``MIN_CHECKPOINTS``+ checkpoints, per (estimator, metric): the comparison with the
    checkpoint as the unit, "of own" beside it, a Holm family of its own (docs/credit_experiments.md)."""
    out = []
    for key, cell in cells.items():
        if cell["saturated"] or len(cell["checkpoints"]) < MIN_CHECKPOINTS:
            continue
        questions = dict.fromkeys((p["claim"], p["metric"], p["a"], p["direction"]) for p in judged
                                  if f"{p['arm']}|{p['target']}" == key)
        for claim_id, metric, estimator, direction in questions:
            per = {p["checkpoint_seed"]: p["diff"] for p in judged if f"{p['arm']}|{p['target']}" == key
                   and (p["claim"], p["metric"], p["a"]) == (claim_id, metric, estimator)
                   and math.isfinite(p["diff"])}  # a checkpoint whose batches never define the metric drops out
            own = np.nanmean([c["estimators"][BASELINE][metric]["mean"] for c in cell["checkpoints"]])
            seeds = sorted(per)
            part = paired_diff([per[s] for s in seeds])
            out.append({"claim": claim_id, "arm": cell["arm"], "target": cell["target"], "metric": metric,
                        "a": estimator, "b": BASELINE, "direction": direction, "seeds": seeds, "unit": "checkpoints",
                        **part, "relative": relative(part["diff"], float(own)),
                        "per_checkpoint": [per[s] for s in seeds]})
    return apply_holm(out)


def render(summary: dict[str, Any], protocol: dict[str, Any], runtime_s: float,
           claim_test: dict[str, Any] | None = None) -> str:
    """The report's markdown, headed where given by ``claim_test`` (``credit_counterfactual_claim.claim_report``)."""
    quick = "QUICK SMOKE RUN (tiny budget, not evidence)" if protocol.get("quick") else "committed protocol"
    seeds = sorted({s for arm in protocol["arms"].values() for s in arm["checkpoint_seeds"]})
    base = {arm["batch_seed_base"] for arm in protocol["arms"].values()}
    per_cell = summary["checkpoints_per_cell"]
    stored = " from the stored arms (no arm rerun)" if protocol.get("from_raw") else ""
    estimators = sorted({e for c in summary["claims"] for e in c["verdicts"]})
    lines = [
        "# Counterfactual credit updates: ECPO vs GiGPO on identical batches", "",
        (f"Run: **{quick}**, {runtime_s / 60:.1f} min of arm time (arms run side by side, niced, on a shared 2-core "
         f"machine); written by `{protocol['command']}`{stored} (raw per-batch records in the JSON next to this "
         f"file). Checkpoint seeds {seeds} ({', '.join(map(str, per_cell))} checkpoint(s) per cell), batch seeds "
         f"from {', '.join(map(str, sorted(base)))}."), ""]
    lines += scope_note(summary, protocol)
    lines += [
        ("Protocol: each arm (a policy on a corridor whose good door itself sometimes fails) is trained with GRPO by "
         "the native `Trainer`, which saves a checkpoint (weights, AdamW state, RNGs) the first time the mean "
         "pi(good door | room) at T = 1 reaches each target (an arm whose protocol says `reach: supervised` gets "
         "there by supervised steps toward the good door, then clears AdamW's moments and settles with GRPO "
         "iterations before saving; see the notes); each checkpoint seed is its own such training run. From each "
         "checkpoint, K rollout batches are drawn, each with its own seed; on every batch each estimator computes "
         "its advantages (`compute_advantages`) and ONE update is applied from the same weights and optimizer state "
         "with the same shuffle seed (`Trainer.update_policy` -> `policy_update`). Every metric is therefore paired "
         "by batch seed across estimators. Per checkpoint, intervals are 95 % paired t-intervals over batches, "
         f"Holm-corrected across all {summary['m']} such comparisons of the unsaturated cells (family-wise alpha "
         "0.05); MDE = the paired difference detectable with 80 % power at Holm's first-step level, printed beside "
         "every result that is not significant ('no MDE (n units)' with fewer than 5). 'of own' = the difference "
         "as a fraction of GiGPO w/std's own mean effect on that metric (for Delta J, the update's own Delta J). "
         f"A cell is *saturated*, and not judged, when its exact success is at least {SATURATED_SUCCESS} or GiGPO "
         f"w/std's own |Delta J| is below {DELTA_J_FLOOR:.0e} (0.05 points of success): there a 'significant' "
         "difference in Delta J is a few millionths."), ""]
    if claim_test is not None:
        lines += claim_lines(claim_test)
    lines += ["## Per-cell verdicts (uninformative by design at 3 checkpoints: 2 degrees of freedom)"
              if claim_test is not None and min(per_cell) == MIN_CHECKPOINTS else "## Verdicts", "",
              (f"Over checkpoints: each of the {min(per_cell)}+ checkpoints of a cell is one value (its mean paired "
               f"difference over batches), Holm-corrected across the {summary['m_over']} comparisons over "
               "checkpoints." if summary["verdict_unit"] == "checkpoints" else
               "Per checkpoint (batches as the unit): these verdicts hold for the checkpoint each cell was measured "
               f"from, not for the training procedure; fewer than {MIN_CHECKPOINTS} checkpoints per cell allow no "
               "verdict over checkpoints."), "",
              "| Claim | " + " | ".join(estimators) + " |", "|---|" + "---|" * len(estimators)]
    for claim in summary["claims"]:
        lines.append(f"| {claim['id']}: {claim['claim']} | "
                     + " | ".join(claim["verdicts"].get(e, "—") for e in estimators) + " |")
    lines += ["", ("A claim *holds* for an estimator when every unsaturated (arm, concentration) comparison is "
                   "Holm-significant on the claimed side, *partly holds* when some are and none contradicts, "
                   "*contradicted* when significant ones lie on the other side only, *mixed* when both, and is "
                   "*not shown* when none is significant (a null at this power does not say the effect is "
                   "absent)."), ""]
    for cell_key, cell in summary["cells"].items():
        arm, target = cell_key.split("|")
        lines += [f"## {arm}, pi(good) target {target}", ""]
        if cell["saturated"]:
            lines += [f"**Saturated** ({cell['saturated']}): not judged.", ""]
        over = [p for p in summary["over_checkpoints"] if p["arm"] == arm and p["target"] == target]
        if over:
            lines += [(f"Over the {len(cell['checkpoints'])} checkpoints (estimator − gigpo_std, the checkpoint as "
                       "the unit):"), "", ("| comparison | checkpoints | per checkpoint | difference [95% CI] | of own | "
                                            "verdict |"), "|---|---|---|---|---|---|"]
            for part in over:
                shown = _scaled(part, SCALE.get(part["metric"], 1.0))
                per = ", ".join(f"{x:+.3f}" for x in shown["per_checkpoint"])
                lines.append(f"| {part['a']}: {LABELS[part['metric']]} | {part['n']} | {per} | {fmt_part(shown, 3)} | "
                             f"{_percent(part['relative'])} | {part['verdict']} |")
            lines.append("")
        for checkpoint in cell["checkpoints"]:
            seed = checkpoint["checkpoint_seed"]
            lines += [f"### Checkpoint seed {seed}", "",
                      (f"Checkpoint at GRPO iteration {checkpoint['iteration']}: mean pi(good) = "
                       f"{checkpoint['concentration']:.3f}, exact success {checkpoint['exact_success']:.3f}. K = "
                       f"{checkpoint['K']} batches (rollout success {checkpoint['rollout_success']:.3f}); "
                       f"{checkpoint['batches_with_lucky']} hold a lucky singleton "
                       f"({checkpoint['lucky_per_batch']:.2f} per batch)."), "",
                      "| estimator | " + " | ".join(LABELS[m] for m in METRICS) + " |", "|---|" + "---|" * len(METRICS)]
            for estimator, metrics in checkpoint["estimators"].items():
                lines.append(f"| {estimator} | " + " | ".join(_mean_text(metrics[m], m) for m in METRICS) + " |")
            lines += ["", "Paired against gigpo_std (estimator − gigpo_std, per batch):", "",
                      "| comparison | n | paired SD | difference [95% CI] | of own | Holm verdict |",
                      "|---|---|---|---|---|---|"]
            for part in summary["comparisons"]:
                if part["arm"] == arm and part["target"] == target and part["checkpoint_seed"] == seed:
                    shown = _scaled(part, SCALE.get(part["metric"], 1.0))
                    lines.append(f"| {part['a']}: {LABELS[part['metric']]} | {part['n']} | {shown['sd']:.3f} | "
                                 f"{fmt_part(shown, 3)} | {_percent(part['relative'])} | {part['verdict']} |")
            lines.append("")
    lines += ["## Arms", ""]
    for name, arm in protocol["arms"].items():
        lines.append(f"- **{name}**: {arm['policy']} policy on `{arm['env_id']}` {arm['env_kwargs']}, trainer settings "
                     f"{arm['config']}, K = {arm['K']} batches per checkpoint, targets {arm['targets']}"
                     + (f", reached by supervised steps at lr {arm.get('reach_lr')} then {arm.get('settle', 0)} GRPO "
                        "iterations" if arm.get("reach") == "supervised" else ", reached by GRPO") + ".")
    lines += ["", *[f"- {note}" for note in protocol.get("notes", [])], ""]
    return "\n".join(lines)


def scope_note(summary: dict[str, Any], protocol: dict[str, Any]) -> list[str]:
    """What the report's verdicts rest on, and, below ``MIN_CHECKPOINTS`` checkpoints or in a quick run, the
    command (and its cost) that would give the full protocol its verdicts over checkpoints."""
    per_cell = summary["checkpoints_per_cell"]
    minutes = protocol["full_arm_minutes"] * MIN_CHECKPOINTS
    rerun = (f"`python -m benchmarks.credit_counterfactual run --checkpoint-seeds 0 1 2` would give the full protocol "
             f"{MIN_CHECKPOINTS} checkpoints per cell: about {minutes / 60:.1f} h of arm time ({minutes / 120:.1f} h "
             "on two free cores), not run yet.")
    if protocol.get("quick"):
        return [(f"**Scope.** A quick run: tiny K and loose targets, for the machinery of verdicts over checkpoints, "
                 "not evidence. The committed full-protocol report (`credit_counterfactual.md`) still rests on one "
                 f"checkpoint per cell. {rerun}"), ""]
    if min(per_cell) < MIN_CHECKPOINTS:
        return [(f"**Scope.** {min(per_cell)} checkpoint per cell: every verdict below is conditional on that "
                 "checkpoint (issue 34's review reran from another checkpoint with other batches: 44 of 60 cell "
                 f"verdicts agreed). {rerun}"), ""]
    return []


def _scaled(part: dict[str, Any], scale: float) -> dict[str, Any]:
    out = part | {k: part[k] * scale for k in ("diff", "low", "high", "sd", "mde") if k in part}
    if "per_checkpoint" in part:
        out["per_checkpoint"] = [x * scale for x in part["per_checkpoint"]]
    return out


def _percent(fraction: float) -> str:
    return f"{100 * fraction:+.1f} %" if math.isfinite(fraction) else "—"


def _mean_text(cell: dict[str, float], metric: str) -> str:
    if not math.isfinite(cell["mean"]):
        return "n/a"
    return f"{cell['mean'] * SCALE.get(metric, 1.0):+.3f} (n={cell['n']})"
