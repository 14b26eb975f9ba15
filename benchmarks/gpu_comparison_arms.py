"""The arms of ``benchmarks/gpu_comparison.py``: a trainer from the warm start with one credit estimator, its
iterations and its closing validations (T = 0.4 and greedy), run in this process one arm after the other, or each
in a process of its own so that two arms share one GPU side by side.

Every arm runs one iteration, then asks for its plan: the number of iterations N every arm runs (the same for all,
so the arms pair) and the seconds the arms after it still need. One after the other, the command answers at once;
side by side, each arm process writes its first iteration's time to ``ARM.first`` and waits for ``ARM.plan``, which
the launcher writes once every arm has reported (N sized on the slowest). An arm that fails stops the others.

    python -m benchmarks.gpu_comparison_arms SPEC.json     # one arm process (the launcher starts it)
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.gpu_comparison_report import regime
from benchmarks.gpu_learning import ROOT, iteration_figures, mean_figures, validate_on

GREEDY_LABEL = "validation_greedy"  # the greedy pass's label in the run folder's validation.jsonl
POLL_SECONDS = 0.2
# a plan: (first iteration's wall seconds, the trainer's build seconds) -> (N, seconds the later arms still need)
Plan = Callable[[float, float], tuple[int, float]]


def validate_both(trainer: Any) -> tuple[dict[str, list[list]], float]:
    """The configured validation at the preset's temperature, then the same episodes (tasks, copies, random draws)
    greedily (T = 0); the outcomes of each and the seconds of both."""
    sampled, seconds = validate_on(trainer)
    config = trainer.config
    trainer.config = dataclasses.replace(config, val_temperature=0.0)  # validation reads it from the config
    try:
        greedy, greedy_seconds = validate_on(trainer, list(trainer.val_tasks), GREEDY_LABEL)
    finally:
        trainer.config = config
    return {"sampled": sampled, "greedy": greedy}, seconds + greedy_seconds


def build_trainer(spec: dict[str, Any]) -> tuple[Any, float]:
    """The trainer a spec names (preset and overrides), with the GPU's scoring batch, and its build seconds."""
    from ecpo_train.runtime.config import load_config
    from ecpo_train.runtime.trainer import Trainer

    started = time.monotonic()
    trainer = Trainer(load_config(spec["preset"], spec["overrides"]))
    if spec["device"].startswith("cuda"):  # distinct (prompt, candidates) items per scoring forward
        trainer.policy.score_batch_size = spec["score_batch"]
    return trainer, time.monotonic() - started


def train_arm(trainer: Any, iterations: int, deadline: float, reserve: float) -> tuple[list[dict], str | None]:
    """Up to ``iterations`` iterations of ``trainer``, stopping early where the next one and ``reserve`` would pass
    ``deadline`` (``time.time()``); returns each iteration's figures (with its wall time) and why it stopped early,
    if it did."""
    rows: list[dict[str, float]] = []
    while len(rows) < iterations:
        started = time.monotonic()
        rows.append(iteration_figures(trainer.train_iteration()) | {"wall": 0.0})
        rows[-1]["wall"] = time.monotonic() - started
        mean_wall = float(np.mean([r["wall"] for r in rows]))
        if len(rows) < iterations and time.time() + mean_wall + reserve > deadline:
            return rows, f"time limit after {len(rows)} of {iterations} iterations"
    return rows, None


def run_arm(spec: dict[str, Any], plan: Plan) -> dict[str, Any]:
    """One arm: build, one iteration, ``plan``, the other N - 1 iterations in the time left to it (the deadline
    less what the later arms need), then both closing validations. Returns its figures and outcomes."""
    trainer, build = build_trainer(spec)
    try:
        done, stopped = train_arm(trainer, 1, spec["deadline"], spec["reserve"])
        iterations, later_seconds = plan(done[0]["wall"], build)
        rows, stopped = train_arm(trainer, iterations - 1, spec["deadline"] - later_seconds, spec["reserve"])
        rows = done + rows
        outcomes, seconds = validate_both(trainer)
    finally:
        trainer.close()
    result = {"iterations_planned": iterations, "iterations_done": len(rows), "per_iteration": rows,
              "rates": mean_figures(rows), "build_seconds": build, "closing_validation_seconds": seconds}
    result["regime"] = regime(result["rates"])
    return result | ({"stopped": stopped} if stopped else {}) | {"outcomes": outcomes}


def _write(path: Path, value: Any) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(value))
    partial.replace(path)


def _wait_for(path: Path, deadline: float) -> Any:
    while not path.exists():
        if time.time() > deadline:
            raise TimeoutError(f"no {path.name} by the deadline")
        time.sleep(POLL_SECONDS)
    return json.loads(path.read_text())


def run_side_by_side(specs: list[dict[str, Any]], work: Path, decide: Callable[[list[float], list[float]], int],
                     logs: Path) -> tuple[dict[str, dict[str, Any]], str | None]:
    """Each spec's arm in a process of its own, all at once; once every arm has run its first iteration,
    ``decide(first_walls, builds)`` gives N and every arm is told it. Returns each finished arm's result and, where
    an arm failed, why (the others are then stopped). Each arm's output goes to ``logs``-ARM.log."""
    procs: dict[str, subprocess.Popen] = {}
    for spec in specs:
        arm = spec["arm"]
        _write(work / f"{arm}.spec", spec)
        with open(f"{logs}-{arm}.log", "w") as log:
            procs[arm] = subprocess.Popen([sys.executable, "-m", __spec__.name, str(work / f"{arm}.spec")],
                                          cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    planned, failed = False, None
    while failed is None:
        failed = next((f"{arm}: its process exited {p.returncode} ({_last_line(logs, arm)})"
                       for arm, p in procs.items() if p.poll() not in (None, 0)), None)
        if failed is None and all(p.poll() == 0 for p in procs.values()):
            break
        if time.time() > max(s["deadline"] for s in specs) + 60:
            failed = "the arms ran past the time limit"
        firsts = [work / f"{arm}.first" for arm in procs]
        if not planned and all(f.exists() for f in firsts):
            walls, builds = zip(*(json.loads(f.read_text()) for f in firsts))
            n = decide(list(walls), list(builds))
            for arm in procs:
                _write(work / f"{arm}.plan", n)
            planned = True
        time.sleep(POLL_SECONDS)
    for p in procs.values():
        if p.poll() is None:
            p.terminate()
            p.wait()
    results = {arm: json.loads((work / f"{arm}.result").read_text()) for arm in procs
               if (work / f"{arm}.result").exists()}
    return results, failed


def _last_line(logs: Path, arm: str) -> str:
    lines = Path(f"{logs}-{arm}.log").read_text().strip().splitlines()
    return lines[-1] if lines else "no output"


def main(argv: list[str] | None = None) -> int:
    """One arm process: its spec's arm, with its plan from the launcher; its result beside the spec."""
    spec_path = Path((argv or sys.argv[1:])[0])
    spec = json.loads(spec_path.read_text())
    work, arm = spec_path.parent, spec["arm"]

    def plan(first_wall: float, build: float) -> tuple[int, float]:
        _write(work / f"{arm}.first", [first_wall, build])
        return int(_wait_for(work / f"{arm}.plan", spec["deadline"])), 0.0

    _write(work / f"{arm}.result", run_arm(spec, plan))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
