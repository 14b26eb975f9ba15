"""Credit study: the --quick run produces the table, plots and report, and the report's numbers equal the JSON."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from benchmarks import credit_study, credit_study_report
from benchmarks import stats as bench_stats

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
RESULTS = BENCH / "results"


def test_cell_statistics_match_textbook_values():
    assert bench_stats.t975(3) == pytest.approx(3.182446305, rel=1e-9)
    assert bench_stats.t975(1) == pytest.approx(12.7062047, rel=1e-8)
    cell = bench_stats.mean_ci([1.0, 2.0, 3.0, 4.0])
    assert cell["mean"] == 2.5 and cell["ci"] == pytest.approx(3.182446305 * np.std([1, 2, 3, 4], ddof=1) / 2)


def test_reading_verdict_uses_the_claims_rule():
    cs = credit_study_report
    part = lambda verdict: {"verdict": verdict, "metric": "final_success", "diff": 0.0}
    assert cs.reading_verdict([part("holds"), part("not significant")])["favours"] == "ecpo_anchor_scale"
    assert cs.reading_verdict([part("contradicted"), part("not supported")])["favours"] == "ecpo"
    assert cs.reading_verdict([part("holds"), part("contradicted")])["favours"] == "mixed"
    verdict = cs.reading_verdict([part("not significant"), part("no data")])
    assert verdict["favours"] == "cannot tell" and verdict["total"] == 1


def _toy_runs(order=None):
    """Two methods x 4 seeds of a one-env, one-N study with known per-seed final success."""
    runs = []
    for method, shift in (("gigpo_std", 0.0), ("ecpo", 0.1)):
        for seed in range(4):
            curve = [0.2 + 0.05 * seed + shift] * 8
            runs.append({"env_name": "diagnostic", "method": method, "group_size": 4, "seed": seed,
                         "final_success": curve[-1], "curves": {
                             "eval_success": curve, "train_return": curve, "eval_return_std": [0.3] * 8,
                             "divergent_fraction": [0.1] * 8,
                             "mean_rho": [0.2] * 8, "mean_rho_strict_valid": [0.4] * 8, "adv_range": [1.0] * 8,
                             "adv_std": [0.5] * 8, "misranked_fraction": [0.1] * 8, "best_action_prob": [0.9] * 8}})
    return [runs[i] for i in order] if order else runs


def test_method_differences_are_paired_by_seed_id_and_holm_corrected():
    cs = credit_study_report
    protocol = {"envs": [{"name": "diagnostic"}], "methods": ["gigpo_std", "ecpo"], "seeds": 4}
    summary = cs.summarize(_toy_runs(), protocol)
    c3 = next(c for c in summary["claims"] if c["id"] == "C3")["parts"][0]
    # every seed gains exactly 0.1: a paired interval of zero width, although seeds differ by up to 0.15
    assert c3["diff"] == pytest.approx(0.1) and c3["high"] - c3["low"] == pytest.approx(0.0, abs=1e-12)
    assert c3["seeds"] == [0, 1, 2, 3] and c3["verdict"] == "holds" and c3["m"] == summary["comparisons"]
    assert summary["cells"]["diagnostic|ecpo|4"]["seeds"] == [0, 1, 2, 3]
    assert summary["cells"]["diagnostic|ecpo|4"]["mean_rho_strict_valid"]["mean"] == pytest.approx(0.4)
    # list order does not matter: pairs are matched by seed id
    shuffled = cs.summarize(_toy_runs(order=[7, 6, 5, 4, 0, 1, 2, 3]), protocol)
    assert json.dumps(shuffled["claims"]) == json.dumps(summary["claims"])  # (NaN == NaN: 'no MDE' with 4 seeds)


def test_misaligned_seed_cells_are_refused():
    cs = credit_study_report
    ps = credit_study_report.MisalignedCells
    protocol = {"envs": [{"name": "diagnostic"}], "methods": ["gigpo_std", "ecpo"], "seeds": 4}
    runs = _toy_runs()
    runs[0]["seed"] = 9  # gigpo_std ran seeds {9, 1, 2, 3}, ecpo {0, 1, 2, 3}
    with pytest.raises(ps, match=r"only in the first \[9\], only in the second \[0\]"):
        cs.summarize(runs, protocol)
    runs[0]["seed"] = 1  # a seed twice in one cell
    with pytest.raises(ps, match="appears twice"):
        cs.summarize(runs, protocol)


def test_mean_rho_strict_valid_averages_rho_over_strict_valid_anchors_only():
    from ecpo_train.credit import compute_advantages

    rows = []  # fig. 1's anchor at step 7 (StrictValid, rho = rho_min = 0.5) and a second one at step 2 (too shallow)
    for traj, (a, win) in enumerate(zip(["A"] * 7 + ["B"], [1, 1, 1, 1, 1, 1, 0, 1])):
        for step in range(1, 8):
            state = "deep" if step == 7 else ("shallow" if step == 2 else f"c{traj}-{step}")
            action = a if step in (2, 7) else "walk"
            rows.append(("g", traj, step, state, action, 10.0 * win if step == 7 else 0.0))
    g, t, s, st, a, r = zip(*rows)
    _, diag = compute_advantages("ecpo", {"group_ids": g, "traj_ids": t, "steps": s, "anchor_keys": st,
                                          "action_keys": a, "rewards": r})
    assert diag["strict_valid_fraction"] == 0.5 and diag["mean_rho"] == pytest.approx(0.25)
    assert diag["mean_rho_strict_valid"] == pytest.approx(0.5)


def test_misranked_anchor_fraction_counts_lucky_rare_actions():
    cs = credit_study
    rows = {"group_ids": [0, 0, 0, 0, 1, 1], "anchor_keys": ["s", "s", "s", "s", "s", "s"],
            "action_keys": ["good", "good", "rare", "rare", "good", "rare"]}
    best = {"s": {"good"}}
    # group 0: rare out-scores good (misranked); group 1: good out-scores rare
    adv = np.array([0.1, 0.3, 0.9, 0.5, 1.0, -1.0])
    assert cs.misranked_anchor_fraction(rows, adv, best) == 0.5


def test_exact_evaluation_matches_sampled_episodes():
    """The study's exact evaluation (DP success, return std 10 sqrt(p(1-p))) agrees with played episodes."""
    import torch

    import ecpo_gym  # noqa: F401
    from ecpo_gym.group_workers import make_env
    from ecpo_train.policies.tabular import TabularSoftmaxPolicy

    cs = credit_study
    env = make_env("ecpo/DivergentAnchor-v0", {"num_tasks": 1, "depth": 6, "rare_prob": (0.4, 0.8)}).unwrapped
    task = env.task_ids[0]
    policy = TabularSoftmaxPolicy(seed=0)
    gen = torch.Generator().manual_seed(1)
    for state, actions in env.transition_model(task).items():  # a non-uniform policy
        for action in actions:
            policy.logits.data[policy.slot(state, action)] = torch.randn((), generator=gen).item()
    success, std = cs.exact_success_and_return_std(env, policy, 0.4, [task])
    table = {}  # pi(. | s) at T=0.4, sampled below
    for state, actions in env.transition_model(task).items():
        probs = policy.action_probabilities(state, list(actions))
        z = np.log(np.array(list(probs.values()))) / 0.4
        table[state] = (list(probs), np.exp(z - z.max()) / np.exp(z - z.max()).sum())
    rng = np.random.default_rng(0)
    returns = []
    for episode in range(1500):
        _, info = env.reset(seed=episode, options={"task_id": task})
        total, done = 0.0, False
        while not done:
            actions, p = table[info["state_key"]]
            action = actions[int(rng.choice(len(p), p=p))]
            _, reward, terminated, truncated, info = env.step(action)
            total += reward
            done = terminated or truncated
        returns.append(total)
    sampled = np.mean(np.asarray(returns) == env.reward_success)
    assert abs(sampled - success) < 4 * math.sqrt(success * (1 - success) / len(returns))
    assert std == pytest.approx(np.std(returns), rel=0.08)
    assert 0.05 < success < 0.95  # a non-trivial check


