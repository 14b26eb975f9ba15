"""Training-curve PNGs: one panel per logged metric, from the trainer's metrics.jsonl."""

from __future__ import annotations

import json

import pytest

from ecpo_train.runtime.plotting import PANELS, logged_panels, plot_comparison
from ecpo_train.runtime.run_dir import read_metrics


def _write_run(folder, rows):
    folder.mkdir()
    (folder / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return folder


def test_panels_follow_what_the_runs_logged(tmp_path):
    base = {"success": 0.5, "reward_mean": 5.0, "episode_length": 3.0}
    grpo = _write_run(tmp_path / "grpo", [{"iteration": i, **base} for i in (1, 2)])
    ecpo = _write_run(tmp_path / "ecpo", [{"iteration": i, **base, "credit/mean_rho": 0.1} for i in (1, 2)])
    titles = [title for _, _, title in logged_panels({"grpo": read_metrics(grpo)})]
    assert titles == ["success rate", "episode reward (mean)", "episode length"]
    both = logged_panels({"grpo": read_metrics(grpo), "ecpo": read_metrics(ecpo)})
    assert [p[0] for p in both] == ["success", "reward_mean", "episode_length", "credit/mean_rho"]
    assert set(both) <= set(PANELS)
    out = plot_comparison({"grpo": grpo, "ecpo": ecpo}, tmp_path / "curves.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_folder_without_metrics_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="metrics.jsonl"):
        read_metrics(tmp_path)


@pytest.mark.parametrize("value, shown", [(float("inf"), "Infinity"), ({"a": 1}, '{"a": 1}'), ("high", '"high"'),
                                          (True, "true")])
def test_ecpo_plot_of_a_value_that_is_not_a_number_is_one_line_naming_it(tmp_path, value, shown):
    """Issue 58 (low): inf gave "arange: cannot compute length", a dict a traceback, a string was plotted."""
    from typer.testing import CliRunner

    from ecpo_train.apps.cli import app

    run = _write_run(tmp_path / "run", [{"iteration": 1, "success": 0.5}, {"iteration": 2, "success": value}])
    result = CliRunner().invoke(app, ["plot", str(run)])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert f"iteration 2 logs success = {shown}, not a finite number" in lines[0]
    assert not (run / "curves.png").exists()
