"""benchmarks/gpu_comparison.py: the iterations every arm can run, its one-line refusals, and a smoke run in which
both arms start from the same warm start and seed (their first iterations play the same episodes) and are compared
on the same validation episodes."""

from __future__ import annotations

import json

import pytest
from conftest import TOKENIZER_DIR

from benchmarks import gpu_comparison


def test_iterations_that_fit_leaves_every_arm_its_iterations_and_closing_validation():
    # 400 s left after arm 1's first 10-s iteration; validation 20 s (closing: 1.15 x 20 + 10 = 33 s), build 5 s:
    # 2 arms need (N - 1) x 10 + 33 + 5 + N x 10 + 33 <= 400, so N <= 16.95
    assert gpu_comparison.iterations_that_fit(400.0, 10.0, 20.0, 5.0, 2) == 16
    n = 16
    assert (n - 1) * 10 + 33 + 5 + n * 10 + 33 <= 400 < n * 10 + 33 + 5 + (n + 1) * 10 + 33
    assert gpu_comparison.iterations_that_fit(50.0, 10.0, 20.0, 5.0, 2) == 1  # at least the iteration already run


@pytest.mark.parametrize("arms, words", [(["ecpo"], "give two or more different estimators"),
                                         (["ecpo", "ecpo"], "give two or more different estimators"),
                                         (["ecpo", "gigpo_typo"], "unknown estimator 'gigpo_typo'")])
def test_bad_arms_are_one_line(capsys, arms, words):
    with pytest.raises(SystemExit) as stop:
        gpu_comparison.main(["--device", "cpu", "--smoke", "--arms", *arms])
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and len(err.splitlines()) == 1 and words in err


@pytest.mark.slow
def test_smoke_trains_both_arms_from_one_warm_start_and_pairs_them(tmp_path):
    if not (TOKENIZER_DIR / "tokenizer.json").exists():
        pytest.skip(f"no Qwen2.5 tokenizer at {TOKENIZER_DIR} (set ECPO_TOKENIZER_DIR)")
    out = tmp_path / "cmp.json"
    assert gpu_comparison.main(["--device", "cpu", "--smoke", "--out", str(out)]) == 0
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
    text = out.with_suffix(".md").read_text()
    assert "regime, mean over iterations: the gate open at" in text
    assert "**Registered endpoint, ecpo - gigpo_std** after training, on the same 4 episodes" in text


def test_a_bad_preset_seed_or_model_is_one_line(capsys, tmp_path):
    for argv, words in ((["--smoke", "--sft-preset", "nope"], "--sft-preset: config nope not found"),
                        (["--smoke", "--seed", "-1"], "--preset: seed=-1 is invalid"),
                        (["--model", str(tmp_path / "absent")], f"--model: no model at {tmp_path / 'absent'}")):
        with pytest.raises(SystemExit) as stop:
            gpu_comparison.main(["--device", "cpu", *argv])
        err = capsys.readouterr().err.strip()
        assert stop.value.code == 2 and len(err.splitlines()) == 1 and words in err, err


def test_split_parts_pairs_trained_and_unseen_episodes_separately():
    first = [["a", 0, 0], ["a", 1, 1], ["u", 0, 1], ["u", 1, 1]]
    second = [["a", 0, 1], ["a", 1, 1], ["u", 0, 0], ["u", 1, 1]]
    parts = gpu_comparison.split_parts(frozenset({"a"}), first, second)
    assert parts["trained"]["episodes"] == parts["unseen"]["episodes"] == 2
    assert (parts["trained"]["success_before"], parts["trained"]["success_after"]) == (0.5, 1.0)
    assert (parts["unseen"]["success_before"], parts["unseen"]["success_after"]) == (1.0, 0.5)
    assert list(gpu_comparison.split_parts(frozenset({"z"}), first, second)) == ["unseen"]


@pytest.mark.slow
def test_smoke_of_the_pool_protocol_pair_keeps_the_warm_starts_preset_and_splits_trained_from_unseen(tmp_path):
    if not (TOKENIZER_DIR / "tokenizer.json").exists():
        pytest.skip(f"no Qwen2.5 tokenizer at {TOKENIZER_DIR} (set ECPO_TOKENIZER_DIR)")
    out = tmp_path / "pool.json"
    assert gpu_comparison.main(["--device", "cpu", "--smoke", "--preset", "alfworld_cpu_pool", "--sft-preset",
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
    assert gpu_comparison.main(["--rescore", str(tmp_path / "returned.json"), "--out", str(tmp_path / "r.json")]) == 0
    assert json.loads((tmp_path / "r.json").read_text()) == report
    assert (tmp_path / "r.md").read_text() == out.with_suffix(".md").read_text()


def test_rescore_of_a_report_without_outcomes_is_one_line(tmp_path, capsys):
    (tmp_path / "early.json").write_text(json.dumps({"arms": ["ecpo", "gigpo_std"], "results": {}}))
    (tmp_path / "broken.json").write_text("{")
    for name, words in (("early.json", "holds no outcomes"), ("broken.json", "Expecting"), ("none.json", "No such")):
        with pytest.raises(SystemExit) as stop:
            gpu_comparison.main(["--rescore", str(tmp_path / name)])
        assert stop.value.code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("error: --rescore") and words in err


def test_the_gpu_pairs_and_the_run_folder_endpoint_split_and_score_the_same_episodes_alike():
    from benchmarks.registered_endpoint import paired_split

    tasks = ["a"] * 6 + ["u"] * 6
    before_won = [0, 0, 1, 0, 1, 0, 1, 1, 0, 0, 1, 0]
    after_won = [1, 1, 1, 0, 0, 1, 0, 1, 1, 0, 0, 0]
    copies = list(range(12))
    folder = paired_split({"iteration": 0, "task_ids": tasks, "copies": copies, "won": before_won},
                          {"iteration": 16, "task_ids": tasks, "copies": copies, "won": after_won}, {"a"})
    gpu = gpu_comparison.split_parts(frozenset({"a"}), [[t, c, w] for t, c, w in zip(tasks, copies, before_won)],
                                     [[t, c, w] for t, c, w in zip(tasks, copies, after_won)])
    assert list(folder) == list(gpu) == ["trained", "unseen"]
    for part in folder:
        for key in ("gained", "lost", "low", "high", "p"):
            assert folder[part][key] == pytest.approx(gpu[part][key]), (part, key)
