"""A study longer than a session (``benchmarks.alfworld_text run --keep``, ``benchmarks.study_keep``): what is finished
is kept in a committed folder, gzipped, and put back on a fresh machine as the leaderboard wrote it, so no finished job
is played again and none is lost."""

from __future__ import annotations

import gzip
import json

import pytest

from benchmarks import alfworld_text as study
from benchmarks import study_keep as keeping
from ecpo_train.evaluation.manifests import load_manifest

BED = study.HOUSEHOLDS
GAMES = [(group.name, task) for group in load_manifest(BED.manifest).groups for task in group.task_ids]


def evaluation(out, name, games):
    """``name``'s episode log under ``out`` in the leaderboard's layout, one record per game of ``games``."""
    folder = out / BED.folder / name
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"agent": {"checkpoint": "/an/absolute/path"}}) + "\n")
    lines = [json.dumps({"manifest": BED.manifest, "group": group, "task_id": task, "seed": 0, "task_type": "Pick",
                         "success": i % 3 == 0}) for i, (group, task) in enumerate(games)]
    (folder / f"{BED.manifest}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


def finished_study(out):
    """A study folder: the warm start, its evaluation, one finished arm (with its run folder) and one arm whose
    evaluation stopped after 7 games."""
    (out / "warm").mkdir(parents=True)
    for name in keeping.WARM_FILES:
        (out / "warm" / name).write_text(name, encoding="utf-8")
    evaluation(out, study.WARM, GAMES)
    evaluation(out, "ecpo-s101", GAMES)
    evaluation(out, "grpo-s101", GAMES[:7])
    run = out / "runs" / "ecpo-s101"
    run.mkdir(parents=True)
    for name in (*keeping.RUN_FILES, "checkpoint.pt"):
        (run / name).write_text(name, encoding="utf-8")


def test_only_evaluations_of_every_game_are_kept_gzipped_with_the_warm_start(tmp_path):
    out, keep = tmp_path / "out", tmp_path / "keep"
    finished_study(out)
    assert keeping.manifest_games(BED) == len(GAMES) == 120
    assert sorted(keeping.keep_finished(out, keep, BED)) == ["ecpo-s101", study.WARM]
    kept = keep / BED.folder / "ecpo-s101"
    assert sorted(p.name for p in kept.iterdir()) == [f"{BED.manifest}.jsonl.gz", "machine.json"]  # no run.json
    assert gzip.decompress((kept / f"{BED.manifest}.jsonl.gz").read_bytes()) == \
        (out / BED.folder / "ecpo-s101" / f"{BED.manifest}.jsonl").read_bytes()
    assert json.loads((kept / "machine.json").read_text())["torch"]  # where it ran
    assert keeping.evaluation_complete(keep, "ecpo-s101", BED, kept=True)
    assert not (keep / BED.folder / "grpo-s101").exists()  # unfinished: played again from its seed
    assert sorted(p.name for p in (keep / "runs" / "ecpo-s101").iterdir()) == ["config.yaml.gz", "metrics.jsonl.gz",
                                                                              "validation.jsonl.gz"]
    assert sorted(p.name for p in (keep / "warm").iterdir()) == sorted(keeping.WARM_FILES)
    first = (kept / f"{BED.manifest}.jsonl.gz").read_bytes()
    assert keeping.keep_finished(out, keep, BED) == []  # what is kept already is not copied again
    (kept / f"{BED.manifest}.jsonl.gz").unlink()
    assert keeping.keep_finished(out, keep, BED) == ["ecpo-s101"]
    assert (kept / f"{BED.manifest}.jsonl.gz").read_bytes() == first  # the same log, the same bytes (git sees no change)


def test_a_fresh_machine_gets_the_kept_jobs_back_and_plays_none_of_them_again(tmp_path):
    out, keep = tmp_path / "out", tmp_path / "keep"
    finished_study(out)
    keeping.keep_finished(out, keep, BED)
    fresh = tmp_path / "fresh"  # the run folder did not outlive its machine; the kept folder came with git
    # every job of this schedule is kept: it restores them and runs no ecpo command (the warm start is restored, not
    # trained again; an ecpo command here would fail on the stand-in weights above)
    study.run(fresh, 1, 20, ["ecpo"], [101], BED, keep)
    assert (fresh / "warm" / "text_policy.safetensors").read_text() == "text_policy.safetensors"
    for name in (study.WARM, "ecpo-s101"):
        assert study.outcomes(fresh, name, BED) == study.outcomes(out, name, BED)  # the report reads them as before
    assert not (fresh / BED.folder / "grpo-s101").exists()
    # the finished run's curve and config come back too (the reports of curves and diagnostics read them), not its
    # checkpoint (not kept)
    run = fresh / "runs" / "ecpo-s101"
    assert sorted(p.name for p in run.iterdir()) == sorted(keeping.RUN_FILES)
    assert all((run / name).read_bytes() == (out / "runs" / "ecpo-s101" / name).read_bytes() for name in keeping.RUN_FILES)
    assert keeping.restore_kept(keep, fresh, BED) == []  # restoring twice copies nothing
    (run / "metrics.jsonl").write_text("this machine's own\n")
    keeping.restore_kept(keep, fresh, BED)
    assert (run / "metrics.jsonl").read_text() == "this machine's own\n"  # a run folder's own file is never replaced


def test_a_torn_last_line_is_not_a_finished_game(tmp_path):
    evaluation(tmp_path, "ecpo-s101", GAMES)
    log = tmp_path / BED.folder / "ecpo-s101" / f"{BED.manifest}.jsonl"
    log.write_text(log.read_text().rstrip("\n")[:-5])  # the last record cut mid-line
    assert not keeping.evaluation_complete(tmp_path, "ecpo-s101", BED)


def test_a_stage_refuses_the_options_it_does_not_read(tmp_path, capsys):
    def refused(argv: list[str]) -> str:
        with pytest.raises(SystemExit) as stop:
            study.main(argv)
        assert stop.value.code == 2
        return capsys.readouterr().err

    assert "report does not take --keep" in refused(["report", "--testbed", "households", "--out", str(tmp_path),
                                                      "--keep", str(tmp_path)])
    for stage in ("keep", "restore"):
        given = [stage, "--testbed", "households", "--out", str(tmp_path), "--keep", str(tmp_path), "--seeds", "101",
                 "--jobs", "2"]
        assert f"{stage} does not take --jobs, --seeds" in refused(given)
    assert "run does not take --json" in refused(["run", "--out", str(tmp_path), "--json", str(tmp_path / "r.json")])
    assert not (tmp_path / "r.json").exists() and not (tmp_path / "warm").exists()  # refused before any work
    for stage in ("keep", "restore"):
        assert study.main([stage, "--testbed", "households", "--out", str(tmp_path)]) == 2
        assert f"{stage} needs --keep DIR" in capsys.readouterr().err


def test_keep_and_restore_refuse_a_folder_that_is_not_there_or_is_a_file(tmp_path, capsys):
    """``restore --keep TYPO`` restored nothing and ``keep --out TYPO`` kept nothing, each with exit status 0; a
    --keep that is a file was '<file>/SHA256SUMS: Not a directory'."""
    (tmp_path / "file").write_text("x")
    for argv, words in (
            (["restore", "--out", str(tmp_path / "out"), "--keep", str(tmp_path / "typo")],
             f"restore --keep {tmp_path / 'typo'}: no such folder, so nothing to restore"),
            (["keep", "--out", str(tmp_path / "typo"), "--keep", str(tmp_path / "kept")],
             f"keep --out {tmp_path / 'typo'}: no such folder, so nothing to keep"),
            (["keep", "--out", str(tmp_path), "--keep", str(tmp_path / "file")],
             f"--keep {tmp_path / 'file'} is a file, not a folder")):
        assert study.main([argv[0], "--testbed", "households", *argv[1:]]) == 2
        assert capsys.readouterr().err.strip() == f"error: {words}"
    assert not (tmp_path / "out").exists() and not (tmp_path / "kept").exists()


PLAYED = ("task_id", "success", "steps", "reward", "invalid_actions")  # what an episode record says was played


def policy_study(out):
    """``finished_study`` whose warm start is a real text policy (float32) and whose finished job ``ecpo-s101`` has a
    final policy (float16) that moved a few rows of the word table and every weight of its scorer."""
    import torch

    from ecpo_train.policies.text import TextPolicy

    finished_study(out)
    warm = TextPolicy(seed=3)
    warm.save_pretrained(out / "warm")
    with torch.no_grad():
        warm.model.words.weight[[5, 6, 900]] += 0.1
        warm.model.score[0].weight += 0.01
    (out / "runs" / "ecpo-s101" / "policy").mkdir()
    warm.save_pretrained(out / "runs" / "ecpo-s101" / "policy", half=True)
    return out / "runs" / "ecpo-s101" / "policy"


def test_a_kept_final_policy_comes_back_byte_for_byte_from_its_difference_to_the_warm_start(tmp_path):
    """A testbed that keeps seed 101's final policy keeps it as its difference from the warm start (a fraction of
    the folder); a fresh machine gets the same folder back, which the text policy loads."""
    from dataclasses import replace

    from ecpo_train.policies.text import TextPolicy

    bed = replace(BED, policy_seeds=(101,))
    out, keep, fresh = tmp_path / "out", tmp_path / "keep", tmp_path / "fresh"
    folder = policy_study(out)
    keeping.keep_finished(out, keep, bed)
    kept = keep / "policies" / "ecpo-s101"
    assert sorted(p.name for p in kept.iterdir()) == sorted([*keeping.POLICY_FILES, keeping.DELTA])
    assert (kept / keeping.DELTA).stat().st_size < (folder / "text_policy.safetensors").stat().st_size / 4
    keeping.check_kept(keep)  # every kept file listed with its sha256
    keeping.restore_kept(keep, fresh, bed)
    restored = fresh / "runs" / "ecpo-s101" / "policy"
    assert sorted(p.name for p in restored.iterdir()) == sorted(p.name for p in folder.iterdir())
    assert all((restored / p.name).read_bytes() == p.read_bytes() for p in folder.iterdir())
    TextPolicy.from_pretrained(restored)  # its own checksums hold
    assert not (keep / "policies" / study.WARM).exists()  # a job whose seed is not kept keeps no policy


def test_a_kept_difference_that_does_not_rebuild_the_policy_is_refused_and_nothing_is_written(tmp_path):
    """A difference replaced together with its line in SHA256SUMS (so the kept folder's own check passes) but taken
    from other weights: the rebuilt bytes differ from the policy folder's kept checksums, and restore says so."""
    import hashlib
    from dataclasses import replace

    from ecpo_train.files.weights_delta import difference

    bed = replace(BED, policy_seeds=(101,))
    out, keep, fresh = tmp_path / "out", tmp_path / "keep", tmp_path / "fresh"
    policy_study(out)
    keeping.keep_finished(out, keep, bed)
    warm = (out / "warm" / "text_policy.safetensors").read_bytes()
    other = difference(warm, warm)  # the warm start itself, as a difference
    (keep / "policies" / "ecpo-s101" / keeping.DELTA).write_bytes(other)
    sums = keep / keeping.SUMS
    name = f"policies/ecpo-s101/{keeping.DELTA}"
    sums.write_text("".join(f"{hashlib.sha256(other).hexdigest()}  {name}\n" if line.endswith(f"  {name}") else
                            line + "\n" for line in sums.read_text().splitlines()))
    with pytest.raises(ValueError, match="does not rebuild the policy"):
        keeping.restore_kept(keep, fresh, bed)
    assert not (fresh / "runs" / "ecpo-s101" / "policy").exists()


def test_the_regime_study_keeps_the_final_policies_of_its_first_two_seeds_on_both_warm_starts():
    bed = study.REGIME_OPEN
    assert [bed.kept_policy_warm(name) for name in
            ("a-ecpo-s101", "b-ecpo_d1-s102", "a-gigpo_std-s102", "a-ecpo-s103", "a-ecpo-s11", "a-grpo-s1",
             "warm-a", "c-ecpo-s101")] == ["warm-a", "warm-b", "warm-a", None, None, None, None, None]
    assert study.REGIME_ADMISSIBLE.kept_policy_warm("a-grpo-s1") == "warm-a"
    assert study.ALFWORLD.kept_policy_warm("ecpo-s101") is None  # the earlier studies keep none


def test_a_runs_final_policy_is_its_checkpoints_policy_in_float16_and_plays_from_its_kept_difference(tmp_path,
                                                                                                   monkeypatch):
    """``final_policy`` writes a trained run's policy (its checkpoint) as a float16 text-policy folder; kept as a
    difference and rebuilt on a fresh machine, the leaderboard plays it as it plays the folder it was taken from."""
    from dataclasses import replace

    import torch
    from typer.testing import CliRunner

    from ecpo_train.apps.cli import app
    from ecpo_train.evaluation.agents import load_checkpoint_policy
    from ecpo_train.policies.text import TextPolicy

    def ecpo(*args):
        done = CliRunner().invoke(app, list(args))
        assert done.exit_code == 0, done.output[-2000:]

    monkeypatch.chdir(tmp_path)
    bed = replace(BED, policy_seeds=(101,))
    finished_study(tmp_path / "out")
    TextPolicy(seed=3).save_pretrained(tmp_path / "out" / "warm")
    run = tmp_path / "out" / "runs" / "ecpo-s101"
    ecpo("train", "--config", "households_text", "--overwrite", "model=out/warm", "run_dir=out/runs/ecpo-s101",
         "iterations=1", "n_groups=2", "group_size=2", "val_every=0", "progress=false", "threads=1")
    folder = keeping.final_policy(run)
    trained, _ = load_checkpoint_policy(run)
    saved = TextPolicy.from_pretrained(folder)
    assert all(torch.equal(saved.model.state_dict()[k], v.half().float()) for k, v in trained.model.state_dict().items())
    keeping.keep_finished(tmp_path / "out", tmp_path / "keep", bed)
    keeping.restore_kept(tmp_path / "keep", tmp_path / "fresh", bed)
    for source, name in ((folder, "taken"), (tmp_path / "fresh" / "runs" / "ecpo-s101" / "policy", "rebuilt")):
        ecpo("leaderboard", "--agent", "checkpoint", "--checkpoint", str(source), "--manifest", "alfworld_gen",
             "--seeds", "1", "--limit", "4", "--out-dir", "lb", "--name", name)
    logs = {name: sorted((tmp_path / "lb").rglob(f"*{name}*/*.jsonl")) for name in ("taken", "rebuilt")}
    played = {name: [{k: v for k, v in json.loads(line).items() if k in PLAYED}
                     for path in logs[name] for line in path.read_text().splitlines()] for name in logs}
    assert len(played["taken"]) == 4 and played["taken"] == played["rebuilt"]
    rebuilt = tmp_path / "fresh" / "runs" / "ecpo-s101" / "policy"  # (the same episodes because the same weights:)
    assert all((rebuilt / p.name).read_bytes() == p.read_bytes() for p in folder.iterdir())


def test_a_job_restored_without_its_checkpoint_keeps_no_policy_and_breaks_nothing(tmp_path):
    """On a fresh machine a kept job has its logs back but not its checkpoint: keeping again copies nothing (there is
    no final policy to keep) rather than failing the study."""
    from dataclasses import replace

    out, keep, fresh = tmp_path / "out", tmp_path / "keep", tmp_path / "fresh"
    finished_study(out)
    keeping.keep_finished(out, keep, BED)  # kept before its testbed kept policies
    keeping.restore_kept(keep, fresh, BED)
    bed = replace(BED, policy_seeds=(101,))
    assert keeping.keep_finished(fresh, keep, bed) == []
    assert not (keep / "policies").exists()
