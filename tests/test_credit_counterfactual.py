"""Counterfactual credit updates (benchmarks/credit_counterfactual*.py) and the shared paired statistics."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks import credit_counterfactual, credit_counterfactual_report, read_json, write_json_gz
from benchmarks import (
    stats as bench_stats,
)

ANCHOR, DEPTH = "anchor", 7


def _fig1_rollout(policy):
    """The paper's fig. 1 as a tabular rollout: 8 trajectories reach one anchor at step 7; door A taken 7 times
    (6 won, trajectory 6 lost), door B once (won); reward 10 on a win at the anchor step. Rows carry the tabular
    policy's slots, chosen index and old log-prob exactly as ``collect_rollout`` stores them."""
    from ecpo_train.core.batch import TrajectoryBatch
    from ecpo_train.core.rollout import Rollout

    actions, wins = ["A"] * 7 + ["B"], [1, 1, 1, 1, 1, 1, 0, 1]
    trajectories = []
    for traj in range(8):
        tokens = {k: [] for k in ("prompt_ids", "response_ids", "old_logprobs")}
        extras = {k: [] for k in ("state_key", "observation_key", "response")}
        anchors, acts, rewards = [], [], []
        for step in range(1, DEPTH + 1):
            at_anchor = step == DEPTH
            state = ANCHOR if at_anchor else f"corridor-{traj}-{step}"
            options = ["A", "B"] if at_anchor else ["walk"]
            action = actions[traj] if at_anchor else "walk"
            probs = policy.action_probabilities(state, options)
            tokens["prompt_ids"].append([policy.slot(state, a) for a in options])
            tokens["response_ids"].append([options.index(action)])
            tokens["old_logprobs"].append([math.log(probs[action])])
            extras["state_key"].append(state)
            extras["observation_key"].append(state)
            extras["response"].append(action)
            anchors.append(state)
            acts.append(action)
            rewards.append(10.0 * wins[traj] if at_anchor else 0.0)
        trajectories.append({"group_id": 0, "traj_id": traj, "anchor_keys": anchors, "action_keys": acts,
                             "rewards": rewards, "is_action_valid": [True] * DEPTH, "extras": extras, **tokens})
    return Rollout(batch=TrajectoryBatch.from_trajectories(trajectories), episodes=[]), wins


def _tabular_trainer(tmp_path, optimizer: str):
    from ecpo_train.runtime.config import make_config
    from ecpo_train.runtime.trainer import Trainer

    config = make_config({"run_dir": str(tmp_path / "run"), "policy": "tabular", "device": "cpu",
                          "env_id": "ecpo/DivergentAnchor-v0", "env_kwargs": {"num_tasks": 1, "depth": 3},
                          "estimator": "grpo", "n_groups": 1, "group_size": 8, "val_every": 0, "lr": 0.1,
                          "kl_coef": 0.0, "weight_decay": 0.0, "mini_batch_size": 100000,
                          "micro_batch_size": 100000, "max_grad_norm": 1000.0, "tensorboard": False,
                          "progress": False, "checkpoint_every": 0, "credit": {"d_min": DEPTH}})
    trainer = Trainer(config)
    if optimizer == "sgd":  # the step is proportional to the gradient, so each step term's size shows
        trainer.optimizer = trainer.learner.optimizer = torch.optim.SGD([trainer.policy.logits], lr=0.1)
    return trainer


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_fig1_batch_drives_each_estimator_to_the_expected_sign_of_delta_log_pi_rare(tmp_path, optimizer):
    """Fig. 1's step terms at the lucky singleton B (tests/test_credit.py): GiGPO w/std +0.354, ECPO as written
    +0.671, the anchor-scale reading +0.059, GRPO 0. One update from the same weights and optimizer state on
    this batch raises log pi(B) under every estimator (B won, A lost once), by more than GiGPO under ECPO as
    written and by less under the anchor-scale reading and GRPO: App. C's bound fails for `ecpo` and holds for
    `ecpo_anchor_scale`. With Adam's first step (an elementwise sign step) all push B by the same amount."""
    from ecpo_train.core.credit import compute_advantages

    cf = credit_counterfactual
    trainer = _tabular_trainer(tmp_path, optimizer)
    try:
        rollout, wins = _fig1_rollout(trainer.policy)
        checkpoint = str(trainer.save(tmp_path / "theta.pt"))
        rows = rollout.batch.credit_rows()
        advantages = {name: np.asarray(compute_advantages(name, rows, {"d_min": DEPTH})[0])
                      for name in ("grpo", "gigpo_std", "ecpo", "ecpo_anchor_scale")}
        b_row = int(np.flatnonzero(rollout.batch.action_key == "B")[0])
        terms = {name: round(float(adv[b_row] - advantages["grpo"][b_row]), 3) for name, adv in advantages.items()}
        assert terms == {"grpo": 0.0, "gigpo_std": 0.354, "ecpo": 0.671, "ecpo_anchor_scale": 0.059}

        before = math.log(trainer.policy.action_probabilities(ANCHOR, ["A", "B"])["B"])
        delta = cf.one_update_each(trainer, checkpoint, rollout, advantages, lambda t: math.log(
            t.policy.action_probabilities(ANCHOR, ["A", "B"])["B"]) - before)
        # the machinery found the lucky singleton the way the benchmark defines it
        lucky = cf.lucky_singletons(rollout.batch, {ANCHOR: "A"}, dict(enumerate(map(bool, wins))), DEPTH)
        assert [(x["state"], x["rare"], x["row"], x["strict_valid"]) for x in lucky] == [(ANCHOR, "B", b_row, True)]
    finally:
        trainer.close()
    assert all(d > 0 for d in delta.values())
    if optimizer == "sgd":
        assert delta["ecpo"] > delta["gigpo_std"] > delta["ecpo_anchor_scale"] > delta["grpo"]
    else:
        assert max(delta.values()) - min(delta.values()) < 1e-6


