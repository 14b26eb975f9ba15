"""One protocol's ECPO against GiGPO w/std over seeds (``gpu_comparison seeds``): its reports, one per seed.

``gpu_comparison`` runs one pair (one seed) per report. This reads several (rescored here, so the paired tests are
computed whatever machine wrote them), refuses reports of different protocols, leaves out the ones whose arms did
not finish every iteration (named, not pairs), and gives the first arm minus the second after training:

- across seeds, the seed as the unit: the mean of the per-seed differences with its t-interval and the MDE from
  the seeds (only from five seeds on: ``stats.mde``). This is the answer about the two training
  procedures, and the one line a report states as its result;
- per seed, on every validation episode and, where the preset has a training pool, on the trained and the unseen
  tasks apart (Tango's interval, McNemar's p, by task where tasks repeat): one pair of runs each, covering the
  validation's draws, not run-to-run variance;
- the episodes pooled over seeds (Tango's interval on the summed table), a secondary line conditional on these
  trained pairs: it says which of these policies won more of the same episodes, not what another seed would do;
- across seeds again on the greedy (T = 0) validation of the same episodes, a secondary line: the registered,
  primary endpoint is the validation at the preset's temperature (T = 0.4). Reports written before the greedy pass
  hold no greedy outcomes; the line then says so (and names the seeds whose report lacks them).

    python -m benchmarks.gpu_comparison seeds --from-json RETURNED/pool_pair_seed*.json \\
        --out benchmarks/results/pool_pairs.json
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks import fail, write_report
from benchmarks.gpu_comparison_report import TEMPERATURES, label, score
from benchmarks.stats import fmt_clustered, fmt_part, paired_binary, paired_diff

PROTOCOL_KEYS = ("preset", "arms", "iterations", "train_tasks", "sft_preset", "sft_seed")


def read_reports(paths: list[Path]) -> list[dict[str, Any]]:
    reports = []
    for path in paths:
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            fail(f"{path}: {' '.join(str(error).split())}")
        if not isinstance(report, dict) or "arms" not in report:
            fail(f"{path} is not a gpu_comparison report")
        reports.append(score(report | {"path": str(path)}))
    first = reports[0]
    for report in reports[1:]:
        differ = [k for k in PROTOCOL_KEYS if report.get(k) != first.get(k)]
        if differ:
            fail(f"{report['path']} and {first['path']} are not one protocol: their {differ[0]} differ")
    seeds = [r.get("seed") for r in reports]
    repeated = next((s for s in seeds if seeds.count(s) > 1), None)
    if repeated is not None:
        fail(f"seed {repeated} appears in more than one report (each seed is one pair)")
    return reports


def _parts(report: dict[str, Any], name: str, prefix: str = "") -> dict[str, dict[str, Any]]:
    parts = {"all episodes": report[f"{prefix}comparisons"][name]}
    return parts | report.get(f"{prefix}by_part", {}).get(name, {})


def _tests(pairs: list[dict[str, Any]], name: str, prefix: str) -> dict[str, list[dict[str, Any]]]:
    """Each part's paired test in every pair, at the temperature whose outcome keys start with ``prefix``."""
    tests = {part: [_parts(r, name, prefix)[part] for r in pairs] for part in _parts(pairs[0], name, prefix)}
    if any("gained" not in t for rows in tests.values() for t in rows):
        fail(f"{pairs[0]['path']}: the paired tests are not computed (scipy missing here?)")
    return tests


def _across(tests: list[dict[str, Any]]) -> dict[str, Any]:
    """The seed as the unit: the mean of the per-seed differences, its t-interval and MDE."""
    return paired_diff([t["diff"] for t in tests]) | {"unit": "seeds"}


