"""A study longer than a session (``benchmarks.alfworld_text run --keep``): what is finished is kept in a committed
folder and put back on a fresh machine, so no finished job is played again and none is lost."""

from __future__ import annotations

import json

from benchmarks import alfworld_text as study
from ecpo_train.evaluation.manifests import load_manifest

BED = study.HOUSEHOLDS
GAMES = [(group.name, task) for group in load_manifest(BED.manifest).groups for task in group.task_ids]


def evaluation(out, name, games):
    """``name``'s episode log under ``out`` in the leaderboard's layout, one record per game of ``games``."""
    folder = out / BED.folder / name
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"agent": {"name": name}}) + "\n", encoding="utf-8")
    lines = [json.dumps({"manifest": BED.manifest, "group": group, "task_id": task, "seed": 0, "task_type": "Pick",
                         "success": i % 3 == 0}) for i, (group, task) in enumerate(games)]
    (folder / f"{BED.manifest}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


def finished_study(out):
    """A study folder: the warm start, its evaluation, one finished arm (with its run folder) and one arm whose
    evaluation stopped after 7 games."""
    (out / "warm").mkdir(parents=True)
    for name in study.WARM_FILES:
        (out / "warm" / name).write_text(name, encoding="utf-8")
    evaluation(out, study.WARM, GAMES)
    evaluation(out, "ecpo-s101", GAMES)
    evaluation(out, "grpo-s101", GAMES[:7])
    run = out / "runs" / "ecpo-s101"
    run.mkdir(parents=True)
    for name in (*study.RUN_FILES, "checkpoint.pt"):
        (run / name).write_text(name, encoding="utf-8")


def test_only_evaluations_of_every_game_are_kept_with_the_warm_start(tmp_path):
    out, keep = tmp_path / "out", tmp_path / "keep"
    finished_study(out)
    assert study.manifest_games(BED) == len(GAMES) == 120
    assert sorted(study.keep_finished(out, keep, BED)) == ["ecpo-s101", study.WARM]
    assert study.evaluation_complete(keep, "ecpo-s101", BED)
    assert not (keep / BED.folder / "grpo-s101").exists()  # unfinished: played again from its seed
    assert not (keep / BED.folder / "ecpo-s101" / "run.json").exists()  # it names the checkpoint by absolute path
    assert json.loads((keep / BED.folder / "ecpo-s101" / "machine.json").read_text())["torch"]  # where it ran
    assert sorted(p.name for p in (keep / "runs" / "ecpo-s101").iterdir()) == sorted(study.RUN_FILES)  # no checkpoint
    assert sorted(p.name for p in (keep / "warm").iterdir()) == sorted(study.WARM_FILES)
    assert study.keep_finished(out, keep, BED) == []  # what is kept already is not copied again


def test_a_fresh_machine_gets_the_kept_jobs_back_and_plays_none_of_them_again(tmp_path):
    out, keep = tmp_path / "out", tmp_path / "keep"
    finished_study(out)
    study.keep_finished(out, keep, BED)
    fresh = tmp_path / "fresh"  # the run folder did not outlive its machine; the kept folder came with git
    # every job of this schedule is kept: it restores them and runs no ecpo command (the warm start is restored, not
    # trained again; an ecpo command here would fail on the stand-in weights above)
    study.run(fresh, 1, 20, ["ecpo"], [101], BED, keep)
    assert (fresh / "warm" / "text_policy.safetensors").read_text() == "text_policy.safetensors"
    for name in (study.WARM, "ecpo-s101"):
        assert study.outcomes(fresh, name, BED) == study.outcomes(out, name, BED)
    assert not (fresh / BED.folder / "grpo-s101").exists()
    assert study.restore_kept(keep, fresh, BED) == []  # restoring twice copies nothing


def test_keep_goes_with_run_or_keep(tmp_path, capsys):
    assert study.main(["report", "--testbed", "households", "--out", str(tmp_path), "--keep", str(tmp_path)]) == 2
    assert "--keep goes with run or keep" in capsys.readouterr().err
    assert study.main(["keep", "--testbed", "households", "--out", str(tmp_path)]) == 2
    assert "keep needs --keep DIR" in capsys.readouterr().err
