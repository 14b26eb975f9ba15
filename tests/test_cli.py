"""The ``ecpo`` command line: every documented command is there, and ``bench`` runs the checkout's benchmarks."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from ecpo_train.apps.cli import app

runner = CliRunner()


def test_help_lists_every_command():
    out = runner.invoke(app, ["--help"]).output
    for command in ("demo", "train", "plot", "leaderboard", "models", "bench"):
        assert command in out


def test_bench_runs_a_benchmark_script_with_its_arguments(tmp_path):
    out_file = tmp_path / "overhead.json"
    result = runner.invoke(app, ["bench", "speed", "credit", "--reps", "2", "--out", str(out_file)])
    assert result.exit_code == 0, result.output
    figures = json.loads(out_file.read_text())
    assert figures["reps"] == 2 and {"grpo", "gigpo_std", "ecpo"} <= set(figures["median_ms"])


def test_bench_rejects_unknown_names_in_one_line_listing_the_benchmarks():
    for name in ("nope", "stats"):  # stats is a module of the package, but a library (no main)
        result = runner.invoke(app, ["bench", name])
        assert result.exit_code == 2, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: unknown benchmark {name!r}; choose one of ")
        listed = lines[0].split("choose one of ")[1].split(", ")
        assert {"speed", "memory", "credit_study", "gpu_run"} <= set(listed)
        assert "stats" not in listed and "__init__" not in listed


def test_bench_outside_a_checkout_is_one_clear_line(tmp_path, monkeypatch):
    from ecpo_train.apps import bench

    monkeypatch.setattr(bench, "CHECKOUT", tmp_path)  # an installed wheel: no benchmarks/ beside ecpo_train
    result = runner.invoke(app, ["bench", "speed", "credit"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: ecpo bench runs the benchmarks of a source checkout, and this ecpo is installed without one (wheels "
        "do not ship benchmarks/): clone the repository and `pip install -e .` it"]


def test_benchmarks_are_not_shipped_in_the_wheel():
    import tomllib
    from pathlib import Path

    config = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    assert config["tool"]["setuptools"]["packages"]["find"]["include"] == ["ecpo_gym*", "ecpo_train*"]


def test_leaderboard_bad_input_is_a_clear_error_not_a_traceback(tmp_path):
    for args in (["leaderboard", "--agent", "nope", "--out-dir", str(tmp_path)],
                 ["leaderboard", "--manifest", "no_such_manifest", "--out-dir", str(tmp_path)],
                 ["leaderboard", "--report-only", "--out-dir", str(tmp_path / "missing")]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert result.exception is None or isinstance(result.exception, SystemExit)
        assert "error:" in result.output


def test_leaderboard_command_writes_the_tables(tmp_path):
    result = runner.invoke(app, ["leaderboard", "--agent", "expert", "--manifest", "webshop_gen", "--seeds", "1",
                                 "--limit", "2", "--no-progress", "--out-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "| expert | – " in result.output and "100.0 ± 0.0 | 100.0 ± 0.0 |" in result.output
    assert json.loads((tmp_path / "leaderboard.json").read_text())["expert"]["webshop_gen"]["episodes"] == 2


def test_eval_scores_a_trained_run_on_its_own_environment(tmp_path):
    run_dir = tmp_path / "run"
    trained = runner.invoke(app, ["train", "--config", "quickstart", f"run_dir={run_dir}", "iterations=2",
                                  "n_groups=2", "group_size=2", "val_every=0"])
    assert trained.exit_code == 0, trained.output
    result = runner.invoke(app, ["eval", str(run_dir), "--limit", "2", "--no-progress"])
    assert result.exit_code == 0, result.output
    report = json.loads((run_dir / "eval" / "leaderboard.json").read_text())
    (agent_results,) = report.values()
    (group_results,) = agent_results.values()
    assert group_results["episodes"] == 2  # the first 2 tasks of the run's environment, one seed


def test_eval_takes_env_arguments_as_the_leaderboard_does(tmp_path):
    """``ecpo eval RUN --env-kwarg K=V`` plays every task of the run's environment with that argument over the
    run's own (a split with no manifest: ``split=valid_unseen``): the very episodes ``ecpo leaderboard --agent
    checkpoint --env ID --env-kwarg ...`` plays with the run's arguments spelled out."""
    run_dir = tmp_path / "run"
    trained = runner.invoke(app, ["train", "--config", "quickstart", f"run_dir={run_dir}", "iterations=1",
                                  "n_groups=2", "group_size=2", "val_every=0"])
    assert trained.exit_code == 0, trained.output
    result = runner.invoke(app, ["eval", str(run_dir), "--env-kwarg", "num_tasks=6", "--no-progress"])
    assert result.exit_code == 0, result.output
    board = runner.invoke(app, ["leaderboard", "--agent", "checkpoint", "--checkpoint", str(run_dir), "--env",
                                "ecpo/DivergentAnchor-v0", "--env-kwarg", "num_tasks=6", "--env-kwarg", "depth=8",
                                "--env-kwarg", "rare_prob=[0.3, 0.6]", "--seeds", "1", "--no-progress",
                                "--out-dir", str(tmp_path / "board")])
    assert board.exit_code == 0, board.output

    def episodes(folder):
        (log,) = folder.glob("*/DivergentAnchor-v0.jsonl")
        return [{k: v for k, v in json.loads(line).items() if k != "seconds"} for line in log.read_text().splitlines()]

    mine = episodes(run_dir / "eval")
    assert sorted(e["task_id"] for e in mine) == [f"corridor{i}" for i in range(6)]  # the run itself has 4 tasks
    assert mine == episodes(tmp_path / "board")


