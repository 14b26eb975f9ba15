"""Outputs are never clobbered or stale (issue 39): ``ecpo sft --out`` refuses the current folder, the input
model's folder and a folder of other files; ``ecpo leaderboard --out-dir`` and ``ecpo eval``'s folder record what
produced their results (agent and weights, manifest, env kwargs, seeds) and refuse results of other settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ecpo_train.apps.cli import app

runner = CliRunner()


def folder_bytes(folder: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None) for p in sorted(folder.rglob("*"))}


def one_error_line(result, *words: str) -> str:
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


# ------------------------------------------------------------------------------------------------ sft --out
def sft(model: Path, out: str, *extra: str):
    return runner.invoke(app, ["sft", "--config", "corridor_llm", "--out", out, "--episodes", "2", "--epochs", "1",
                               f"model={model}", *extra])


def test_sft_refuses_an_empty_out_without_writing_the_current_folder(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.json").write_text('{"mine": true}')
    one_error_line(sft(tiny_model_dir, ""), "--out is empty")
    one_error_line(sft(tiny_model_dir, "  "), "--out is empty")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]
    assert (tmp_path / "config.json").read_text() == '{"mine": true}'


def test_sft_refuses_the_input_models_folder_and_a_folder_of_other_files(tiny_model_dir, tmp_path):
    before = folder_bytes(tiny_model_dir)
    one_error_line(sft(tiny_model_dir, str(tiny_model_dir)), "is the input model's folder")
    one_error_line(sft(tiny_model_dir, f"{tiny_model_dir}/"), "is the input model's folder")
    assert folder_bytes(tiny_model_dir) == before
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text("{}")
    one_error_line(sft(tiny_model_dir, str(other)), "holds files that are not an sft output", "sft.json")
    assert folder_bytes(other) == {"config.json": b"{}"}


def test_sft_replaces_its_own_earlier_output(tiny_model_dir, tmp_path):
    out = tmp_path / "sft"
    first = sft(tiny_model_dir, str(out))
    assert first.exit_code == 0, first.output
    assert json.loads((out / "sft.json").read_text())["episodes"] == 2
    again = sft(tiny_model_dir, str(out), "seed=1")
    assert again.exit_code == 0, again.output


def test_sft_on_a_full_disk_is_one_line_and_keeps_the_earlier_output(tiny_model_dir, tmp_path, monkeypatch):
    """Issue 52.9: safetensors reports a full disk as its own ``SafetensorError``: one line naming the folder, and
    the earlier output stays whole (the new one is written beside it)."""
    import transformers.modeling_utils
    from safetensors import SafetensorError

    out = tmp_path / "sft"
    assert sft(tiny_model_dir, str(out)).exit_code == 0
    before = folder_bytes(out)

    def full_disk(*args, **kwargs):
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", full_disk)
    result = sft(tiny_model_dir, str(out), "seed=1")
    errors = [line for line in result.output.splitlines() if line.startswith("error")]  # (beside progress bars)
    assert result.exit_code == 2 and errors == [f"error: {out}: No space left on device"], result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert folder_bytes(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["sft"]


def test_sft_on_a_real_full_filesystem_is_one_line(tiny_model_dir, tmp_path):
    """The same on a real 1 MiB filesystem (a tmpfs in a user namespace, where this machine allows one)."""
    import shutil
    import subprocess
    import sys

    if shutil.which("unshare") is None or subprocess.run(["unshare", "-rm", "true"], check=False,
                                                         capture_output=True).returncode != 0:
        pytest.skip("no user namespaces here to mount a small tmpfs in")
    disk = tmp_path / "disk"
    disk.mkdir()
    root = Path(__file__).resolve().parents[1]
    command = (f"mount -t tmpfs -o size=1m tmpfs {disk} && exec {sys.executable} -m ecpo_train.apps.cli sft "
               f"--config corridor_llm --out {disk}/sft --episodes 2 --epochs 1 model={tiny_model_dir}")
    done = subprocess.run(["unshare", "-rm", "sh", "-c", command], capture_output=True, text=True, check=False,
                          env={**__import__("os").environ, "PYTHONPATH": str(root)})
    errors = [line for line in done.stderr.splitlines() if line.startswith("error")]  # (beside progress bars)
    assert done.returncode == 2 and errors == [f"error: {disk}/sft: No space left on device"], done.stderr[-2000:]
    assert "Traceback" not in done.stderr


def test_sft_bounds_the_number_of_expert_episodes(tmp_path):
    one_error_line(runner.invoke(app, ["sft", "--config", "corridor_llm", "--out", str(tmp_path / "o"),
                                       "--episodes", "100000000", "model=x"]), "--episodes 100000000", "at most")
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------------------------------------ leaderboard
def leaderboard(out_dir: Path, *extra: str):
    return runner.invoke(app, ["leaderboard", "--agent", "expert", "--env", "ecpo/DivergentAnchor-v0", "--seeds", "1",
                               "--limit", "2", "--out-dir", str(out_dir), *extra])


def test_leaderboard_refuses_results_played_with_other_env_kwargs(tmp_path):
    out_dir = tmp_path / "lb"
    first = leaderboard(out_dir, "--env-kwarg", "depth=3", "--env-kwarg", "good_prob=1.0")
    assert first.exit_code == 0, first.output
    before = folder_bytes(out_dir)
    provenance = json.loads((out_dir / "expert" / "run.json").read_text())
    (manifest,) = provenance["manifests"].values()
    assert manifest["env_id"] == "ecpo/DivergentAnchor-v0"
    assert {g["env_kwargs"]["depth"] for g in manifest["groups"].values()} == {3}
    assert provenance["seeds"] == [0]
    line = one_error_line(leaderboard(out_dir, "--env-kwarg", "depth=4", "--env-kwarg", "good_prob=1.0"),
                          "played on other environment settings", "use another --out-dir")
    assert line.endswith("to evaluate again")
    assert folder_bytes(out_dir) == before
    # the same settings continue the folder, more seeds add to it
    more = leaderboard(out_dir, "--env-kwarg", "depth=3", "--env-kwarg", "good_prob=1.0", "--seeds", "2")
    assert more.exit_code == 0, more.output
    assert json.loads((out_dir / "expert" / "run.json").read_text())["seeds"] == [0, 1]


def test_an_evaluation_refused_before_its_first_episode_binds_no_settings(tmp_path):
    """A manifest run whose environment argument is refused used to leave run.json behind with that argument: the
    corrected command was then refused as 'results played on other environment settings', with no results there."""
    out_dir = tmp_path / "lb"
    common = ["leaderboard", "--agent", "random", "--manifest", "webshop_gen", "--limit", "1", "--seeds", "1",
              "--no-progress", "--out-dir", str(out_dir)]
    one_error_line(runner.invoke(app, [*common, "--env-kwarg", "bogus=1"]), "bogus")
    fixed = runner.invoke(app, [*common, "--env-kwarg", "max_steps=3"])
    assert fixed.exit_code == 0, fixed.output
    (manifest,) = json.loads((out_dir / "random" / "run.json").read_text())["manifests"].values()
    assert [g["env_kwargs"] for g in manifest["groups"].values()] == [{"max_steps": 3}]
    # once an episode is recorded its settings bind the folder, as before
    one_error_line(runner.invoke(app, [*common, "--env-kwarg", "max_steps=4"]), "played on other environment settings")


def test_eval_refuses_its_folder_once_the_run_has_trained_on(tmp_path):
    run_dir = tmp_path / "run"
    fast = ["n_groups=2", "group_size=2", "val_every=0", "progress=false", "tensorboard=false"]
    assert runner.invoke(app, ["train", "--config", "quickstart", f"run_dir={run_dir}", "iterations=1",
                               *fast]).exit_code == 0
    first = runner.invoke(app, ["eval", str(run_dir), "--limit", "1", "--seeds", "1"])
    assert first.exit_code == 0, first.output
    resumed = runner.invoke(app, ["train", "--config", "quickstart", f"run_dir={run_dir}", "iterations=2", *fast,
                                  "--resume"])
    assert resumed.exit_code == 0, resumed.output
    before = folder_bytes(run_dir / "eval")
    line = one_error_line(runner.invoke(app, ["eval", str(run_dir), "--limit", "1", "--seeds", "1"]),
                          "holds results of a different agent configuration", "weights")
    assert f"or delete {run_dir / 'eval'}/" in line and not line.endswith(":")  # a sentence that finishes
    assert folder_bytes(run_dir / "eval") == before


@pytest.mark.parametrize("damage", [b"{not json", b"[1, 2]"])
def test_a_damaged_run_json_is_one_line_naming_it(tmp_path, damage):
    out_dir = tmp_path / "lb"
    assert leaderboard(out_dir).exit_code == 0
    (out_dir / "expert" / "run.json").write_bytes(damage)
    one_error_line(leaderboard(out_dir), "run.json is damaged")
