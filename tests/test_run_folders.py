"""Run folders are never lost or damaged (issue 25): refused starts change no byte, --resume keeps the run what
it is, --overwrite replaces it, a torn metrics line does not block a resume."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from conftest import QUICK, train
from typer.testing import CliRunner

from ecpo_train.runtime.config import load_config
from ecpo_train.runtime.resume import RESUMABLE_KEYS, plan_start, resume_changes
from ecpo_train.runtime.trainer import Trainer

runner = CliRunner()


def folder_hash(folder: Path) -> str:
    """Every file's relative path and bytes, and every folder's name: any change to the run folder shows."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        digest.update(str(path.relative_to(folder)).encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


def iterations(run_dir: Path) -> list[int]:
    return [int(json.loads(line)["iteration"]) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture
def finished_run(tmp_path) -> Path:
    run_dir = tmp_path / "run"
    result = train(run_dir, "iterations=3")
    assert result.exit_code == 0, result.output
    return run_dir


def refused(result, *words: str) -> str:
    """The one ``error:`` line of a refused command (exit 2, no traceback), checked to name ``words``."""
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def test_a_start_in_a_folder_holding_a_run_is_refused_and_changes_nothing(finished_run):
    before = folder_hash(finished_run)
    refused(train(finished_run, "iterations=2"), "already holds a run", "--resume", "--overwrite")
    assert folder_hash(finished_run) == before and iterations(finished_run) == [1, 2, 3]


@pytest.mark.parametrize("bad", [["env_id=ecpo/Nope-v0", "--overwrite"], ["env_id=ecpo/Nope-v0", "--resume"],
                                 ["policy=llm", "model=/nonexistent", "--overwrite"],
                                 ["policy=llm", "model=/nonexistent", "--resume", "iterations=4"],
                                 ["env_kwargs.depth=100000000", "--overwrite"], ["lr=-1", "--overwrite"]])
def test_a_failed_start_leaves_the_existing_run_unchanged(finished_run, bad):
    before = folder_hash(finished_run)
    refused(train(finished_run, *bad))
    assert folder_hash(finished_run) == before


def test_a_refused_start_in_a_new_folder_creates_nothing(tmp_path):
    refused(train(tmp_path / "new" / "run", "env_id=ecpo/Nope-v0"), "Nope")
    assert not (tmp_path / "new").exists()
    Trainer(load_config("quickstart", [f"run_dir={tmp_path / 'api'}", *QUICK])).close()  # building writes nothing
    assert not (tmp_path / "api").exists()


def test_resume_to_fewer_iterations_than_the_checkpoint_holds_is_refused_and_changes_nothing(finished_run):
    """The run shell checks the loaded engine's iteration against ``iterations`` before the first write."""
    before = folder_hash(finished_run)
    refused(train(finished_run, "iterations=2", "--resume"), "iterations=2", "checkpoint's iteration 3")
    assert folder_hash(finished_run) == before


def test_resume_with_a_damaged_checkpoint_changes_nothing(finished_run):
    (finished_run / "checkpoint.pt").write_bytes(b"\x80\x04not a checkpoint")
    before = folder_hash(finished_run)
    refused(train(finished_run, "iterations=5", "--resume"), "checkpoint.pt", "damaged")
    assert folder_hash(finished_run) == before


@pytest.mark.parametrize("change,key", [("estimator=grpo", "estimator"), ("group_size=3", "group_size"),
                                        ("credit.kappa=3.0", "credit.kappa"), ("env_kwargs.depth=6", "env_kwargs.depth"),
                                        ("lr=0.2", "lr"), ("seed=1", "seed")])
def test_resume_refuses_a_change_to_what_the_run_is_naming_the_key(finished_run, change, key):
    before = folder_hash(finished_run)
    refused(train(finished_run, "iterations=5", change, "--resume"), f"cannot change {key} ")
    assert folder_hash(finished_run) == before


def test_the_checkpoint_config_is_authoritative_even_when_config_yaml_was_edited(finished_run):
    text = (finished_run / "config.yaml").read_text().replace("estimator: ecpo", "estimator: grpo")
    (finished_run / "config.yaml").write_text(text)
    before = folder_hash(finished_run)
    refused(train(finished_run, "iterations=5", "estimator=grpo", "--resume"), "cannot change estimator")
    assert folder_hash(finished_run) == before


def test_a_run_recorded_as_algorithm_resumes_under_estimator(finished_run):
    """A run folder an earlier version wrote (its checkpoint and config.yaml say ``algorithm: ecpo``) resumes
    under today's name; changing it is still a change, named by the new name; writing ``algorithm=`` is refused
    with the pointer."""
    import torch

    checkpoint = finished_run / "checkpoint.pt"
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    state["config"] = {("algorithm" if key == "estimator" else key): value for key, value in state["config"].items()}
    del state["state_sha256"]  # (that version wrote no checksum of the state)
    torch.save(state, checkpoint)
    text = (finished_run / "config.yaml").read_text()
    assert "estimator: ecpo" in text
    (finished_run / "config.yaml").write_text(text.replace("estimator: ecpo", "algorithm: ecpo"))
    before = folder_hash(finished_run)
    refused(train(finished_run, "iterations=5", "estimator=grpo", "--resume"), "cannot change estimator")
    refused(train(finished_run, "iterations=5", "algorithm=ecpo", "--resume"), "'algorithm' is now 'estimator'")
    assert folder_hash(finished_run) == before
    result = train(finished_run, "iterations=5", "--resume")
    assert result.exit_code == 0, result.output
    assert iterations(finished_run) == [1, 2, 3, 4, 5]
    assert "estimator: ecpo" in (finished_run / "config.yaml").read_text()


def test_resume_trusts_the_checkpoint_over_a_config_yaml_damaged_by_an_older_version(finished_run):
    text = (finished_run / "config.yaml").read_text().replace("ecpo/DivergentAnchor-v0", "ecpo/Nope-v0")
    (finished_run / "config.yaml").write_text(text)  # what a refused start wrote before issue 25
    result = train(finished_run, "iterations=4", "--resume")
    assert result.exit_code == 0, result.output
    assert iterations(finished_run) == [1, 2, 3, 4]
    assert "env_id: ecpo/DivergentAnchor-v0" in (finished_run / "config.yaml").read_text()


def test_resume_of_a_run_without_a_checkpoint_is_refused_naming_overwrite(finished_run):
    (finished_run / "checkpoint.pt").unlink()  # killed before its first checkpoint
    before = folder_hash(finished_run)
    refused(train(finished_run, "iterations=5", "--resume"), "no checkpoint.pt to resume from", "--overwrite")
    assert folder_hash(finished_run) == before and iterations(finished_run) == [1, 2, 3]


def test_resume_below_the_checkpoint_iteration_is_refused(finished_run):
    before = folder_hash(finished_run)
    refused(train(finished_run, "iterations=2", "--resume"), "iterations=2", "iteration 3")
    assert folder_hash(finished_run) == before


def test_resume_records_the_allowed_changes_in_the_run_history(finished_run):
    result = train(finished_run, "iterations=5", "checkpoint_every=2", "--resume")
    assert result.exit_code == 0, result.output
    assert iterations(finished_run) == [1, 2, 3, 4, 5]
    history = [json.loads(line) for line in (finished_run / "history.jsonl").read_text().splitlines()]
    assert [event["event"] for event in history] == ["start", "resume"]
    assert history[1]["iteration"] == 3
    assert history[1]["changes"] == {"iterations": [3, 5], "checkpoint_every": [10, 2]}
    assert "iterations: 5" in (finished_run / "config.yaml").read_text()


def test_a_torn_last_metrics_line_is_dropped_with_a_warning_and_the_resume_is_exact(tmp_path, finished_run):
    whole = tmp_path / "whole"
    assert train(whole, "iterations=5").exit_code == 0
    with open(finished_run / "metrics.jsonl", "a") as fh:
        fh.write('{"iteration": 4.0, "num_st')  # a crash mid-write of the next line
    result = train(finished_run, "iterations=5", "--resume")
    assert result.exit_code == 0, result.output
    assert f"warning: {finished_run / 'metrics.jsonl'}: the last line was cut mid-write" in result.output
    resumed = (finished_run / "metrics.jsonl").read_text().splitlines()
    straight = (whole / "metrics.jsonl").read_text().splitlines()
    drop_time = [{k: v for k, v in json.loads(line).items() if not k.startswith("time/")} for line in resumed]
    assert drop_time == [{k: v for k, v in json.loads(line).items() if not k.startswith("time/")} for line in straight]


def test_a_damaged_metrics_line_before_the_last_refuses_the_resume_naming_file_and_line(finished_run):
    lines = (finished_run / "metrics.jsonl").read_text().splitlines()
    (finished_run / "metrics.jsonl").write_text("\n".join([lines[0], "{garbage", *lines[1:]]) + "\n")
    before = folder_hash(finished_run)
    refused(train(finished_run, "iterations=5", "--resume"), "metrics.jsonl line 2")
    assert folder_hash(finished_run) == before


def test_overwrite_replaces_the_run_and_keeps_other_files(finished_run):
    (finished_run / "notes.txt").write_text("mine")
    (finished_run / "eval").mkdir()
    (finished_run / "eval" / "leaderboard.json").write_text("{}")  # results of the replaced checkpoint
    result = train(finished_run, "iterations=2", "--overwrite")
    assert result.exit_code == 0, result.output
    assert iterations(finished_run) == [1, 2]
    assert (finished_run / "notes.txt").read_text() == "mine" and not (finished_run / "eval").exists()
    history = [json.loads(line)["event"] for line in (finished_run / "history.jsonl").read_text().splitlines()]
    assert history == ["overwrite"]


def test_resume_and_overwrite_together_and_a_file_as_run_dir_are_refused(tmp_path, finished_run):
    before = folder_hash(finished_run)
    refused(train(finished_run, "--resume", "--overwrite"), "choose one")
    assert folder_hash(finished_run) == before
    (tmp_path / "file").write_text("x")
    refused(train(tmp_path / "file"), "is a file")
    refused(train(tmp_path / "file" / "run"), "is a file")
    assert (tmp_path / "file").read_text() == "x"


@pytest.mark.parametrize("there", ["missing", "empty", "unrelated"])
def test_resume_where_there_is_no_run_is_refused_and_creates_nothing(tmp_path, there):
    """Issue 58.4: ``--resume`` of a missing folder, an empty one or one of unrelated files (a typo in a path) is
    one line, exit 2, and the folder stays as it was; ``--resume-or-start`` is the spelling that starts there."""
    run_dir = tmp_path / "run"
    if there != "missing":
        run_dir.mkdir()
    if there == "unrelated":
        (run_dir / "notes.txt").write_text("mine")
    before = folder_hash(tmp_path)
    refused(train(run_dir, "iterations=1", "--resume"), "nothing to resume", "--resume-or-start",
            {"missing": "does not exist", "empty": "is empty", "unrelated": "holds no run"}[there])
    assert folder_hash(tmp_path) == before and run_dir.exists() == (there != "missing")
    with pytest.raises(ValueError, match="nothing to resume"):
        plan_start(run_dir, {}, resume=True)
    assert plan_start(run_dir, {}, resume="auto").kind == "start"


def test_resume_or_start_starts_where_there_is_no_run_and_resumes_where_there_is(tmp_path):
    run_dir = tmp_path / "run"
    result = train(run_dir, "iterations=1", "--resume-or-start")
    assert result.exit_code == 0, result.output
    result = train(run_dir, "iterations=2", "--resume-or-start")
    assert result.exit_code == 0, result.output
    assert iterations(run_dir) == [1, 2]
    history = [json.loads(line)["event"] for line in (run_dir / "history.jsonl").read_text().splitlines()]
    assert history == ["start", "resume"]
    refused(train(run_dir, "iterations=2", "--resume", "--resume-or-start"), "give one")


@pytest.mark.parametrize("flag", [[], ["--resume"], ["--resume-or-start"]])
def test_a_start_never_erases_an_earlier_runs_files(finished_run, flag):
    """Issue 58.4: a folder holding an earlier run's validation.jsonl and history.jsonl but no checkpoint (nor
    config.yaml, metrics.jsonl): no start of any spelling erases them."""
    for name in ("checkpoint.pt", "config.yaml", "metrics.jsonl", "curves.png"):
        (finished_run / name).unlink(missing_ok=True)
    (finished_run / "validation.jsonl").write_text('{"iteration": 3, "won": [1]}\n')
    before = folder_hash(finished_run)
    refused(train(finished_run, "iterations=1", *flag), "--overwrite")
    assert folder_hash(finished_run) == before


def test_resume_changes_compares_nested_keys_and_allows_only_bookkeeping():
    saved = {"iterations": 3, "credit": {"kappa": 2.0}, "env_kwargs": {"rare_prob": [0.3, 0.6]}, "run_dir": "a"}
    new = {"iterations": 9, "credit": {"kappa": 2.0}, "env_kwargs": {"rare_prob": (0.3, 0.6)}, "run_dir": "b"}
    assert resume_changes(saved, new) == {"iterations": [3, 9], "run_dir": ["a", "b"]}
    with pytest.raises(ValueError, match="cannot change env_kwargs.rare_prob"):
        resume_changes(saved, new | {"env_kwargs": {"rare_prob": [0.3, 0.7]}})
    assert {"iterations", "tensorboard", "progress"} <= RESUMABLE_KEYS and "estimator" not in RESUMABLE_KEYS
    # how copies are spread over processes and waves does not change the rows: a resume may change it
    assert resume_changes({"rollout_waves": 1, "env_workers": 0}, {"rollout_waves": 2, "env_workers": 2}) == {
        "env_workers": [0, 2], "rollout_waves": [1, 2]}
    with pytest.raises(ValueError, match="cannot change behaviour_correction"):
        resume_changes({}, {"behaviour_correction": "truncated_is"})
