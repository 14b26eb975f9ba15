"""The ``ecpo`` command line: every documented command is there, and ``bench`` runs the source tree's scripts."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from ecpo_train.cli import app

runner = CliRunner()


def test_help_lists_every_command():
    out = runner.invoke(app, ["--help"]).output
    for command in ("demo", "train", "plot", "leaderboard", "models", "bench"):
        assert command in out


def test_bench_runs_a_benchmark_script_with_its_arguments(tmp_path):
    out_file = tmp_path / "overhead.json"
    result = runner.invoke(app, ["bench", "credit_overhead", "--reps", "2", "--out", str(out_file)])
    assert result.exit_code == 0, result.output
    figures = json.loads(out_file.read_text())
    assert figures["reps"] == 2 and {"grpo", "gigpo_std", "ecpo"} <= set(figures["median_ms"])


def test_bench_rejects_unknown_names():
    result = runner.invoke(app, ["bench", "nope"])
    assert result.exit_code != 0
    assert "credit_overhead" in result.output
