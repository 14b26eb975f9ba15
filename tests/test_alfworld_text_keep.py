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
