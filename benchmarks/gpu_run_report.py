"""The reports of ``benchmarks/gpu_run.py``: paired before/after statistics and the markdown of each stage's JSON.

No torch: the GPU machine writes them after every part, and here ``gpu_run report`` re-renders the files a run
brought back, merged part by part, with the paired tests filled in (they need scipy, which the GPU machine may lack).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks import write_report

PART_NAMES = ("environment", "credit", "paper_iteration", "learning")  # learning: the finished part 4 (gpu_run.py)
RLLIB_PARTS = ("environment", "first_iteration", "gpu_runners", "lag", "cpu_runners")
PHASES = ("sampling", "credit", "update", "sync")  # an iteration's time split, both engines (gpu_run.time_split)
PAPER_ITERATION_SECONDS = {"ECPO paper, Qwen2.5-1.5B, 8x A100": 302.8, "GiGPO, Qwen2.5-1.5B, 2x H100": 362.8}


# ---------------------------------------------------------------------------------------------- statistics
def outcomes(validation_line: Mapping[str, Any]) -> list[list]:
    """``[[task_id, copy, won], ...]`` of one ``validation.jsonl`` line (JSON-friendly; keyed by task and copy)."""
    return [[t, c, int(w)] for t, c, w in zip(validation_line["task_ids"], validation_line["copies"],
                                              validation_line["won"])]


def paired_test(before: list[list], after: list[list]) -> dict[str, Any]:
    """Success before and after on the same episodes, and, where scipy is installed, the paired test of
    ``benchmarks/stats.paired_outcomes`` (Tango's interval, Newcombe's, McNemar's p, the MDE, and the
    interval clustered by task, since every task is validated more than once). The GPU machine may lack scipy:
    the run stores the outcomes, and re-rendering its JSON here fills the test in."""
    first = {(t, c): w for t, c, w in before}
    second = {(t, c): w for t, c, w in after}
    out = {"episodes": len(first), "success_before": sum(first.values()) / max(len(first), 1),
           "success_after": sum(second.values()) / max(len(second), 1)}
    try:
        from benchmarks.stats import paired_outcomes
    except ImportError:  # no scipy here
        return out | {"test": "not computed (no scipy): re-render here (report --from-json)"}
    return out | paired_outcomes(first, second, label="the validations before and after training",
                                 task_of=lambda key: key[0])


# The CPU recipe that alfworld_gpu keeps was chosen on this preset's validation households, which are also among
# alfworld_gpu's 400: the report gives the validation without them as well.
RECIPE_PRESET = Path(__file__).resolve().parents[1] / "ecpo_train" / "runtime" / "configs" / "alfworld_cpu.yaml"


@functools.cache
def recipe_tasks() -> frozenset[str]:
    """The validation tasks the ``alfworld_cpu`` recipe was chosen on (empty where the preset is not at hand); read
    once per process (the report is re-rendered after every iteration)."""
    try:
        from ecpo_train.runtime.config_values import read_yaml

        return frozenset(read_yaml(RECIPE_PRESET.read_text()).get("val_tasks") or [])
    except (ImportError, OSError):
        return frozenset()


def fill_tests(report: dict[str, Any]) -> dict[str, Any]:
    """The learning part's paired tests, from its stored outcomes (in place; returns ``report``): one per stored
    task set, and the unseen validation without the tasks the recipe was chosen on (``validation_untuned``)."""
    learning = report.get("parts", {}).get("learning", {})
    for name, stored in learning.get("outcomes", {}).items():
        if "before" in stored and "after" in stored:
            learning[name] = paired_test(stored["before"], stored["after"])
    validation, tuned = learning.get("outcomes", {}).get("validation", {}), recipe_tasks()
    if "before" in validation and "after" in validation:
        before = [o for o in validation["before"] if o[0] not in tuned]
        excluded = sorted({o[0] for o in validation["before"]} & tuned)
        if excluded and before:
            learning["validation_untuned"] = paired_test(
                before, [o for o in validation["after"] if o[0] not in tuned]) | {"excluded_tasks": excluded}
    return report


# ---------------------------------------------------------------------------------------------- markdown
def _num(value: Any, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return f"{value:,.{digits}f}" if isinstance(value, float) else str(value)


def _paired_line(label: str, test: Mapping[str, Any] | None) -> str:
    if not test:
        return f"- {label}: not measured"
    line = f"- {label}: {test['success_before']:.3f} -> {test['success_after']:.3f} on {test['episodes']} paired episodes"
    if "gained" not in test:
        return f"{line}; paired test {test.get('test', 'not computed')}"
    if test["gained"] + test["lost"] == 0:
        return f"{line}; no episode changed its outcome"
    from benchmarks.stats import fmt_clustered  # the test is filled in, so scipy is here
    by_task = f"; by task {fmt_clustered(test)}" if test.get("clustered") else ""
    return (f"{line} ({test['gained']} gained, {test['lost']} lost): change {test['diff']:+.3f} "
            f"[{test['low']:+.3f}, {test['high']:+.3f}] (Tango 95 %){by_task}, McNemar p = {test['p']:.3g}, "
            f"MDE {_num(test.get('mde'), 3)}")


def _split_table(rows: list[tuple[str, Mapping[str, Any]]]) -> list[str]:
    keys = ("generation", "env", "credit", "update")
    lines = ["| run | " + " | ".join(f"{k} s" for k in keys) + " | iteration s | rows/iter | decisions/s | "
             "update tok/s |", "|---" * (len(keys) + 5) + "|"]
    for name, r in rows:
        lines.append(f"| {name} | " + " | ".join(_num(r.get(f"time/{k}")) for k in keys) +
                     f" | {_num(r.get('time/iteration'))} | {_num(r.get('rows_per_iteration'), 1)} | "
                     f"{_num(r.get('decisions_per_s'))} | {_num(r.get('update_tokens_per_s'), 0)} |")
    return lines


def render(report: Mapping[str, Any]) -> str:
    """The markdown report of a ``gpu_run`` JSON (whatever parts it holds)."""
    parts = report.get("parts", {})
    env = parts.get("environment", {})
    smoke = " (smoke sizes: not a measurement)" if report.get("smoke") else ""
    done = ", ".join(p for p in PART_NAMES if p in parts) or "none"
    running = f"; stopped in: {report['running']}" if report.get("running") else ""
    lines = [f"# The GPU run ({env.get('gpu') or env.get('device', 'unknown device')})", "",
             f"Written by `benchmarks/gpu_run.py`{smoke}; parts done: {done}{running}.", ""]
    if env:
        tests = env.get("cuda_tests", {})
        lines += ["## 1. Device and the suite's CUDA tests", "",
                  (f"- device: {env.get('gpu') or env.get('device')}; torch {env.get('torch')} (CUDA "
                   f"{env.get('cuda')}), transformers {env.get('transformers')}, Python {env.get('python')}"),
                  (f"- CUDA tests (`{tests.get('command', '')}`): {tests.get('summary', 'not run')} "
                   f"(exit {tests.get('exit_code')})"), ""]
    for name in PART_NAMES:
        if "error" in parts.get(name, {}):
            lines += [f"**Part {PART_NAMES.index(name) + 1} ({name}) failed:** `{parts[name]['error']}`", ""]
    if "credit" in parts and "error" not in parts["credit"]:
        c = parts["credit"]
        lines += ["## 2. Credit on the device against numpy", "",
                  (f"ECPO credit on a paper-shaped batch ({c['rows']} rows): numpy {1e3 * c['cpu_seconds']:.2f} ms, "
                   f"{c['device']} {1e3 * c['device_seconds']:.2f} ms, "
                   f"max |difference| {c['max_abs_difference']:.1e}."), ""]
    if "paper_iteration" in parts and "error" not in parts["paper_iteration"]:
        p = parts["paper_iteration"]
        lines += ["## 3. The paper-shaped iteration", "",
                  (f"{p['model']}, {p['groups']} groups x {p['group_size']} on {p['env_id']} (native engine), "
                   f"{p['response']}-token responses (random weights never stop early: every reply is "
                   f"{p['response']} tokens), {p['steps']} environment steps per episode, {p['rows']} rows."), ""]
        lines += _split_table([("measured", p)])
        lines += ["", (f"{p.get('mixed_precision')} mixed precision, {p.get('attention')} attention. Peak memory "
                       f"{_num(p.get('peak_memory_gib'))} GiB; generation {_num(p.get('generation_tokens_per_s'), 0)} "
                       f"tok/s, update {_num(p.get('update_tokens_per_s'), 0)} tok/s."), "",
                  (f"At {p['paper_steps']} steps per episode (the paper's horizon, every step taken, every reply "
                   f"{p['response']} tokens) the same rates give {_num(p.get('projected_iteration_seconds'), 1)} s "
                   "per iteration; beside it:")]
        lines += [f"- {name}: {seconds} s per iteration" for name, seconds in PAPER_ITERATION_SECONDS.items()]
        lines.append("")
    if "learning" in parts:
        lines += _learning_lines(parts["learning"])
    return "\n".join(lines) + "\n"


def _learning_lines(part: Mapping[str, Any]) -> list[str]:
    steps = _num((part.get("sft") or {}).get("steps"))
    lines = ["## 4. SmolLM2 learns ALFWorld households", "",
             (f"Preset `{part.get('preset')}` from an `ecpo sft` warm start on expert play of training tasks only "
              f"({steps} expert steps); {part.get('iterations_done', 0)} ECPO iterations of a planned "
              f"{part.get('iterations_planned', 'n/a')} (sized from the first iteration to end inside the time "
              "limit). One run: the intervals cover the validation's draws, not run-to-run variance."), ""]
    excluded = len(part.get("validation_untuned", {}).get("excluded_tasks", []))
    for name, label in (("validation", "unseen validation tasks"),
                        ("validation_untuned", f"the same without the {excluded} tasks the CPU recipe was chosen on"),
                        ("training_tasks", "training tasks")):
        if name == "validation_untuned" and not excluded:
            continue
        before = part.get("outcomes", {}).get(name, {}).get("before")
        if name not in part and before:
            lines.append(f"- {label}: {sum(w for _, _, w in before) / len(before):.3f} before training on "
                         f"{len(before)} episodes (the closing validation was not reached)")
        else:
            lines.append(_paired_line(label, part.get(name)))
    rates = part.get("rates")
    if rates:
        rows = [("this run (mean per iteration)", rates)]
        if part.get("cpu_reference"):
            rows.append((f"CPU, {part['cpu_reference'].get('source', '')}", part["cpu_reference"]))
        lines += [""] + _split_table(rows)
    if part.get("stopped"):
        lines += ["", f"Stopped early: {part['stopped']}"]
    return lines + [""]


# ---------------------------------------------------------------------------------------------- rllib
def render_rllib(report: dict[str, Any]) -> str:
    """The report's markdown: both engines' time split, the checkpoint round trip, the runner cases."""
    parts = report["parts"]
    device = parts.get("environment", {}).get("gpu") or parts.get("environment", {}).get("device", "?")
    lines = [f"# The RLlib engine on one GPU ({device})", "",
             (f"`python -m benchmarks.gpu_run rllib`{' --smoke' if report.get('smoke') else ''}; "
              f"{report.get('seconds', 0):.0f} s. JSON beside this file."), ""]
    first = parts.get("first_iteration", {})
    if "time_split" in first:
        ck = first["checkpoint"]
        lines += ["## Native vs RLlib (one runner, the learner and the runner on the device)", "",
                  (f"- checkpoint saved from the learner in {ck['save_seconds']:.1f} s, restored in "
                   f"{ck['restore_seconds']:.1f} s, iteration {ck['resumed_iteration']:.0f} run from it"), ""]
        split = first["time_split"]
        lines += ["| seconds per iteration | " + " | ".join(PHASES) + " | iteration |",
                  "|---|" + "---:|" * (len(PHASES) + 1)]
        for engine in ("native", "rllib"):
            lines.append(f"| {engine} | " + " | ".join(f"{split[engine][p]:.3f}" for p in (*PHASES, "iteration")) + " |")
        lines += ["", f"RLlib / native iteration time: **{split['rllib_over_native']:.2f}x** (goal <= 1.2x)", ""]
        memory = first.get("memory", {})
        peaks = [(role, m.get("peak_gib")) for role, m in memory.items() if isinstance(m, dict)]
        peaks += [(f"runner {k + 1}", m.get("peak_gib")) for k, m in enumerate(memory.get("runners") or [])]
        lines += ["Peak GPU memory (torch, per process): " + ", ".join(
            f"{role} {'-' if gib is None else f'{gib:.2f} GiB'}" for role, gib in peaks), ""]
    for name, title in (("gpu_runners", "runners sharing the GPU"), ("lag", "max_policy_lag=1"),
                        ("cpu_runners", "runners on CPU cores")):
        part = parts.get(name, {})
        if "time_split" in part:
            split = part["time_split"]
            shares = part["gpu_shares"]
            lines.append(f"- {title} ({part['runners']} runners, GPU shares: learner "
                         f"{shares['num_gpus_per_learner']:g}, runner {shares['num_gpus_per_env_runner']:g}): "
                         + ", ".join(f"{p} {split[p]:.3f} s" for p in (*PHASES, "iteration")))
    if "time_split" in parts.get("lag", {}) and "time_split" in parts.get("gpu_runners", {}):
        ratio = parts["gpu_runners"]["time_split"]["iteration"] / max(parts["lag"]["time_split"]["iteration"], 1e-9)
        lines.append(f"- lag 1 speed-up over lag 0: {ratio:.2f}x (the CPU measured 1.25x)")
    for name, part in parts.items():
        if "error" in part:
            lines.append(f"\n**Part {name} failed:** `{part['error']}`")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------- merge
def merge(reports: list[Mapping[str, Any]]) -> dict[str, Any]:
    """Later reports' parts replace earlier ones of the same name; each command's environment is kept."""
    merged: dict[str, Any] = {"parts": {}, "commands": []}
    for report in reports:
        merged["smoke"] = bool(report.get("smoke"))
        merged["commands"].append(report.get("parts", {}).get("environment"))
        merged["parts"].update(report.get("parts", {}))
    return merged


def write(report: Mapping[str, Any], out: Path) -> None:
    """``out`` (JSON) and the markdown beside it (same name, ``.md``), each replaced whole."""
    write_report(report, out, render)
