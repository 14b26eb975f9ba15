"""Nothing lost at any instant, nothing untrusted executed (issue 52): every file the project rewrites is failed at
its write, by a full disk and by ``kill -9`` inside the write (``tests/fault_injection.py``), and the previous
version survives and the next run resumes from it; a planted checkpoint runs no code on any verb."""

from __future__ import annotations

import errno
import functools
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import QUICK
from conftest import train as quick_train
from fault_injection import failing_write
from test_run_ownership import one_error_line
from typer.testing import CliRunner

from ecpo_train.apps.cli import app
from ecpo_train.runtime.run_dir import LOCK_FILE, read_metrics_file, read_validation_file

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()
FAST = [*QUICK, "val_every=1", "checkpoint_every=2"]  # a validation and a checkpoint to lose
train = functools.partial(quick_train, sizes=FAST)


def trained(run_dir: Path, *extra: str) -> Path:
    result = train(run_dir, *extra)
    assert result.exit_code == 0, result.output
    return run_dir


def killed_inside_write(name: str, *argv: str) -> subprocess.CompletedProcess:
    """``ecpo ARGV`` in a fresh process, killed (SIGKILL) inside its first write of a file named ``name*``."""
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "fault_injection.py"), "kill", name, "--", *argv],
                          capture_output=True, text=True, env=os.environ | {"PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])},
                          check=False)
    assert done.returncode == -9, (done.returncode, done.stderr[-2000:])
    return done


def logged(run_dir: Path) -> tuple[list[dict], list[dict]]:
    """The run's metrics (without timings) and validation records."""
    rows, torn = read_metrics_file(run_dir / "metrics.jsonl")
    assert not torn
    metrics = [{k: v for k, v in row.items() if not k.startswith("time/")} for row in rows]
    return metrics, read_validation_file(run_dir / "validation.jsonl", tasks=None)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> tuple[list[dict], list[dict]]:
    return logged(trained(tmp_path_factory.mktemp("whole") / "run", "iterations=4"))


@pytest.fixture
def stopped_run(tmp_path) -> Path:
    """A run logged and checkpointed through iteration 3 (checkpoint_every=2: the end of a run checkpoints too)."""
    return trained(tmp_path / "run", "iterations=3")


def rewind_checkpoint(run_dir: Path, tmp_path: Path) -> None:
    """Make ``run_dir`` a run that died after logging iteration 3 but before its checkpoint: the checkpoint of
    iteration 2 (from a run stopped there), the logs through 3."""
    early = trained(tmp_path / "early", "iterations=2")
    (run_dir / "checkpoint.pt").write_bytes((early / "checkpoint.pt").read_bytes())


# ------------------------------------------------------------------------------ 52.3: the trim on --resume
@pytest.mark.parametrize("name", ["metrics.jsonl", "validation.jsonl"])
def test_a_full_disk_while_a_resume_cuts_a_log_back_keeps_the_log_and_the_next_resume_is_exact(
        stopped_run, tmp_path, uninterrupted, name):
    rewind_checkpoint(stopped_run, tmp_path)
    before = (stopped_run / name).read_bytes()
    with failing_write(name):
        line = one_error_line(train(stopped_run, "iterations=4", "--resume"), name, "No space left on device")
    assert "[Errno" not in line
    assert (stopped_run / name).read_bytes() == before  # never cut in place: the old lines are all there
    assert not (stopped_run / LOCK_FILE).exists()
    assert train(stopped_run, "iterations=4", "--resume").exit_code == 0
    assert logged(stopped_run) == uninterrupted


@pytest.mark.parametrize("name", ["metrics.jsonl", "validation.jsonl"])
def test_kill_9_while_a_resume_cuts_a_log_back_keeps_the_log_and_the_next_resume_is_exact(
        stopped_run, tmp_path, uninterrupted, name):
    rewind_checkpoint(stopped_run, tmp_path)
    before = (stopped_run / name).read_bytes()
    killed_inside_write(name, "train", "--config", "quickstart", f"run_dir={stopped_run}", *FAST, "iterations=4",
                        "--resume")
    assert (stopped_run / name).read_bytes() == before
    assert train(stopped_run, "iterations=4", "--resume").exit_code == 0  # the dead holder's lock is taken over
    assert logged(stopped_run) == uninterrupted


