"""Issue 71's recipe tuning (regime_study.yaml's `tuning`): the `tune` stage's commands and resume rule, the kept runs,
and `tune-report`'s registered rule on hand-built curves (no training)."""

from __future__ import annotations

import copy
import gzip
import json
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks import regime_study
from benchmarks.alfworld_text import REGIME_OPEN, train_command
from benchmarks.study_keep import check_kept, keep_runs

SPEC = regime_study.protocol()
VALIDATED = [1, *range(10, 151, 10)]  # the 16 validation points of a 150-iteration run


def write_run(out: Path, name: str, points: list[float], last: int = 150) -> Path:
    """A run folder whose metrics reach iteration ``last``, validated at ``VALIDATED`` (up to ``last``) with
    ``points``."""
    run = out / "runs" / name
    run.mkdir(parents=True)
    by_iteration = dict(zip(VALIDATED, points))
    lines = [{"iteration": i, "success": 0.1} | ({"val/success": by_iteration[i]} if i in by_iteration else {})
             for i in range(1, last + 1)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (run / "config.yaml").write_text(f"run_dir: {name}\n")
    return run


def flat(value: float) -> list[float]:
    return [value] * 16


# kl: GRPO holds at 0.5; GiGPO w/std starts at 0.5 and ends at 0.2 (< half its first: collapsed)
KL = {"grpo": [0.4] * 8 + [0.6] * 8, "gigpo_std": [0.5] + [0.3] * 14 + [0.2]}
LR = {"grpo": flat(0.45), "gigpo_std": flat(0.35)}  # lr: score 0.35, neither collapses
REGISTERED = {"grpo": flat(0.3), "gigpo_std": [0.4] + [0.2] * 14 + [0.0]}  # the pilot's seed 1: score 0.2


def study(tmp_path: Path, kl: dict, lr: dict, registered: dict) -> tuple[Path, Path, Path]:
    """The tuning's out folder, its kept folder (every run kept, as `tune` keeps them) and the pilot's kept folder."""
    out, keep, pilot, registered_keep = (tmp_path / name for name in ("out", "keep", "pilot", "registered"))
    for candidate, curves in (("kl", kl), ("lr", lr)):
        for arm, points in curves.items():
            write_run(out, f"{candidate}-{arm}-s301", points)
    for arm, points in registered.items():
        write_run(pilot, f"a-{arm}-s1", points)
    keep_runs(out, keep, sorted(p.name for p in (out / "runs").iterdir()))
    keep_runs(pilot, registered_keep, ["a-grpo-s1", "a-gigpo_std-s1"])
    return out, keep, registered_keep


def test_a_tuning_job_is_the_schedules_training_command_with_the_candidates_overrides(tmp_path):
    """The command the lead ran by hand: alfworld_text's train_command at the tuning's seed and iterations from warm
    start a, then the candidate's overrides; a run with a checkpoint resumes, a finished one is not trained again."""
    out = tmp_path / "out"
    run_dir = out / "runs" / "kl-grpo-s301"
    command = regime_study.tune_command(out, SPEC, "kl", "grpo", ["kl_coef=0.1"])
    untuned = replace(REGIME_OPEN, recipe=())  # the recipe at tuning time
    assert command == train_command(run_dir, out / "warm-a", "grpo", 301, 150, untuned) + ["kl_coef=0.1"]
    assert command == ["train", "--config", "alfworld_text_paper", f"model={out / 'warm-a'}", "estimator=grpo",
                       "seed=301", f"run_dir={run_dir}", "iterations=150", "threads=1", "progress=false",
                       "command_set=open", "kl_coef=0.1"]
    write_run(out, "kl-grpo-s301", flat(0.4), last=80)
    (run_dir / "checkpoint.pt").write_bytes(b"")
    assert regime_study.tune_command(out, SPEC, "kl", "grpo", ["kl_coef=0.1"])[3] == "--resume"
    write_run(out, "lr-grpo-s301", flat(0.4))
    assert regime_study.tune_command(out, SPEC, "lr", "grpo", ["lr=1.0e-4"]) is None


def test_a_registered_recipe_reaches_every_training_command_but_not_the_warm_start_nor_the_tuning(tmp_path,
                                                                                            monkeypatch):
    """A testbed's ``recipe`` (the tuned recipe once registered) ends every ``ecpo train`` of the schedule; the warm
    start's ``ecpo sft`` does not take it, and the tuning's commands stay as they ran (the recipe at tuning time)."""
    from benchmarks import alfworld_text

    tuned = replace(REGIME_OPEN, recipe=("kl_coef=0.3",))
    command = train_command(tmp_path / "r", tmp_path / "warm-a", "ecpo_d1", 11, 150, tuned)
    assert command[-3:] == ["progress=false", "command_set=open", "kl_coef=0.3"] and "credit.d_min=1" in command
    assert "kl_coef=0.3" not in alfworld_text.warm_start_command(tmp_path / "warm-a", tuned, tuned.warm_starts[0])
    monkeypatch.setitem(alfworld_text.TESTBEDS, "regime_open", tuned)
    assert regime_study.tune_command(tmp_path, SPEC, "kl", "grpo", ["kl_coef=0.1"])[-2:] == ["command_set=open",
                                                                                            "kl_coef=0.1"]


def test_the_registered_recipe_is_the_tunings_choice_on_both_regime_testbeds_and_the_new_pilot_reuses_no_seed():
    """regime_study.yaml's `recipe` is what both regime testbeds train with, and it is the candidate that round 2's
    kept report chose; the new pilot's seeds are none of the first pilot's, the tuning's or the study's."""
    from benchmarks.alfworld_text import REGIME_ADMISSIBLE
    from benchmarks import ROOT

    chosen = json.loads((ROOT / "benchmarks/results/regime_tuning_round2.json").read_text())["chosen"]
    assert SPEC["recipe"] == SPEC["tuning"]["second_round"][chosen] == ["kl_coef=0.3"]
    assert list(REGIME_OPEN.recipe) == list(REGIME_ADMISSIBLE.recipe) == SPEC["recipe"]
    assert SPEC["pilot"] == {"seeds": [11, 12, 13], "warm_starts": ["a"]}
    first_pilot, study_low = {1, 2, 3}, SPEC["seed_offset"] + 1
    assert not set(SPEC["pilot"]["seeds"]) & (first_pilot | {SPEC["tuning"]["seed"]}) and \
        max(SPEC["pilot"]["seeds"]) < study_low


def test_tune_trains_no_finished_run_and_keeps_each_runs_metrics_and_config(tmp_path):
    """Every run of round 1 finished: `tune` runs no `ecpo` command (no log written) and keeps each run's metrics
    and config gzipped, with their sha256, as the pilot's runs are kept."""
    out = tmp_path / "out"
    (out / "warm-a").mkdir(parents=True)
    (out / "warm-a" / "sft.json").write_text("{}")
    for name in ("kl-grpo-s301", "kl-gigpo_std-s301", "lr-grpo-s301", "lr-gigpo_std-s301"):
        write_run(out, name, flat(0.4))
    keep = tmp_path / "keep"
    result = regime_study.tune(out, 1, 2, keep, SPEC)
    assert result["runs"] == {name: "finished before" for name in
                              ("kl-grpo-s301", "kl-gigpo_std-s301", "lr-grpo-s301", "lr-gigpo_std-s301")}
    assert sorted(p.name for p in (out / "logs").iterdir()) == []  # no ecpo command was run
    sums = check_kept(keep)
    assert sorted(sums) == sorted(f"runs/{name}/{file}.gz" for name in result["runs"]
                                  for file in ("metrics.jsonl", "config.yaml"))
    for name in result["runs"]:
        for file in ("metrics.jsonl", "config.yaml"):
            assert gzip.decompress((keep / "runs" / name / f"{file}.gz").read_bytes()) == \
                (out / "runs" / name / file).read_bytes()


def test_a_bad_candidate_override_is_refused_before_any_work(tmp_path):
    spec = copy.deepcopy(SPEC)
    spec["tuning"]["candidates"] = {"typo": ["kl_cof=0.1"]}
    with pytest.raises(ValueError, match="tuning candidate 'typo': unknown config key 'kl_cof'"):
        regime_study.tune(tmp_path / "out", 1, 1, tmp_path / "keep", spec)
    assert not (tmp_path / "out").exists() and not (tmp_path / "keep").exists()


def test_the_report_computes_auc_score_and_collapse_by_hand_and_chooses_a_candidate_that_beats_and_holds(tmp_path):
    out, keep, registered_keep = study(tmp_path, KL, LR, REGISTERED)
    # read from the kept folder alone (an empty out folder) and from the out folder: the same report
    from_keep = regime_study.tune_report(tmp_path / "empty", 1, keep, SPEC, registered_keep)
    assert regime_study.tune_report(out, 1, tmp_path / "none", SPEC, registered_keep) == from_keep
    kl = from_keep["candidates"]["kl"]
    assert kl["overrides"] == ["kl_coef=0.1"]
    assert kl["arms"]["grpo"] == pytest.approx({"run": "kl-grpo-s301", "auc": 0.5, "first": 0.4, "last": 0.6,
                                                "collapsed": False, "points": 16})
    assert kl["arms"]["gigpo_std"] == pytest.approx({"run": "kl-gigpo_std-s301", "auc": (0.5 + 14 * 0.3 + 0.2) / 16,
                                                     "first": 0.5, "last": 0.2, "collapsed": True, "points": 16})
    assert from_keep["scores"] == pytest.approx({"kl": 4.9 / 16, "lr": 0.35})
    registered = from_keep["registered"]
    assert registered["score"] == pytest.approx(3.2 / 16)
    assert registered["arms"]["gigpo_std"]["run"] == "a-gigpo_std-s1" and registered["arms"]["gigpo_std"]["collapsed"]
    assert from_keep["chosen"] == "lr" and "none of its arms collapsed" in from_keep["reason"]
    assert "no valid_seen game" in from_keep["validation"]


@pytest.mark.parametrize("case", ["best collapses", "none beats"])
def test_the_report_chooses_none_when_the_best_collapses_or_none_beats_the_registered(tmp_path, case):
    if case == "best collapses":  # kl scores 0.5 (its GiGPO w/std 0.8 -> 0.3); lr beats and holds but is second
        kl, registered = {"grpo": flat(0.5), "gigpo_std": [0.8] + [0.5] * 14 + [0.3]}, REGISTERED
    else:
        kl, registered = {"grpo": flat(0.5), "gigpo_std": flat(0.5)}, {"grpo": flat(0.6), "gigpo_std": flat(0.55)}
    _, keep, registered_keep = study(tmp_path, kl, LR, registered)
    result = regime_study.tune_report(tmp_path / "empty", 1, keep, SPEC, registered_keep)
    assert result["scores"] == pytest.approx({"kl": 0.5, "lr": 0.35})
    assert result["chosen"] == "none: run round 2"
    if case == "best collapses":
        assert "kl (0.5000), beats the registered recipe's 0.2000, but its gigpo_std collapsed" in result["reason"]
    else:
        assert "kl (0.5000, the lower of its arms' validation AUC), does not beat the registered recipe's 0.5500" \
            in result["reason"]


def test_a_last_point_at_exactly_half_the_first_is_not_a_collapse(tmp_path):
    run = write_run(tmp_path, "r", [0.4] + [0.3] * 14 + [0.2])
    summary = regime_study.curve_summary(regime_study.program.metrics_of(run), 150, "r")
    assert summary["collapsed"] is False and summary["first"] == 0.4 and summary["last"] == 0.2


def test_round_two_says_none_plainly():
    chosen, reason = regime_study.choose({"kl_lr": 0.2, "kl3": 0.1}, {"kl_lr": [], "kl3": []}, 0.3, 2)
    assert chosen == "none" and "no recipe is chosen" in reason
    assert regime_study.choose({"kl_lr": 0.4, "kl3": 0.1}, {"kl_lr": [], "kl3": []}, 0.3, 2)[0] == "kl_lr"


def test_a_report_refuses_an_unfinished_or_missing_run_naming_it(tmp_path, capsys):
    out, keep, registered_keep = study(tmp_path, KL, LR, REGISTERED)
    unfinished = tmp_path / "unfinished"
    write_run(unfinished, "kl-grpo-s301", flat(0.4)[:9], last=80)
    with pytest.raises(ValueError, match="run kl-grpo-s301 has not finished: its metrics end at iteration 80 of 150"):
        regime_study.tune_report(unfinished, 1, keep, SPEC, registered_keep)
    with pytest.raises(ValueError, match="run kl-grpo-s301 is missing"):
        regime_study.tune_report(tmp_path / "empty", 1, tmp_path / "no-keep", SPEC, registered_keep)
    with pytest.raises(ValueError, match="run a-grpo-s1 is missing"):
        regime_study.tune_report(out, 1, keep, SPEC, tmp_path / "no-pilot")
    # on the command line: one error line, exit 2
    assert regime_study.main(["tune-report", "--out", str(unfinished), "--keep", str(keep)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: run kl-grpo-s301 has not finished") and len(err.splitlines()) == 1


def test_an_option_a_tuning_stage_does_not_read_is_refused(tmp_path, capsys):
    for argv in (["tune-report", "--out", str(tmp_path), "--jobs", "2"],
                 ["tune", "--out", str(tmp_path), "--testbed", "regime_admissible"]):
        with pytest.raises(SystemExit) as stop:
            regime_study.main(argv)
        assert stop.value.code == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert errors == ["error: tune-report does not take --jobs (it takes --json, --round, --keep)",
                      "error: tune does not take --testbed (it takes --json, --round, --jobs, --keep)"]
    assert not (tmp_path / "logs").exists()
