"""The report of ``benchmarks/llm_learning.py``: from the per-run summaries (``results[env][N][method]`` = list
of run summaries with their seed ids) to the comparisons, the markdown and the plot. Its two Holm families, by seed
and (secondary) by episode pooled over seeds: docs/training.md ("Units"); ``SELECTED_ON``: a winner's curse.
"""

from __future__ import annotations

import math
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.stats import (
    MIN_UNITS_FOR_MDE,
    apply_holm,
    fmt_clustered,
    fmt_part,
    keyed,
    mean_ci,
    paired_diff,
    paired_outcomes,
    paired_values,
)

# Presets whose recipe was chosen on one seed's own validation episodes: preset -> (that seed, how it was chosen).
SELECTED_ON = {
    "alfworld_cpu": (0, ("the recipe (lr 3e-6 with a 9-step warm-up) was the best of about 6 tried on seed 0's own "
                         "96 validation episodes, and ECPO seed 0 is that run (winner's curse)")),
}


def all_runs(results: dict) -> list[dict]:
    """Every run summary of ``results[env][N][method]``."""
    return [r for by_n in results.values() for ms in by_n.values() for rs in ms.values() for r in rs]


def late_sigma(run: dict) -> float:
    """Late sigma: iteration-to-iteration std of the (exact) validation success over the second half of training."""
    last = max((i for i, _ in run["curve"]), default=0)
    late = [s for i, s in run["curve"] if i >= last / 2]
    return float(np.std(late, ddof=1)) if len(late) >= 2 else float("nan")


def by_seed(runs: list[dict], key: str) -> dict:
    """``{seed id: value}`` of one method's runs: comparisons pair by these ids, never by list position."""
    value = late_sigma if key == "late_sigma" else (lambda r: r.get(key, float("nan")))
    return keyed([value(r) for r in runs], [r["seed"] for r in runs])


def comparisons(results: dict) -> list[dict]:
    """Every comparison of the report, one Holm family: per (env, N) each method's late − before success, each
    method vs gigpo_std and anchor scale vs ecpo on late-stage success, paired by seed id."""
    parts = []
    for env_label, by_n in results.items():
        for n, by_method in by_n.items():
            where = {"env": env_label, "N": n}
            for method, runs in by_method.items():
                seeds, diffs = paired_values(by_seed(runs, "late_success"), by_seed(runs, "initial_success"))
                parts.append(where | {"kind": "learned", "a": method, "b": "before", "seeds": seeds,
                                      **paired_diff(diffs)})
            pairs = [(m, "gigpo_std") for m in ("ecpo", "ecpo_anchor_scale", "grpo")] + [("ecpo_anchor_scale", "ecpo")]
            for a, b in pairs:
                if a in by_method and b in by_method:
                    seeds, diffs = paired_values(by_seed(by_method[a], "late_success"),
                                                 by_seed(by_method[b], "late_success"), label=f"{env_label} N={n} {a}-{b}")
                    parts.append(where | {"kind": "reading" if b == "ecpo" else "vs", "a": a, "b": b, "seeds": seeds,
                                          **paired_diff(diffs)})
    return apply_holm(parts)


def without_seed(results: dict, seed: Any) -> dict:
    """``results`` with every run of ``seed`` left out (every method keeps the same other seeds, so pairs hold)."""
    return {env: {n: {m: [r for r in runs if r["seed"] != seed] for m, runs in by_method.items()}
                  for n, by_method in by_n.items()} for env, by_n in results.items()}


def selection_seed(results: dict, protocol: Any) -> Any:
    """The seed a preset's recipe was chosen on (``SELECTED_ON``) when this report holds it, else None."""
    seed = SELECTED_ON.get(getattr(protocol, "preset", None), (None, ""))[0]
    held = {r["seed"] for r in all_runs(results)}
    return seed if seed in held and len(held) > 1 else None


def without_text(part: dict, others: list[dict], seed: Any) -> str:
    """``; without seed 0 (selection): ...`` beside a result whose comparison also ran without the selection seed."""
    question = itemgetter("env", "N", "kind", "a", "b")
    match = next((q for q in others if question(q) == question(part)), None)
    if match is None or seed not in part.get("seeds", []):
        return ""
    counts = f"{match['gained']} gained, {match['lost']} lost, " if "gained" in match else ""
    return f"; without seed {seed} (the recipe's selection seed): {counts}{fmt_part(match)} — {_said(match)}"


def pooled_episodes(runs: list[dict], which: str) -> dict:
    """``{(seed, task, copy): won}`` over a method's runs: the ``which`` ("before"/"after") validation."""
    return {(r["seed"], t, c): w for r in runs if r.get("episodes") for t, c, w in r["episodes"][which]}