def test_pairing_by_seed_id_refuses_misaligned_cells_and_ignores_list_order():
    ps = bench_stats
    a = ps.keyed([1.0, 2.0, 4.0], seeds=[0, 1, 2])
    b = ps.keyed([0.5, 1.0, 1.0], seeds=[2, 0, 1])  # the same seeds stored in another order
    seeds, diffs = ps.paired_values(a, b)
    assert seeds == [0, 1, 2] and diffs.tolist() == [0.0, 1.0, 3.5]
    with pytest.raises(ps.MisalignedCells, match=r"only in the first \[2\], only in the second \[3\]"):
        ps.paired_values(a, ps.keyed([1.0, 1.0, 1.0], seeds=[0, 1, 3]))
    with pytest.raises(ps.MisalignedCells, match="repeated seed"):
        ps.keyed([1.0, 2.0], seeds=[0, 0])
    # a NaN (metric undefined on that batch) drops only its own pair
    seeds, diffs = ps.paired_values({0: 1.0, 1: float("nan"), 2: 3.0}, {0: 0.0, 1: 0.0, 2: 1.0})
    assert seeds == [0, 2] and diffs.tolist() == [1.0, 2.0]


def test_paired_interval_holm_and_mde_match_textbook_values():
    ps = bench_stats
    part = ps.paired_diff([1.0, 2.0, 3.0, 4.0, 5.0])
    assert part["diff"] == 3.0 and part["n"] == 5
    assert part["high"] - 3.0 == pytest.approx(2.776445105 * math.sqrt(2.5) / math.sqrt(5), rel=1e-8)
    assert part["p"] == pytest.approx(0.013235599, rel=1e-6)
    # MDE at 80% exact power, alpha 0.05, df 4: above the normal-approximation (t_.975 + t_.8) * se
    assert ps.t_power(part["mde"], math.sqrt(0.5), 4) == pytest.approx(0.80, abs=1e-9)
    assert part["mde"] > (2.776445105 + 0.940964840) * math.sqrt(0.5)
    assert ps.holm([0.01, 0.04, 0.03, 0.5]) == [True, False, False, False]
    assert ps.holm([0.001, 0.012, 0.02]) == [True, True, True]
    parts = [{"diff": 1.0, "p": 0.001, "se": 0.2, "df": 9, "n": 10, "low": 0.5, "high": 1.5},
             {"diff": -0.1, "p": 0.4, "se": 0.1, "df": 9, "n": 10, "low": -0.3, "high": 0.1}]
    ps.apply_holm(parts, [+1, +1])
    assert [p["verdict"] for p in parts] == ["holds", "not supported"]
    assert parts[1]["mde"] == pytest.approx(ps.mde(0.1, 9, 0.025))
    assert ps.fmt_part(parts[1]) == f"-0.100 [-0.300, +0.100] (MDE {parts[1]['mde']:.3f})"
    assert "MDE" not in ps.fmt_part(parts[0])