# ------------------------------------------------------------------------------ the native checkpoint
def test_kill_9_inside_a_checkpoint_write_keeps_the_previous_checkpoint(stopped_run, uninterrupted):
    before = (stopped_run / "checkpoint.pt").read_bytes()
    script = ("import os, signal, sys, torch\n"
              "def dying(state, path, *a, **k):\n"
              "    open(path, 'wb').write(b'PK' * 1000)\n"
              "    os.kill(os.getpid(), signal.SIGKILL)\n"
              "torch.save = dying\n"
              "from ecpo_train.apps.cli import main\n"
              "main(sys.argv[1:])\n")
    done = subprocess.run([sys.executable, "-c", script, "train", "--config", "quickstart", f"run_dir={stopped_run}",
                           *FAST, "iterations=4", "--resume"], capture_output=True, text=True,
                          env=os.environ | {"PYTHONPATH": str(ROOT)}, check=False)
    assert done.returncode == -9, done.stderr[-2000:]
    assert (stopped_run / "checkpoint.pt").read_bytes() == before
    assert train(stopped_run, "iterations=4", "--resume").exit_code == 0
    assert logged(stopped_run) == uninterrupted
    assert not list(stopped_run.glob("checkpoint.pt.partial*"))


def test_a_first_checkpoint_that_fails_does_not_claim_a_previous_one(tmp_path, monkeypatch):
    def full_disk(state, path, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(torch, "save", full_disk)
    line = one_error_line(train(tmp_path / "run", "iterations=2"), "checkpoint.pt", "No space left on device")
    assert "previous checkpoint is kept" not in line and "no checkpoint was written before" in line
    assert not (tmp_path / "run" / LOCK_FILE).exists()


def test_a_full_disk_during_training_names_the_file_and_releases_the_lock(tmp_path):
    run_dir = tmp_path / "run"
    with failing_write("metrics.jsonl"):
        line = one_error_line(train(run_dir, "iterations=2"), f"{run_dir / 'metrics.jsonl'}: No space left")
    assert "[Errno" not in line and not (run_dir / LOCK_FILE).exists()


def test_a_full_disk_under_tensorboard_is_one_line_naming_its_folder_without_a_thread_traceback(tmp_path, capfd):
    run_dir = tmp_path / "run"
    with failing_write("events.out.tfevents"):  # written from TensorBoard's own thread
        result = train(run_dir, "iterations=2", "tensorboard=true")
    one_error_line(result, f"{run_dir / 'tensorboard'}: No space left on device")
    assert "Traceback" not in capfd.readouterr().err and not (run_dir / LOCK_FILE).exists()


def test_a_tensorboard_writer_failing_at_close_still_releases_the_lock(tmp_path, monkeypatch, capfd):
    from torch.utils.tensorboard import SummaryWriter

    def full_disk(self):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(SummaryWriter, "close", full_disk)
    run_dir = tmp_path / "run"
    one_error_line(train(run_dir, "iterations=1", "tensorboard=true"), "tensorboard", "No space left on device")
    assert not (run_dir / LOCK_FILE).exists()  # MetricsLog.close raised, and still released the lock
    assert train(run_dir, "iterations=2", "--resume", "tensorboard=true").exit_code == 2  # (close still fails)
    monkeypatch.undo()
    assert train(run_dir, "iterations=2", "--resume").exit_code == 0
    assert "Traceback" not in capfd.readouterr().err


# ------------------------------------------------------------------------------ 52.2: no code runs on load
class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.mkdir, (str(self.marker),)


def plant_payload(run_dir: Path, marker: Path) -> None:
    import yaml

    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    torch.save({"iteration": 1, "policy": _Payload(marker), "config": config}, run_dir / "checkpoint.pt")


@pytest.mark.parametrize("verb", ["eval", "leaderboard", "resume"])
def test_a_planted_checkpoint_runs_no_code_on_any_verb(stopped_run, tmp_path, verb):
    marker = tmp_path / "payload_ran"
    plant_payload(stopped_run, marker)
    argv = {"eval": ["eval", str(stopped_run), "--limit", "1"],
            "leaderboard": ["leaderboard", "--agent", "checkpoint", "--checkpoint", str(stopped_run),
                            "--env", "ecpo/DivergentAnchor-v0", "--limit", "1", "--seeds", "1",
                            "--out-dir", str(tmp_path / "lb")],
            "resume": ["train", "--config", "quickstart", f"run_dir={stopped_run}", *FAST, "iterations=4",
                       "--resume"]}[verb]
    one_error_line(runner.invoke(app, argv), "scripts/convert_checkpoint.py", "run as code")
    assert not marker.exists()


def test_an_rllib_checkpoint_is_read_without_unpickling_anything(tmp_path):
    """Issue 58.1: ECPO's RLlib checkpoint is msgpack and safetensors (``state_files``); a pickle planted in it
    (RLlib's ``class_and_ctor_args.pkl``, a ``state.pkl``, or in place of the state) runs nothing, and a folder in
    RLlib's own pickle format is refused without being read."""
    pytest.importorskip("ray")
    import numpy as np

    from ecpo_train.integrations.rllib.llm.engine import check_rllib_checkpoint
    from ecpo_train.integrations.rllib.state_files import read_state, write_state

    marker = tmp_path / "payload_ran"
    checkpoint = tmp_path / "rllib_checkpoint"
    state = {"learner": {"weights": torch.arange(6, dtype=torch.bfloat16), 3: np.arange(4, dtype=np.int32)},
             "ecpo": {"rng": {"state": 2**100 + 7, "inc": -(2**70)}, "iteration": np.int64(4), "pending": (["t"], 2),
                      "done": [True, None, 0.5, "x", b"raw"]}}
    write_state(checkpoint, state, {"train_config": {}})
    for planted in ("class_and_ctor_args.pkl", "state.pkl", "learner_group/state.pkl"):
        (checkpoint / planted).parent.mkdir(exist_ok=True)
        (checkpoint / planted).write_bytes(pickle.dumps(_Payload(marker)))
    check_rllib_checkpoint(checkpoint)
    back = read_state(checkpoint)
    assert torch.equal(back["learner"]["weights"], state["learner"]["weights"])
    assert back["learner"]["weights"].dtype == torch.bfloat16 and back["learner"][3].tolist() == [0, 1, 2, 3]
    assert back["ecpo"] == {"rng": {"state": 2**100 + 7, "inc": -(2**70)}, "iteration": 4, "pending": (["t"], 2),
                            "done": [True, None, 0.5, "x", b"raw"]}
    assert type(back["ecpo"]["iteration"]) is np.int64
    (checkpoint / "state.msgpack").write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(ValueError, match="is damaged and cannot be read"):
        check_rllib_checkpoint(checkpoint)
    (checkpoint / "state.msgpack").unlink()  # what RLlib's own save_to_path leaves: pickles only
    with pytest.raises(ValueError, match="RLlib's pickle format, which runs code when read"):
        check_rllib_checkpoint(checkpoint)
    with pytest.raises(TypeError, match="holds a _Payload at state.ecpo.extra"):
        write_state(tmp_path / "other", {"ecpo": {"extra": _Payload(marker)}}, {})
    assert not marker.exists()


@pytest.mark.slow
def test_an_rllib_resume_runs_no_pickle_planted_in_its_checkpoint(tiny_model_dir, tmp_path):
    """Issue 58.1 as found: a payload written into ``rllib_checkpoint/class_and_ctor_args.pkl``; ``--resume``
    continues the run without running it, and so does ``ECPO.from_checkpoint`` on that folder."""
    pytest.importorskip("ray")
    run_dir = tmp_path / "run"
    argv = ["train", "--config", "corridor_llm", "--engine", "rllib", "--env-runners", "0", f"model={tiny_model_dir}",
            f"run_dir={run_dir}", "val_every=0", "progress=false", "n_groups=2", "group_size=2"]
    assert runner.invoke(app, [*argv, "iterations=1"]).exit_code == 0
    marker = tmp_path / "payload_ran"
    (run_dir / "rllib_checkpoint" / "class_and_ctor_args.pkl").write_bytes(pickle.dumps(_Payload(marker)))
    resumed = runner.invoke(app, [*argv, "iterations=2", "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert not marker.exists()
    assert [int(row["iteration"]) for row in read_metrics_file(run_dir / "metrics.jsonl")[0]] == [1, 2]
    (run_dir / "rllib_checkpoint" / "class_and_ctor_args.pkl").write_bytes(pickle.dumps(_Payload(marker)))
    import ray

    from ecpo_train.integrations.rllib import ECPO

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        algo = ECPO.from_checkpoint(run_dir / "rllib_checkpoint")
        try:
            assert algo.ecpo.iteration == 2
        finally:
            algo.stop()
    finally:
        ray.shutdown()
    assert not marker.exists()


def test_an_old_format_checkpoint_is_refused_and_the_converter_makes_it_resumable(stopped_run, tmp_path,
                                                                                   uninterrupted):
    import numpy as np

    rewind_checkpoint(stopped_run, tmp_path)
    state = torch.load(stopped_run / "checkpoint.pt", weights_only=True)
    state["numpy_global_rng"] = (state["numpy_global_rng"][0], state["numpy_global_rng"][1].numpy(),
                                 *state["numpy_global_rng"][2:])  # as older versions saved it: a numpy array
    torch.save(state, stopped_run / "checkpoint.pt")
    one_error_line(train(stopped_run, "iterations=4", "--resume"), "older ECPO format",
                   f"python scripts/convert_checkpoint.py {stopped_run / 'checkpoint.pt'}")
    converter = [sys.executable, str(ROOT / "scripts" / "convert_checkpoint.py"), str(stopped_run)]
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    refused = subprocess.run(converter, capture_output=True, text=True, env=env, check=False)
    assert refused.returncode == 2 and "unpickles it" in refused.stderr and "--trust" in refused.stderr
    converted = subprocess.run([*converter, "--trust"], capture_output=True, text=True, env=env, check=False)
    assert converted.returncode == 0, converted.stderr
    assert "warning: converting" in converted.stderr
    assert train(stopped_run, "iterations=4", "--resume").exit_code == 0
    assert logged(stopped_run) == uninterrupted
    assert isinstance(np.random.get_state()[1], np.ndarray)


# ------------------------------------------------------------------------------ 52.1: the RLlib checkpoint folder
class _Algorithm:
    """Writes a checkpoint folder the way ``Algorithm.save_to_path`` does (several files, one after the other);
    ``die_at`` kills the process (or fills the disk) at that file."""

    def __init__(self, version: int, die_at: str | None = None, fault: str = "kill") -> None:
        self.version, self.die_at, self.fault = version, die_at, fault

    def save_to_path(self, path: str) -> None:
        for name in ("class_and_ctor_args.pkl", "algorithm_state.pkl", "learner_group/learner/state.pkl"):
            target = Path(path) / name
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "wb") as handle:
                if name == self.die_at:
                    handle.write(b"")
                    if self.fault == "kill":
                        os.kill(os.getpid(), 9)
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                handle.write(pickle.dumps({"version": self.version, "file": name}))


TOKEN = "-0123456789abcdef"  # the form of the token a writer gives its temporary names (files/atomic.py)


def _versions(folder: Path) -> set[int]:
    return {pickle.loads(p.read_bytes())["version"] for p in folder.rglob("*.pkl")}


def test_a_crash_or_full_disk_during_the_rllib_save_keeps_the_previous_checkpoint(tmp_path):
    pytest.importorskip("ray")
    from ecpo_train.files.atomic import current_folder
    from ecpo_train.integrations.rllib.llm.engine import save_rllib_checkpoint

    checkpoint = tmp_path / "rllib_checkpoint"
    save_rllib_checkpoint(_Algorithm(1), checkpoint)
    with pytest.raises(ValueError, match="could not be written .*No space left on device.*previous checkpoint is kept"):
        save_rllib_checkpoint(_Algorithm(2, die_at="learner_group/learner/state.pkl", fault="disk"), checkpoint)
    assert _versions(checkpoint) == {1}
    script = ("import sys; from test_faults import _Algorithm; "
              "from ecpo_train.integrations.rllib.llm.engine import save_rllib_checkpoint; from pathlib import Path; "
              "save_rllib_checkpoint(_Algorithm(3, die_at='learner_group/learner/state.pkl'), Path(sys.argv[1]))")
    paths = os.pathsep.join([str(ROOT), str(ROOT / "tests")])  # the test modules import their helpers by name
    done = subprocess.run([sys.executable, "-c", script, str(checkpoint)], capture_output=True, text=True,
                          env=os.environ | {"PYTHONPATH": paths}, check=False)
    assert done.returncode == -9, done.stderr[-2000:]
    assert _versions(checkpoint) == {1}
    # a kill between the swap's two renames: the old folder is NAME.previous-<token>, which the resume reads
    os.replace(checkpoint, tmp_path / f"rllib_checkpoint.previous{TOKEN}")
    assert current_folder(checkpoint) == tmp_path / f"rllib_checkpoint.previous{TOKEN}"
    save_rllib_checkpoint(_Algorithm(4), checkpoint)
    assert _versions(checkpoint) == {4} and current_folder(checkpoint) == checkpoint
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rllib_checkpoint"]


@pytest.mark.slow
def test_kill_9_while_rllib_saves_its_learner_state_keeps_the_previous_checkpoint_and_resumes(tiny_model_dir,
                                                                                              tmp_path):
    """Issue 52.1 as found: ``kill -9`` while the engine writes the ``state.msgpack`` of its checkpoint (the real algorithm's
    ``save_to_path``): the previous ``rllib_checkpoint/`` is intact and ``--resume`` continues from it."""
    pytest.importorskip("ray")
    run_dir = tmp_path / "run"
    argv = ["train", "--config", "corridor_llm", "--engine", "rllib", "--env-runners", "0", f"model={tiny_model_dir}",
            f"run_dir={run_dir}", "val_every=0", "progress=false", "n_groups=2", "group_size=2"]
    assert runner.invoke(app, [*argv, "iterations=1"]).exit_code == 0
    before = {str(p.relative_to(run_dir)): p.read_bytes() for p in (run_dir / "rllib_checkpoint").rglob("*")
              if p.is_file()}
    killed_inside_write("state.msgpack", *argv, "iterations=2", "--resume")
    assert {str(p.relative_to(run_dir)): p.read_bytes() for p in (run_dir / "rllib_checkpoint").rglob("*")
            if p.is_file()} == before
    resumed = runner.invoke(app, [*argv, "iterations=2", "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert [int(row["iteration"]) for row in read_metrics_file(run_dir / "metrics.jsonl")[0]] == [1, 2]
    assert sorted(p.name for p in run_dir.iterdir() if "rllib" in p.name) == ["rllib_checkpoint"]


def test_an_rllib_run_whose_swap_was_cut_between_its_renames_resumes_from_the_previous_folder(tmp_path):
    from ecpo_train.runtime.resume import plan_start

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("engine: rllib\n")
    (run_dir / f"rllib_checkpoint.previous{TOKEN}").mkdir()
    assert plan_start(run_dir, {}, resume=True, engine="rllib").kind == "resume"


# ------------------------------------------------------------------------------ 52.6 / 52.9: the lock
def test_a_run_lock_symlink_is_refused_and_its_target_untouched(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me")
    (run_dir / LOCK_FILE).symlink_to(victim)
    one_error_line(train(run_dir, "iterations=1"), "run.lock", "symlink")
    assert victim.read_text() == "keep me"


def test_a_filesystem_without_locks_is_one_line_naming_the_folder_and_leaves_no_lock(tmp_path, monkeypatch):
    import fcntl

    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", no_locks)
    run_dir = tmp_path / "run"
    one_error_line(train(run_dir, "iterations=1"), str(run_dir), "without file locks", "local disk")
    assert not run_dir.exists()  # the folder the lock would have made is gone again


# ------------------------------------------------------------------------------ 52.6: the leaderboard's files
LEADERBOARD = ["leaderboard", "--agent", "expert", "--env", "ecpo/DivergentAnchor-v0", "--env-kwarg", "depth=3",
               "--limit", "1", "--no-progress"]


@pytest.mark.parametrize("name", ["run.json", "results.json", "leaderboard.json", "leaderboard.md"])
def test_a_full_disk_at_a_leaderboard_file_keeps_it_and_the_next_run_completes(tmp_path, name):
    out = tmp_path / "lb"
    first = runner.invoke(app, [*LEADERBOARD, "--seeds", "1", "--out-dir", str(out)])
    assert first.exit_code == 0, first.output
    path = next(out.rglob(name))
    before = path.read_bytes()
    with failing_write(name):
        one_error_line(runner.invoke(app, [*LEADERBOARD, "--seeds", "2", "--out-dir", str(out)]), name,
                       "No space left on device")
    assert path.read_bytes() == before
    again = runner.invoke(app, [*LEADERBOARD, "--seeds", "2", "--out-dir", str(out)])
    assert again.exit_code == 0, again.output
    assert json.loads((out / "expert" / "run.json").read_text())["seeds"] == [0, 1]


def test_kill_9_inside_the_run_json_write_keeps_it(tmp_path):
    out = tmp_path / "lb"
    assert runner.invoke(app, [*LEADERBOARD, "--seeds", "1", "--out-dir", str(out)]).exit_code == 0
    before = (out / "expert" / "run.json").read_bytes()
    killed_inside_write("run.json", *LEADERBOARD, "--seeds", "2", "--out-dir", str(out))
    assert (out / "expert" / "run.json").read_bytes() == before
    assert runner.invoke(app, [*LEADERBOARD, "--seeds", "2", "--out-dir", str(out)]).exit_code == 0


# ------------------------------------------------------------------------------ the helper itself
def test_replaced_file_keeps_the_old_version_until_the_new_one_is_synced(tmp_path, monkeypatch):
    from ecpo_train.files import atomic

    path = tmp_path / "f.txt"
    atomic.write_text(path, "old")

    def full_disk(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left on device") as caught:
        atomic.write_text(path, "new")
    assert caught.value.filename == str(path)
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["f.txt"]


# ------------------------------------------------------------------------------ 58.5: no write through a link
def test_a_hard_linked_run_lock_is_refused_and_its_target_untouched(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me")
    os.link(victim, run_dir / LOCK_FILE)
    one_error_line(train(run_dir, "iterations=1"), "run.lock", "hard link")
    from ecpo_train.runtime.run_lock import acquire_run_lock

    with pytest.raises(ValueError, match="is a hard link to another file"):
        acquire_run_lock(run_dir)
    assert victim.read_text() == "keep me"


@pytest.mark.parametrize("name, link", [("history.jsonl", "symlink"), ("validation.jsonl", "hard"),
                                        ("metrics.jsonl", "symlink")])
def test_a_run_log_that_is_a_link_is_never_written_through(tmp_path, name, link):
    """Issue 58.5: a symlinked ``history.jsonl`` in a fresh folder appended to its target. No start, resume or
    append writes through a link (symbolic or hard) out of the run folder."""
    from ecpo_train.runtime.run_dir import append_line

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me\n")
    (run_dir / name).symlink_to(victim) if link == "symlink" else os.link(victim, run_dir / name)
    for flags in ([], ["--resume"], ["--resume-or-start"]):
        one_error_line(train(run_dir, "iterations=1", *flags), name, "link")
    with pytest.raises(OSError, match="link"):
        append_line(run_dir / name, "{}")
    assert victim.read_text() == "keep me\n"
    assert train(run_dir, "iterations=1", "--overwrite").exit_code == 0  # deletes the link itself
    assert victim.read_text() == "keep me\n" and not (run_dir / name).is_symlink()


def test_a_model_folder_whose_sft_swap_was_cut_between_its_renames_is_read_from_its_previous(tiny_model_dir,
                                                                                              tmp_path):
    """Issue 58 (low): after a kill between ``ecpo sft --out``'s two renames the model is whole in
    ``OUT.previous-<token>`` and ``OUT`` is gone; ``ecpo train model=OUT`` reads it there (``models.model_folder``)."""
    import shutil

    from ecpo_train.runtime.models import model_folder, weights_sha256

    shutil.copytree(tiny_model_dir, tmp_path / f"sft_model.previous{TOKEN}")
    out = str(tmp_path / "sft_model")
    assert model_folder(out) == str(tmp_path / f"sft_model.previous{TOKEN}")
    assert weights_sha256(out) == weights_sha256(tiny_model_dir)
    result = runner.invoke(app, ["train", "--config", "corridor_llm", f"model={out}", f"run_dir={tmp_path / 'run'}",
                                 "iterations=1", "n_groups=2", "group_size=2", "val_every=0", "progress=false"])
    assert result.exit_code == 0, result.output
