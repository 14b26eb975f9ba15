"""The markdown of ``benchmarks/rllib_gpu.py``'s JSON: the RLlib engine on one GPU beside the native trainer."""

from __future__ import annotations

from typing import Any

PHASES = ("sampling", "credit", "update", "sync")  # an iteration's time split, both engines (rllib_gpu.time_split)


def render(report: dict[str, Any]) -> str:
    """The report's markdown: both engines' time split, the checkpoint round trip, the runner cases."""
    parts = report["parts"]
    device = parts.get("environment", {}).get("gpu") or parts.get("environment", {}).get("device", "?")
    lines = [f"# The RLlib engine on one GPU ({device})", "",
             (f"`python -m benchmarks.rllib_gpu`{' --smoke' if report.get('smoke') else ''}; "
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
