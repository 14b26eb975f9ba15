"""The real-ALFWorld study's report (``benchmarks/alfworld_text.py``): outcomes paired by game within a seed, the seed
as the unit across seeds, ECPO against the other arms paired by seed, and the paper's table layout."""

from __future__ import annotations

import json

import pytest

from benchmarks import alfworld_text as study

GAMES = [(f"{kind.lower()}-{i}/game.tw-pddl", kind) for kind in study.TYPES for i in range(4)]  # 24 games


def write(out, name, won):
    folder = out / "valid_seen" / name
    folder.mkdir(parents=True)
    lines = [json.dumps({"manifest": study.MANIFEST, "group": kind, "task_id": game, "seed": 0, "task_type": kind,
                         "success": bool(w)}) for (game, kind), w in zip(GAMES, won)]
    (folder / f"{study.MANIFEST}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_report_pairs_by_game_then_by_seed(tmp_path):
    warm = [1] * 6 + [0] * 18  # 6 of 24
    write(tmp_path, study.WARM, warm)
    gains = {1: 3, 2: 5, 3: 4}  # each seed wins the warm start's 6 and `gain` more, loses none
    for seed, gain in gains.items():
        write(tmp_path, f"ecpo-s{seed}", [1] * (6 + gain) + [0] * (18 - gain))
        write(tmp_path, f"grpo-s{seed}", [1] * 6 + [0] * 18)  # the warm start's games exactly
    result = study.report(tmp_path, ["ecpo", "grpo"], [1, 2, 3])

    assert result["warm_start"]["by_type"]["All"] == pytest.approx(6 / 24)
    assert result["warm_start"]["by_type"]["Pick"] == 1.0 and result["warm_start"]["by_type"]["Clean"] == 0.5
    seed2 = result["arms"]["ecpo"]["seeds"][2]["minus_warm_start"]
    assert (seed2["gained"], seed2["lost"], seed2["diff"]) == (5, 0, pytest.approx(5 / 24))
    across = result["arms"]["ecpo"]["minus_warm_start"]
    assert across["n"] == 3 and across["diff"] == pytest.approx(4 / 24)  # the mean of 3/24, 5/24, 4/24
    assert across["verdict"] == "shown: a gain"  # sd 1/24 over 3 seeds: the t interval stays above 0
    assert result["arms"]["grpo"]["minus_warm_start"]["diff"] == 0.0
    part = result["comparisons"]["ecpo - grpo"]
    assert part["diff"] == pytest.approx(4 / 24) and part["seeds"] == [1, 2, 3] and part["m"] == 1
    lines = result["table"].splitlines()
    assert lines[0].startswith("| policy | Pick | Clean | Cool | Look | Heat | Pick2 | All")
    assert "| 25.0 | 24 |" in lines[2]  # the warm start's All and its game count
    assert any(line.startswith("| BUTLER (DAgger, beam search), published") for line in lines)


def test_an_arm_not_evaluated_on_every_game_is_left_out(tmp_path):
    write(tmp_path, study.WARM, [1] * 24)
    folder = tmp_path / "valid_seen" / "ecpo-s1"
    folder.mkdir(parents=True)
    (folder / f"{study.MANIFEST}.jsonl").write_text(json.dumps(
        {"manifest": study.MANIFEST, "group": "Pick", "task_id": GAMES[0][0], "seed": 0, "task_type": "Pick",
         "success": True}) + "\n", encoding="utf-8")
    result = study.report(tmp_path, ["ecpo"], [1])
    assert result["arms"]["ecpo"]["seeds"] == {}
