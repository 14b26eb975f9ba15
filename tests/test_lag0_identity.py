"""benchmarks/lag0_identity.compare: every non-timing number of two runs' results, iteration by iteration."""

from __future__ import annotations

import math

from benchmarks.lag0_identity import compare


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