def test_counterfactual_summary_pairs_estimators_by_batch_seed():
    report = credit_counterfactual_report
    ps = bench_stats

    def batch(seed, ecpo_lucky):
        values = {"delta_j": 0.01, "lucky": 0.2, "lucky_sv": 0.2, "rare_sv": 0.0, "term_lucky": 0.3}
        return {"seed": seed, "n_lucky": 1, "success": 0.5, "estimators": {
            "gigpo_std": values, "ecpo": values | {"lucky": ecpo_lucky}}}

    arms = {"arm": [{"protocol": {"checkpoint_seed": 0},
                     "checkpoints": [{"target": 0.8, "concentration": 0.81, "exact_success": 0.4, "iteration": 3}],
                     "batches": {"0.80": [batch(s, 0.2 + 0.1 * (s % 3) + 0.05) for s in range(12)]}}]}
    summary = report.summarize(arms)
    part = next(p for p in summary["comparisons"] if p["a"] == "ecpo" and p["metric"] == "lucky")
    assert part["seeds"] == sorted(range(12), key=str) and part["n"] == 12
    assert part["diff"] == pytest.approx(np.mean([0.1 * (s % 3) + 0.05 for s in range(12)]))
    assert part["verdict"] == "contradicted"  # ECPO raised log pi(rare) more than GiGPO on every batch
    assert summary["claims"][0]["verdicts"]["ecpo"] == "contradicted"
    arms["arm"][0]["batches"]["0.80"][0]["seed"] = 5  # two batches now claim seed 5
    with pytest.raises(ps.MisalignedCells):
        report.summarize(arms)


@pytest.mark.slow
def test_quick_run_writes_a_report_whose_numbers_are_the_json(tmp_path):
    """``--quick`` on the tabular arms: GRPO checkpoints, paired batches, one JSON and a report that reads it."""
    cf = credit_counterfactual
    report = credit_counterfactual_report
    args = ["run", "--quick", "--arms", "tabular_corridor", "--workers", "1", "--out", str(tmp_path),
            "--runs-dir", str(tmp_path / "runs")]
    assert cf.main(args) == 0
    payload = read_json(tmp_path / "credit_counterfactual_quick.json.gz")
    text = (tmp_path / "credit_counterfactual_quick.md").read_text()
    assert "QUICK SMOKE RUN" in text
    [arm] = payload["arms"]["tabular_corridor"]  # one record per checkpoint seed (the default: seed 0)
    assert arm["protocol"]["checkpoint_seed"] == 0
    assert [c["target"] for c in arm["checkpoints"]] == [0.5, 0.8]
    assert all(c["concentration"] >= c["target"] for c in arm["checkpoints"])
    for batches in arm["batches"].values():
        assert [b["seed"] for b in batches] == list(range(100_000, 100_012))  # the same batch seeds per level
        assert set(batches[0]["estimators"]) == set(credit_counterfactual.ESTIMATORS)
    assert payload["summary"] == json.loads(json.dumps(report.summarize(payload["arms"])))
    for part in payload["summary"]["comparisons"]:
        shown = report._scaled(part, report.SCALE.get(part["metric"], 1.0))
        assert f"{report.fmt_part(shown, 3)} | {report._percent(part['relative'])} | {part['verdict']} |" in text
    with pytest.raises(SystemExit) as refused:  # an arm the protocol lacks: argparse's one error line
        cf.main(["run", "--arms", "nope"])
    assert refused.value.code == 2
    assert "run --quick --arms tabular_corridor`" in text  # the command that wrote it, as the run's protocol keeps it
    assert payload["protocol"]["command"] == ("python -m benchmarks.credit_counterfactual run --quick --arms "
                                              "tabular_corridor")
    # the report again from the finished arm, without running: quoted as the report stage
    assert cf.main(["report", "--from-raw", str(tmp_path / "runs" / "quick"), "--out", str(tmp_path / "again")]) == 0
    again = (tmp_path / "again" / "credit_counterfactual_quick.md").read_text()
    assert f"`python -m benchmarks.credit_counterfactual report --from-raw {tmp_path / 'runs' / 'quick'}`" in again
    with pytest.raises(SystemExit) as refused:  # a run option: refused, not ignored
        cf.main(["report", "--k", "3", "--from-raw", str(tmp_path)])
    assert refused.value.code == 2


