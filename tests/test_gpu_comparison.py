"""benchmarks/gpu_comparison.py: the iterations every arm can run, its one-line refusals, and smoke runs in which both
arms start from the same warm start and seed (their first iterations play the same episodes), side by side in two
processes, and are compared on the same validation episodes, at T = 0.4 and greedily."""

from __future__ import annotations

import json

import pytest
from conftest import TOKENIZER_DIR

from benchmarks import gpu_comparison
from benchmarks.arms import iterations_that_fit, run_side_by_side
from benchmarks.gpu_comparison import run_arm
from benchmarks.paired_report import households, split_parts


def test_iterations_that_fit_leaves_every_arm_its_iterations_and_closing_validation():
    # 400 s left after the slowest arm's first 10-s iteration; validation 20 s (closing: 1.15 x 20 + 10 = 33 s):
    # its other N - 1 iterations and its closing validation: (N - 1) x 10 + 33 <= 400, so N <= 37.7
    assert iterations_that_fit(400.0, 10.0, 20.0) == 37
    assert 36 * 10 + 33 <= 400 < 37 * 10 + 33
    assert iterations_that_fit(30.0, 10.0, 20.0) == 1  # at least the iteration already run


@pytest.mark.parametrize("arms, words", [(["ecpo"], "give two or more different estimators"),
                                         (["ecpo", "ecpo"], "give two or more different estimators"),
                                         (["ecpo", "gigpo_typo"], "unknown estimator 'gigpo_typo'")])
def test_bad_arms_are_one_line(capsys, arms, words):
    with pytest.raises(SystemExit) as stop:
        gpu_comparison.main(["run", "--device", "cpu", "--smoke", "--arms", *arms])
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and len(err.splitlines()) == 1 and words in err


