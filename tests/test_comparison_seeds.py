"""`gpu_comparison seeds` (benchmarks/paired_report.py): gpu_comparison reports of one protocol summarised over
seeds (the seed as the
unit, and the episodes pooled), incomplete pairs left out by name, other protocols refused in one line."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("scipy")

from benchmarks import gpu_comparison


def _report(tmp_path, seed, ecpo_won, gigpo_won, iterations_done=16, preset="alfworld_cpu_pool", name=None,
            greedy=None):
    """A gpu_comparison report of four episodes (tasks a, a, u, u; a trained); ``greedy``: the two arms' greedy
    (T = 0) outcomes (default: those of T = 0.4), ``False``: none (not a gpu_comparison report)."""
    tasks = ["a", "a", "u", "u"]
    keys = [[t, c] for t, c in zip(tasks, [0, 1, 0, 1])]
    report = {"preset": preset, "arms": ["ecpo", "gigpo_std"], "iterations": 16, "train_tasks": ["a"],
              "sft_preset": "alfworld_cpu", "sft_seed": 0, "seed": seed, "by_part": {}, "comparisons": {},
              "results": {"ecpo": {"iterations_done": 16}, "gigpo_std": {"iterations_done": iterations_done}},
              "outcomes": {"before": [k + [0] for k in keys],
                           "after_ecpo": [k + [w] for k, w in zip(keys, ecpo_won)],
                           "after_gigpo_std": [k + [w] for k, w in zip(keys, gigpo_won)]}}
    greedy = (ecpo_won, gigpo_won) if greedy is None else greedy
    if greedy:
        report["outcomes"] |= {"greedy_before": [k + [0] for k in keys]} | {
            f"greedy_after_{arm}": [k + [w] for k, w in zip(keys, won)] for arm, won in zip(report["arms"], greedy)}
    path = tmp_path / (name or f"seed{seed}.json")
    path.write_text(json.dumps(report))
    return path


def seeds(paths: list[str], out) -> dict:
    """``gpu_comparison seeds --from-json PATHS --out OUT`` (exit 0), and the summary it wrote."""
    assert gpu_comparison.main(["seeds", "--from-json", *paths, "--out", str(out)]) == 0
    return json.loads(out.read_text())


def test_summary_over_seeds_by_hand(tmp_path):
    paths = [_report(tmp_path, 1, [1, 1, 0, 0], [0, 1, 0, 0]),   # trained: ECPO won 1; unseen: equal
             _report(tmp_path, 2, [1, 0, 1, 0], [0, 0, 0, 0]),   # trained: won 1; unseen: won 1
             _report(tmp_path, 3, [0, 0, 0, 0], [1, 0, 0, 0]),   # trained: lost 1
             _report(tmp_path, 4, [1, 1, 1, 1], [1, 1, 1, 1], iterations_done=9)]  # stopped early: not a pair
    summary = seeds([str(p) for p in paths], tmp_path / "s.json")
    assert summary["seeds"] == [1, 2, 3] and [x["seed"] for x in summary["left_out"]] == [4]
    trained = summary["across_seeds"]["trained"]
    assert trained["diff"] == pytest.approx((0.5 + 0.5 - 0.5) / 3) and trained["n"] == 3
    pooled = summary["pooled_episodes"]["trained"]
    assert (pooled["gained"], pooled["lost"], pooled["episodes"]) == (2, 1, 6)
    assert pooled["diff"] == pytest.approx(1 / 6) and pooled["p"] == pytest.approx(1.0)
    everything = summary["pooled_episodes"]["all episodes"]
    assert (everything["gained"], everything["lost"], everything["episodes"]) == (3, 1, 12)
    text = (tmp_path / "s.md").read_text()
    assert "left out: seed 4" in text and "no MDE (3 seeds)" in text


@pytest.mark.parametrize("seed, preset, words", [(2, "alfworld_gpu", "their preset differ"),
                                                 (1, "alfworld_cpu_pool", "seed 1 appears in more than one report")])
def test_other_protocols_and_repeated_seeds_are_one_line(tmp_path, capsys, seed, preset, words):
    first = _report(tmp_path, 1, [1, 1, 0, 0], [0, 1, 0, 0])
    other = _report(tmp_path, seed, [1, 1, 0, 0], [0, 1, 0, 0], preset=preset, name="other.json")
    with pytest.raises(SystemExit) as stop:
        gpu_comparison.main(["seeds", "--from-json", str(first), str(other)])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err


def test_the_seed_is_the_unit_and_one_pair_says_it_cannot_speak_to_run_to_run_variance(tmp_path):
    """The across-seed line comes first; one pair gets no interval over seeds; the pooled episodes are a secondary,
    conditional line; per-seed rows carry Tango's interval and the by-task one (tasks repeat: 2 copies each)."""
    one = seeds([str(_report(tmp_path, 1, [1, 1, 0, 0], [0, 0, 0, 0]))], tmp_path / "o.json")
    text = (tmp_path / "o.md").read_text()
    assert ("**Across seeds (T = 0.4, primary; the seed as the unit, 1 seed pair): +0.500 (one pair of runs: "
            "no interval over seeds") in text
    assert text.index("Across seeds") < text.index("| seed |") < text.index("Secondary, conditional on these trained")
    pooled = one["pooled_episodes"]["all episodes"]
    assert pooled["interval"] == "Tango score" and pooled["both_won"] == 0
    assert "clustered" in one["per_seed"]["all episodes"][0]  # tasks a and u, two copies each