def test_checkpoint_seeds_and_batch_seed_base_reach_the_protocol(tmp_path):
    """``--checkpoint-seeds 3 4 --batch-seed-base 500``: one GRPO training run per seed, so distinct checkpoints,
    and every checkpoint's batches drawn from seeds 500, 501, ..."""
    cf = credit_counterfactual
    args = ["run", "--quick", "--arms", "tabular_corridor", "--workers", "1", "--k", "2", "--targets", "0.5",
            "--checkpoint-seeds", "3", "4", "--batch-seed-base", "500", "--out", str(tmp_path),
            "--runs-dir", str(tmp_path / "runs")]
    assert cf.main(args) == 0
    records = read_json(tmp_path / "credit_counterfactual_quick.json.gz")["arms"]["tabular_corridor"]
    assert [r["protocol"]["checkpoint_seed"] for r in records] == [3, 4]
    for record in records:
        assert [b["seed"] for b in record["batches"]["0.50"]] == [500, 501]
    from ecpo_train.runtime.checkpoint_io import load_checkpoint

    first, second = (load_checkpoint(Path(r["checkpoints"][0]["path"]))["policy"] for r in records)
    assert any(not torch.equal(first[k], second[k]) for k in first)  # two GRPO runs, two different policies
    assert (tmp_path / "runs" / "quick" / "tabular_corridor_ckpt4.json").exists()
    assert cf.main(args[:-4] + ["--checkpoint-seeds", "1", "1"]) == 2
    # resume: started again, a job kept under the same protocol is not run again (its record is reused as kept);
    # one kept under another protocol is
    for seed, change in ((3, {"K": 99}), (4, {})):
        kept = tmp_path / "runs" / "quick" / f"tabular_corridor_ckpt{seed}.json"
        record = json.loads(kept.read_text())
        kept.write_text(json.dumps(record | {"seconds": 12345.0, "protocol": record["protocol"] | change}))
    assert cf.main(args) == 0
    records = read_json(tmp_path / "credit_counterfactual_quick.json.gz")["arms"]["tabular_corridor"]
    assert [r["seconds"] == 12345.0 for r in records] == [False, True]
    assert records[0]["protocol"]["K"] == 2 and len(records[0]["batches"]["0.50"]) == 2


def _replicate(seed, diffs, exact_success=0.4, target=0.8):
    """One checkpoint's record: 6 batches whose ECPO - GiGPO differences are ``diffs[metric]`` +- 0.001."""
    def batch(k):
        base = {"delta_j": 0.01, "lucky": 0.2, "lucky_sv": 0.2, "rare_sv": 0.0, "term_lucky": 0.3}
        wobble = 0.001 * (k % 3 - 1)
        ecpo = base | {m: base[m] + d + wobble for m, d in diffs.items()}
        return {"seed": 100 + k, "n_lucky": 1, "success": 0.5, "estimators": {"gigpo_std": base, "ecpo": ecpo}}
    return {"protocol": {"checkpoint_seed": seed},
            "checkpoints": [{"target": target, "concentration": 0.8, "exact_success": exact_success, "iteration": 3}],
            "batches": {f"{target:.2f}": [batch(k) for k in range(6)]}}