def test_a_cell_is_a_native_trainer_run(tmp_path):
    """``train_run`` trains through ``Trainer``: its training curves are a plain trainer run's metrics for the
    cell's config (the study's exact evaluation between iterations does not touch the training run)."""
    import ecpo_gym  # noqa: F401
    from ecpo_gym.group_workers import make_env
    from ecpo_train.runtime.run import train
    from ecpo_train.runtime.trainer import Trainer

    cs = credit_study
    protocol = cs.load_protocol(quick=True)
    spec = next(s for s in cs.run_specs(protocol, ["diagnostic"]) if s["method"] == "ecpo" and s["group_size"] == 4)
    run = cs.train_run(spec)
    tasks = make_env(spec["env_id"], spec["env_kwargs"]).unwrapped.task_ids
    config = cs.cell_config(spec, str(tmp_path), tasks)
    assert (config.policy, config.estimator, config.n_groups, config.group_size, config.iterations, config.lr) == (
        "tabular", "ecpo", spec["groups_per_batch"], 4, spec["iterations"], protocol["optim"]["learning_rate"])
    assert config.credit.kappa == protocol["credit"]["kappa"] and config.val_every == 0
    history = train(Trainer, config)
    assert run["curves"]["train_success"] == [m["success"] for m in history]
    assert run["curves"]["train_return"] == [m["reward_mean"] for m in history]
    np.testing.assert_array_equal(run["curves"]["adv_std"], [m["credit/advantage_std"] for m in history])
    assert any(m["credit/advantage_std"] > 0 for m in history)  # some iteration had signal to learn from


def test_webshop_search_template_becomes_the_instruction_query():
    from ecpo_train.policies.base import StepContext
    from ecpo_train.policies.tabular import TabularSoftmaxPolicy

    cs = credit_study
    actor = cs.InstructionQueryPolicy(TabularSoftmaxPolicy(seed=0))
    ctx = StepContext("webshop", "i want [red] shoes", 0, [], "home", [cs.SEARCH_TEMPLATE], "home")
    out = actor.act([ctx, ctx])
    assert out.actions == ["search[i want  red  shoes]"] * 2
    assert out.response_ids == [[0], [0]]  # what is learned is the policy's own choice