def test_greedy_across_seeds_is_a_secondary_line_beside_the_primary_one(tmp_path):
    """The greedy (T = 0) validation of the same episodes, the seed as the unit: per seed ECPO - GiGPO w/std on all
    four episodes is +0.25, +0.50, 0.00, on the trained two +0.5, +1.0, 0.0; the T = 0.4 line stays the primary."""
    paths = [_report(tmp_path, 1, [1, 1, 0, 0], [0, 1, 0, 0], greedy=([1, 1, 0, 0], [0, 1, 0, 0])),
             _report(tmp_path, 2, [1, 0, 1, 0], [0, 0, 0, 0], greedy=([1, 1, 0, 0], [0, 0, 0, 0])),
             _report(tmp_path, 3, [0, 0, 0, 0], [1, 0, 0, 0], greedy=([0, 0, 1, 1], [0, 0, 1, 1]))]
    summary = seeds([str(p) for p in paths], tmp_path / "g.json")
    greedy = summary["greedy"]
    assert greedy["seeds"] == [1, 2, 3]
    assert greedy["per_seed_diff"]["all episodes"] == pytest.approx([0.25, 0.5, 0.0])
    everything = greedy["across_seeds"]["all episodes"]
    assert everything["diff"] == pytest.approx(0.25) and everything["n"] == 3
    assert everything["sd"] == pytest.approx(0.25)  # deviations -0.25, +0.25, 0
    half = 4.302652729911275 * 0.25 / 3 ** 0.5  # t_{0.975, 2} * sd / sqrt(3)
    assert (everything["low"], everything["high"]) == pytest.approx((0.25 - half, 0.25 + half))
    assert greedy["across_seeds"]["trained"]["diff"] == pytest.approx(0.5)
    assert greedy["across_seeds"]["unseen"]["diff"] == pytest.approx(0.0)
    # the primary line is untouched by the greedy outcomes
    assert summary["across_seeds"]["trained"]["diff"] == pytest.approx((0.5 + 0.5 - 0.5) / 3)
    assert summary["endpoint"].startswith("primary, registered") and greedy["endpoint"].startswith("secondary")
    text = (tmp_path / "g.md").read_text()
    assert "The primary, registered endpoint is the validation at the preset's temperature (T = 0.4)" in text
    section = text[text.index("## all episodes"):]
    primary = section.index("**Across seeds (T = 0.4, primary;")
    secondary = section.index("- Secondary, the greedy (T = 0) validation of the same episodes (across seeds, the "
                              "seed as the unit, 3 seed pairs): +0.250 [")
    assert primary < secondary < section.index("| seed |")


def test_a_report_without_the_greedy_validation_is_refused_in_one_line(tmp_path, capsys):
    """Every gpu_comparison report holds the greedy (T = 0) validation; a file without it is not one of them."""
    paths = [_report(tmp_path, 1, [1, 1, 0, 0], [0, 1, 0, 0]), _report(tmp_path, 2, [1, 0, 1, 0], [0, 0, 0, 0],
                                                                      greedy=False)]
    with pytest.raises(SystemExit) as stop:
        gpu_comparison.main(["seeds", "--from-json", *map(str, paths)])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "seed2.json: no greedy (T = 0) validation of ecpo - gigpo_std" in err
