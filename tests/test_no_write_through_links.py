"""Issue 70, items 1, 2, 6, 7, 11, 14, 15: nothing is written through a link (a run folder's eval/, the leaderboard's
logs and lock, a study's kept folder and its --out), kept results carry checksums and a report never replaces a
committed result with an empty or partial one, no user file is deleted (``ecpo sft --out``, ``NAME.partial`` and
``NAME.previous`` siblings, ``run_dir=''``), a study's whole input is checked before any work, ``--resume-or-start``
starts again after a kill before the first checkpoint, and ``ecpo sft`` / ``ecpo eval`` take their folder's lock.

Each refusal is one ``error:`` line, exit 2, and the file it protects keeps its bytes."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import train
from typer.testing import CliRunner

from benchmarks import alfworld_text as study
from benchmarks import estimator_comparison as ec
from benchmarks import study_keep as keeping
from ecpo_train.apps.cli import app
from ecpo_train.evaluation.manifests import load_manifest
from ecpo_train.runtime.run_lock import acquire_run_lock

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()
BED = study.HOUSEHOLDS
GAMES = [(group.name, task) for group in load_manifest(BED.manifest).groups for task in group.task_ids]
SECRET = b"a file of the machine\nwithout its last newline"


def one_error_line(result_or_text, *words: str, code: int | None = None) -> str:
    """The one ``error:`` line of a refused command (a CliRunner result, or the stderr of a ``main``), exit 2."""
    if isinstance(result_or_text, str):
        assert code == 2, (code, result_or_text)
        text = result_or_text
    else:
        assert result_or_text.exit_code == 2, result_or_text.output
        assert result_or_text.exception is None or isinstance(result_or_text.exception, SystemExit)
        text = result_or_text.output
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("warning: ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), text
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def tree(folder: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() and not p.is_symlink() else None)
            for p in sorted(folder.rglob("*"))}


def link(kind: str, target: Path, at: Path) -> None:
    at.unlink(missing_ok=True)
    (os.symlink if kind == "symlink" else os.link)(target, at)


# ------------------------------------------------------------------------------ 70.1: the leaderboard's links
@pytest.fixture(scope="module")
def evaluated_run(tmp_path_factory) -> Path:
    """A trained run evaluated once by ``ecpo eval`` (its ``eval/<agent>/<manifest>.jsonl`` exists)."""
    run_dir = tmp_path_factory.mktemp("evaluated") / "run"
    assert train(run_dir, "iterations=1").exit_code == 0
    first = runner.invoke(app, ["eval", str(run_dir), "--limit", "1", "--seeds", "1"])
    assert first.exit_code == 0, first.output
    return run_dir


def evaluate(run_dir: Path, *extra: str):
    return runner.invoke(app, ["eval", str(run_dir), "--limit", "1", "--seeds", "2", *extra])


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_eval_never_cuts_or_appends_to_a_linked_episode_log(evaluated_run, tmp_path, kind):
    (log,) = (evaluated_run / "eval").glob("*/*.jsonl")
    saved = log.read_bytes()
    victim = tmp_path / "victim.txt"
    victim.write_bytes(SECRET)  # an unterminated last line: the repair would cut it, the append would follow it
    link(kind, victim, log)
    try:
        one_error_line(evaluate(evaluated_run), str(log), "link")
        assert victim.read_bytes() == SECRET
    finally:
        log.unlink()
        log.write_bytes(saved)


def test_eval_never_writes_into_a_symlinked_eval_folder(evaluated_run, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_bytes(SECRET)
    own = evaluated_run / "eval"
    moved = evaluated_run.parent / "eval-moved"
    own.rename(moved)
    try:
        own.symlink_to(elsewhere, target_is_directory=True)
        one_error_line(evaluate(evaluated_run), "eval", "link")
        assert tree(elsewhere) == {"keep.txt": SECRET}
    finally:
        own.unlink()
        moved.rename(own)


def test_the_leaderboard_lock_is_never_created_through_a_symlink(evaluated_run, tmp_path):
    lock = evaluated_run / "eval" / ".leaderboard.lock"
    outside = tmp_path / "outside.lock"
    lock.unlink(missing_ok=True)
    lock.symlink_to(outside)
    try:
        one_error_line(runner.invoke(app, ["eval", str(evaluated_run), "--limit", "1", "--seeds", "1"]),
                       ".leaderboard.lock", "link")
        assert not outside.exists()
    finally:
        lock.unlink()


# ------------------------------------------------------------------------------ 70.15: the locks of sft and eval
def test_a_second_eval_into_the_same_folder_is_refused_naming_the_first(evaluated_run):
    (agent,) = [p for p in (evaluated_run / "eval").iterdir() if p.is_dir()]
    before = tree(agent)
    held = acquire_run_lock(agent, "leaderboard")
    try:
        one_error_line(evaluate(evaluated_run), "in use by pid")
    finally:
        held.release()
    assert tree(agent) == before  # no episode appended twice


def test_a_second_sft_into_the_same_out_is_refused_naming_the_first(tiny_model_dir, tmp_path):
    out = tmp_path / "sft"
    out.mkdir()
    (out / "sft.json").write_text(json.dumps({"files": ["sft.json"]}))  # an earlier output, which sft may replace
    held = acquire_run_lock(out, "sft")
    try:
        one_error_line(sft(tiny_model_dir, out), "in use by pid")
        assert sorted(p.name for p in out.iterdir()) == ["run.lock", "sft.json"]  # the holder's work not replaced
        assert json.loads((out / "sft.json").read_text()) == {"files": ["sft.json"]}
    finally:
        held.release()


# ------------------------------------------------------------------------------ 70.7: no user file deleted
def sft(model: Path, out: Path, *extra: str):
    return runner.invoke(app, ["sft", "--config", "corridor_llm", "--out", str(out), "--episodes", "2", "--epochs",
                               "1", f"model={model}", *extra])


@pytest.mark.parametrize("summary", [{"episodes": 2}, {"episodes": 2, "files": ["sft.json", "config.json"]}])
def test_sft_never_replaces_a_folder_holding_files_it_did_not_write(tiny_model_dir, tmp_path, summary):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "sft.json").write_text(json.dumps(summary))
    (out / "config.json").write_text("{}")
    (out / "notes.txt").write_bytes(SECRET)  # the user's
    before = tree(out)
    one_error_line(sft(tiny_model_dir, out), "--out", "sft.json")
    assert tree(out) == before


def test_a_folder_swap_never_touches_siblings_named_partial_or_previous(tmp_path):
    """``replaced_folder`` (sft's output, LoRA's merged model, RLlib's checkpoint) names its temporary folders with a
    token of its own: the user's ``OUT.partial`` and ``OUT.previous`` stay as they were."""
    from ecpo_train.files.atomic import replaced_folder

    out = tmp_path / "out"
    for sibling in ("out.partial", "out.previous"):
        (tmp_path / sibling).mkdir()
        (tmp_path / sibling / "mine.txt").write_bytes(SECRET)
    before = tree(tmp_path)
    for version in (b"1", b"2"):  # a new folder, then a swap over an old one
        with replaced_folder(out) as partial:
            (partial / "weights").write_bytes(version)
    assert tree(tmp_path) == before | {"out": None, "out/weights": b"2"}


def test_an_empty_run_dir_is_refused_and_the_current_folder_untouched(tmp_path, monkeypatch):
    (tmp_path / "config.yaml").write_text("my: own preset\n")
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "results.md").write_bytes(SECRET)
    before = tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    one_error_line(runner.invoke(app, ["train", "--config", "quickstart", "run_dir=", "iterations=1", "--overwrite"]),
                   "run_dir=''")
    assert tree(tmp_path) == before


