"""The markdown of ``benchmarks/gpu_run.py``'s JSON, each stage's, written after every part; and the paired
before/after statistics of a learning run (``paired_test``, which the learning programs share). No torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

PART_NAMES = ("environment", "paper_iteration")  # gpu_run native's (the first run's credit and learning: finished)
RLLIB_PARTS = ("environment", "first_iteration", "gpu_runners", "lag", "cpu_runners")
PHASES = ("sampling", "credit", "update", "sync")  # an iteration's time split, both engines (gpu_run.time_split)
PAPER_ITERATION_SECONDS = {"ECPO paper, Qwen2.5-1.5B, 8x A100": 302.8, "GiGPO, Qwen2.5-1.5B, 2x H100": 362.8}


def paired_test(before: list[list], after: list[list]) -> dict[str, Any]:
    """Success before and after on the same episodes, and, where scipy is installed, the paired test of
    ``benchmarks/stats.paired_outcomes`` (Tango's interval, Newcombe's, McNemar's p, the MDE, and the
    interval clustered by task, since every task is validated more than once). The GPU machine may lack scipy:
    the run stores the outcomes, and its program's ``report --from-json`` here fills the test in."""
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


def num(value: Any, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return f"{value:,.{digits}f}" if isinstance(value, float) else str(value)


def render(report: Mapping[str, Any]) -> str:
    """The markdown report of a ``gpu_run native`` JSON (whatever parts it holds)."""
    parts = report.get("parts", {})
    env = parts.get("environment", {})
    smoke = " (smoke sizes: not a measurement)" if report.get("smoke") else ""
    done = ", ".join(p for p in PART_NAMES if p in parts) or "none"
    lines = [f"# The GPU run ({env.get('gpu') or env.get('device', 'unknown device')})", "",
             f"Written by `benchmarks/gpu_run.py`{smoke}; parts done: {done}.", ""]
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
    if "paper_iteration" in parts and "error" not in parts["paper_iteration"]:
        p = parts["paper_iteration"]
        lines += ["## 2. The paper-shaped iteration", "",
                  (f"{p['model']}, {p['groups']} groups x {p['group_size']} on {p['env_id']} (native engine), "
                   f"{p['response']}-token responses (random weights never stop early: every reply is "
                   f"{p['response']} tokens), {p['steps']} environment steps per episode, {p['rows']} rows."), ""]
        keys = ("generation", "env", "credit", "update")
        lines += ["| run | " + " | ".join(f"{k} s" for k in keys) + " | iteration s | rows/iter | decisions/s | "
                  "update tok/s |", "|---" * (len(keys) + 5) + "|",
                  "| measured | " + " | ".join(num(p.get(f"time/{k}")) for k in keys) +
                  f" | {num(p.get('time/iteration'))} | {num(p.get('rows_per_iteration'), 1)} | "
                  f"{num(p.get('decisions_per_s'))} | {num(p.get('update_tokens_per_s'), 0)} |", "",
                  (f"{p.get('mixed_precision')} mixed precision, {p.get('attention')} attention. Peak memory "
                   f"{num(p.get('peak_memory_gib'))} GiB; generation {num(p.get('generation_tokens_per_s'), 0)} "
                   f"tok/s, update {num(p.get('update_tokens_per_s'), 0)} tok/s."), "",
                  (f"At {p['paper_steps']} steps per episode (the paper's horizon, every step taken, every reply "
                   f"{p['response']} tokens) the same rates give {num(p.get('projected_iteration_seconds'), 1)} s "
                   "per iteration; beside it:"),
                  *(f"- {name}: {seconds} s per iteration" for name, seconds in PAPER_ITERATION_SECONDS.items()), ""]
    return "\n".join(lines) + "\n"


def render_rllib(report: dict[str, Any]) -> str:
    """The report's markdown: both engines' time split, the checkpoint round trip, the runner cases."""
    parts = report["parts"]
    device = parts.get("environment", {}).get("gpu") or parts.get("environment", {}).get("device", "?")
    lines = [f"# The RLlib engine on one GPU ({device})", "",
             (f"`python -m benchmarks.gpu_run rllib`{' --smoke' if report.get('smoke') else ''}; "
              f"{report.get('seconds', 0):.0f} s. JSON beside this file."), ""]
    first = parts.get("first_iteration", {})
    if "time_split" in first:
        ck, split = first["checkpoint"], first["time_split"]
        lines += ["## Native vs RLlib (one runner, the learner and the runner on the device)", "",
                  (f"- checkpoint saved from the learner in {ck['save_seconds']:.1f} s, restored in "
                   f"{ck['restore_seconds']:.1f} s, iteration {ck['resumed_iteration']:.0f} run from it"), "",
                  "| seconds per iteration | " + " | ".join(PHASES) + " | iteration |",
                  "|---|" + "---:|" * (len(PHASES) + 1),
                  *(f"| {engine} | " + " | ".join(f"{split[engine][p]:.3f}" for p in (*PHASES, "iteration")) + " |"
                    for engine in ("native", "rllib")),
                  "", f"RLlib / native iteration time: **{split['rllib_over_native']:.2f}x** (goal <= 1.2x)", ""]
        memory = first.get("memory", {})
        peaks = [(role, m.get("peak_gib")) for role, m in memory.items() if isinstance(m, dict)]
        peaks += [(f"runner {k + 1}", m.get("peak_gib")) for k, m in enumerate(memory.get("runners") or [])]
        lines += ["Peak GPU memory (torch, per process): " + ", ".join(
            f"{role} {'-' if gib is None else f'{gib:.2f} GiB'}" for role, gib in peaks), ""]
    for name, title in (("gpu_runners", "runners sharing the GPU"), ("lag", "max_policy_lag=1"),
                        ("cpu_runners", "runners on CPU cores")):
        part = parts.get(name, {})
        if "time_split" in part:
            split, shares = part["time_split"], part["gpu_shares"]
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
