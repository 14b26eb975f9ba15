"""benchmarks/arms.py, the one launcher of a comparison's arms: side by side, every arm reports its first iteration,
N is decided once on all of them (the slowest sizes it) and every arm gets the same N; an arm that fails stops the
others, named with its log's last line. (Both programs' smoke runs go through it: tests/test_gpu_comparison.py,
tests/test_paper_benchmarks.py.)"""

from __future__ import annotations

import os
import time
from pathlib import Path

from benchmarks.arms import run_side_by_side

FIRST_WALLS = {"fast": 1.0, "slow": 3.0}  # what each arm's first iteration "took"


def reporting_arm(spec: dict, plan) -> dict:
    """An arm whose first iteration took ``FIRST_WALLS[arm]`` seconds; it fails after the plan where told to."""
    n = plan(FIRST_WALLS[spec["arm"]])
    if spec.get("fail"):
        raise RuntimeError(f"{spec['arm']} broke after its plan of {n}")
    if spec.get("hang"):
        time.sleep(600)
    return {"n": n, "pid": os.getpid()}


def test_side_by_side_sizes_n_on_every_arms_first_iteration_and_a_failure_stops_the_others(tmp_path, monkeypatch):
    tests = str(Path(__file__).parent)  # the arm processes import this module's runner
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (tests, os.environ.get("PYTHONPATH")) if p))
    seen, kept = [], {}

    def decide(walls):
        seen.append(sorted(walls))
        return int(10 // max(walls))

    specs = [{"arm": arm, "deadline": time.time() + 120, "reserve": 0.0} for arm in FIRST_WALLS]
    failed = run_side_by_side(specs, reporting_arm, tmp_path / "work", decide, tmp_path / "log", kept.__setitem__)
    assert failed is None and seen == [[1.0, 3.0]]
    assert kept["fast"]["n"] == kept["slow"]["n"] == 3  # one N for both, sized on the slower
    assert os.getpid() != kept["fast"]["pid"] != kept["slow"]["pid"]  # a process each
    assert (tmp_path / "log-fast.log").is_file() and (tmp_path / "log-slow.log").is_file()

    kept.clear()
    specs = [specs[0] | {"hang": True}, specs[1] | {"fail": True}]
    started = time.monotonic()
    failed = run_side_by_side(specs, reporting_arm, tmp_path / "work", decide, tmp_path / "log", kept.__setitem__)
    assert time.monotonic() - started < 60  # the hanging arm was stopped, not waited for
    assert kept == {} and (failed.arm, failed.code) == ("slow", 1)
    assert str(failed) == "slow: its process exited 1 (RuntimeError: slow broke after its plan of 3)"
