"""Credit study, the report: per-run scalars, mean and 95% intervals over seeds, a verdict per paper claim, the
markdown page (every number read from the summary stored in the JSON) and the figures. The statistics' rules (paired
by seed id, one Holm family, MDEs): docs/credit_experiments.md, "End-to-end training", and ``benchmarks.stats``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.stats import (
    MisalignedCells,
    apply_holm,
    claim_verdict,
    fmt_part,
    mean_ci,
    nanmean,
    paired_diff,
    paired_values,
    pearson,
    t975,
    welch_diff,
)

# eq. eca_adv's two readings (issue 17), compared head to head by summarize()'s "readings": see reading_paragraph
PAPER_READING, ANCHOR_READING = "ecpo", "ecpo_anchor_scale"


def run_metrics(run: dict[str, Any], early_fraction: float, late_fraction: float) -> dict[str, float]:
    """Per-run scalars: final success, late-stage spreads, diagnostics averaged over training (or its first or last
    ``fraction`` of iterations, at least 2)."""
    c = run["curves"]
    early = lambda name: np.asarray(c[name], dtype=float)[: max(2, round(len(c[name]) * early_fraction))]
    late = lambda name: np.asarray(c[name], dtype=float)[-max(2, round(len(c[name]) * late_fraction)):]
    return {
        "final_success": float(run["final_success"]),
        "late_reward_std": float(np.std(late("train_return"), ddof=1)),
        "late_eval_std": float(np.std(late("eval_success"), ddof=1)),
        "late_eval_return_std": nanmean(late("eval_return_std")),
        "final_best_prob": float(c["best_action_prob"][-1]),
        "divergent_early": nanmean(early("divergent_fraction")),
        "divergent_late": nanmean(late("divergent_fraction")),
        **{name: nanmean(c[name]) for name in ("mean_rho", "mean_rho_strict_valid", "adv_range", "adv_std")},
        "misranked": nanmean(c["misranked_fraction"]),
        "misranked_late": nanmean(late("misranked_fraction")),
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
    """Table cells (mean, 95% CI per env x method x N, with the seeds), the verdict of every paper claim: methods
    paired by seed id, N against N by Welch (different runs), every comparison (the readings' too) one Holm family."""
    early, late = float(protocol.get("early_fraction", 0.25)), float(protocol.get("late_fraction", 0.25))
    metrics = _cells_by_seed(runs, early, late)
    envs = sorted({k[0] for k in metrics}, key=lambda e: [x["name"] for x in protocol["envs"]].index(e))
    sizes = sorted({k[2] for k in metrics})
    methods = [m for m in protocol["methods"] if any(k[1] == m for k in metrics)]

    def col(env, method, n, name) -> dict[Any, float]:
        return {seed: m[name] for seed, m in metrics.get((env, method, n), {}).items()}

    cells = {}
    for env, method, n in itertools.product(envs, methods, sizes):
        if by_seed := metrics.get((env, method, n)):
            cells[f"{env}|{method}|{n}"] = {name: mean_ci([m[name] for m in by_seed.values()])
                                            for name in next(iter(by_seed.values()))} | {"seeds": sorted(by_seed, key=str)}

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
            pairs = {n: paired_values(col(env, "gigpo_std", n, "divergent_late"),
                                      col(env, "gigpo_std", n, "divergent_early")) for n in sizes}
            add("C1", "Divergent anchors become more frequent as training proceeds", env,
                [part("GiGPO divergent-anchor fraction, late - early", n, "divergent_late-early", "late", "early", +1,
                      paired_diff(diffs), seeds) for n, (seeds, diffs) in pairs.items()])
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
            add("C4", "ECA-only and VarGate-only each beat GiGPO, and ECPO beats both", env,
                [compare(env, n, "final_success", a, b, +1, f"final success, {label}") for n in sizes
                 for a, b, label in (("ecpo_eca_only", "gigpo_std", "ECA-only - GiGPO"),
                                     ("ecpo_vargate_only", "gigpo_std", "VarGate-only - GiGPO"),
                                     ("ecpo", "ecpo_eca_only", "ECPO - ECA-only"),
                                     ("ecpo", "ecpo_vargate_only", "ECPO - VarGate-only"))])
        if has("ecpo") and len(sizes) >= 2:
            add("C7", "VarGate's mean rho is lower at smaller N", env,
                [part(f"ECPO {what}, N={large} - N={small}", small, name, f"N={large}", f"N={small}", +1,
                      welch_diff(list(col(env, "ecpo", large, name).values()),
                                 list(col(env, "ecpo", small, name).values())))
                 for small, large in itertools.pairwise(sizes)
                 for name, what in (("mean_rho", "mean rho, all anchors"),
                                    ("mean_rho_strict_valid", "mean rho, StrictValid anchors"))])
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
    favours = {"mixed": "mixed", "contradicted": PAPER_READING, "not shown": "cannot tell"}.get(
        claim_verdict([p["verdict"] for p in parts]), ANCHOR_READING)  # (holds, partly holds: the anchor scale)
    return {"parts": list(parts), "favours": favours, "for_anchor_scale": sum(p["verdict"] == "holds" for p in parts),
            "for_ecpo": sum(p["verdict"] == "contradicted" for p in parts),
            "total": sum(p["verdict"] != "no data" for p in parts)}


METHOD_LABELS = {
    "grpo": "GRPO",
    "gigpo_std": "GiGPO (w/ std)",
    "ecpo": "ECPO",
    "ecpo_eca_only": "ECA-only",
    "ecpo_vargate_only": "VarGate-only",
    "ecpo_anchor_scale": "ECPO (anchor scale)",
}


def fmt(cell: dict[str, float]) -> str:
    """``mean ± ci`` as written in the report (the test re-derives these strings from the JSON)."""
    if math.isnan(cell["mean"]):
        return "n/a"
    return f"{cell['mean']:.3f}" + ("" if math.isnan(cell["ci"]) else f" ± {cell['ci']:.3f}")


TABLE_METRICS = (
    ("final_success", "Final success (eval T=0.4)"),
    ("late_reward_std", "Late-stage train-return std (across iterations)"),
    ("late_eval_std", "Late sigma: iteration-to-iteration std of eval success (exact on the diagnostic env)"),
    ("late_eval_return_std", "Late-stage eval return std (across episodes, mean per iteration)"),
    ("final_best_prob", "Final pi(best action) at anchors (T=1)"),
    ("adv_range", "Advantage range (mean per batch)"),
    ("divergent_late", "Divergent-anchor fraction (late)"),
    ("mean_rho", "Mean rho (all anchors)"),
    ("mean_rho_strict_valid", "Mean rho (StrictValid anchors only)"),
    ("misranked", "Misranked-anchor fraction"),
)


def render_report(summary: dict[str, Any], protocol: dict[str, Any], runtime_s: float, images: Sequence[str]) -> str:
    """The markdown report; every number comes from ``summary`` (which is stored in the JSON)."""
    label = "QUICK SMOKE RUN (tiny budget, not evidence)" if summary["quick"] else "full protocol"
    lines = [
        "# Credit study: do the paper's divergent-anchor claims reproduce?",
        "",
        (f"Run: **{label}** — {summary['seeds']} seeds per cell, group sizes N = "
        f"{', '.join(map(str, summary['group_sizes']))}, methods "
        f"{', '.join(METHOD_LABELS.get(m, m) for m in summary['methods'])}; wall time {runtime_s / 60:.1f} min. "
        "Generated by `benchmarks/credit_study.py` from `credit_study.yaml`; the raw per-run curves and this "
        "summary are in the JSON next to this file."),
        "",
        "Policy: the project's tabular softmax policy (`ecpo_train/policies/tabular.py`), one native trainer "
        "run per cell (`ecpo_train/runtime/trainer.py`: its rollout, the credit estimators of `ecpo_train/core/credit/` "
        "and the clipped objective of `ecpo_train/core/loss.py`), "
        "credit hyperparameters " + ", ".join(f"{k}={v}" for k, v in protocol["credit"].items()) + ". "
        "Cell intervals are 95% Student-t intervals over seeds. Every method of an (env, N) trains on the same seed "
        "ids, so method differences are *paired* 95% intervals over the per-seed differences (paired by the seed id "
        "stored with each run; the seeds are in the JSON's cells); differences across N are Welch intervals. "
        f"Verdicts are Holm-corrected across all {summary.get('comparisons', 'the')} comparisons of this report "
        "(family-wise alpha 0.05): a claim part *holds* when Holm rejects zero on the claimed side, is "
        "*contradicted* when it rejects it on the other side, and is otherwise *not significant* (right sign) or "
        "*not supported* (wrong sign), with the minimum detectable effect (MDE: the true difference detected with "
        "80% power at Holm's first-step level) printed beside it; with fewer than 5 seeds the SD rests on too few "
        "degrees of freedom for an MDE, and 'no MDE (n seeds)' stands there instead. A claim with no significant "
        "part is *not shown*: at this power a null does not say the claimed effect is absent.",
        "",
        "## Verdicts",
        "",
        "| Claim | Env | Verdict |",
        "|---|---|---|",
    ]
    for claim in summary["claims"]:
        lines.append(f"| {claim['id']}: {claim['claim']} | {claim['env']} | **{claim['verdict']}** |")
    lines += ["", "## Evidence per claim", ""]
    for claim in summary["claims"]:
        lines += [f"### {claim['id']} ({claim['env']}): {claim['claim']} — {claim['verdict']}", "",
                  "| Comparison | N | Difference [95% CI] | Verdict |", "|---|---|---|---|"]
        for part in claim["parts"]:
            lines.append(f"| {part['label']} | {part['N']} | {fmt_part(part)} | {part['verdict']} |")
        lines.append("")
    lines += reading_section(summary.get("readings"))
    lines += gate_section(summary)
    for env in summary["envs"]:
        lines += [f"## Results table: {env}", ""]
        for metric, title in TABLE_METRICS:
            header = "| Method | " + " | ".join(f"N={n}" for n in summary["group_sizes"]) + " |"
            rows = []
            for method in summary["methods"]:
                cells = [summary["cells"].get(f"{env}|{method}|{n}", {}).get(metric) for n in summary["group_sizes"]]
                if all(c is None or math.isnan(c["mean"]) for c in cells):
                    continue
                rows.append(f"| {METHOD_LABELS.get(method, method)} | "
                            + " | ".join("n/a" if c is None else fmt(c) for c in cells) + " |")
            if rows:
                lines += [f"**{title}** (mean ± 95% CI half-width)", "", header,
                          "|---|" + "---|" * len(summary["group_sizes"]), *rows, ""]
    lines += ["## Protocol", "",
              (f"Optimiser: the trainer's AdamW with weight decay 0 (= Adam), learning rate {protocol['optim']['learning_rate']}, clip {protocol['optim']['clip_eps']}, "
              f"KL coefficient {protocol['optim']['kl_coef']}, one update per iteration; rollout temperature "
              f"{protocol.get('rollout_temperature', 1.0)}, evaluation temperature {protocol.get('eval_temperature', 0.4)}. "
              "Identical for every method (tuned once on short GRPO / GiGPO probes, never per method)."), ""]
    for env in protocol["envs"]:
        if env["name"] not in summary["envs"]:
            continue
        lines.append(f"- **{env['name']}**: `{env['id']}` with {env.get('kwargs') or {}}, "
                     f"{'a pool of ' + str(env['tasks']) + ' tasks, ' if env.get('tasks') else ''}"
                     f"{env['iterations']} iterations x {env['groups_per_batch']} groups of N, evaluation "
                     + ("exact (DP)" if env.get("eval") == "exact" else
                        f"{env.get('eval_episodes')} sampled episodes per iteration, "
                        f"{env.get('final_eval_episodes', env.get('eval_episodes'))} for the final policy") + ".")
        if ref := summary["reference"].get(env["name"]):
            lines.append(f"  Exact success at T=0.4 of the uniform policy: {ref['uniform']:.3f}; of the optimal "
                         f"policy: {ref['optimal']:.3f} (the ceiling of every curve).")
    lines += [""] + [f"- {note}" for note in protocol.get("notes", [])] + [""]
    lines += ["## Reading the late-stage numbers", "",
              ("A low late-stage std is not only a sign of stable credit: a policy that has converged (to the optimum "
              "or to a local optimum) also shows it, across iterations and across episodes. Across all runs of an env, "
              "the correlation of final success with late-stage std is:"), ""]
    for env, conf in summary.get("confounds", {}).items():
        lines.append(f"- {env}: train-return std r = {conf['corr_final_success_late_reward_std']:+.2f}, "
                     f"eval-success std r = {conf['corr_final_success_late_eval_std']:+.2f}")
    lines += ["", "so std differences between methods must be read together with their final success.", ""]
    lines += ["## Definitions", "",
              ("- *Final success*: success probability of the final policy at the paper's validation temperature "
              "0.4 — exact (dynamic programming over the MDP) on the diagnostic env, sampled episodes elsewhere."),
              ("- *Late-stage train-return std*: std over the last "
              f"{int(100 * float(protocol.get('late_fraction', 0.25)))}% of iterations of the per-iteration "
              "mean training episode return (the paper's reward-oscillation measure), averaged over seeds. It mixes "
              "sampling noise of the small batch with real oscillation of the policy."),
              ("- *Late sigma*: the iteration-to-iteration std of the per-iteration evaluation success over the "
              "same late iterations. On the diagnostic env this is exact (DP), so it measures only the policy's own "
              "oscillation; it is the late-stage measure the C5 verdicts use."),
              ("- *Late-stage eval return std*: spread of episode returns under the evaluation policy within one "
              "iteration (exact on the diagnostic env: 10 sqrt(p(1-p))), averaged over late iterations."),
              ("- *Final pi(best action)*: the policy's probability (T=1) of the truly best action, averaged over "
              "the anchor rooms (diagnostic env only)."),
              ("- *Divergent-anchor fraction*: share of anchors (states visited >= 2 times in a group) where some "
              "canonical action was sampled more than once and another exactly once (paper fig. 1), from "
              "`compute_advantages`' diagnostics; 'late' = last quarter of training."),
              "- *Advantage range*: max - min of the final advantages of a batch, averaged over iterations.",
              ("- *Mean rho*: VarGate's reliability weight averaged over the anchors of a batch, then over training "
              "(rho = 0 at anchors that fail StrictValid); *mean rho (StrictValid)* averages over the StrictValid "
              "anchors only, so it shows VarGate's own reliability apart from how many anchors StrictValid shuts."),
              ("- *Misranked-anchor fraction* (diagnostic env only, true values known by DP): among anchors where the "
              "truly best action and a worse one were both sampled, how often a worse action's mean advantage "
              "exceeded the best one's — App. C's 'rare lucky action over-rewarded' event, measured directly."),
              ""]
    lines += ["## Figures", ""] + [f"![{Path(i).stem}]({Path(i).name})" for i in images] + [""]
    return "\n".join(lines)


def reading_paragraph(readings: dict[str, Any]) -> str:
    """One paragraph: which reading of eq. eca_adv the comparisons favour, and how strongly."""
    total, for_anchor, for_paper = readings["total"], readings["for_anchor_scale"], readings["for_ecpo"]
    diffs = [p["diff"] for p in readings["parts"] if p["metric"] == "final_success" and not math.isnan(p["diff"])]
    spread = (f"final-success differences (anchor scale - ECPO) range from {min(diffs):+.3f} to {max(diffs):+.3f}"
              if diffs else "no final-success difference could be computed")
    verdicts = {
        ANCHOR_READING: (f"the evidence favours the anchor-scale reading (`{ANCHOR_READING}`): {for_anchor} of "
                         f"{total} comparisons are significant in its favour and none in `{PAPER_READING}`'s"),
        PAPER_READING: (f"the evidence favours `{PAPER_READING}` as written (sigma_act): {for_paper} of {total} "
                        f"comparisons are significant in its favour and none in `{ANCHOR_READING}`'s"),
        "mixed": (f"the evidence is mixed: {for_anchor} of {total} comparisons are significant for the anchor-scale "
                  f"reading and {for_paper} for `{PAPER_READING}`"),
        "cannot tell": (f"the study cannot tell the two readings apart: none of the {total} comparisons is "
                        "Holm-significant"),
    }
    return (
        "`ecpo` divides eq. eca_adv by sigma_act, the spread of the calibrated action means over the anchor's "
        "actions (the equation as written; with two actions it undoes ECA's shrinkage). `ecpo_anchor_scale` "
        "divides by the anchor's occurrence-level std sigma_s, GiGPO's scale, on which App. C's 1/(1+kappa) bound "
        "holds. Compared head to head by the claims' rule (final success per env and N; on the diagnostic env also "
        f"the misranked-anchor fraction, lower is better): {verdicts[readings['favours']]}; {spread}."
    )


def reading_section(readings: dict[str, Any] | None) -> list[str]:
    """The report's "Which ECPO reading?" section: the paragraph and its comparisons (empty without both)."""
    if not readings:
        return []
    lines = ["## Which ECPO reading?", "", reading_paragraph(readings), "",
             "| Comparison | Env | N | Difference [95% CI] | Verdict |", "|---|---|---|---|---|"]
    for part in readings["parts"]:
        lines.append(f"| {part['label']} | {part['env']} | {part['N']} | {fmt_part(part)} | {part['verdict']} |")
    return lines + [""]


def gate_section(summary: dict[str, Any]) -> list[str]:
    """Where ECPO's gate stays shut, ECPO is GRPO: say so, with the rho numbers behind it."""
    lines = []
    for env, counts in summary.get("same_as_grpo", {}).items():
        rho = [summary["cells"].get(f"{env}|ecpo|{n}", {}).get("mean_rho", {}).get("mean", float("nan"))
               for n in summary["group_sizes"]]
        if counts["total"] and counts["equal"] * 2 >= counts["total"]:
            lines += [f"**Why ECPO equals GRPO on {env}.** ECPO's evaluation curve is identical to GRPO's in "
                      f"{counts['equal']} of {counts['total']} (N, seed) cells; ECPO's mean rho is "
                      + ", ".join(f"{r:.4f}" for r in rho) + f" at N = {', '.join(map(str, summary['group_sizes']))}. "
                      "With d_min = 7 against 8-step episodes almost no anchor passes StrictValid's depth test, so "
                      "rho = 0 and ECPO's advantage is GRPO's: this arm does not test ECPO's credit.", ""]
    return lines


def plot_study(runs: Sequence[dict[str, Any]], summary: dict[str, Any], prefix: Path) -> list[str]:
    """Small PNGs: success curves with bands, divergent-anchor fraction over training, per-N diagnostics."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []

    def save(fig, env: str, tag: str) -> None:
        fig.tight_layout()
        path = prefix.parent / f"{prefix.name}_{env}_{tag}.png"
        fig.savefig(path, dpi=70)
        plt.close(fig)
        written.append(str(path))

    sizes, methods = summary["group_sizes"], summary["methods"]
    colors = dict(zip(METHOD_LABELS, ("#777777", "#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd")))
    for env in summary["envs"]:
        for curve, ylabel, tag in (("eval_success", "eval success", "curves"),
                                   ("divergent_fraction", "divergent-anchor fraction", "divergent")):
            fig, axes = plt.subplots(1, len(sizes), figsize=(3.2 * len(sizes), 2.6), sharey=True, squeeze=False)
            for ax, n in zip(axes[0], sizes):
                for method in methods:
                    ys = [r["curves"][curve] for r in runs
                          if r["env_name"] == env and r["method"] == method and r["group_size"] == n]
                    if not ys:
                        continue
                    y = np.asarray(ys, dtype=float)
                    mean = np.nanmean(y, axis=0)
                    half = t975(len(y) - 1) * np.nanstd(y, axis=0, ddof=1) / math.sqrt(len(y)) if len(y) > 1 else 0
                    x = np.arange(1, y.shape[1] + 1)
                    ax.plot(x, mean, color=colors.get(method), lw=1.2, label=METHOD_LABELS.get(method, method))
                    ax.fill_between(x, mean - half, mean + half, color=colors.get(method), alpha=0.15, lw=0)
                ax.set_title(f"{env}, N={n}", fontsize=8)
                ax.set_xlabel("iteration", fontsize=7)
                ax.tick_params(labelsize=6)
            axes[0][0].set_ylabel(ylabel, fontsize=7)
            axes[0][-1].legend(fontsize=5, loc="best")
            save(fig, env, tag)
        fig, axes = plt.subplots(1, 3, figsize=(9.6, 2.6), squeeze=False)
        for ax, (metric, title) in zip(axes[0], (("mean_rho", "mean rho"), ("adv_range", "advantage range"),
                                                  ("late_reward_std", "late reward std"))):
            width = 0.8 / max(1, len(methods))
            for k, method in enumerate(methods):
                cells = [summary["cells"].get(f"{env}|{method}|{n}", {}).get(metric) for n in sizes]
                mean = [np.nan if c is None else c["mean"] for c in cells]
                err = [np.nan if c is None else c["ci"] for c in cells]
                if all(math.isnan(v) for v in mean):
                    continue
                ax.bar(np.arange(len(sizes)) + k * width, mean, width, yerr=err, color=colors.get(method),
                       label=METHOD_LABELS.get(method, method), error_kw={"lw": 0.6})
            ax.set_xticks(np.arange(len(sizes)) + 0.4 - width / 2, [f"N={n}" for n in sizes], fontsize=7)
            ax.set_title(f"{env}: {title}", fontsize=8)
            ax.tick_params(labelsize=6)
        axes[0][0].legend(fontsize=5)
        save(fig, env, "per_n")
    return written