@pytest.mark.slow
def test_quick_run_writes_table_plots_and_a_report_that_matches_the_json(tmp_path):
    cs, stats, report_of = credit_study, credit_study_report, credit_study_report
    assert cs.main(["run", "--quick", "--out", str(tmp_path), "--envs", "diagnostic"]) == 0
    payload = json.loads((tmp_path / "credit_study_quick.json").read_text())
    report = (tmp_path / "credit_study_quick.md").read_text()
    summary = payload["summary"]
    protocol = payload["protocol"]
    assert "QUICK SMOKE RUN" in report
    # every method x N cell was trained with every seed
    assert len(payload["runs"]) == len(protocol["methods"]) * len(protocol["group_sizes"]) * protocol["seeds"]
    # the summary is exactly what the raw runs give
    recomputed = json.loads(json.dumps(stats.summarize(payload["runs"], protocol)))
    assert recomputed["cells"] == summary["cells"] and recomputed["claims"] == summary["claims"]
    # the report's results table shows the JSON's numbers
    for method in summary["methods"]:
        label = report_of.METHOD_LABELS[method]
        expected = [report_of.fmt(summary["cells"][f"diagnostic|{method}|{n}"]["final_success"])
                    for n in summary["group_sizes"]]
        row = f"| {label} | " + " | ".join(expected) + " |"
        assert row in report, row
    # ... and every claim's difference and verdict
    for claim in summary["claims"]:
        assert f"| {claim['id']}: {claim['claim']} | {claim['env']} | **{claim['verdict']}** |" in report
        for part in claim["parts"]:
            assert f"| {part['label']} | {part['N']} | {report_of.fmt_part(part)} | {part['verdict']} |" in report
    # the paragraph on the two ECPO readings, and its comparisons, are the JSON's
    readings = summary["readings"]
    assert report_of.reading_paragraph(readings) in report
    for part in readings["parts"]:
        assert f"| {part['label']} | {part['env']} | {part['N']} | {report_of.fmt_part(part)} |" in report
    # the same seeds reproduce the committed quick run's numbers (trained by the native trainer), run by run
    # (to float32 rounding of the policy's logits: reruns differ by ~1e-8, far below the 3 decimals reported)
    committed = json.loads((RESULTS / "credit_study_quick.json").read_text())
    key = lambda r: (r["env_name"], r["method"], r["group_size"], r["seed"])
    before = {key(r): r for r in committed["runs"]}
    assert {key(r) for r in payload["runs"]} <= set(before)
    for run in payload["runs"]:
        assert run["final_success"] == pytest.approx(before[key(run)]["final_success"], abs=1e-6), key(run)
        for curve, values in run["curves"].items():
            np.testing.assert_allclose(values, before[key(run)]["curves"][curve], rtol=1e-6, atol=1e-6,
                                       err_msg=f"{key(run)} {curve}")
    # final success in the JSON is the exact DP success of each run's last iteration, a probability
    finals = [r["curves"]["eval_success"][-1] for r in payload["runs"]]
    assert all(0.0 <= f <= 1.0 for f in finals)
    pngs = sorted(p.name for p in tmp_path.glob("credit_study_quick_*.png"))
    assert pngs == ["credit_study_quick_diagnostic_curves.png", "credit_study_quick_diagnostic_divergent.png",
                    "credit_study_quick_diagnostic_per_n.png"]
    for png in pngs:
        assert re.search(re.escape(f"({png})"), report)
    # the exact reference successes and the convergence confound are the JSON's numbers
    ref = summary["reference"]["diagnostic"]
    assert f"uniform policy: {ref['uniform']:.3f}; of the optimal policy: {ref['optimal']:.3f}" in report
    assert ref["uniform"] < ref["optimal"] <= 1.0
    conf = summary["confounds"]["diagnostic"]
    assert f"train-return std r = {conf['corr_final_success_late_reward_std']:+.2f}" in report
    # re-summarising the JSON reproduces the report
    again = tmp_path / "again"
    assert cs.main(["report", "--from-json", str(tmp_path / "credit_study_quick.json"), "--out", str(again)]) == 0
    assert (again / "credit_study_quick.md").read_text() == report


@pytest.mark.parametrize("stem", ["credit_study", "credit_study_quick"])
def test_the_report_stage_writes_the_committed_report_again_byte_for_byte(tmp_path, stem):
    """``report --from-json benchmarks/results/credit_study.json`` (and the quick one): the committed markdown and
    JSON again, byte for byte, from the committed runs, without training."""
    assert credit_study.main(["report", "--from-json", str(RESULTS / f"{stem}.json"), "--out", str(tmp_path)]) == 0
    for name in (f"{stem}.md", f"{stem}.json"):
        assert (tmp_path / name).read_bytes() == (RESULTS / name).read_bytes(), name
    assert credit_study.main(["report", "--from-json", str(tmp_path / "none.json"), "--out", str(tmp_path)]) == 2
