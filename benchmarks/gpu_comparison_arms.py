"""The arms of ``benchmarks/gpu_comparison.py``: a trainer from the warm start with one credit estimator, its
iterations and its closing validations (T = 0.4 and greedy). ``benchmarks/arms.py`` runs them, side by side (a
process each on the one GPU) or one after the other, with N decided once for every arm.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from benchmarks.arms import Plan, open_arm, train_arm
from benchmarks.gpu_comparison_report import regime
from benchmarks.gpu_learning import mean_figures, validate_on

GREEDY_LABEL = "validation_greedy"  # the greedy pass's label in the run folder's validation.jsonl


def validate_both(run: Any) -> tuple[dict[str, list[list]], float]:
    """A started run's configured validation at the preset's temperature, then the same episodes (tasks, copies,
    random draws) greedily (T = 0); the outcomes of each and the seconds of both."""
    sampled, seconds = validate_on(run)
    engine = run.engine
    config = engine.config
    engine.config = dataclasses.replace(config, val_temperature=0.0)  # the engine's validation reads its config
    try:
        greedy, greedy_seconds = validate_on(run, list(engine.val_tasks), GREEDY_LABEL)
    finally:
        engine.config = config
    return {"sampled": sampled, "greedy": greedy}, seconds + greedy_seconds


def run_arm(spec: dict[str, Any], plan: Plan) -> dict[str, Any]:
    """One arm: build, one iteration, ``plan``, the other N - 1 iterations in the time left to it (the deadline
    less what the later arms need), then both closing validations. Returns its figures and outcomes."""
    run, build = open_arm(spec, overwrite=True)  # (an arm's folder is this command's: a rerun starts it over)
    with run:
        rows: list[dict[str, float]] = []
        train_arm(run, rows, 1, spec["deadline"], spec["reserve"])
        iterations, later_seconds = plan(rows[0]["wall"], build)
        stopped = train_arm(run, rows, iterations, spec["deadline"] - later_seconds, spec["reserve"])
        outcomes, seconds = validate_both(run)
    result = {"iterations_planned": iterations, "iterations_done": len(rows), "per_iteration": rows,
              "rates": mean_figures(rows), "build_seconds": build, "closing_validation_seconds": seconds}
    result["regime"] = regime(result["rates"])
    return result | ({"stopped": stopped} if stopped else {}) | {"outcomes": outcomes}
