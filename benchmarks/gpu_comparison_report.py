"""The report of ``benchmarks/gpu_comparison.py``: its paired tests, per-household outcomes and markdown, from the
outcomes a run stored. No torch: the GPU machine writes it after every stage, and ``report --from-json``
recomputes it here.

One report is one seed: its ECPO - GiGPO w/std difference is one unit of the registered comparison, which takes
the seed as the unit (``benchmarks/comparison_seeds.py``). Its episode-level McNemar lines are conditional on this
seed's two trained policies: they say which of the two won more of the same episodes, not what another seed would
do. Each arm is validated at the preset's temperature (T = 0.4: primary) and greedily (T = 0, beside it).
"""

from __future__ import annotations

from typing import Any

from benchmarks.gpu_run_report import paired_test

# the outcomes' keys: the validation before training and each arm's after, at the preset's temperature and greedy
TEMPERATURES = {"sampled": "", "greedy": "greedy_"}
# A preset with a training pool (``alfworld_cpu_pool``) validates on its pool's tasks (primary) and on unseen
# tasks (secondary); every split of a validation takes these two names.
PARTS = ("trained", "unseen")


def label(part: str) -> str:
    """How a report heads a part: "trained tasks", "unseen tasks" (other names as they are)."""
    return f"{part} tasks" if part in PARTS else part


def split(task_ids: list[str], trained: frozenset[str]) -> dict[str, list[int]]:
    """The positions of the episodes of trained tasks and of the others, in validation order; a part that holds
    no episode is left out."""
    positions: dict[str, list[int]] = {part: [] for part in PARTS}
    for i, task in enumerate(task_ids):
        positions["trained" if task in trained else "unseen"].append(i)
    return {part: idx for part, idx in positions.items() if idx}


def split_parts(trained: frozenset[str], first: list[list], second: list[list]) -> dict[str, dict[str, Any]]:
    """``paired_test(first, second)`` on the episodes of the trained tasks and on the others (parts that hold no
    episode are left out)."""
    ours, theirs = (split([o[0] for o in side], trained) for side in (first, second))
    return {name: paired_test([first[i] for i in idx], [second[i] for i in theirs.get(name, [])])
            for name, idx in ours.items()}


def households(outcomes: dict[str, list[list]]) -> dict[str, dict[str, int]]:
    """Per household (task): its validation episodes and, for each stored validation, how many it won."""
    table: dict[str, dict[str, int]] = {}
    for key, rows in outcomes.items():
        for task, _, won in rows:
            row = table.setdefault(task, {"episodes": 0} | {k: 0 for k in outcomes})
            row[key] += int(won)
            row["episodes"] += key == "before"
    return table


def score(report: dict[str, Any]) -> dict[str, Any]:
    """The paired tests of a report, from its stored outcomes, at each temperature: each arm's after - before, the
    first arm against each later one, and both by part where the preset has a training pool; and the outcomes per
    household. The GPU machine may lack scipy, so there the tests read "not computed"; ``report --from-json`` runs this
    again here on the JSON it returned."""
    outcomes = report.get("outcomes", {})
    arms = report.get("arms", [])
    trained = frozenset(report.get("train_tasks") or [])
    for prefix in TEMPERATURES.values():
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


def regime(rates: dict[str, float]) -> dict[str, float]:
    """Whether the arm ran where ECPO should differ: the share of anchors whose gate was open (estimators without
    a gate have none), lucky singletons per batch, the share of anchors whose visits diverge."""
    named = {"gate_open_share": 1 - rates["credit/gated_fraction"] if "credit/gated_fraction" in rates else None,
             "lucky_singletons_per_batch": rates.get("credit/num_lucky_singletons"),
             "divergent_anchor_share": rates.get("credit/divergent_anchor_fraction")}
    return {k: v for k, v in named.items() if v is not None}


def _regime_text(figures: dict[str, float]) -> str:
    words = {"gate_open_share": "the gate open at {:.2f} of anchors",
             "lucky_singletons_per_batch": "{:.1f} lucky singletons per batch",
             "divergent_anchor_share": "{:.2f} of anchors divergent"}
    return ", ".join(words[k].format(v) for k, v in figures.items())


def _paired(test: dict[str, Any], head: str, unchanged: str, split_words: str) -> str:
    """A paired test's line: ``head``, then the test (or why there is none), its counts in ``split_words``."""
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


def _gain(test: dict[str, Any]) -> str:
    head = f"{test['success_before']:.3f} -> {test['success_after']:.3f} on {test['episodes']} paired episodes"
    return _paired(test, head, "no episode changed its outcome", "{gained} gained, {lost} lost")


def _comparison(name: str, test: dict[str, Any]) -> str:
    first, other = name.split(" - ")
    head = f"{first} {test['success_after']:.3f}, {other} {test['success_before']:.3f} on {test['episodes']} episodes"
    return _paired(test, head, "no episode differs between the two",
                   f"{first} won {{gained}} episodes {other} lost, {{lost}} the other way")


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


def render(report: dict[str, Any]) -> str:
    """The markdown of a comparison JSON (whatever stages it holds)."""
    env = report.get("environment", {})
    smoke = " (smoke sizes: not a measurement)" if report.get("smoke") else ""
    mode = "side by side (two processes)" if report.get("parallel") else "one after the other"
    lines = [f"# ECPO against GiGPO w/std on one GPU ({env.get('gpu') or env.get('device', 'unknown device')})", "",
             (f"Written by `benchmarks/gpu_comparison.py`{smoke}. Preset `{report.get('preset')}`, seed "
              f"{report.get('seed')}, warm start {(report.get('sft') or {}).get('steps', 'n/a')} expert steps; "
              f"{report.get('iterations', 'n/a')} iterations per arm, the arms {mode}."),
             ("One seed: one unit of the registered comparison over seeds (`benchmarks/comparison_seeds.py`); the "
              "episode-level lines below are conditional on this seed's trained pair."), ""]
    if report.get("window_plan"):
        lines += [f"Window plan: {report['window_plan']['text']}.", ""]
    for arm in report.get("arms", []):
        result = report.get("results", {}).get(arm)
        if result is None:
            continue
        for temperature, prefix in TEMPERATURES.items():
            test = result.get(f"{prefix}gain")
            at = "T = 0.4" if temperature == "sampled" else "greedy, T = 0"
            if test:
                lines.append(f"- {arm} ({result['iterations_done']} iterations), {at}: {_gain(test)}")
            elif temperature == "sampled":
                lines.append(f"- {arm}: {result['iterations_done']} iterations done, closing validation not reached")
        if result.get("regime"):
            lines.append(f"  - regime, mean over iterations: {_regime_text(result['regime'])}")
    for temperature, prefix in TEMPERATURES.items():
        at = "T = 0.4, primary" if temperature == "sampled" else "greedy, T = 0"
        for name, test in report.get(f"{prefix}comparisons", {}).items():
            lines += ["", f"**{name} after training ({at})**: {_comparison(name, test)}."]
    lines += _household_lines(report)
    by_part = report.get("by_part", {})
    if by_part:
        lines += ["", (f"By part of the validation at T = 0.4 ({report.get('train_task_count')} trained tasks; "
                      "the rest unseen):")]
        for name, parts in by_part.items():
            for part, test in parts.items():
                lines.append(f"- {name}, {label(part)}: {_gain(test)}")
    if report.get("stopped"):
        lines += ["", f"Stopped early: {report['stopped']}"]
    return "\n".join(lines) + "\n"