def _greedy(pairs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """The secondary line: across seeds on the greedy (T = 0) validation, over the pairs whose report holds it."""
    prefix = TEMPERATURES["greedy"]
    held = [r for r in pairs if name in r.get(f"{prefix}comparisons", {})]
    lacking = [r.get("seed") for r in pairs if name not in r.get(f"{prefix}comparisons", {})]
    greedy: dict[str, Any] = {"endpoint": "secondary: the greedy validation (T = 0)",
                              "seeds": [r.get("seed") for r in held], "without_greedy": lacking, "across_seeds": {}}
    if not held:
        return greedy | {"absent": "no report holds a greedy (T = 0) validation (written before the greedy pass)"}
    tests = _tests(held, name, prefix)
    greedy["across_seeds"] = {part: _across(rows) for part, rows in tests.items()}
    greedy["per_seed_diff"] = {part: [t["diff"] for t in rows] for part, rows in tests.items()}
    return greedy


def summarise(reports: list[dict[str, Any]]) -> dict[str, Any]:
    arms = reports[0]["arms"]
    name = f"{arms[0]} - {arms[1]}"
    pairs, left_out = [], []
    for report in reports:
        done = [report["results"].get(a, {}).get("iterations_done") for a in arms[:2]]
        if name not in report.get("comparisons", {}) or report.get("stopped") or done != [report["iterations"]] * 2:
            left_out.append({"path": report["path"], "seed": report.get("seed"),
                             "why": report.get("stopped") or f"iterations done {done} of {report.get('iterations')}"})
        else:
            pairs.append(report)
    summary: dict[str, Any] = {"comparison": name, "preset": reports[0].get("preset"),
                               "iterations": reports[0].get("iterations"), "seeds": [r.get("seed") for r in pairs],
                               "left_out": left_out,
                               "endpoint": "primary, registered: the validation at the preset's temperature (T = 0.4)",
                               "per_seed": {}, "across_seeds": {}, "pooled_episodes": {}}
    if not pairs:
        return summary
    for part, tests in _tests(pairs, name, TEMPERATURES["sampled"]).items():
        summary["per_seed"][part] = [{"seed": r.get("seed")} | t for r, t in zip(pairs, tests)]
        summary["across_seeds"][part] = _across(tests)
        gained, lost = sum(t["gained"] for t in tests), sum(t["lost"] for t in tests)
        episodes = sum(t["episodes"] for t in tests)
        both = [t.get("both_won") for t in tests]
        summary["pooled_episodes"][part] = paired_binary(gained, lost, episodes,
                                                         both_won=None if None in both else sum(both))
    summary["greedy"] = _greedy(pairs, name)
    return summary


def _across_text(across: dict[str, Any]) -> str:
    seeds = f"{across['n']} seed pair{'s' if across['n'] != 1 else ''}"
    result = (f"{fmt_part(across)}, p {across['p']:.3g}" if across["n"] >= 2 else
              f"{across['diff']:+.3f} (one pair of runs: no interval over seeds, nothing about run-to-run variance)")
    return f"the seed as the unit, {seeds}): {result}"


def _greedy_text(greedy: dict[str, Any], part: str) -> str:
    head = "- Secondary, the greedy (T = 0) validation of the same episodes"
    if greedy.get("absent"):
        return f"{head}: absent ({greedy['absent']})."
    if part not in greedy["across_seeds"]:
        return f"{head}: absent for this part."
    lacking = (f"; seeds {greedy['without_greedy']} left out: their report holds no greedy validation"
               if greedy["without_greedy"] else "")
    return f"{head} (across seeds, {_across_text(greedy['across_seeds'][part])}{lacking}."


def render(summary: dict[str, Any]) -> str:
    lines = [f"# {summary['comparison']} over seeds ({summary['preset']}, {summary['iterations']} iterations)", "",
             (f"Written by `benchmarks/comparison_seeds.py` from {len(summary['seeds'])} complete pair(s), seeds "
              f"{summary['seeds']}. The first arm's success minus the second's after training, on the same episodes."),
             "", ("The primary, registered endpoint is the validation at the preset's temperature (T = 0.4), across "
                  "seeds; the greedy (T = 0) validation of the same episodes is a secondary line beside it."), ""]
    for item in summary["left_out"]:
        lines.append(f"- left out: seed {item['seed']} ({item['path']}): {item['why']}")
    for part, rows in summary["per_seed"].items():
        across, pooled = summary["across_seeds"][part], summary["pooled_episodes"][part]
        lines += ["", f"## {label(part)}", "", f"- **Across seeds (T = 0.4, primary; {_across_text(across)}.**",
                  _greedy_text(summary["greedy"], part), "",
                  "| seed | episodes | won / lost | difference (Tango 95 %; one pair, validation draws only) | by task |",
                  "|---|---|---|---|---|"]
        lines += [f"| {r['seed']} | {r['episodes']} | {r['gained']} / {r['lost']} | {fmt_part(r)} | "
                  f"{fmt_clustered(r)} |" for r in rows]
        lines += ["", (f"- Secondary, conditional on these trained pairs: the episodes pooled over the seeds "
                       f"({pooled['episodes']}): {pooled['gained']} won, {pooled['lost']} lost, {fmt_part(pooled)}, "
                       f"McNemar p {pooled['p']:.3g}.")]
    return "\n".join(lines) + "\n"


def summarise_reports(paths: list[Path], out: Path | None = None) -> dict[str, Any]:
    """``gpu_comparison seeds --from-json REPORT ... [--out FILE]``: the summary of these reports, printed as markdown
    and, with ``out``, written (its markdown beside it)."""
    summary = summarise(read_reports(paths))
    text = render(summary)
    print(text, end="")
    if out:
        write_report(summary, out, render)
    return summary