def test_eval_of_a_folder_without_a_run_is_a_clear_error(tmp_path):
    result = runner.invoke(app, ["eval", str(tmp_path)])
    assert result.exit_code == 2 and "config.yaml" in result.output


def test_demo_refuses_a_run_dir_or_model_it_would_overwrite_or_mislabel(tmp_path, monkeypatch):
    """``ecpo demo run_dir=R`` replaced the run in R (the demo starts with --overwrite: its own folder), and
    ``model=M`` trained M under SmolLM2's name after pulling SmolLM2: both are refused before any download."""
    from ecpo_train.apps import demo

    monkeypatch.setattr(demo, "main", lambda **kwargs: (_ for _ in ()).throw(AssertionError("the demo started")))
    for override in (f"run_dir={tmp_path / 'mine'}", "model=some/model"):
        result = runner.invoke(app, ["demo", override])
        lines = result.output.splitlines()
        assert result.exit_code == 2 and len(lines) == 1, result.output
        assert lines[0].startswith(f"error: {override}: ecpo demo trains") and "ecpo train --config corridor_llm" in lines[0]
    assert not (tmp_path / "mine").exists()


def test_eval_env_kwargs_replace_the_runs_own_and_a_key_given_twice_is_refused(tmp_path, monkeypatch):
    """``ecpo eval RUN --env-kwarg K=V`` replaces the run's K (one value each, the user's), while a K the user gives
    twice is refused rather than its last value taken."""
    from ecpo_train.evaluation import command

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("env_id: ecpo/DivergentAnchor-v0\nenv_kwargs: {num_tasks: 4, depth: 8}\n")
    seen = []

    def evaluated(options):
        seen.append(command.parse_overrides(options.env_kwarg))
        return {"markdown": "table"}

    monkeypatch.setattr(command, "run_leaderboard", evaluated)
    result = runner.invoke(app, ["eval", str(run_dir), "--env-kwarg", "num_tasks=6"])
    assert result.exit_code == 0, result.output
    assert seen == [{"depth": 8, "num_tasks": 6}]
    monkeypatch.undo()
    twice = runner.invoke(app, ["eval", str(run_dir), "--env-kwarg", "depth=3", "--env-kwarg", "depth=4"])
    assert twice.exit_code == 2 and twice.output.strip() == "error: --env-kwarg 'depth' is given twice: give it once"