def test_verdicts_over_checkpoints_take_the_checkpoint_as_the_unit():
    """Three checkpoints. ECPO's lucky-singleton difference is -0.10, -0.11, -0.09 (consistent): B1 holds over
    checkpoints. Its Delta J difference is +0.005, -0.004, +0.006: each checkpoint alone is significant (the
    batches agree within 0.001), but over checkpoints the sign is not stable, so B2 is not shown. A fourth cell
    at exact success 0.95 is saturated: flagged and judged nowhere."""
    report = credit_counterfactual_report
    lucky, dj = (-0.10, -0.11, -0.09), (0.005, -0.004, 0.006)
    arms = {"arm": [_replicate(s, {"lucky": lucky[s], "delta_j": dj[s]}) for s in range(3)],
            "hot": [_replicate(s, {"lucky": -0.1, "delta_j": 0.01}, exact_success=0.95) for s in range(3)]}
    summary = report.summarize(arms)
    assert summary["verdict_unit"] == "checkpoints"
    assert summary["cells"]["hot|0.80"]["saturated"].startswith("exact success 0.950")
    assert {p["verdict"] for p in summary["comparisons"] if p["arm"] == "hot"} == {"saturated"}
    assert all(p["arm"] == "arm" for p in summary["over_checkpoints"])
    per_checkpoint = [p["verdict"] for p in summary["comparisons"] if p["arm"] == "arm" and p["metric"] == "delta_j"]
    assert per_checkpoint == ["holds", "contradicted", "holds"]
    over = {p["metric"]: p for p in summary["over_checkpoints"]}
    assert over["lucky"]["n"] == 3 and over["lucky"]["diff"] == pytest.approx(-0.10)
    assert over["lucky"]["verdict"] == "holds" and over["delta_j"]["verdict"] == "not significant"
    assert over["delta_j"]["relative"] == pytest.approx((0.005 - 0.004 + 0.006) / 3 / 0.01)
    assert report.fmt_part(over["delta_j"]).endswith("(no MDE (3 checkpoints))")
    assert {c["id"]: c["verdicts"]["ecpo"] for c in summary["claims"]} == {"B1": "holds", "B2": "not shown"}
    # with two checkpoints there is no verdict over checkpoints: the claims fall back to per-checkpoint ones
    two = report.summarize({"arm": arms["arm"][:2]})
    assert two["verdict_unit"] == "batches" and two["over_checkpoints"] == []


def test_an_arms_checkpoint_seeds_are_reported_together_and_a_clash_is_refused():
    """``--from-raw DIR1 DIR2``: an arm's records from several places are its replicates, by checkpoint seed; a
    seed found twice, or a replicate that ran another protocol, is refused (naming the key), never silently mixed."""
    cf = credit_counterfactual
    protocol = {"policy": "llm", "lr": 1e-4, "targets": [0.5], "K": 4, "checkpoint_seed": 1}
    late = {"arm": "a", "protocol": protocol, "checkpoints": [], "batches": {}, "seconds": 5.0}
    early = late | {"protocol": protocol | {"checkpoint_seed": 0}}
    assert [cf.replicate_seed(r) for r in cf.replicates([late, early])] == [0, 1]
    with pytest.raises(ValueError, match=r"checkpoint seed 0 is in two runs"):
        cf.replicates([early, late, early])
    with pytest.raises(ValueError, match=r"checkpoint seeds 0 and 1 ran different protocols \(K, targets\)"):
        cf.replicates([early, late | {"protocol": protocol | {"targets": [0.8], "K": 2}}])


def test_a_finished_arm_is_read_from_a_runs_folder_or_from_a_written_reports_json(tmp_path):
    """``--from-raw`` takes a runs folder (``<arm>_ckpt<seed>.json``) or a report's JSON, whose ``arms`` keep every
    arm's raw batches: so the committed tabular arms can be re-reported beside a new LLM arm without rerunning them."""
    finished_arm = credit_counterfactual.finished_arm
    record = {"arm": "tabular_corridor", "protocol": {"targets": [0.5], "checkpoint_seed": 0}, "checkpoints": [],
              "batches": {}, "seconds": 1.0}
    (tmp_path / "runs").mkdir()
    for seed in (2, 0):
        (tmp_path / "runs" / f"tabular_corridor_ckpt{seed}.json").write_text(json.dumps(
            record | {"protocol": {"targets": [0.5], "checkpoint_seed": seed}}))
    assert [r["protocol"]["checkpoint_seed"] for r in finished_arm(tmp_path / "runs", "tabular_corridor")] == [0, 2]
    (tmp_path / "report.json").write_text(json.dumps({"summary": {}, "arms": {"tabular_corridor": [record]}}))
    assert finished_arm(tmp_path / "report.json", "tabular_corridor") == [record]
    # the report as the program writes it: gzipped (benchmarks.write_json_gz)
    write_json_gz(tmp_path / "report.json.gz", {"summary": {}, "arms": {"tabular_corridor": [record]}})
    assert finished_arm(tmp_path / "report.json.gz", "tabular_corridor") == [record]
    assert finished_arm(tmp_path / "runs", "smollm2_corridor") == []
    assert finished_arm(tmp_path / "report.json", "smollm2_corridor") == []


