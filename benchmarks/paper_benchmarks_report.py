"""The report of ``benchmarks/paper_benchmarks.py``: the paper's table before and after training, paired episode
by episode, and the registered endpoint, from the episodes the program stored.

No torch and no scipy needed: the GPU machine renders it after every stage (the paired tests then read "not
computed"), and here ``python -m benchmarks.paper_benchmarks report --from-json OUT/report.json`` renders it again
with the tests (``gpu_run_report.paired_test``, i.e. ``stats.paired_outcomes``).

An episode is stored as ``{"set", "task", "copy", "type", "won", "score", "invalid", "steps"}``: the validation set
it belongs to, its task id and copy (the pair key: before and after play the same ``(set, task, copy)`` with the
same draws), the task's type (ALFWorld's subtask), success, the environment's graded score (WebShop's purchase
score, search-QA's exact match; success elsewhere), the invalid actions it sent and its steps.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.gpu_run_report import paired_test

ALFWORLD_COLUMNS = ("Pick", "Clean", "Cool", "Look", "Heat", "Pick2", "All")  # the paper's table 1
FORMAT_FAILS_AT = 0.5  # an invalid-action share above this, before and after: the format does not work


def columns(benchmark: str, episodes: Sequence[Mapping[str, Any]]) -> dict[str, list[int]]:
    """The table's columns and the positions of the episodes each one holds: ALFWorld's six task types and All
    (the paper's table 1); WebShop's held-out goals (success; the score beside it); search-QA's validation sets
    and All (exact match)."""
    if benchmark == "alfworld":
        cols = {c: [i for i, e in enumerate(episodes) if e["type"] == c] for c in ALFWORLD_COLUMNS[:-1]}
    else:
        cols = {s: [i for i, e in enumerate(episodes) if e["set"] == s] for s in dict.fromkeys(e["set"] for e in episodes)}
    cols["All"] = list(range(len(episodes)))
    return {c: idx for c, idx in cols.items() if idx}


def key(episode: Mapping[str, Any]) -> tuple[str, str, int]:
    return (episode["set"], episode["task"], int(episode["copy"]))


def pair_lists(before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]]
               ) -> tuple[list[list], list[list]]:
    """``[[task, copy, won], ...]`` of both sides in ``before``'s order; two validations that played different
    episodes are refused (``ValueError``): they do not pair."""
    if [key(e) for e in before] != [key(e) for e in after]:
        raise ValueError("the two validations played different episodes: they do not pair")
    return ([[f"{e['set']}/{e['task']}", e["copy"], int(e["won"])] for e in before],
            [[f"{e['set']}/{e['task']}", e["copy"], int(e["won"])] for e in after])


def share(episodes: Sequence[Mapping[str, Any]], field: str) -> float:
    return sum(float(e[field]) for e in episodes) / len(episodes) if episodes else float("nan")


def invalid_rate(episodes: Sequence[Mapping[str, Any]]) -> float:
    """Invalid actions per step taken (the share of the policy's turns the environment could not read)."""
    steps = sum(int(e["steps"]) for e in episodes)
    return sum(int(e["invalid"]) for e in episodes) / steps if steps else float("nan")


def compare(benchmark: str, before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]]
            ) -> dict[str, dict[str, Any]]:
    """Per column: success before and after with the paired test (``paired_test``: the interval of
    ``stats.paired_outcomes`` where scipy is), the mean score on both sides and the invalid-action rate."""
    first, second = pair_lists(before, after)
    out = {}
    for column, idx in columns(benchmark, before).items():
        b, a = [before[i] for i in idx], [after[i] for i in idx]
        out[column] = paired_test([first[i] for i in idx], [second[i] for i in idx]) | {
            "score_before": share(b, "score"), "score_after": share(a, "score"),
            "invalid_before": invalid_rate(b), "invalid_after": invalid_rate(a)}
    return out


def score(report: dict[str, Any]) -> dict[str, Any]:
    """Fill in every paired comparison of ``report`` from its stored episodes (in place; returns it): each arm's
    after - before by column, and the first arm against each later one that ran as many iterations."""
    episodes, arms = report.get("episodes", {}), report.get("arms", [])
    before = episodes.get("before")
    report["tables"], report["comparisons"] = {}, {}
    if before is None:
        return report
    done = [a for a in arms if f"after_{a}" in episodes]
    for arm in done:
        report["tables"][arm] = compare(report["benchmark"], before, episodes[f"after_{arm}"])
    first = arms[0] if arms else None
    for arm in done:
        if arm == first or first not in done:
            continue
        runs = report.get("arm_results", {})
        same = runs.get(arm, {}).get("iterations_done") == runs.get(first, {}).get("iterations_done")
        name = f"{first} - {arm}"
        report["comparisons"][name] = (compare(report["benchmark"], episodes[f"after_{arm}"], episodes[f"after_{first}"])
                                       if same else {"not compared": "the arms ran different numbers of iterations"})
    report["endpoint"] = endpoint(report)
    return report


def endpoint(report: Mapping[str, Any]) -> dict[str, Any]:
    """The registered endpoint read from the tables: the first arm's All after - before (``shown`` where the
    interval lies above 0), the comparison with the second arm where both ran, and where the format does not
    work (invalid-action share above ``FORMAT_FAILS_AT`` before and after) that rate instead of a learning
    figure."""
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
    return f"{test['diff']:+.3f} [{low:+.3f}, {high:+.3f}], {word} (MDE {_num(test.get('mde'))})"


# ---------------------------------------------------------------------------------------------- markdown
def _num(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return f"{value:.{digits}f}"


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
    cols = list(next(iter(tables.values())))
    lines = ["| | " + " | ".join(cols) + " |", "|---" + "|:-:" * len(cols) + "|"]
    first = next(iter(tables.values()))
    lines.append("| before training | " + " | ".join(_cell(first[c], "before", benchmark) for c in cols) + " |")
    for arm, t in tables.items():
        lines.append(f"| after, {arm} | " + " | ".join(_cell(t[c], "after", benchmark) for c in cols) + " |")
        lines.append(f"| change, {arm} | " + " | ".join(_change(t[c]) for c in cols) + " |")
    for name, t in report.get("comparisons", {}).items():
        if "All" in t:
            lines.append(f"| {name}, after | " + " | ".join(_change(t[c]) for c in cols) + " |")
    lines.append("| invalid actions per step, before -> after | " + " | ".join(
        f"{_num(first[c]['invalid_before'], 2)} -> {_num(first[c]['invalid_after'], 2)}" for c in cols) + " |")
    return lines


def render(report: Mapping[str, Any]) -> str:
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
        unit = "score / success %" if report.get("benchmark") == "webshop" else (
            "exact match %" if report.get("benchmark") == "searchqa" else "success %")
        lines += ["", f"{unit}; change: after - before in points, paired episode by episode, 95 % interval:", ""]
        lines += table_lines
    point = report.get("endpoint")
    if point:
        lines += ["", "**Registered endpoint** (module docstring of `benchmarks/paper_benchmarks.py`):"]
        lines += [f"- {k}: {v}" for k, v in point.items() if k not in ("read",)]
    return "\n".join(lines) + "\n"