def test_overwrite_never_deletes_a_users_config_and_eval_that_no_run_wrote(tmp_path):
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "config.yaml").write_text("my: own preset\n")
    (folder / "eval").mkdir()
    (folder / "eval" / "results.md").write_bytes(SECRET)
    before = tree(folder)
    for flag in ("--overwrite", "--resume-or-start"):
        one_error_line(train(folder, "iterations=1", flag), "no run wrote them")
        assert tree(folder) == before


# ------------------------------------------------------------------------------ 70.14: --resume-or-start
def test_resume_or_start_after_a_kill_before_the_first_checkpoint_starts_the_run_again(tmp_path):
    run_dir = tmp_path / "run"
    argv = ["train", "--config", "quickstart", f"run_dir={run_dir}", "n_groups=2", "group_size=2", "val_every=0",
            "progress=false", "tensorboard=false", "iterations=2", "checkpoint_every=2"]
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "fault_injection.py"), "kill", "checkpoint.pt", "--",
                           *argv, "--resume-or-start"], capture_output=True, text=True, check=False,
                          env=os.environ | {"PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])})
    assert done.returncode == -9, done.stderr[-2000:]
    assert not (run_dir / "checkpoint.pt").exists() and (run_dir / "metrics.jsonl").exists()
    for _ in range(2):  # every retry: the first starts the run again, the second resumes the finished run
        again = runner.invoke(app, [*argv, "--resume-or-start"])
        assert again.exit_code == 0, again.output
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [int(row["iteration"]) for row in rows] == [1, 2]
    events = [json.loads(line)["event"] for line in (run_dir / "history.jsonl").read_text().splitlines()]
    assert events == ["start", "restart", "resume"]


# ------------------------------------------------------------------------------ 70.2 / 70.6 / 70.11: studies
def episode_log(out: Path, name: str, games=GAMES) -> Path:
    folder = out / BED.folder / name
    folder.mkdir(parents=True)
    lines = [json.dumps({"manifest": BED.manifest, "group": group, "task_id": task, "seed": 0, "task_type": "Pick",
                         "success": i % 3 == 0}) for i, (group, task) in enumerate(games)]
    path = folder / f"{BED.manifest}.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def finished(out: Path) -> None:
    (out / "warm").mkdir(parents=True)
    for name in keeping.WARM_FILES:
        (out / "warm" / name).write_text(name, encoding="utf-8")
    episode_log(out, study.WARM)
    episode_log(out, "ecpo-s101")
    (out / "runs" / "ecpo-s101").mkdir(parents=True)
    for name in keeping.RUN_FILES:
        (out / "runs" / "ecpo-s101" / name).write_text(name, encoding="utf-8")


def stage(capsys, *argv: str) -> tuple[int, str]:
    code = study.main(list(argv))
    return code, capsys.readouterr().err


@pytest.fixture
def kept(tmp_path) -> Path:
    out, keep = tmp_path / "out", tmp_path / "keep"
    finished(out)
    assert sorted(keeping.keep_finished(out, keep, BED)) == ["ecpo-s101", study.WARM]
    return keep


def test_keep_never_copies_a_symlinks_target_into_the_kept_folder(tmp_path, capsys):
    out, keep = tmp_path / "out", tmp_path / "keep"
    finished(out)
    secret = tmp_path / "secret"
    secret.write_bytes(SECRET)
    link("symlink", secret, out / "runs" / "ecpo-s101" / "metrics.jsonl")
    code, err = stage(capsys, "keep", "--testbed", BED.name, "--out", str(out), "--keep", str(keep))
    one_error_line(err, "metrics.jsonl", "link", code=code)
    assert not any(SECRET in (gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes())
                   for p in keep.rglob("*") if p.is_file())


def test_keep_never_writes_through_a_symlinked_machine_json(tmp_path, capsys):
    out, keep = tmp_path / "out", tmp_path / "keep"
    finished(out)
    victim = tmp_path / "victim"
    victim.write_bytes(SECRET)
    (keep / BED.folder / "ecpo-s101").mkdir(parents=True)
    (keep / BED.folder / "ecpo-s101" / "machine.json").symlink_to(victim)
    code, err = stage(capsys, "keep", "--testbed", BED.name, "--out", str(out), "--keep", str(keep))
    one_error_line(err, "machine.json", code=code)
    assert victim.read_bytes() == SECRET


@pytest.mark.parametrize("planted", ["machine.json", f"{BED.manifest}.jsonl", "../../warm/text_policy.safetensors"])
def test_restore_never_writes_through_a_symlink_in_out(kept, tmp_path, capsys, planted):
    fresh = tmp_path / "fresh"
    (fresh / BED.folder / "ecpo-s101").mkdir(parents=True)
    target = (fresh / BED.folder / "ecpo-s101" / planted).resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    victim = tmp_path / "victim"
    victim.write_bytes(SECRET)
    target.symlink_to(victim)
    code, err = stage(capsys, "restore", "--testbed", BED.name, "--out", str(fresh), "--keep", str(kept))
    one_error_line(err, "link", code=code)
    assert victim.read_bytes() == SECRET


@pytest.mark.parametrize("change", ["edited", "garbage", "unlisted"])
def test_restore_refuses_a_kept_file_keep_did_not_write(kept, tmp_path, capsys, change):
    """Every kept file's sha256 is in ``SHA256SUMS``: a kept log edited to change a verdict, replaced by garbage, or
    added by hand is one line, and nothing is restored (no seed silently left out)."""
    log = kept / BED.folder / "ecpo-s101" / f"{BED.manifest}.jsonl.gz"
    if change == "edited":
        text = gzip.decompress(log.read_bytes()).replace(b'"success": false', b'"success": true', 5)
        log.write_bytes(gzip.compress(text, mtime=0))
    elif change == "garbage":
        log.write_bytes(b"\x1f\x8b garbage")
    else:
        shutil.copytree(kept / BED.folder / "ecpo-s101", kept / BED.folder / "grpo-s101")
    fresh = tmp_path / "fresh"
    code, err = stage(capsys, "restore", "--testbed", BED.name, "--out", str(fresh), "--keep", str(kept))
    one_error_line(err, "SHA256SUMS", code=code)
    assert not fresh.exists() or not any(p.is_file() for p in fresh.rglob("*"))


@pytest.mark.parametrize("damage", ["truncated", "bomb", "incomplete", "machine {}", "machine []"])
def test_a_damaged_kept_file_is_one_line_and_restores_nothing(kept, tmp_path, capsys, damage):
    """Damage whose checksums were written after it (as for a folder kept before checksums) is still found: a
    truncated .gz, one unpacking past the bound, a log without every game, a machine record naming no CPU."""
    job = kept / BED.folder / "ecpo-s101"
    log = job / f"{BED.manifest}.jsonl.gz"
    if damage == "truncated":
        log.write_bytes(log.read_bytes()[:-20])
    elif damage == "bomb":
        log.write_bytes(gzip.compress(b"\n" * ((64 << 20) + 1), mtime=0))  # past keeping.MAX_UNPACKED
    elif damage == "incomplete":
        log.write_bytes(gzip.compress(gzip.decompress(log.read_bytes()).split(b"\n", 5)[-1], mtime=0))
    else:
        (job / "machine.json").write_text(damage.split()[1])
    keeping._write_sums(kept, {p.relative_to(kept).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                               for p in kept.rglob("*") if p.is_file() and p.name != keeping.SUMS})  # (not a checksum's)
    fresh = tmp_path / "fresh"
    code, err = stage(capsys, "restore", "--testbed", BED.name, "--out", str(fresh), "--keep", str(kept))
    one_error_line(err, str(job), code=code)
    assert not list(fresh.rglob("*.jsonl")) and not list(fresh.rglob("*partial*"))


def test_the_committed_kept_folders_match_their_checksums():
    raw = ROOT / "benchmarks" / "results" / "raw"
    sealed = sorted(keep for keep in raw.iterdir() if (keep / keeping.SUMS).is_file())
    assert raw / "estimators_households" in sealed  # (the study kept by benchmarks.study_keep)
    for keep in sealed:
        assert keeping.check_kept(keep), keep


def test_a_report_of_a_folder_without_the_study_never_replaces_the_committed_one(tmp_path, capsys):
    committed = tmp_path / "alfworld_text.json"
    committed.write_bytes((ROOT / "benchmarks" / "results" / "alfworld_text.json").read_bytes())
    before = committed.read_bytes()
    code, err = stage(capsys, "report", "--out", str(tmp_path / "TYPO"), "--json", str(committed))
    one_error_line(err, "--out", "warm start", code=code)
    assert committed.read_bytes() == before
    out = tmp_path / "study"
    episode_log(out, study.WARM, GAMES[:5])
    code, err = stage(capsys, "report", "--testbed", BED.name, "--out", str(out), "--json", str(tmp_path))
    one_error_line(err, "--json", "folder", code=code)


def test_a_bad_arm_is_refused_before_the_warm_start(tmp_path, capsys):
    out = tmp_path / "study"
    code, err = stage(capsys, "run", "--out", str(out), "--arms", "ecpo", "bogus")
    one_error_line(err, "--arms", "bogus", code=code)
    assert not out.exists()  # no log folder, no warm start


@pytest.fixture
def results(tmp_path, monkeypatch) -> Path:
    """The committed comparison's JSON, copied where the program writes (its bytes are the victim)."""
    path = tmp_path / "estimator_comparison.json"
    shutil.copy(ec.RESULT_JSON, path)
    shutil.copy(ec.RESULT_JSON.with_suffix(".md"), path.with_suffix(".md"))
    monkeypatch.setattr(ec, "RESULT_JSON", path)
    return path


def comparison(capsys, *argv: str) -> tuple[int, str]:
    code = ec.main(list(argv))
    return code, capsys.readouterr().err


def test_a_missing_program_column_never_replaces_the_committed_comparison(results, tmp_path, capsys):
    before = results.read_bytes(), results.with_suffix(".md").read_bytes()
    code, err = comparison(capsys, "report", "--from-json", str(results), "--program-out", f"households={tmp_path / 'MISSING'}")
    one_error_line(err, "--program-out households=", "no such folder", code=code)
    partial = tmp_path / "partial"
    episode_log(partial, study.WARM)
    episode_log(partial, "ecpo-s101")
    code, err = comparison(capsys, "report", "--from-json", str(results), "--program-out", f"households={partial}")
    one_error_line(err, "have no evaluation of every game", code=code)
    assert (results.read_bytes(), results.with_suffix(".md").read_bytes()) == before


@pytest.mark.parametrize("damage", ["missing", "folder", "not json", "no runtime_s", "lost a run", "run not a run"])
def test_a_bad_from_json_is_one_line_and_writes_nothing(results, tmp_path, capsys, damage):
    payload = json.loads(results.read_text())
    given = tmp_path / "given.json"
    if damage == "folder":
        given.mkdir()
    elif damage == "not json":
        given.write_text("{not json")
    elif damage == "no runtime_s":
        given.write_text(json.dumps({k: v for k, v in payload.items() if k != "runtime_s"}))
    elif damage == "lost a run":
        given.write_text(json.dumps(payload | {"runs": payload["runs"][1:]}))
    elif damage == "run not a run":
        given.write_text(json.dumps(payload | {"runs": [*payload["runs"], {"seed": "x"}]}))
    before = results.read_bytes()
    code, err = comparison(capsys, "report", "--from-json", str(given))
    one_error_line(err, "--from-json", code=code)
    assert results.read_bytes() == before
