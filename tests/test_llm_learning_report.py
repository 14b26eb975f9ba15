"""``benchmarks/llm_learning_report.py``: the episode-level report: validation episodes pooled over seeds, paired by
(seed, task, copy), from the run folders a protocol leaves (``validation.jsonl`` written by ``MetricsLog``)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchmarks import llm_learning, llm_learning_report
from benchmarks import stats as bench_stats


def _run(folder: Path, iterations: int, before: list[int], after: list[int]) -> None:
    """A finished cell: metrics up to ``iterations`` and two validations of 4 episodes (2 tasks x 2 copies)."""
    from ecpo_train.runtime.run_dir import MetricsLog

    log = MetricsLog(folder, tensorboard=False, config={"iterations": iterations})
    episodes = lambda won: [SimpleNamespace(task_id=t, won=w, length=3) for t, w in zip(["a", "a", "b", "b"], won)]
    log.append_validation(0, episodes(before))
    log.append({"iteration": 0, "val/success": sum(before) / 4}, 0)
    log.append({"iteration": iterations, "val/success": sum(after) / 4, "time/iteration": 1.0}, iterations)
    log.append_validation(iterations, episodes(after))
    (folder / "config.yaml").write_text(f"iterations: {iterations}\n")


def test_paired_outcomes_counts_discordant_episodes_and_mcnemar():
    ps = bench_stats
    out = ps.paired_outcomes({1: 1, 2: 1, 3: 0, 4: 0, 5: 0, 6: 0}, {1: 1, 2: 0, 3: 1, 4: 1, 5: 1, 6: 0})
    assert (out["gained"], out["lost"], out["episodes"]) == (3, 1, 6)
    assert out["diff"] == pytest.approx(2 / 6)
    assert out["p"] == pytest.approx(2 * 5 / 16)  # P(X <= 1 | 4, 1/2) * 2
    with pytest.raises(ps.MisalignedCells, match="only one of them"):
        ps.paired_outcomes({1: 1}, {2: 1})


def test_episode_report_pools_seeds_and_pairs_methods(tmp_path):
    ll, report = llm_learning, llm_learning_report
    root = tmp_path / "alfworld_small" / "N4"
    # seed 0 and 1, each: both methods share the first validation (same weights, same draws)
    _run(root / "ecpo" / "seed0", 6, [1, 0, 0, 0], [1, 1, 1, 0])
    _run(root / "gigpo_std" / "seed0", 6, [1, 0, 0, 0], [1, 0, 0, 0])
    _run(root / "ecpo" / "seed1", 6, [0, 0, 1, 0], [0, 1, 1, 1])
    _run(root / "gigpo_std" / "seed1", 6, [0, 0, 1, 0], [0, 0, 0, 1])
    _run(root / "ecpo" / "seed2", 6, [0, 0, 0, 0], [1, 1, 1, 1])  # no gigpo partner: not in the method pair
    results, _ = ll.summaries_from_runs([tmp_path], ["ecpo", "gigpo_std"])
    parts = {(p["kind"], p["a"]): p for p in report.episode_comparisons(results)}
    learned = parts[("learned", "ecpo")]
    assert (learned["gained"], learned["lost"], learned["episodes"], learned["seeds"]) == (8, 0, 12, [0, 1, 2])
    assert learned["p"] == pytest.approx(2 / 2**8)
    gigpo = parts[("learned", "gigpo_std")]
    assert (gigpo["gained"], gigpo["lost"]) == (1, 1)
    vs = parts[("vs", "ecpo")]  # ecpo - gigpo_std at the final validation, seeds 0 and 1 only
    assert (vs["gained"], vs["lost"], vs["episodes"], vs["seeds"]) == (4, 0, 8, [0, 1])
    assert vs["diff"] == pytest.approx(4 / 8)
    assert all(p["m"] == 3 for p in parts.values())  # one Holm family of three
    text = "\n".join(report.episode_lines(list(parts.values())))
    assert "ecpo − gigpo_std, final (8 episodes, seeds [0, 1]): 4 gained, 0 lost" in text


def test_a_cell_without_validation_file_is_left_out_of_the_episode_report(tmp_path):
    ll, report = llm_learning, llm_learning_report
    folder = tmp_path / "alfworld_small" / "N4" / "ecpo" / "seed0"
    _run(folder, 6, [1, 0, 0, 0], [1, 1, 0, 0])
    (folder / "validation.jsonl").unlink()
    results, _ = ll.summaries_from_runs([tmp_path], ["ecpo"])
    assert results["alfworld_small"][4]["ecpo"][0]["episodes"] == {}
    assert report.episode_comparisons(results) == []
    assert json.loads(json.dumps(results))  # stays JSON


def test_a_recipe_chosen_on_seed_0_is_stated_and_every_result_is_also_given_without_it(tmp_path):
    """Preset ``alfworld_cpu``: the recipe was chosen on seed 0's own validation, so the report says so and prints
    each comparison again over seeds 1-2 only (seed 0 gains 3 episodes, seeds 1 and 2 none)."""
    ll, report = llm_learning, llm_learning_report
    root = tmp_path / "alfworld_small" / "N4"
    for seed, after in ((0, [1, 1, 1, 1]), (1, [1, 0, 0, 0]), (2, [0, 0, 1, 0])):
        before = [1, 0, 0, 0] if seed < 2 else [0, 0, 1, 0]
        _run(root / "ecpo" / f"seed{seed}", 6, before, after)
        _run(root / "gigpo_std" / f"seed{seed}", 6, before, before)
    results, _ = ll.summaries_from_runs([tmp_path], ["ecpo", "gigpo_std"])
    protocol = SimpleNamespace(preset="alfworld_cpu", seeds=[0, 1, 2], overrides=[])
    text = report.report(results, "alfworld_cpu_pairs", protocol, 60.0)
    assert "**Recipe selection.** Preset `alfworld_cpu`: the recipe (lr 3e-6 with a 9-step warm-up)" in text
    # by episode: 3 of 12 gained with seed 0 (Tango's interval; by task, over the 2 tasks at t with 1 df, it spans
    # nearly everything), none of 8 without it (Tango's +-z^2 / (8 + z^2) = +-0.324)
    low, high = bench_stats.tango(3, 0, 12)
    assert (f"ecpo, final − first (12 episodes, seeds [0, 1, 2]): 3 gained, 0 lost, +0.250 [{low:+.3f}, {high:+.3f}] "
            "(no MDE (3 of 12 changed)), by task [-0.914, +0.961] (2 tasks, design effect 1.00), McNemar p 0.25 — "
            "not significant; without seed 0 (the recipe's selection seed): 0 gained, 0 lost, +0.000 [-0.324, +0.324] "
            "— not significant") in text
    assert "- ecpo, late − before (3 seeds): " in text and "(no MDE (3 seeds))" in text
    assert "without seed 0 (the recipe's selection seed): +0.000" in text  # the seed-level late − before, seeds 1-2
    # another preset carries no selection note
    assert "Recipe selection" not in report.report(results, "x", SimpleNamespace(preset="corridor_llm", seeds=[0, 1, 2],
                                                                                  overrides=[]), 60.0)


def test_the_report_stage_writes_the_committed_report_again_and_a_run_records_its_command(tmp_path, capsys,
                                                                                           monkeypatch):
    """``report --from-json`` on the committed results writes their JSON and report again as committed (the
    committed report quotes the command of then: results stored before the stages keep it); results that record
    their command are quoted in the stage form; an option of another stage is one line, exit 2."""
    results = Path(llm_learning.__file__).parent / "results"
    monkeypatch.chdir(results.parent.parent)  # (the committed report quotes the path from the repository root)
    committed = results / "llm_learning.json"
    stem = tmp_path / "llm_learning"
    assert llm_learning.main(["report", "--protocol", "budget", "--from-json", "benchmarks/results/llm_learning.json",
                              "--out", str(stem)]) == 0
    assert stem.with_suffix(".json").read_bytes() == committed.read_bytes()
    written = stem.with_suffix(".md").read_text()
    assert (results / "llm_learning.md").read_text().startswith(written)  # (hand-written sections follow it)
    assert "Re-reported by `python -m benchmarks.llm_learning --protocol budget --from-json" in written
    pairs = results / "llm_learning_alfworld_cpu_pairs.json"
    assert llm_learning.main(["report", "--protocol", "alfworld_cpu_pairs", "--from-json",
                              "benchmarks/results/llm_learning_alfworld_cpu_pairs.json", "--out", str(tmp_path / "p")]) == 0
    assert (tmp_path / "p.json").read_bytes() == pairs.read_bytes()
    assert (tmp_path / "p.md").read_bytes() == pairs.with_suffix(".md").read_bytes()

    stored = json.loads(committed.read_text()) | {"command": "python -m benchmarks.llm_learning run --protocol budget"}
    (tmp_path / "new.json").write_text(json.dumps(stored))
    assert llm_learning.main(["report", "--protocol", "budget", "--from-json", str(tmp_path / "new.json"),
                              "--out", str(tmp_path / "again")]) == 0
    assert "Re-reported by `python -m benchmarks.llm_learning report --protocol budget --from-json" in \
        (tmp_path / "again.md").read_text()
    assert json.loads((tmp_path / "again.json").read_text())["command"] == stored["command"]
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        llm_learning.main(["report", "--jobs", "2", "--from-json", str(committed)])
    assert stop.value.code == 2
    refusal = "error: report does not take --jobs (it takes --from-json, --from-runs)"
    assert capsys.readouterr().err.strip().splitlines() == [refusal]
    assert llm_learning.main(["report", "--protocol", "budget"]) == 2


@pytest.mark.slow
def test_run_trains_every_cell_then_passes_over_the_finished_ones(tmp_path, tiny_model_dir, capsys):
    """``run`` (the ``quick`` protocol, a tiny model): each cell trained in its folder and reported; run again, every
    finished cell is passed over (the run shell's resume-or-start) and the report is the same; a changed defining
    key is one line, exit 2, and leaves the cells as they were."""
    runs, stem = tmp_path / "runs", tmp_path / "quick"
    argv = ["run", "--protocol", "quick", "--runs-dir", str(runs), "--out", str(stem), f"model={tiny_model_dir}",
            "iterations=1", "val_every=1"]
    assert llm_learning.main(argv) == 0
    first = json.loads(stem.with_suffix(".json").read_text())
    assert sorted(first["results"]["corridor"]["8"]) == ["ecpo", "gigpo_std"]
    assert first["command"].startswith("python -m benchmarks.llm_learning run --protocol quick model=")
    cell = runs / "quick" / "corridor" / "N8" / "ecpo" / "seed0"
    metrics = (cell / "metrics.jsonl").read_bytes()
    assert llm_learning.main(argv) == 0
    assert json.loads(stem.with_suffix(".json").read_text()) == first
    assert (cell / "metrics.jsonl").read_bytes() == metrics
    capsys.readouterr()
    assert llm_learning.main([*argv, "lr=1e-3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "lr" in err[0], err
    assert (cell / "metrics.jsonl").read_bytes() == metrics