@pytest.mark.slow
def test_smoke_trains_both_arms_from_one_warm_start_and_pairs_them(tmp_path):
    if not (TOKENIZER_DIR / "tokenizer.json").exists():
        pytest.skip(f"no Qwen2.5 tokenizer at {TOKENIZER_DIR} (set ECPO_TOKENIZER_DIR)")
    out = tmp_path / "cmp.json"
    assert gpu_comparison.main(["run", "--device", "cpu", "--smoke", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    ecpo, gigpo = report["results"]["ecpo"], report["results"]["gigpo_std"]
    assert report["iterations"] == ecpo["iterations_done"] == gigpo["iterations_done"] == 2  # sized, then capped
    # the same weights and seed: the first iteration plays the same episodes in both arms
    for key in ("num_steps", "success"):
        assert ecpo["per_iteration"][0][key] == gigpo["per_iteration"][0][key]
    before = report["outcomes"]["before"]
    assert len(before) == ecpo["gain"]["episodes"] == report["comparisons"]["ecpo - gigpo_std"]["episodes"] == 4
    assert {(t, c) for t, c, _ in report["outcomes"]["after_ecpo"]} == {(t, c) for t, c, _ in before}
    # the regime is reported per arm: ECPO's gate share and lucky singletons; GiGPO has no gate
    assert all("credit/num_lucky_singletons" in r and "credit/gated_fraction" in r for r in ecpo["per_iteration"])
    assert not any("credit/gated_fraction" in r for r in gigpo["per_iteration"])
    assert set(ecpo["regime"]) == {"gate_open_share", "lucky_singletons_per_batch", "divergent_anchor_share"}
    assert "gate_open_share" not in gigpo["regime"]
    # greedy (T = 0) beside T = 0.4, on the same episodes; the outcomes per household add up to the episodes'
    assert [(t, c) for t, c, _ in report["outcomes"]["greedy_after_gigpo_std"]] == [(t, c) for t, c, _ in before]
    assert report["comparisons"].keys() == report["greedy_comparisons"].keys() == {"ecpo - gigpo_std"}
    for key, rows in report["outcomes"].items():
        assert sum(h[key] for h in report["households"].values()) == sum(w for _, _, w in rows)
    text = out.with_suffix(".md").read_text()
    assert "regime, mean over iterations: the gate open at" in text
    assert "**ecpo - gigpo_std after training (T = 0.4, primary)**: ecpo" in text
    assert "**ecpo - gigpo_std after training (greedy, T = 0)**" in text
    assert (tmp_path / "cmp-ecpo.log").is_file() and (tmp_path / "cmp-gigpo_std.log").is_file()  # a process each


def test_an_arm_process_that_fails_is_reported_in_one_line(tmp_path):
    spec = {"arm": "ecpo", "preset": "no_such_preset", "overrides": [], "device": "cpu", "score_batch": 8,
            "deadline": 1e12, "reserve": 0.0}
    kept = {}
    failed = run_side_by_side([spec], run_arm, tmp_path, lambda walls: 1, tmp_path / "out", kept.__setitem__)
    # the library's refusal is the arm's one `error:` line and exit 2, named in the launcher's one line
    assert kept == {} and str(failed).startswith("ecpo: its process exited 2 (error: ") and "no_such_preset" in str(failed)


def test_a_bad_preset_seed_or_model_is_one_line(capsys, tmp_path):
    for argv, words in ((["--smoke", "--sft-preset", "nope"], "--sft-preset: config nope not found"),
                        (["--smoke", "--seed", "-1"], "--seed: '-1' is not a whole number >= 0"),
                        (["--model", str(tmp_path / "absent")], f"--model: no model at {tmp_path / 'absent'}")):
        with pytest.raises(SystemExit) as stop:
            gpu_comparison.main(["run", "--device", "cpu", *argv])
        err = capsys.readouterr().err.strip()
        assert stop.value.code == 2 and len(err.splitlines()) == 1 and words in err, err


def test_split_parts_pairs_trained_and_unseen_episodes_separately():
    first = [["a", 0, 0], ["a", 1, 1], ["u", 0, 1], ["u", 1, 1]]
    second = [["a", 0, 1], ["a", 1, 1], ["u", 0, 0], ["u", 1, 1]]
    parts = split_parts(frozenset({"a"}), first, second)
    assert parts["trained"]["episodes"] == parts["unseen"]["episodes"] == 2
    assert (parts["trained"]["success_before"], parts["trained"]["success_after"]) == (0.5, 1.0)
    assert (parts["unseen"]["success_before"], parts["unseen"]["success_after"]) == (1.0, 0.5)
    assert list(split_parts(frozenset({"z"}), first, second)) == ["unseen"]


@pytest.mark.slow
def test_smoke_of_the_pool_protocol_pair_keeps_the_warm_starts_preset_and_splits_trained_from_unseen(tmp_path):
    if not (TOKENIZER_DIR / "tokenizer.json").exists():
        pytest.skip(f"no Qwen2.5 tokenizer at {TOKENIZER_DIR} (set ECPO_TOKENIZER_DIR)")
    out = tmp_path / "pool.json"
    assert gpu_comparison.main(["run", "--device", "cpu", "--smoke", "--preset", "alfworld_cpu_pool", "--sft-preset",
                                "alfworld_cpu", "--seed", "3", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert (report["seed"], report["sft_preset"], report["sft_seed"], report["train_task_count"]) == \
        (3, "alfworld_cpu", 0, 16)
    parts = report["by_part"]["ecpo - gigpo_std"]
    assert parts["trained"]["episodes"] == parts["unseen"]["episodes"] == 2
    assert set(report["by_part"]) == {"ecpo after - before", "gigpo_std after - before", "ecpo - gigpo_std"}
    assert "ecpo - gigpo_std, trained tasks:" in out.with_suffix(".md").read_text()
    # the GPU machine has no scipy: its tests read "not computed"; --rescore here recomputes them from the outcomes
    stripped = json.loads(out.read_text())
    stripped["comparisons"] = {}
    stripped["by_part"] = {}
    for arm in stripped["results"].values():
        arm["gain"] = {"test": "not computed (no scipy)"}
    (tmp_path / "returned.json").write_text(json.dumps(stripped))
    assert gpu_comparison.main(["report", "--from-json", str(tmp_path / "returned.json"), "--out", str(tmp_path / "r.json")]) == 0
    assert json.loads((tmp_path / "r.json").read_text()) == report
    assert (tmp_path / "r.md").read_text() == out.with_suffix(".md").read_text()


def test_rescore_of_a_report_without_outcomes_is_one_line(tmp_path, capsys):
    (tmp_path / "early.json").write_text(json.dumps({"arms": ["ecpo", "gigpo_std"], "results": {}}))
    (tmp_path / "broken.json").write_text("{")
    for name, words in (("early.json", "holds no outcomes after training"), ("broken.json", "Expecting"), ("none.json", "No such")):
        with pytest.raises(SystemExit) as stop:
            gpu_comparison.main(["report", "--from-json", str(tmp_path / name)])
        assert stop.value.code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("error: --from-json") and words in err


def test_households_count_each_validations_wins_per_task():
    table = households({"before": [["a", 0, 1], ["a", 1, 0], ["b", 0, 0]],
                        "after_ecpo": [["a", 0, 1], ["a", 1, 1], ["b", 0, 1]]})
    assert table == {"a": {"episodes": 2, "before": 1, "after_ecpo": 2}, "b": {"episodes": 1, "before": 0,
                                                                               "after_ecpo": 1}}


def test_the_registered_comparisons_arms_reference_first():
    """``--registered``: issue 57's nine arms for the next GPU window, GiGPO w/std first (the one compared with)."""
    from benchmarks.gpu_comparison import registered_arms
    from ecpo_train.core.credit import available_estimators

    arms = registered_arms()
    assert arms[0] == "gigpo_std" and len(arms) == len(set(arms)) == 9
    assert {"pgpo", "hgpo", "graphgpo", "pace", "ecpo", "grpo"} <= set(arms) <= set(available_estimators())
