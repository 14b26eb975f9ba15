"""benchmarks/pipelined_learning: the comparisons pair runs by seed and episode, and the report names every run
that left the registered conditions (runner faults, staleness)."""

from __future__ import annotations

from benchmarks.pipelined_learning import compare, report


def run(seed, arm, after, outcomes, failures=0.0):
    lag = 1.0 if arm.endswith("lag1") else 0.0
    return {"seed": seed, "arm": arm, "exact_success_before": 0.25, "exact_success_after": after,
            "val_success_after": sum(outcomes) / len(outcomes),
            "val_outcomes_after": {f"t{k % 2}#{k // 2}": bool(w) for k, w in enumerate(outcomes)}, "seconds": 100.0 + seed,
            "policy_lag_max": lag, "stale_groups_resampled": 0.0, "runner_failures": failures}


def test_lag_one_against_lag_zero_pairs_by_seed_and_by_episode():
    runs = []
    for seed, (a, b, c) in enumerate([(0.5, 0.4, 0.5), (0.6, 0.4, 0.6), (0.7, 0.6, 0.5)]):
        runs += [run(seed, "ecpo_lag0", b, [0, 0, 1, 1]), run(seed, "ecpo_lag1", a, [1, 0, 1, 1]),
                 run(seed, "gigpo_std_lag1", c, [1, 0, 1, 1], failures=2.0 if seed == 2 else 0.0)]
    parts = compare(runs)
    exact = next(p for p in parts if p["comparison"] == "ecpo_lag1 - ecpo_lag0" and p["measure"].startswith("final exact success"))
    assert abs(exact["diff"] - (0.1 + 0.2 + 0.1) / 3) < 1e-12 and exact["seeds"] == [0, 1, 2]
    episodes = next(p for p in parts if p["comparison"] == "ecpo_lag1 - ecpo_lag0" and "pooled" in p["measure"])
    assert (episodes["gained"], episodes["lost"], episodes["n"]) == (3, 0, 12)  # episode t0#0 of every seed
    assert episodes["clustered"]["clusters"] == 2  # tasks t0 and t1, each over copies and seeds: two clusters
    assert "secondary" in episodes["measure"] and "conditional on these runs" in episodes["measure"]
    text = report(runs, parts)
    assert "ecpo_lag0 0.467, ecpo_lag1 0.600, gigpo_std_lag1 0.533" in text
    assert "seed 2 gigpo_std_lag1, 2 failures" in text and "0 runs over the bound" in text
