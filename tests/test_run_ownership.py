"""A run folder has one owner and one engine (issue 39): a lock held for the whole run refuses a second start or
resume naming its holder, a dead holder's lock is taken over, ``--resume`` refuses the other engine's folder and
a folder without a checkpoint, every key that defines the run (nested ones, added or dropped) is compared on
resume, and a full disk during a checkpoint write keeps the old checkpoint."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import QUICK, train
from typer.testing import CliRunner

from ecpo_train.apps.cli import app
from ecpo_train.runtime.resume import resume_changes
from ecpo_train.runtime.run_dir import LOCK_FILE
from ecpo_train.runtime.run_lock import acquire_run_lock

runner = CliRunner()


def folder_bytes(folder: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None) for p in sorted(folder.rglob("*"))}


def iterations(run_dir: Path) -> list[int]:
    from ecpo_train.runtime.run_dir import read_metrics_file

    rows, _ = read_metrics_file(run_dir / "metrics.jsonl")
    return [int(row["iteration"]) for row in rows]


def one_error_line(result, *words: str) -> str:
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    lines = [line for line in result.output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and all(line.startswith(("error: ", "warning: ")) for line in lines), result.output
    for word in words:
        assert word in errors[0], (word, errors[0])
    return errors[0]


@pytest.fixture
def finished_run(tmp_path) -> Path:
    run_dir = tmp_path / "run"
    result = train(run_dir, "iterations=2")
    assert result.exit_code == 0, result.output
    assert not (run_dir / LOCK_FILE).exists()  # released at the end of the run
    return run_dir


# ------------------------------------------------------------------------------------------------ the lock
def test_a_start_or_resume_while_another_process_holds_the_folder_is_refused_naming_it(finished_run):
    before = folder_bytes(finished_run)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from ecpo_train.runtime.run_lock import acquire_run_lock; "
        f"lock = acquire_run_lock(Path({str(finished_run)!r}), 'native'); print('held', flush=True); "
        "time.sleep(120)")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        line = one_error_line(train(finished_run, "iterations=4", "--resume"), "is in use by",
                              f"pid {holder.pid} on host")
        assert "native engine" in line
        one_error_line(train(finished_run, "iterations=4", "--overwrite"), f"pid {holder.pid}")
    finally:
        holder.kill()
        holder.wait()
    after = folder_bytes(finished_run)
    after.pop(LOCK_FILE)  # the killed holder's lock file stays behind (stale)
    assert after == before
    # the holder is dead: its lock is stale, and the next resume takes it over
    result = train(finished_run, "iterations=3", "--resume")
    assert result.exit_code == 0, result.output
    assert "no longer running: taking it over" in result.output
    assert iterations(finished_run) == [1, 2, 3]
    assert not (finished_run / LOCK_FILE).exists()


def test_two_concurrent_resumes_one_is_refused_and_no_iteration_is_logged_twice(finished_run):
    command = [sys.executable, "-m", "ecpo_train.apps.cli", "train", "--config", "quickstart",
               f"run_dir={finished_run}", *QUICK, "iterations=1000000", "checkpoint_every=0", "--resume"]
    first = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while len(iterations(finished_run)) < 5:  # the first resume is training (it holds the lock)
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        second = subprocess.run(command, check=False, capture_output=True, text=True, timeout=300)
        assert first.poll() is None  # still training: the two ran at the same time
    finally:
        first.kill()
        first.wait()
    assert second.returncode == 2, second.stderr
    lines = [line for line in second.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and f"is in use by pid {first.pid}" in lines[0], lines
    logged = iterations(finished_run)
    assert len(logged) == len(set(logged)) and logged == list(range(1, len(logged) + 1))


def test_releasing_a_lock_leaves_a_folder_it_created_as_it_was(tmp_path):
    lock = acquire_run_lock(tmp_path / "new" / "run")
    assert json.loads((tmp_path / "new" / "run" / LOCK_FILE).read_text())["pid"] == os.getpid()
    with pytest.raises(ValueError, match=f"in use by pid {os.getpid()}"):
        acquire_run_lock(tmp_path / "new" / "run")  # (a second descriptor of this process is refused too)
    lock.release()
    lock.release()
    assert not (tmp_path / "new").exists()  # every folder taking the lock made, removed again (each was empty)


# ------------------------------------------------------------------------------------------------ engines
def test_a_native_resume_of_an_rllib_folder_is_refused_and_changes_nothing(finished_run):
    (finished_run / "checkpoint.pt").unlink()  # as the RLlib engine leaves a folder: rllib_checkpoint/, engine
    (finished_run / "rllib_checkpoint").mkdir()
    (finished_run / "config.yaml").write_text((finished_run / "config.yaml").read_text() + "engine: rllib\n")
    before = folder_bytes(finished_run)
    one_error_line(train(finished_run, "iterations=9", "--resume"), "holds a run of the rllib engine",
                   "--engine rllib", "--overwrite")
    assert folder_bytes(finished_run) == before


def test_an_rllib_resume_of_a_native_folder_is_refused_and_changes_nothing(tiny_model_dir, tmp_path):
    pytest.importorskip("ray")
    run_dir = tmp_path / "run"

    def llm_train(*extra: str):
        return runner.invoke(app, ["train", "--config", "corridor_llm", f"model={tiny_model_dir}", f"run_dir={run_dir}",
                                   "val_every=0", "progress=false", "tensorboard=false", "n_groups=1", "group_size=2",
                                   *extra])

    result = llm_train("iterations=1")
    assert result.exit_code == 0, result.output
    before = folder_bytes(run_dir)
    one_error_line(llm_train("iterations=3", "--engine", "rllib", "--env-runners", "0", "--resume"),
                   "holds a run of the native engine", "--engine native")
    assert folder_bytes(run_dir) == before


def test_resume_without_a_checkpoint_is_refused_naming_overwrite_and_keeps_the_history(finished_run):
    (finished_run / "checkpoint.pt").unlink()  # killed before its first checkpoint (checkpoint_every: 0)
    before = folder_bytes(finished_run)
    one_error_line(train(finished_run, "iterations=5", "--resume"), "no checkpoint.pt to resume from",
                   "--overwrite")
    assert folder_bytes(finished_run) == before and iterations(finished_run) == [1, 2]
    result = train(finished_run, "iterations=1", "--overwrite")  # asked for: the run starts over
    assert result.exit_code == 0, result.output
    assert iterations(finished_run) == [1]


def test_nproc_is_refused_with_the_rllib_engine(tmp_path):
    one_error_line(train(tmp_path / "r", "--engine", "rllib", "--nproc", "2"), "--nproc", "--learners")
    assert not (tmp_path / "r").exists()


# ------------------------------------------------------------------------------------------------ what the run is
@pytest.mark.parametrize("change,words", [
    ("env_kwargs.rare_prob=[0.3,0.7]", ["cannot change env_kwargs.rare_prob", "[0.3, 0.6]"]),
    ("env_kwargs.good_prob=0.9", ["cannot change env_kwargs.good_prob", "the run does not have it", "now 0.9"]),
    ("env_kwargs={num_tasks: 4, depth: 8}", ["cannot change env_kwargs.rare_prob", "now it is dropped"]),
    ("credit.kappa=3.0", ["cannot change credit.kappa"]),
])
def test_resume_refuses_an_added_dropped_or_changed_nested_key(finished_run, change, words):
    before = folder_bytes(finished_run)
    one_error_line(train(finished_run, "iterations=4", change, "--resume"), *words)
    assert folder_bytes(finished_run) == before


def test_resume_refuses_dropping_the_lora_adapter_of_a_lora_run():
    saved = {"lora": {"r": 4, "alpha": 8}, "iterations": 2}
    with pytest.raises(ValueError, match=r"cannot change lora.alpha \(the run has 8, now it is dropped\)"):
        resume_changes(saved, {"lora": {}, "iterations": 3})
    with pytest.raises(ValueError, match="cannot change lora.r"):
        resume_changes(saved, {"lora": {"r": 8, "alpha": 8}, "iterations": 3})


def test_a_field_one_config_lacks_is_compared_with_its_default():
    # a config written before a field existed ran with its default: the same default continues it
    assert resume_changes({"iterations": 2}, {"iterations": 3, "kl_coef": 0.01, "credit": {"kappa": 2.0}}) == \
        {"iterations": [2, 3]}
    with pytest.raises(ValueError, match="cannot change kl_coef"):
        resume_changes({"iterations": 2}, {"iterations": 3, "kl_coef": 0.5})
    with pytest.raises(ValueError, match="cannot change credit.kappa"):
        resume_changes({"credit": {}}, {"credit": {"kappa": 99.0}})
    assert resume_changes({"engine": "rllib", "a_key_of_another_version": 1}, {}) == {}


def test_an_allowed_change_is_recorded_in_history_and_config_yaml(finished_run):
    result = train(finished_run, "iterations=3", "checkpoint_every=5", "--resume")
    assert result.exit_code == 0, result.output
    history = [json.loads(line) for line in (finished_run / "history.jsonl").read_text().splitlines()]
    assert history[-1]["event"] == "resume"
    assert history[-1]["changes"] == {"checkpoint_every": [10, 5], "iterations": [2, 3]}
    config = (finished_run / "config.yaml").read_text()
    assert "iterations: 3\n" in config and "checkpoint_every: 5\n" in config


# ------------------------------------------------------------------------------------------------ a full disk
def test_a_full_disk_during_a_checkpoint_write_is_one_line_and_keeps_the_old_checkpoint(finished_run, monkeypatch):
    old = (finished_run / "checkpoint.pt").read_bytes()

    def full_disk(state, path, *args, **kwargs):  # an injected fault: the write starts, then the disk is full
        Path(path).write_bytes(b"partial")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(torch, "save", full_disk)
    line = one_error_line(train(finished_run, "iterations=3", "--resume"), "could not be written",
                          "No space left on device", "the previous checkpoint is kept")
    assert "checkpoint.pt" in line
    assert (finished_run / "checkpoint.pt").read_bytes() == old
    assert not list(finished_run.glob("checkpoint.pt.partial*")) and not (finished_run / LOCK_FILE).exists()
    monkeypatch.undo()
    result = train(finished_run, "iterations=3", "--resume")  # space again: the run continues from the old one
    assert result.exit_code == 0, result.output
    assert iterations(finished_run) == [1, 2, 3]



def test_runner_counts_beyond_the_cpus_ray_sees_are_refused_in_one_line(tiny_model_dir, tmp_path):
    pytest.importorskip("ray")
    from ecpo_train.integrations.rllib import ECPOConfig
    from ecpo_train.integrations.rllib.llm.engine import check_runner_cpus
    from ecpo_train.runtime.config import load_config

    config = ECPOConfig.from_train_config(load_config("corridor_llm", [f"model={tiny_model_dir}",
                                                                      f"run_dir={tmp_path}"]))
    with pytest.raises(ValueError, match=r"^--env-runners 3 and --learners 0 need 3 CPUs and Ray sees 2: lower"):
        check_runner_cpus(config.env_runners(num_env_runners=3), 2.0)
    check_runner_cpus(config.env_runners(num_env_runners=2), 2.0)
    with pytest.raises(ValueError, match=r"--env-runners 1 and --learners 2 need 3 CPUs"):
        check_runner_cpus(config.env_runners(num_env_runners=1).learners(num_learners=2), 2.0)
