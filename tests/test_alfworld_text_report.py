"""The real-ALFWorld study's report (``benchmarks/alfworld_text.py``): outcomes paired by game within a seed, the seed
as the unit across seeds, ECPO against the other arms paired by seed, and the paper's table layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

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


def test_an_interval_past_0_that_misses_holms_level_is_not_called_shown(tmp_path):
    """ECPO's two comparisons are one Holm family: ECPO - GRPO, 0, 1, 1, 1, 2 games of 24 over 5 seeds, has an
    unadjusted 95 % interval above 0 but p 0.034 > 0.05 / 2, so its verdict says it is not shown, with its p."""
    write(tmp_path, study.WARM, [1] * 6 + [0] * 18)
    for seed, gain in zip(range(1, 6), (0, 1, 1, 1, 2)):
        write(tmp_path, f"ecpo-s{seed}", [1] * (6 + gain) + [0] * (18 - gain))
        write(tmp_path, f"gigpo_std-s{seed}", [1] * (6 + gain) + [0] * (18 - gain))
        write(tmp_path, f"grpo-s{seed}", [1] * 6 + [0] * 18)
    parts = study.report(tmp_path, ["ecpo", "gigpo_std", "grpo"], [1, 2, 3, 4, 5])["comparisons"]
    grpo = parts["ecpo - grpo"]
    assert grpo["low"] > 0 and 0.025 < grpo["p"] < 0.05 and not grpo["holm_significant"]
    assert grpo["verdict_text"].startswith("not shown: p 0.034 misses Holm's level, Holm-adjusted p 0.068 (MDE")
    assert parts["ecpo - gigpo_std"]["verdict_text"].startswith("not shown at MDE")


# ---------------------------------------------------------------------------------------------- the two testbeds
def test_the_alfworld_text_commands_are_the_registered_studys(tmp_path):
    """The real-ALFWorld testbed's three commands, written out as the registered study's program ran them."""
    warm, run_dir = tmp_path / "warm", tmp_path / "runs" / "ecpo-s1"
    assert study.warm_start_command(warm) == ["sft", "--config", "alfworld_text", "--out", str(warm), "--episodes",
                                              "3553", "--epochs", "6", "--lr", "1e-3", "--batch-size", "64"]
    train = ["train", "--config", "alfworld_text", f"model={warm}", "estimator=ecpo", "seed=1", f"run_dir={run_dir}",
             "iterations=20", "threads=1", "progress=false"]
    assert study.train_command(run_dir, warm, "ecpo", 1, 20) == train
    run_dir.mkdir(parents=True)  # stopped before its first checkpoint: started over
    assert study.train_command(run_dir, warm, "ecpo", 1, 20) == train[:3] + ["--overwrite"] + train[3:]
    (run_dir / "checkpoint.pt").write_bytes(b"")  # a checkpoint: continued
    assert study.train_command(run_dir, warm, "ecpo", 1, 20) == train[:3] + ["--resume"] + train[3:]
    assert study.evaluate_command(tmp_path, run_dir, "ecpo-s1") == [
        "leaderboard", "--agent", "checkpoint", "--checkpoint", str(run_dir), "--manifest", "alfworld_valid_seen_by_type",
        "--seeds", "1", "--temperature", "0.4", "--out-dir", str(tmp_path / "valid_seen"), "--name", "ecpo-s1"]
    assert study.TESTBEDS["alfworld_text"] is study.ALFWORLD


def test_the_households_testbed_reaches_every_command(tmp_path):
    bed, warm, run_dir = study.HOUSEHOLDS, tmp_path / "warm", tmp_path / "runs" / "grpo-s3"
    assert study.warm_start_command(warm, bed)[:5] == ["sft", "--config", "households_text", "--out", str(warm)]
    assert study.train_command(run_dir, warm, "grpo", 3, 20, bed)[:3] == ["train", "--config", "households_text"]
    evaluate = study.evaluate_command(tmp_path, run_dir, "grpo-s3", bed)
    assert evaluate[evaluate.index("--manifest") + 1] == "alfworld_gen"
    assert evaluate[evaluate.index("--out-dir") + 1] == str(tmp_path / "alfworld_gen")
    with pytest.raises(ValueError, match="has no testbed 'kitchen'"):
        study.testbed_named("kitchen")


def test_the_households_training_validation_and_endpoint_games_are_disjoint():
    """The preset trains on generated households 0-3599, validates on 200000+, and the endpoint (manifest
    alfworld_gen) plays seeds 100000+: no household is in two of them; the warm start plays each training one."""
    from ecpo_gym.alfworld.env import ALFWorldGenEnv
    from ecpo_train.evaluation.manifests import load_manifest
    from ecpo_train.runtime.config import load_config

    config = load_config("households_text")
    assert config.env_id == "ecpo/ALFWorldGen-v0" and config.policy == "text"
    train = ALFWorldGenEnv(**config.env_kwargs).task_ids
    endpoint = [t for group in load_manifest("alfworld_gen").groups for t in group.task_ids]
    seed = lambda task: int(task.rsplit("/", 1)[1])  # the generator's household
    sets = [{seed(t) for t in train}, {seed(t) for t in config.val_tasks}, {seed(t) for t in endpoint}]
    assert len(endpoint) == 120 and all(not a & b for i, a in enumerate(sets) for b in sets[i + 1:])
    warm = study.HOUSEHOLDS.warm_start
    assert int(warm[warm.index("--episodes") + 1]) == len(train) == 3600


def test_a_households_report_has_no_published_rows(tmp_path):
    folder = tmp_path / "alfworld_gen" / study.WARM
    folder.mkdir(parents=True)
    folder.joinpath("alfworld_gen.jsonl").write_text("".join(
        json.dumps({"manifest": "alfworld_gen", "group": "gen", "task_id": f"gen/{kind}/100000", "seed": 0,
                    "task_type": kind, "success": kind == "Pick"}) + "\n" for kind in study.TYPES), encoding="utf-8")
    result = study.report(tmp_path, ["ecpo"], [1], study.HOUSEHOLDS)
    assert result["protocol"]["preset"] == "households_text" and result["protocol"]["manifest"] == "alfworld_gen"
    assert result["warm_start"]["by_type"]["All"] == pytest.approx(1 / 6) and result["published"] == {}
    assert "published" not in result["table"]


def test_the_regime_testbeds_train_the_open_set_arms_at_the_papers_length(tmp_path):
    """Issue 71's testbeds: two warm starts told apart by their sft seed, the open command set on every sft and train
    command of the study testbed, ECPO with d_min 1 as its own arm, 150 iterations, and each command's settings
    reach the run's config."""
    from benchmarks.alfworld_text import REGIME_ADMISSIBLE, REGIME_OPEN, job_name, train_command, warm_start_command
    from ecpo_train.runtime.config import load_config

    a, b = REGIME_OPEN.warm_starts
    sft = warm_start_command(tmp_path / b.folder, REGIME_OPEN, b)
    assert sft[:5] == ["sft", "--config", "alfworld_text_paper", "--out", str(tmp_path / "warm-b")]
    assert sft[-2:] == ["command_set=open", "seed=1"] and "--episodes" in sft
    assert job_name(a, "ecpo_d1", 101) == "a-ecpo_d1-s101" and REGIME_OPEN.iterations == 150
    command = train_command(tmp_path / "runs" / "a-ecpo_d1-s101", tmp_path / "warm-a", "ecpo_d1", 101, 150, REGIME_OPEN)
    overrides = [arg for arg in command[3:] if "=" in arg and not arg.startswith("model=")]
    config = load_config("alfworld_text_paper", overrides)
    assert (config.estimator, config.credit.d_min, config.command_set, config.iterations, config.seed) == \
        ("ecpo", 1, "open", 150, 101)
    assert config.credit.kappa == 2.0 and config.credit.tau == 2.0  # the paper's other values unchanged
    admissible = train_command(tmp_path / "r", tmp_path / "warm-a", "gigpo_std", 1, 150, REGIME_ADMISSIBLE)
    assert load_config("alfworld_text_paper", [x for x in admissible[3:] if "=" in x and not x.startswith("model=")
                                               ]).command_set == "admissible"