def episode_comparisons(results: dict) -> list[dict]:
    """The same questions at the episode level, pooled over seeds (a second Holm family; ``stats.paired_outcomes``):
    each method's final validation against its first, and ecpo vs gigpo_std at the final one (why an episode pairs
    with itself: the report's paragraph). Episodes ``(seed, task, copy)`` of one task, in any seed, form one cluster."""
    parts, task = [], itemgetter(1)
    for env_label, by_n in results.items():
        for n, by_method in by_n.items():
            where = {"env": env_label, "N": n}
            with_episodes = {m: [r for r in runs if r.get("episodes")] for m, runs in by_method.items()}
            for method, runs in with_episodes.items():
                if runs:
                    parts.append(where | {"kind": "learned", "a": method, "b": "before", "seeds": [r["seed"] for r in runs]}
                                 | paired_outcomes(pooled_episodes(runs, "before"), pooled_episodes(runs, "after"),
                                                   label=f"{env_label} N={n} {method} before/after", task_of=task))
            a, b = with_episodes.get("ecpo", []), with_episodes.get("gigpo_std", [])
            shared = sorted({r["seed"] for r in a} & {r["seed"] for r in b})
            if shared:
                a, b = ([r for r in runs if r["seed"] in shared] for runs in (a, b))
                parts.append(where | {"kind": "vs", "a": "ecpo", "b": "gigpo_std", "seeds": shared}
                             | paired_outcomes(pooled_episodes(b, "after"), pooled_episodes(a, "after"),
                                               label=f"{env_label} N={n} ecpo/gigpo_std", task_of=task))
    return apply_holm(parts)


def episode_lines(parts: list[dict], without: list[dict] = (), seed: Any = None) -> list[str]:
    if not parts:
        return []
    lines = ["## Episode level, pooled over seeds", "",
             ("Each validation episode pairs with itself: the same (seed, task, copy) takes the same uniform draws "
              "before and after training, and under either method of a seed. Gained / lost are the discordant "
              "episodes; p is McNemar's exact test on them; the interval is Tango's unconditional score interval, "
              "and beside it the interval clustered by task (each task is validated in several copies and seeds: "
              "Tango's on the table shrunk by the design effect); the MDE is Connor's (80 % power, unconditional) "
              "at the observed share of changing episodes. "
              f"Holm-corrected over these {len(parts)} comparisons (a family of their own). This tests the runs "
              "that were trained, not the training procedure: the seed-level verdicts above carry the run-to-run "
              "variance."), ""]
    for part in parts:
        what = f"{part['a']}, final − first" if part["kind"] == "learned" else f"{part['a']} − {part['b']}, final"
        head = f"- {part['env']} N={part['N']} {what} ({part['episodes']} episodes, seeds {part['seeds']}): "
        if part["gained"] + part["lost"] == 0:
            lines.append(head + "no episode changed its outcome")
            continue
        by_task = f", by task {fmt_clustered(part)}" if part.get("clustered") else ""
        scope = " (one run: covers validation draws, not run-to-run variance)" if len(part["seeds"]) == 1 else ""
        lines.append(f"{head}{part['gained']} gained, {part['lost']} lost, {fmt_part(part)}{by_task}, McNemar p "
                     f"{part['p']:.3g} — {_said(part)}{scope}{without_text(part, list(without), seed)}")
    return lines + [""]


def _said(part: dict) -> str:
    if part["n"] < 2:
        return "one seed: no verdict"
    if part["holm_significant"]:
        return "higher (Holm-significant)" if part["diff"] > 0 else "lower (Holm-significant)"
    return "not significant"  # (the MDE stands beside the interval: stats.fmt_part)


def success_said(results: dict) -> str:
    kinds = {r.get("success_kind", "exact") for r in all_runs(results)}
    exact = ("Success is the exact success probability at the validation temperature (DP over the corridor MDP with "
             "the LM's action distribution).")
    sampled = ("Success is the sampled validation success: the fraction of the fixed validation episodes won at the "
               "validation temperature.")
    return exact if kinds == {"exact"} else sampled if kinds == {"sampled"} else (
        "Success is exact (DP) where the environment allows it, else sampled validation success.")


# The table's columns after the seed count: each run's figure (mean ± t-interval over seeds), at these digits.
COLUMNS = [("initial_success", 3), ("final_success", 3), ("late_success", 3), ("late_sigma", 3), ("late_reward_std", 2),
           ("divergent_fraction", 3), ("mean_rho", 3), ("mean_rho_strict_valid", 3), ("advantage_std", 2),
           ("advantage_range", 2), ("seconds_per_iteration", 1)]


