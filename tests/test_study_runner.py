"""benchmarks/study.py, the runner every registered study shares: its jobs, how they run, its stages' options."""

from __future__ import annotations

import pytest

from benchmarks.alfworld_text import REGIME_OPEN, job_name
from benchmarks.study import StudyCommand, arms_by_seeds, finished, run_jobs, trained


def test_jobs_are_seed_major_under_the_names_a_kept_study_holds():
    # a kept study (the regime study's folder) names its jobs WARM-ARM-sSEED: a resumed study must find them
    jobs = arms_by_seeds(["grpo", "ecpo"], [1, 2], REGIME_OPEN.warm_starts, job_name)
    assert [job.name for job in jobs] == ["a-grpo-s1", "a-ecpo-s1", "b-grpo-s1", "b-ecpo-s1",
                                          "a-grpo-s2", "a-ecpo-s2", "b-grpo-s2", "b-ecpo-s2"]
    assert [job.name for job in arms_by_seeds(["ecpo"], [3])] == ["ecpo-s3"]


def test_a_run_is_finished_once_its_metrics_reach_its_iterations():
    """The one rule every study's resume reads (alfworld_text's schedule, the regime tuning, llm_learning's
    --from-runs): not started, stopped early, at the target, past it (trained longer)."""
    lines = [{"iteration": i} for i in range(1, 6)]
    assert [finished(lines[:n], 5) for n in (0, 4, 5)] == [False, False, True]
    assert finished(lines, 4)


def test_a_run_stopped_between_its_last_metrics_line_and_its_last_checkpoint_is_trained_on_not_evaluated(tmp_path):
    """A crash after iteration 5's metrics line but before its checkpoint leaves the checkpoint at 4: the schedule
    resumes the run (train_command gives --resume, which cuts the metrics back to 4) instead of evaluating iteration
    4's policy as the final one; a run whose checkpoint holds the last iteration, or that has none left, is trained."""
    from benchmarks.alfworld_text import train_command
    from ecpo_train.runtime.checkpoint_io import save_checkpoint

    run_dir, lines = tmp_path / "run", [{"iteration": i} for i in range(1, 6)]
    checkpoint = run_dir / "checkpoint.pt"
    assert trained(lines, checkpoint, 5) and not trained(lines[:4], checkpoint, 5)  # no checkpoint: the metrics say
    save_checkpoint({"iteration": 4}, checkpoint)
    assert not trained(lines, checkpoint, 5)
    assert "--resume" in train_command(run_dir, tmp_path / "warm", "ecpo", 1, 5)
    save_checkpoint({"iteration": 5}, checkpoint)
    assert trained(lines, checkpoint, 5)


def test_a_failed_job_is_raised_after_the_others_finished():
    done = []

    def fail() -> None:
        raise RuntimeError("job 2 failed")

    with pytest.raises(RuntimeError, match="job 2 failed"):
        run_jobs([lambda: done.append(1), fail, lambda: done.append(3)], parallel=1)
    assert done == [1, 3]  # the later job was not lost to the earlier one's failure


def test_an_option_the_stage_does_not_read_is_one_line_and_defaults_fill_the_rest(capsys):
    command = StudyCommand("benchmarks.example", "an example study", {"run": ("jobs",), "report": ("json",)},
                           defaults={"jobs": 2})
    command.add("--out", required=True, common=True)
    command.add("--jobs", type=int)
    command.add("--json")
    with pytest.raises(SystemExit) as stop:
        command.parse(["report", "--out", "d", "--jobs", "3"])
    assert stop.value.code == 2
    assert capsys.readouterr().err.strip() == "error: report does not take --jobs (it takes --json)"
    args = command.parse(["run", "--out", "d"])
    assert (args.stage, args.jobs, args.json) == ("run", 2, None)
    assert command.parse(["run", "--out", "d", "--jobs", "1"]).jobs == 1


@pytest.mark.parametrize(("module", "argv", "words"), [
    ("credit_counterfactual", ["run", "--k", "0"], "argument --k: '0' is not a whole number >= 1"),
    ("credit_counterfactual", ["run", "--targets", "nan"], "argument --targets: 'nan' is not a number in [0, 1]"),
    ("credit_counterfactual", ["run", "--workers", "-1"], "argument --workers: '-1' is not a whole number >= 1"),
    ("credit_study", ["run", "--workers", "0"], "argument --workers: '0' is not a whole number >= 1"),
    ("gpu_comparison", ["run", "--smoke", "--time-limit", "nan"], "argument --time-limit: 'nan' is not a finite"),
    ("gpu_comparison", ["run", "--smoke", "--iterations", "0"], "argument --iterations: '0' is not a whole number"),
    ("paper_benchmarks", ["run", "--smoke", "--seed", "-1"], "argument --seed: '-1' is not a whole number >= 0"),
    ("paper_benchmarks", ["run", "--smoke", "--sft-lr=-1e-5"], "argument --sft-lr: '-1e-5' is not a finite number"),
    ("memory", ["--rows", "0"], "argument --rows: '0' is not a whole number >= 1"),
    ("llm_learning", ["run", "--jobs", "0"], "argument --jobs: '0' is not a whole number >= 1"),
    ("credit_study", ["run", "--envs", "diagnostic", "nope"], "--envs: the protocol has no env 'nope'"),
    ("arms", [], "the following arguments are required: spec"),
    ("arms", ["/nonexistent/spec.json"], "spec /nonexistent/spec.json: not an arm's spec (FileNotFoundError"),
])
def test_a_benchmark_number_or_name_out_of_range_is_one_line_before_any_work(capsys, module, argv, words):
    """0 was read as "the default" (--k, --iterations), a negative count as one process, nan as a time limit or a
    target no run reaches, an unknown --envs name was dropped, and `benchmarks.arms` without its spec was an
    IndexError: each is refused by the option's type, one line, exit 2."""
    import importlib

    main = importlib.import_module(f"benchmarks.{module}").main
    try:
        code = main(argv)
    except SystemExit as exited:
        code = exited.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: ") and words in err[0], err