def test_the_regime_comparisons_pair_by_warm_start_and_seed():
    """Each family arm minus GiGPO w/std over the (warm start, seed) units it shares with it, Holm over the three;
    each warm start's mean beside it."""
    from benchmarks.regime_study import compare

    units = [("a", s) for s in (1, 2, 3)] + [("b", s) for s in (1, 2, 3)]
    reference = dict(zip(units, [0.5, 0.6, 0.4, 0.5, 0.5, 0.5]))
    values = {"gigpo_std": reference,
              "ecpo": {u: reference[u] + d for u, d in zip(units, [0.10, 0.12, 0.08, 0.11, 0.09, 0.10])},
              "ecpo_d1": {u: reference[u] + d for u, d in zip(units, [0.1, -0.1, 0.0, 0.05, -0.05, 0.0])},
              "grpo": {u: reference[u] for u in units[:2]}}  # two units only
    got = compare(values)
    assert got["ecpo - gigpo_std"]["units"] == 6 and abs(got["ecpo - gigpo_std"]["diff"] - 0.1) < 1e-12
    assert got["ecpo - gigpo_std"]["by_warm_start"] == pytest.approx({"a": 0.1, "b": 0.1})
    assert got["ecpo - gigpo_std"]["verdict"] == "shown: a gain"
    assert got["ecpo_d1 - gigpo_std"]["verdict"].startswith("not shown")
    assert got["grpo - gigpo_std"]["units"] == 2