def report(results: dict, protocol_name: str, protocol: Any, elapsed: float, how: str = "") -> str:
    how = how or f"Written by `python -m benchmarks.llm_learning run --protocol {protocol_name}` in {elapsed / 60:.1f} min."
    parts = comparisons(results)
    lines = [f"# LLM learning: ECPO vs GiGPO w/std vs GRPO with a real small LM ({protocol_name} protocol)", "",
             (f"{how} "
             f"Preset `{protocol.preset}` (policy_mode=score; see `ecpo_train/runtime/configs/{protocol.preset}.yaml`), "
             f"seeds {protocol.seeds}, extra overrides {protocol.overrides or 'none'}. {success_said(results)} "
             "± is the 95 % t-interval over seeds. Every method ran on the same seed ids, so "
             "differences are paired by seed id (stored with each run in the JSON); verdicts are Holm-corrected "
             f"across the report's {len(parts)} comparisons (family-wise α = 0.05), and beside every 'not significant' "
             "is the minimum detectable effect (MDE: the paired difference found with 80 % power at Holm's "
             f"first-step level), or 'no MDE (n seeds)' with fewer than {MIN_UNITS_FOR_MDE} seeds, whose SD rests on "
             "too few degrees of freedom for one."), ""]
    seed = selection_seed(results, protocol)
    without = comparisons(without_seed(results, seed)) if seed is not None else []
    if seed is not None:
        lines += [(f"**Recipe selection.** Preset `{protocol.preset}`: {SELECTED_ON[protocol.preset][1]}. Every "
                   f"result that includes seed {seed} is also given without it (those comparisons Holm-corrected "
                   "as a family of their own)."), ""]
    if any(r.get("seed_recovered") for r in all_runs(results)):
        lines += [("Seed ids: the stored summaries predate seed recording; `--from-runs` had read each method's seed "
                  "folders in sorted order with every seed present, so the ids are recovered from that order."), ""]
    for env_label, by_n in results.items():
        for n, by_method in by_n.items():
            lines += [f"## {env_label}, N = {n}", "",
                      ("| method | seeds | before | final | late-stage | late σ (exact, across iterations) | "
                       "reward σ in a batch | divergent frac | mean ρ | mean ρ (StrictValid) | adv std | adv range | "
                       "s/iter |"), "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
            for method, runs in by_method.items():
                def cell(key: str, digits: int, runs: list = runs) -> str:  # mean ± 95 % t-interval over seeds
                    c = mean_ci([v for v in by_seed(runs, key).values() if math.isfinite(v)])
                    if not math.isfinite(c["mean"]):
                        return "—" if key != "mean_rho_strict_valid" else "not recorded"
                    half = 0.0 if c["n"] == 1 else c["ci"]
                    return f"{c['mean']:.{digits}f}" + (f" ± {half:.{digits}f}" if len(runs) > 1 else "")
                lines.append(f"| {method} | {len(runs)} | " + " | ".join(cell(*column) for column in COLUMNS) + " |")
            lines += ["", "Verdicts (paired by seed, late-stage success, Holm-corrected):", ""]
            for part in parts:  # (each method's gain first, then the methods against one another)
                if part["env"] == env_label and part["N"] == n and part["kind"] != "reading":
                    what = (f"{part['a']}, late − before ({part['n']} seeds)" if part["kind"] == "learned"
                            else f"{part['a']} vs {part['b']}")
                    lines.append(f"- {what}: {fmt_part(part)} — {_said(part)}{without_text(part, without, seed)}")
            lines.append("")
    lines += episode_lines(episode_comparisons(results),
                           episode_comparisons(without_seed(results, seed)) if seed is not None else [], seed)
    lines += reading_paragraph(parts)
    return "\n".join(lines)


def reading_paragraph(parts: list[dict]) -> list[str]:
    """Issue 17's question, ``ecpo`` or ``ecpo_anchor_scale`` (the paragraph says how they differ)."""
    verdicts = [p for p in parts if p["kind"] == "reading"]
    if not verdicts:
        return []
    significant = [p for p in verdicts if p["holm_significant"]]
    detail = "; ".join(f"{p['env']} N={p['N']}: {fmt_part(p)} ({_said(p)})" for p in verdicts)
    finding = (f"the evidence cannot tell them apart: none of the {len(verdicts)} comparisons is Holm-significant"
               if not significant else f"{len(significant)} of {len(verdicts)} comparisons are Holm-significant")
    return ["## Which ECPO reading?", "",
            ("`ecpo` normalises ECA's centred action evidence by the spread of the calibrated action means "
            "(eq. eca_adv as written); `ecpo_anchor_scale` by the anchor's occurrence-level std, the scale on which "
            f"App. C's 1/(1+κ) bound is stated. Late-stage success, anchor scale − ECPO, paired by seed: {finding}. "
             f"{detail}."), ""]


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(env, n) for env, by_n in results.items() for n in by_n]
    fig, axes = plt.subplots(2, len(panels), figsize=(5 * len(panels), 7), squeeze=False)
    for col, (env, n) in enumerate(panels):
        for method, runs in results[env][n].items():
            for row, key in enumerate(("curve", "divergent_curve")):  # (success, then the divergent-anchor fraction)
                mean = np.nanmean([[v for _, v in r[key]] for r in runs], axis=0)
                axes[row][col].plot([i for i, _ in runs[0][key]], mean, label=method, marker="o" if row == 0 else None)
        axes[0][col].set(title=f"{env}, N={n}", xlabel="iteration", ylabel="success (mean over seeds)")
        axes[1][col].set(xlabel="iteration", ylabel="divergent-anchor fraction")
        axes[0][col].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
