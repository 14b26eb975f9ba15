"""``benchmarks/small_households_summary.py``: the before/after intervals the small-household results quote."""

from __future__ import annotations

import json

import pytest

from benchmarks import small_households_summary
from benchmarks import stats as bench_stats


def test_newcombe_interval_matches_the_published_example():
    """Newcombe (1998), method 10: 56/70 - 48/80 = 0.200, 95 % interval 0.0524 to 0.3339."""
    low, high = bench_stats.newcombe(48, 80, 56, 70)
    assert (round(low, 4), round(high, 4)) == (0.0524, 0.3339)


def test_summary_counts_successes_and_reads_the_last_validation(tmp_path):
    before = tmp_path / "before.jsonl"
    before.write_text(json.dumps({"iteration": 0, "val/success": 12 / 96, "val/success/Look": 0.25}) + "\n")
    run = tmp_path / "run.jsonl"
    lines = [{"iteration": 1, "success": 0.125, "time/update": 170.0, "val/success": 0.5},
             {"iteration": 2, "success": 0.0, "time/update": 0.002},
             {"iteration": 3, "success": 0.0, "time/update": 0.002, "val/success": 2 / 96,
              "val/success/Look": 0.0, "time/validation": 450.0}]
    run.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = small_households_summary.main(["--before", str(before), "--metrics", str(run), "--episodes", "96",
                                  "--out", str(tmp_path / "s.json")])
    assert (out["successes_before"], out["successes_after"]) == (12, 2)
    assert out["gain_newcombe95"] == [-0.1865, -0.0306]
    assert out["by_type_before"] == {"Look": 0.25} and out["by_type_after"] == {"Look": 0.0}
    assert [it["iteration"] for it in out["iterations"]] == [1, 2, 3]
    assert json.loads((tmp_path / "s.json").read_text()) == out


def test_a_metrics_file_without_validation_is_one_error(tmp_path):
    empty = tmp_path / "run.jsonl"
    empty.write_text(json.dumps({"iteration": 1, "time/update": 1.0}) + "\n")
    with pytest.raises(SystemExit, match="has no validation line"):
        small_households_summary.main(["--before", str(empty), "--metrics", str(empty), "--episodes", "96",
                                "--out", str(tmp_path / "s.json")])


def _validation(path, iteration, won, tasks=("gen/Look/1", "gen/Pick/2")):
    line = {"iteration": iteration, "task_ids": [t for t in tasks for _ in range(len(won) // len(tasks))],
            "copies": list(range(len(won) // len(tasks))) * len(tasks), "won": won, "lengths": [5] * len(won)}
    with open(path, "a") as fh:
        fh.write(json.dumps(line) + "\n")


def test_paired_comparison_counts_gained_and_lost_episodes(tmp_path):
    """Same episodes before and after: 5 gained, 1 lost of 12; McNemar exact p = P(X <= 1 | 6, 1/2) * 2."""
    metrics = tmp_path / "m.jsonl"
    metrics.write_text(json.dumps({"iteration": 0, "val/success": 0.25}) + "\n")
    before, after = tmp_path / "b.jsonl", tmp_path / "a.jsonl"
    _validation(before, 0, [1, 1, 1, 0, 0, 0] + [0, 0, 0, 0, 0, 0])
    _validation(after, 1, [0] * 12)  # an earlier validation of the run: the last line is "after"
    _validation(after, 3, [1, 0, 1, 1, 1, 0] + [1, 1, 0, 1, 0, 0])
    out = small_households_summary.main(["--before", str(metrics), "--metrics", str(metrics), "--episodes", "12",
                                  "--before-episodes", str(before), "--after-episodes", str(after),
                                  "--out", str(tmp_path / "s.json")])["paired"]
    assert (out["gained"], out["lost"], out["episodes"], out["iteration_after"]) == (5, 1, 12, 3)
    assert out["mcnemar_p"] == pytest.approx(2 * 7 / 64)
    assert out["paired_gain"] == pytest.approx(4 / 12)
    # Tango's unconditional score interval of the 5 gained, 1 lost of 12 (bench_stats.tango)
    assert out["paired_gain_tango95"] == [round(x, 4) for x in bench_stats.tango(5, 1, 12)]
    # half the 12 episodes changed: the exact power of the unconditional design (bench_stats.mcnemar_power) reaches
    # 80 % at a difference of 0.468 (Connor's normal formula would ask ~13 pairs even for 0.5 and give none)
    assert out["changed_share"] == 0.5
    assert out["paired_mde80"] == pytest.approx(0.4684, abs=1e-4)
    assert bench_stats.mcnemar_power(out["paired_mde80"], 12, 0.5) == pytest.approx(0.80, abs=1e-3)


def test_restat_rewrites_a_stored_summarys_paired_block_from_its_counts(tmp_path):
    """WebShop LoRA seed 0 as stored with the old t-interval: 7 gained, 1 lost of 96 -> Tango's [+0.006, +0.134],
    p 0.07."""
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"gain": 0.0625, "paired": {
        "episodes": 96, "iteration_before": 0, "iteration_after": 6, "gained": 7, "lost": 1, "mcnemar_p": 0.0703,
        "paired_gain": 0.0625, "paired_gain_t95": [0.0048, 0.1202], "paired_mde80": 0.08}}))
    small_households_summary.main(["--restat", str(path)])
    data = json.loads(path.read_text())
    assert data["gain"] == 0.0625 and "paired_gain_t95" not in data["paired"]
    assert data["paired"]["paired_gain_tango95"] == [round(x, 4) for x in bench_stats.tango(7, 1, 96)]
    assert data["paired"]["mcnemar_p"] == pytest.approx(18 / 256) and data["paired"]["iteration_after"] == 6


def test_pairing_different_validations_is_one_error(tmp_path):
    metrics = tmp_path / "m.jsonl"
    metrics.write_text(json.dumps({"iteration": 0, "val/success": 0.25}) + "\n")
    before, after = tmp_path / "b.jsonl", tmp_path / "a.jsonl"
    _validation(before, 0, [1, 0, 0, 0])
    _validation(after, 1, [1, 0, 0, 0], tasks=("gen/Look/1", "gen/Pick/3"))
    with pytest.raises(SystemExit, match="in only one of them"):
        small_households_summary.main(["--before", str(metrics), "--metrics", str(metrics), "--episodes", "4",
                                "--before-episodes", str(before), "--after-episodes", str(after),
                                "--out", str(tmp_path / "s.json")])


def test_identical_validations_report_no_interval(tmp_path):
    """No episode changed: the summary gives no interval and no MDE, only the note."""
    metrics = tmp_path / "m.jsonl"
    metrics.write_text(json.dumps({"iteration": 0, "val/success": 0.25}) + "\n")
    before, after = tmp_path / "b.jsonl", tmp_path / "a.jsonl"
    _validation(before, 0, [1, 0, 0, 0])
    _validation(after, 6, [1, 0, 0, 0])
    out = small_households_summary.main(["--before", str(metrics), "--metrics", str(metrics), "--episodes", "4",
                                  "--before-episodes", str(before), "--after-episodes", str(after),
                                  "--out", str(tmp_path / "s.json")])["paired"]
    assert (out["gained"], out["lost"], out["paired_gain"]) == (0, 0, 0.0)
    assert out["paired_gain_tango95"] is None and out["paired_mde80"] is None and "no episode changed" in out["note"]