def test_a_half_precision_policy_folder_loads_the_rounded_weights(tmp_path):
    from ecpo_train.policies.text import TextPolicy

    policy = TextPolicy(seed=4)
    (tmp_path / "full").mkdir()
    (tmp_path / "half").mkdir()
    policy.save_pretrained(tmp_path / "full")
    policy.save_pretrained(tmp_path / "half", half=True)
    size = lambda name: (tmp_path / name / "text_policy.safetensors").stat().st_size  # noqa: E731
    assert size("half") < 0.6 * size("full")
    loaded = TextPolicy.from_pretrained(tmp_path / "half")
    for name, tensor in policy.model.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[name], tensor.half().float()), name


def test_a_bad_arm_or_warm_start_is_refused_before_any_work(tmp_path, capsys):
    assert study.main(["run", "--out", str(tmp_path / "s"), "--arms", "ecpo", "bogus"]) == 2
    assert study.main(["run", "--testbed", "regime_open", "--out", str(tmp_path / "s"), "--warm-starts", "c"]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 2 and "bogus" in errors[0] and "['a', 'b']" in errors[1]
    assert not (tmp_path / "s").exists()  # no warm start begun, nothing written


def test_the_regime_seed_rule_is_the_registered_one():
    """regime_study.yaml: the fewest units with an exact-power MDE <= 0.10 at 0.05 / 3 for the pilot's largest SD,
    split over the two warm starts, never fewer than 5 seeds each; a missing SD is refused."""
    from benchmarks.regime_study import protocol, seed_count
    from benchmarks.stats import mde

    spec = protocol()
    small = seed_count([0.01, 0.02, 0.03], spec)
    assert small["seeds"] == 5  # the floor
    large = seed_count([0.05, 0.20, 0.10], spec)
    n = large["units"]
    assert mde(0.20 / n ** 0.5, n - 1, alpha=0.05 / 3) <= 0.10 < mde(0.20 / (n - 1) ** 0.5, n - 2, alpha=0.05 / 3)
    assert large["seeds"] == max(5, -(-n // 2))
    with pytest.raises(ValueError, match="lacks a paired difference"):
        seed_count([0.1, float("nan"), 0.1], spec)


def test_the_committed_study_regenerates_byte_identical_from_its_kept_episode_logs(tmp_path, monkeypatch):
    """``report`` on the kept folder (``benchmarks/results/raw/alfworld_text``: the 16 policies' episode logs on all
    140 valid_seen games) writes the committed ``alfworld_text.json`` again, byte for byte."""
    results = Path(study.__file__).parent / "results"
    monkeypatch.chdir(results.parent.parent)
    out = tmp_path / "alfworld_text.json"
    assert study.main(["report", "--out", "benchmarks/results/raw/alfworld_text", "--json", str(out)]) == 0
    assert out.read_bytes() == (results / "alfworld_text.json").read_bytes()
