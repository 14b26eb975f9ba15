"""benchmarks/lag0_identity.compare: every non-timing number of two runs' results, iteration by iteration."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest

from benchmarks.lag0_identity import compare, main

BASELINE = "56ef19a^"  # the parent of the commit that added max_policy_lag


def test_equal_runs_differ_only_in_their_timers():
    baseline = [{"success": 0.5, "time/iteration": 3.0, "credit/advantage_std": math.nan},
                {"success": 0.75, "time/iteration": 2.0}]
    current = [{"success": 0.5, "time/iteration": 9.0, "credit/advantage_std": math.nan, "sampling/policy_lag_max": 0.0},
               {"success": 0.75, "time/iteration": 1.0}]
    out = compare(baseline, current)
    assert out == {"values_compared": 3, "differences": [], "keys_only_in_current": ["sampling/policy_lag_max"]}


def test_a_difference_names_its_iteration_and_key():
    out = compare([{"success": 0.5}, {"success": 0.75}], [{"success": 0.5}, {"success": 0.7500001}])
    assert out["differences"] == [{"iteration": 2, "key": "success", "baseline": 0.75, "current": 0.7500001}]


@pytest.mark.slow
def test_lag_zero_reproduces_the_lock_step_iterations_of_the_code_before_pipelining(tiny_model_dir, tmp_path):
    """The real check: the same 3-iteration RLlib run with the code before ``max_policy_lag`` existed and with
    this checkout's (lag 0, the default), each in a fresh process; every non-timing number equal bit for bit."""
    root = Path(__file__).resolve().parents[1]
    if subprocess.run(["git", "cat-file", "-e", f"{BASELINE}^{{commit}}"], cwd=root, capture_output=True,
                      check=False).returncode != 0:
        pytest.skip(f"this clone lacks the baseline commit {BASELINE} (a shallow clone?)")
    out = tmp_path / "lag0.json"
    assert main(["--baseline", BASELINE, "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["differences"] == [] and report["values_compared"] >= 90
    assert "sampling/policy_lag_max" in report["keys_only_in_current"]  # the baseline really ran the old code