def test_the_llm_arm_reaches_a_concentration_by_supervised_steps_then_settles_with_grpo(tiny_model_dir, tmp_path):
    """``reach: supervised``: steps of the trainer's AdamW on -log pi(good door) raise the scoring LM's mean
    pi(good | room); once the target is crossed, ``settle`` GRPO iterations run and the checkpoint (weights and
    AdamW state) records the concentration measured after them."""
    protocol = credit_counterfactual
    from ecpo_train.runtime.checkpoint_io import load_checkpoint
    from ecpo_train.runtime.trainer import Trainer

    arm = {"policy": "llm", "preset": "corridor_llm", "env_id": "ecpo/DivergentAnchor-v0",
           "env_kwargs": {"num_tasks": 1, "depth": 2, "good_prob": 0.85, "rare_prob": [0.4, 0.7]},
           "config": {"device": "cpu", "save_optimizer": True, "model": str(tiny_model_dir), "lr": 3e-3,
                      "n_groups": 1, "group_size": 4},
           "targets": [], "max_iterations": 40, "reach": "supervised", "settle": 1}
    env, good = protocol.probe_env(arm)
    trainer = Trainer(protocol.arm_config(arm, str(tmp_path / "probe"), 0))
    try:
        start = protocol.concentration(trainer.policy, env, good, arm["env_id"])
        losses = [protocol.supervised_step(trainer, env, good, arm["env_id"], lr=1e-2) for _ in range(4)]
        assert [g["lr"] for g in trainer.optimizer.param_groups] == [3e-3]  # the step's lr is the step's only
        assert protocol.concentration(trainer.policy, env, good, arm["env_id"]) > start
        assert losses[-1] < losses[0]
    finally:
        trainer.close()
    arm["targets"] = [round(start + 0.05, 3)]
    saved = protocol.make_checkpoints(arm, tmp_path / "arm", log=lambda _: None)
    assert len(saved) == 1 and saved[0]["supervised_steps"] >= 1 and saved[0]["iteration"] == 1
    state = load_checkpoint(Path(saved[0]["path"]))
    steps = {int(s["step"]) for s in state["optimizer"]["state"].values()}
    assert steps <= {1, 2}  # only the settling GRPO iteration's steps (2 epochs): the supervised ones were cleared
    unsettled = protocol.make_checkpoints(arm | {"settle": 0}, tmp_path / "unsettled", log=lambda _: None)
    assert unsettled[0]["supervised_steps"] >= 1
    assert load_checkpoint(Path(unsettled[0]["path"]))["optimizer"]["state"] == {}


@pytest.mark.parametrize("name", ["credit_counterfactual", "credit_counterfactual_quick"])
def test_the_committed_report_regenerates_byte_identical_from_its_kept_records(name, tmp_path, monkeypatch):
    """``report --from-raw`` on a committed report's gzipped JSON (its arms keep every raw batch) writes that JSON and
    its markdown again, byte for byte: the committed numbers are today's code's on the kept records."""
    results = Path(credit_counterfactual.__file__).parent / "results"
    monkeypatch.chdir(results.parent.parent)  # (the report quotes its input's path from the repository root)
    assert credit_counterfactual.main(["report", "--from-raw", f"benchmarks/results/{name}.json.gz",
                                       "--out", str(tmp_path)]) == 0
    for suffix in (".json.gz", ".md"):
        assert (tmp_path / f"{name}{suffix}").read_bytes() == (results / f"{name}{suffix}").read_bytes(), suffix
