"""How many ECPO vs GiGPO w/std seed pairs one GPU window holds, from the first GPU run's committed rates.

The first GPU run (``benchmarks/results/gpu_run.json``, part 4: SmolLM2-135M on ``alfworld_gpu``, one H100) measured
every stage a ``gpu_comparison`` pair is made of: the expert warm start (45.3 s for 96 episodes), a validation
(23.5 s for 800 episodes at T = 0.4) and an iteration (7.5 s for 1,008 rows). A pair here is one seed: the warm
start, the validation before training at T = 0.4 and at T = 0 (greedy), each arm's iterations and its two closing
validations. Each stage is carried to another preset in proportion to what it processes (episodes, rows), which
the small batches of a GPU that is launch-bound at this size make an optimistic count: the plan is a ceiling to
size a lease's seed loop, and the report a command writes records the rates it measured for the next plan.

Two arms run side by side as two processes share the GPU. How much that slows each one (``contention``: an arm's
iteration time beside another, over its time alone) was not measured by the first run: 1 is perfect overlap, 2 no
gain over running them one after the other. The plan gives both ends; a ``gpu_comparison`` report records its
plan beside the seconds its pair took (``window_plan.measured_pair_seconds``) and each arm's iteration times, which
is what the next plan should be read against.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks import RESULTS
from ecpo_train.runtime.config import load_config

GPU_RUN = RESULTS / "gpu_run.json"
# The first run's lease: 612 s held (the machine's start, the transfers, install, the model's conversion, parts 1-3
# and part 4), docs/gpu.md. What it spent outside part 4's own stages is the setup a comparison lease pays once;
# parts 1-3 ran beside the model's conversion, so this bound is high, never low.
FIRST_LEASE_SECONDS = 612.0
WINDOW_SECONDS = 900.0  # one 15-minute device window
BUILD_SECONDS = 5.0  # a trainer's build from the warm start (SmolLM2-135M: a model load)
CLOSING_MARGIN = 1.15  # a closing validation's time, as a multiple of the one before training (plus 10 s)


def closing_seconds(validation: float) -> float:
    """What to keep for a closing validation that took ``validation`` seconds before training (and the writes)."""
    return CLOSING_MARGIN * validation + 10.0


def first_run_rates(path: Path = GPU_RUN) -> dict[str, float]:
    """Seconds per unit of each stage of the first GPU run's part 4, and the setup it paid outside them."""
    parts = json.loads(path.read_text())["parts"]
    learning, rates = parts["learning"], parts["learning"]["rates"]
    preset = load_config(learning["preset"])
    return {"sft_per_episode": learning["sft"]["seconds"] / learning["sft"]["episodes"],
            "validation_per_episode": learning["validation_seconds"] / learning["validation"]["episodes"],
            "iteration_per_row": rates["time/iteration"] / rates["rows_per_iteration"],
            "rows_per_episode": rates["rows_per_iteration"] / (preset.n_groups * preset.group_size),
            "setup": FIRST_LEASE_SECONDS - learning["seconds"],
            "device": parts["environment"]["gpu"]}


def pair_seconds(rates: Mapping[str, float], *, iterations: int, episodes_per_iteration: int,
                 validation_episodes: int, sft_episodes: int, arms: int = 2, contention: float | None = None) -> float:
    """Seconds of one seed pair: warm start, two validations before (T = 0.4 and greedy), then each arm's build,
    ``iterations`` iterations and two closing validations; one after the other (``contention=None``) or side by
    side, each arm's stages ``contention`` times slower than alone."""
    validation = validation_episodes * rates["validation_per_episode"]
    iteration = episodes_per_iteration * rates["rows_per_episode"] * rates["iteration_per_row"]
    arm = BUILD_SECONDS + iterations * iteration + closing_seconds(2 * validation)
    shared = sft_episodes * rates["sft_per_episode"] + BUILD_SECONDS + 2 * validation
    return shared + (arms * arm if contention is None else contention * arm)


def window_plan(rates: Mapping[str, float], *, window: float = WINDOW_SECONDS, **sizes: int) -> dict[str, Any]:
    """How many seed pairs one ``window`` holds after the setup: one after the other, and side by side at both
    ends of the unmeasured contention (1: perfect overlap; 2: none)."""
    left = window - rates["setup"]
    plan: dict[str, Any] = {"window_seconds": window, "setup_seconds": rates["setup"], "device": rates["device"],
                            "sizes": dict(sizes)}
    for name, contention in (("sequential", None), ("parallel_contention_1", 1.0), ("parallel_contention_2", 2.0)):
        seconds = pair_seconds(rates, contention=contention, **sizes)
        plan[name] = {"pair_seconds": seconds, "pairs": max(0, math.floor(left / seconds))}
    return plan


def plan_text(plan: Mapping[str, Any]) -> str:
    seq, best, worst = plan["sequential"], plan["parallel_contention_1"], plan["parallel_contention_2"]
    return (f"one {plan['window_seconds'] / 60:.0f}-minute window ({plan['device']} rates of the first GPU run, "
            f"{plan['setup_seconds']:.0f} s of setup) holds {seq['pairs']} seed pair(s) one arm after the other "
            f"({seq['pair_seconds']:.0f} s a pair), {worst['pairs']}-{best['pairs']} with the two arms side by side "
            f"({best['pair_seconds']:.0f}-{worst['pair_seconds']:.0f} s a pair, contention 1-2, unmeasured)")
