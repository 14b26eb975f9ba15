"""The speed and memory benchmarks (``benchmarks.speed``, ``benchmarks.memory`` on ``benchmarks.timing``): memory.py
counts the published parameter numbers, a stage refuses what it does not read in one line before any timing, and
the harness's figures are the ones the claims ledger reads (the GPU run's own tests are in tests/test_gpu_run.py)."""

import pytest

from benchmarks import memory, speed, timing


def test_memory_benchmark_counts_the_published_parameter_numbers():
    # Qwen2.5 model cards: 1.54B and 7.61B parameters
    assert memory.parameter_count(memory.QWEN25["Qwen2.5-1.5B"]) / 1e9 == pytest.approx(1.54, abs=0.01)
    assert memory.parameter_count(memory.QWEN25["Qwen2.5-7B"]) / 1e9 == pytest.approx(7.61, abs=0.01)
    table = {(r["model"], r["setting"]): r["total_gb"] for r in memory.computed_table()}
    full, lora = table[("Qwen2.5-7B", "full FT + checkpointing, 1 GPU")], table[("Qwen2.5-7B", "LoRA r=16 + checkpointing, 1 GPU")]
    assert lora < full / 3


@pytest.mark.parametrize("argv, words", [
    (["credit", "--episodes", "3"], "credit does not take --episodes (it takes --reps, --seed, --out)"),
    (["env", "--env", "nope"], "--env 'nope': choose from alfworld, searchqa, webshop"),
    (["openenv", "--env-kwargs", "[1]"], "--env-kwargs must be a JSON object"),
    (["openenv", "--sessions", "0"], "every --sessions in [1, 4096]"),
    (["text_policy", "--batch", "0"], "--batch and --iterations must be >= 1"),
    (["credit", "--reps", "0"], "--reps 0: at least one repetition is needed for a median"),
])
def test_a_speed_stage_refuses_bad_input_in_one_line_and_writes_nothing(capsys, tmp_path, argv, words):
    out = tmp_path / "figures.json"
    try:  # (an option the stage does not read is refused as argparse refuses: SystemExit)
        code = speed.main([*argv, "--out", str(out)])
    except SystemExit as stop:
        code = stop.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and words in err[0], err
    assert not out.exists()


def test_latency_is_the_summary_the_ledger_reads():
    seconds = [k / 1000 for k in range(1, 11)]  # 1..10 ms
    assert timing.latency(seconds) == {"median_ms": pytest.approx(5.5), "p90_ms": pytest.approx(10.0),
                                       "mean_ms": pytest.approx(5.5), "count": 10}
    assert timing.latency(seconds, 95)["p95_ms"] == pytest.approx(10.0) and timing.latency([]) == {"count": 0}


def test_a_child_measurement_returns_its_figures_and_a_failure_says_why():
    assert timing.call_in_child("benchmarks.timing:latency", seconds=[0.002], tail=50) == timing.latency([0.002], 50)
    with pytest.raises(RuntimeError, match=r"(?s)exit 1: .*TypeError"):
        timing.call_in_child("benchmarks.timing:latency", nope=1)

