"""The reports of arms compared on the same validation episodes (the programs of ``benchmarks/arms.py``), from the
outcomes a run stored, every test ``gpu_run_report.paired_test``. No torch: the GPU machine writes them after every
stage (without scipy there, the tests read "not computed"), and ``report --from-json`` scores them again here.

Sections: ``gpu_comparison``'s one seed's pair and a protocol's pairs over seeds, then ``paper_benchmarks``' table.
A ``paper_benchmarks`` episode is stored as ``{"set", "task", "copy", "type", "won", "score", "invalid", "steps"}``:
the pair key ``(set, task, copy)`` (before and after play the same ones with the same draws), the task's type
(ALFWorld's subtask), success, the graded score (WebShop's purchase score, search-QA's exact match; success
elsewhere), its invalid actions and its steps.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks import fail
from benchmarks.gpu_run_report import num, paired_test
from benchmarks.stats import fmt_clustered, fmt_part, paired_binary, paired_diff
from ecpo_train.evaluation.tables import ALFWORLD_COLUMNS

# ---------------------------------------------------------------------------------------------- one seed's pair
# the outcomes' keys (the validation before training and each arm's after) at the preset's temperature and greedy,
# and how the report names each temperature
TEMPERATURES = {"": "T = 0.4", "greedy_": "greedy, T = 0"}
# A preset with a training pool (``alfworld_cpu_pool``) validates on its pool's tasks (primary) and on unseen
# tasks (secondary); every split of a validation takes these two names, and a report these heads.
PARTS = {"trained": "trained tasks", "unseen": "unseen tasks"}


def split_parts(trained: frozenset[str], first: list[list], second: list[list]) -> dict[str, dict[str, Any]]:
    """``paired_test(first, second)`` on the episodes of the trained tasks and on the others (a part that holds no
    episode is left out)."""
    sides = {part: [[o for o in side if (o[0] in trained) == (part == "trained")] for side in (first, second)]
             for part in PARTS}
    return {part: paired_test(*pair) for part, pair in sides.items() if pair[0]}


def households(outcomes: dict[str, list[list]]) -> dict[str, dict[str, int]]:
    """Per household (task): its validation episodes and, for each stored validation, how many it won."""
    table: dict[str, dict[str, int]] = {}
    for key, rows in outcomes.items():
        for task, _, won in rows:
            row = table.setdefault(task, {"episodes": 0} | {k: 0 for k in outcomes})
            row[key] += int(won)
            row["episodes"] += key == "before"
    return table


def score_pair(report: dict[str, Any]) -> dict[str, Any]:
    """The paired tests of a report, from its stored outcomes, at each temperature: each arm's after - before, the
    first arm against each later one, and both by part where the preset has a training pool; and the outcomes per
    household."""
    outcomes = report.get("outcomes", {})
    arms = report.get("arms", [])
    trained = frozenset(report.get("train_tasks") or [])
    for prefix in TEMPERATURES:
        before = outcomes.get(f"{prefix}before")
        done = [a for a in arms if f"{prefix}after_{a}" in outcomes and a in report.get("results", {})]
        comparisons = report.setdefault(f"{prefix}comparisons", {})
        by_part = report.setdefault(f"{prefix}by_part", {}) if trained else {}
        for arm in done:
            after = outcomes[f"{prefix}after_{arm}"]
            report["results"][arm][f"{prefix}gain"] = paired_test(before, after)
            if trained:
                by_part[f"{arm} after - before"] = split_parts(trained, before, after)
            if arm != arms[0] and arms[0] in done:
                name = f"{arms[0]} - {arm}"
                comparisons[name] = paired_test(after, outcomes[f"{prefix}after_{arms[0]}"])
                if trained:
                    by_part[name] = split_parts(trained, after, outcomes[f"{prefix}after_{arms[0]}"])
    if outcomes:
        report["households"] = households(outcomes)
    return report


REGIME_WORDS = {"gate_open_share": "the gate open at {:.2f} of anchors",
                "lucky_singletons_per_batch": "{:.1f} lucky singletons per batch",
                "divergent_anchor_share": "{:.2f} of anchors divergent"}


def regime(rates: dict[str, float]) -> dict[str, float]:
    """Whether the arm ran where ECPO should differ: the share of anchors whose gate was open (estimators without
    a gate have none), lucky singletons per batch, the share of anchors whose visits diverge."""
    named = {"gate_open_share": 1 - rates["credit/gated_fraction"] if "credit/gated_fraction" in rates else None,
             "lucky_singletons_per_batch": rates.get("credit/num_lucky_singletons"),
             "divergent_anchor_share": rates.get("credit/divergent_anchor_fraction")}
    return {k: v for k, v in named.items() if v is not None}


def _paired(test: dict[str, Any], name: str | None = None) -> str:
    """A paired test's line (or why there is none): an arm's after - before, or the arms ``name`` ("first -
    other") after training."""
    if name is None:
        head = f"{test['success_before']:.3f} -> {test['success_after']:.3f} on {test['episodes']} paired episodes"
        unchanged, split_words = "no episode changed its outcome", "{gained} gained, {lost} lost"
    else:
        first, other = name.split(" - ")
        head = f"{first} {test['success_after']:.3f}, {other} {test['success_before']:.3f} on {test['episodes']} episodes"
        unchanged = "no episode differs between the two"
        split_words = f"{first} won {{gained}} episodes {other} lost, {{lost}} the other way"
    if "gained" not in test:
        return f"{head}; paired test {test.get('test', 'not computed')}"
    if test["gained"] + test["lost"] == 0:
        return f"{head}; {unchanged}"
    text = f"{head} ({split_words.format(**test)}): {test['diff']:+.3f} [{test['low']:+.3f}, {test['high']:+.3f}]"
    if test.get("interval"):
        text += f" ({test['interval']})"
    if isinstance(test.get("clustered"), dict):  # each household is validated more than once: its cluster
        c = test["clustered"]
        text += f", by household ({c['clusters']}) [{c['low']:+.3f}, {c['high']:+.3f}]"
    return f"{text}, p = {test['p']:.3g}, MDE {test['mde']:.3f}"


def _household_lines(report: dict[str, Any]) -> list[str]:
    arms = [a for a in report.get("arms", []) if f"after_{a}" in report.get("outcomes", {})]
    table = report.get("households") or {}
    if len(arms) < 2 or not table:
        return []
    first, other = (f"after_{a}" for a in arms[:2])
    ahead = sum(r[first] > r[other] for r in table.values())
    behind = sum(r[first] < r[other] for r in table.values())
    split_most = sorted(table.items(), key=lambda item: -abs(item[1][first] - item[1][other]))[:5]
    return ["", (f"Per household (T = 0.4, {len(table)} households): {arms[0]} won more episodes on {ahead}, "
                 f"{arms[1]} on {behind}, tied on {len(table) - ahead - behind}. Largest differences (won of "
                 "episodes, before / " + " / ".join(arms[:2]) + "): "
                 + "; ".join(f"{task} {r['before']}/{r[first]}/{r[other]} of {r['episodes']}"
                             for task, r in split_most))]


def render_pair(report: dict[str, Any]) -> str:
    """The markdown of a ``gpu_comparison`` JSON (whatever stages it holds)."""
    env = report.get("environment", {})
    smoke = " (smoke sizes: not a measurement)" if report.get("smoke") else ""
    lines = [f"# ECPO against GiGPO w/std on one GPU ({env.get('gpu') or env.get('device', 'unknown device')})", "",
             (f"Written by `benchmarks/gpu_comparison.py`{smoke}. Preset `{report.get('preset')}`, seed "
              f"{report.get('seed')}, warm start {(report.get('sft') or {}).get('steps', 'n/a')} expert steps; "
              f"{report.get('iterations', 'n/a')} iterations per arm, the arms side by side (a process each)."),
             ("One seed: one unit of the registered comparison over seeds (`gpu_comparison seeds`); the "
              "episode-level lines below are conditional on this seed's trained pair."), ""]
    for arm in report.get("arms", []):
        result = report.get("results", {}).get(arm)
        if result is None:
            continue
        for prefix, at in TEMPERATURES.items():
            if result.get(f"{prefix}gain"):
                lines.append(f"- {arm} ({result['iterations_done']} iterations), {at}: {_paired(result[f'{prefix}gain'])}")
            elif not prefix:
                lines.append(f"- {arm}: {result['iterations_done']} iterations done, closing validation not reached")
        if result.get("regime"):
            lines.append("  - regime, mean over iterations: "
                         + ", ".join(REGIME_WORDS[k].format(v) for k, v in result["regime"].items()))
    for prefix, at in TEMPERATURES.items():
        for name, test in report.get(f"{prefix}comparisons", {}).items():
            lines += ["", f"**{name} after training ({at}{'' if prefix else ', primary'})**: {_paired(test, name)}."]
    lines += _household_lines(report)
    if report.get("by_part"):
        lines += ["", (f"By part of the validation at T = 0.4 ({report.get('train_task_count')} trained tasks; "
                      "the rest unseen):")]
        for name, parts in report["by_part"].items():
            lines += [f"- {name}, {PARTS.get(part, part)}: {_paired(test)}" for part, test in parts.items()]
    if report.get("stopped"):
        lines += ["", f"Stopped early: {report['stopped']}"]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------- over seeds
PROTOCOL_KEYS = ("preset", "arms", "iterations", "train_tasks", "sft_preset", "sft_seed")


def read_reports(paths: list[Path]) -> list[dict[str, Any]]:
    """The ``gpu_comparison`` reports of one protocol, one per seed, each scored here; anything else is the
    command's one-line refusal."""
    reports = []
    for path in paths:
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            fail(f"{path}: {' '.join(str(error).split())}")
        if not isinstance(report, dict) or "arms" not in report:
            fail(f"{path} is not a gpu_comparison report")
        reports.append(score_pair(report | {"path": str(path)}))
    for report in reports[1:]:
        differ = [k for k in PROTOCOL_KEYS if report.get(k) != reports[0].get(k)]
        if differ:
            fail(f"{report['path']} and {reports[0]['path']} are not one protocol: their {differ[0]} differ")
    seeds = [r.get("seed") for r in reports]
    repeated = next((s for s in seeds if seeds.count(s) > 1), None)
    if repeated is not None:
        fail(f"seed {repeated} appears in more than one report (each seed is one pair)")
    return reports


def _tests(pairs: list[dict[str, Any]], name: str, prefix: str) -> dict[str, list[dict[str, Any]]]:
    """Each part's paired test in every pair (all episodes, then its parts), at the temperature of ``prefix``."""
    def parts(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return {"all episodes": report[f"{prefix}comparisons"][name]} | report.get(f"{prefix}by_part", {}).get(name, {})

    tests = {part: [parts(r)[part] for r in pairs] for part in parts(pairs[0])}
    if any("gained" not in t for rows in tests.values() for t in rows):
        fail(f"{pairs[0]['path']}: the paired tests are not computed (scipy missing here?)")
    return tests


def _greedy(pairs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """The secondary line: across seeds on the greedy (T = 0) validation, which every ``gpu_comparison`` report holds
    (a report without it is refused in one line)."""
    for report in pairs:
        if name not in report.get("greedy_comparisons", {}):
            fail(f"{report['path']}: no greedy (T = 0) validation of {name}: not a gpu_comparison report")
    tests = _tests(pairs, name, "greedy_")
    return {"endpoint": "secondary: the greedy validation (T = 0)", "seeds": [r.get("seed") for r in pairs],
            "across_seeds": {part: paired_diff([t["diff"] for t in rows]) | {"unit": "seeds"}
                             for part, rows in tests.items()},
            "per_seed_diff": {part: [t["diff"] for t in rows] for part, rows in tests.items()}}


def summarise(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """``gpu_comparison seeds``: the first arm minus the second after training over one protocol's pairs, one per
    seed (a seed whose arms stopped early is left out, named). The seed is the unit (the mean of the per-seed
    differences, its t-interval, the MDE from five seeds on): the answer about the two training procedures. Per seed,
    on all episodes and on trained and unseen tasks apart (Tango, McNemar, by task): the validation's draws, not
    run-to-run variance; secondary, the episodes pooled over seeds (conditional on these pairs) and the greedy
    validation across seeds."""
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
    for part, tests in _tests(pairs, name, "").items():
        summary["per_seed"][part] = [{"seed": r.get("seed")} | t for r, t in zip(pairs, tests)]
        summary["across_seeds"][part] = paired_diff([t["diff"] for t in tests]) | {"unit": "seeds"}
        both = [t.get("both_won") for t in tests]
        summary["pooled_episodes"][part] = paired_binary(
            sum(t["gained"] for t in tests), sum(t["lost"] for t in tests), sum(t["episodes"] for t in tests),
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
    if part not in greedy["across_seeds"]:
        return f"{head}: absent for this part."
    return f"{head} (across seeds, {_across_text(greedy['across_seeds'][part])}."


def render_seeds(summary: dict[str, Any]) -> str:
    lines = [f"# {summary['comparison']} over seeds ({summary['preset']}, {summary['iterations']} iterations)", "",
             (f"Written by `gpu_comparison seeds` from {len(summary['seeds'])} complete pair(s), seeds "
              f"{summary['seeds']}. The first arm's success minus the second's after training, on the same episodes."),
             "", ("The primary, registered endpoint is the validation at the preset's temperature (T = 0.4), across "
                  "seeds; the greedy (T = 0) validation of the same episodes is a secondary line beside it."), ""]
    lines += [f"- left out: seed {item['seed']} ({item['path']}): {item['why']}" for item in summary["left_out"]]
    for part, rows in summary["per_seed"].items():
        across, pooled = summary["across_seeds"][part], summary["pooled_episodes"][part]
        lines += ["", f"## {PARTS.get(part, part)}", "", f"- **Across seeds (T = 0.4, primary; {_across_text(across)}.**",
                  _greedy_text(summary["greedy"], part), "",
                  "| seed | episodes | won / lost | difference (Tango 95 %; one pair, validation draws only) | by task |",
                  "|---|---|---|---|---|"]
        lines += [f"| {r['seed']} | {r['episodes']} | {r['gained']} / {r['lost']} | {fmt_part(r)} | "
                  f"{fmt_clustered(r)} |" for r in rows]
        lines += ["", (f"- Secondary, conditional on these trained pairs: the episodes pooled over the seeds "
                       f"({pooled['episodes']}): {pooled['gained']} won, {pooled['lost']} lost, {fmt_part(pooled)}, "
                       f"McNemar p {pooled['p']:.3g}.")]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------- the paper's table
FORMAT_FAILS_AT = 0.5  # an invalid-action share above this, before and after: the format does not work


def columns(benchmark: str, episodes: Sequence[Mapping[str, Any]]) -> dict[str, list[int]]:
    """The table's columns and the positions of the episodes each one holds: ALFWorld's six task types and All
    (the paper's table 1); WebShop's held-out goals (success; the score beside it); search-QA's validation sets
    and All (exact match)."""
    field, names = ("type", ALFWORLD_COLUMNS[:-1]) if benchmark == "alfworld" else ("set", [e["set"] for e in episodes])
    cols = {c: [i for i, e in enumerate(episodes) if e[field] == c] for c in dict.fromkeys(names)}
    cols["All"] = list(range(len(episodes)))
    return {c: idx for c, idx in cols.items() if idx}


def pair_lists(before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]]
               ) -> tuple[list[list], list[list]]:
    """``[[task, copy, won], ...]`` of both sides in ``before``'s order; two validations that played different
    episodes are refused (``ValueError``): they do not pair."""
    if [(e["set"], e["task"], int(e["copy"])) for e in before] != [(e["set"], e["task"], int(e["copy"])) for e in after]:
        raise ValueError("the two validations played different episodes: they do not pair")
    return tuple([[f"{e['set']}/{e['task']}", e["copy"], int(e["won"])] for e in side] for side in (before, after))


def share(episodes: Sequence[Mapping[str, Any]], field: str) -> float:
    return sum(float(e[field]) for e in episodes) / len(episodes) if episodes else float("nan")


def invalid_rate(episodes: Sequence[Mapping[str, Any]]) -> float:
    """Invalid actions per step taken (the share of the policy's turns the environment could not read)."""
    steps = sum(int(e["steps"]) for e in episodes)
    return sum(int(e["invalid"]) for e in episodes) / steps if steps else float("nan")


def compare(benchmark: str, before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]]
            ) -> dict[str, dict[str, Any]]:
    """Per column: success before and after with the paired test, the mean score on both sides and the
    invalid-action rate."""
    first, second = pair_lists(before, after)
    out = {}
    for column, idx in columns(benchmark, before).items():
        b, a = [before[i] for i in idx], [after[i] for i in idx]
        out[column] = paired_test([first[i] for i in idx], [second[i] for i in idx]) | {
            "score_before": share(b, "score"), "score_after": share(a, "score"),
            "invalid_before": invalid_rate(b), "invalid_after": invalid_rate(a)}
    return out


def score_table(report: dict[str, Any]) -> dict[str, Any]:
    """Fill in every paired comparison of ``report`` from its stored episodes (in place; returns it): each arm's
    after - before by column, and the first arm against each later one that ran as many iterations."""
    episodes, arms, runs = report.get("episodes", {}), report.get("arms", []), report.get("arm_results", {})
    report["tables"], report["comparisons"] = {}, {}
    if "before" not in episodes:
        return report
    done = [a for a in arms if f"after_{a}" in episodes]
    for arm in done:
        report["tables"][arm] = compare(report["benchmark"], episodes["before"], episodes[f"after_{arm}"])
        if arm != arms[0] and arms[0] in done:
            same = runs.get(arm, {}).get("iterations_done") == runs.get(arms[0], {}).get("iterations_done")
            report["comparisons"][f"{arms[0]} - {arm}"] = (
                compare(report["benchmark"], episodes[f"after_{arm}"], episodes[f"after_{arms[0]}"]) if same
                else {"not compared": "the arms ran different numbers of iterations"})
    report["endpoint"] = endpoint(report)
    return report


def endpoint(report: Mapping[str, Any]) -> dict[str, Any]:
    """The registered endpoint (``paper_benchmarks``' docstring) read from the tables."""
    arms = report.get("arms", [])
    first = report["tables"].get(arms[0], {}).get("All") if arms else None
    if first is None:
        return {"read": False, "why": "the first arm's closing validation was not reached"}
    out: dict[str, Any] = {"read": True, "arm": arms[0], "after_minus_before": _verdict(first, "learning shown")}
    if first["invalid_before"] > FORMAT_FAILS_AT and first["invalid_after"] > FORMAT_FAILS_AT:
        out["format"] = (f"a 135M model does not make this format work: invalid-action rate "
                         f"{first['invalid_before']:.2f} before and {first['invalid_after']:.2f} after training "
                         "(no learning figure is read)")
    for name, table in report["comparisons"].items():
        if "All" in table:
            out[name] = _verdict(table["All"], f"{arms[0]} better")
    return out


def _verdict(test: Mapping[str, Any], positive: str) -> str:
    low, high = test.get("low"), test.get("high")
    if low is None or high is None:
        return f"{test['success_after'] - test['success_before']:+.3f}; paired test not computed (rescore here)"
    if not (math.isfinite(low) and math.isfinite(high)):
        return "+0.000: no episode differs"
    word = positive if low > 0 else ("worse" if high < 0 else "not shown")
    return f"{test['diff']:+.3f} [{low:+.3f}, {high:+.3f}], {word} (MDE {num(test.get('mde'), 3)})"


def _cell(test: Mapping[str, Any], side: str, benchmark: str) -> str:
    success = 100 * test[f"success_{side}"]
    if benchmark == "webshop":
        return f"{100 * test[f'score_{side}']:.1f} / {success:.1f}"
    return f"{success:.1f}"


def _change(test: Mapping[str, Any]) -> str:
    low, high = test.get("low"), test.get("high")
    diff = 100 * (test["success_after"] - test["success_before"])
    if low is None or high is None:
        return f"{diff:+.1f} (test not computed)"
    if not (math.isfinite(low) and math.isfinite(high)):
        return f"{diff:+.1f} (none changed)"
    return f"{diff:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}]"


def table(report: Mapping[str, Any]) -> list[str]:
    """The paper's layout: one row before training, one after per arm, and the paired change with its 95 %
    interval (percentage points); WebShop cells read "score / success"."""
    benchmark, tables = report["benchmark"], report.get("tables", {})
    if not tables:
        return []
    first = next(iter(tables.values()))
    cols = list(first)
    lines = ["| | " + " | ".join(cols) + " |", "|---" + "|:-:" * len(cols) + "|",
             "| before training | " + " | ".join(_cell(first[c], "before", benchmark) for c in cols) + " |"]
    for arm, t in tables.items():
        lines.append(f"| after, {arm} | " + " | ".join(_cell(t[c], "after", benchmark) for c in cols) + " |")
        lines.append(f"| change, {arm} | " + " | ".join(_change(t[c]) for c in cols) + " |")
    lines += [f"| {name}, after | " + " | ".join(_change(t[c]) for c in cols) + " |"
              for name, t in report.get("comparisons", {}).items() if "All" in t]
    lines.append("| invalid actions per step, before -> after | " + " | ".join(
        f"{num(first[c]['invalid_before'])} -> {num(first[c]['invalid_after'])}" for c in cols) + " |")
    return lines


def render_table(report: Mapping[str, Any]) -> str:
    """The markdown of a ``paper_benchmarks`` report (whatever stages it holds)."""
    env = report.get("environment", {})
    smoke = " (smoke sizes: not a measurement)" if report.get("smoke") else ""
    sft = report.get("sft") or {}
    lines = [f"# {report.get('title', report.get('benchmark'))} on one device ({env.get('gpu') or env.get('device')})",
             "", f"Written by `benchmarks/paper_benchmarks.py --env {report.get('benchmark')}`{smoke}.", "",
             (f"- warm start: `ecpo sft` on {len(report.get('sft_tasks', []))} training tasks' expert play "
              f"({sft.get('steps', 'n/a')} expert steps, {sft.get('epochs', 'n/a')} epochs)"),
             (f"- validation: {len((report.get('episodes') or {}).get('before') or [])} episodes "
              f"({report.get('val_episodes_per_task')} per task, draws fixed by (seed, copy, step))"),
             f"- iterations: {report.get('iterations_planned', 'n/a')} planned per arm"]
    for arm, result in report.get("arm_results", {}).items():
        stopped = f" ({result['stopped']})" if result.get("stopped") else ""
        lines.append(f"- {arm}: {result.get('iterations_done', 0)} iterations done{stopped}")
    table_lines = table(report)
    if table_lines:
        unit = {"webshop": "score / success %", "searchqa": "exact match %"}.get(report.get("benchmark"), "success %")
        lines += ["", f"{unit}; change: after - before in points, paired episode by episode, 95 % interval:", ""]
        lines += table_lines
    if report.get("endpoint"):
        lines += ["", "**Registered endpoint** (module docstring of `benchmarks/paper_benchmarks.py`):"]
        lines += [f"- {k}: {v}" for k, v in report["endpoint"].items() if k != "read"]
    return "\n".join(lines) + "\n"
