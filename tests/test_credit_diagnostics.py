"""Where credit engages (issue 71): ECPO's gate, the step credit and the distance to GiGPO w/std and GRPO, on
hand-built batches whose numbers are worked by hand, and in every run's metrics."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ecpo_gym.canonical import INVALID_ACTION
from ecpo_train.core.batch import TrajectoryBatch
from ecpo_train.core.credit import CreditConfig, compute_advantages, future_return, gigpo_anchor_advantage
from ecpo_train.core.credit.diagnostics import correlation, credit_diagnostics
from ecpo_train.core.credit.estimators import ecpo_gate
from ecpo_train.core.credit.registry import available_estimators, estimator_spec
from ecpo_train.core.iteration import credit_step
from ecpo_train.runtime.config import TrainConfig

# gamma 1 so that a row's return G is the sum of its trajectory's rewards from that step on; omega 0.5 so that
# a step term and omega times it differ
CONFIG = CreditConfig(gamma=1.0, omega=0.5, d_min=7)


def _trajectory(group: str, index: int, prefix: int, tail: list[tuple[str, str, float]]) -> dict:
    """``prefix`` steps through states no other rollout visits (action "a", reward 0), then ``tail``'s
    (state, action, reward) steps."""
    anchors = [f"{group}{index}_{t}" for t in range(prefix)] + [s for s, _, _ in tail]
    return {"group_id": group, "traj_id": index, "anchor_keys": anchors,
            "action_keys": ["a"] * prefix + [a for _, a, _ in tail], "rewards": [0.0] * prefix + [r for _, _, r in tail]}


def hand_batch() -> TrajectoryBatch:
    """Five groups, one anchor each (every other state is visited once):

    deep     S8 first visited at step 8: actions good, good, rare, returns 0, 2, 10 (rare is a lucky singleton);
             passes StrictValid
    shallow  the same at step 3 (S3): a lucky singleton that fails only the depth condition
    invalid  S7 at step 7, where three invalid commands (state unchanged, -0.1 each) pool into one canonical
             action beside "take": |U_s| = 2, passes StrictValid
    stuck    S8x at step 8, only invalid commands (returns -0.2, -0.1, -0.1): fails only |U_s| >= 2
    flat     S7f at step 7, actions x and y, both returns 0: fails only B_s + W_s > eps
    """
    bad = INVALID_ACTION
    return TrajectoryBatch.from_trajectories([
        _trajectory("deep", 0, 7, [("S8", "good", 0.0)]),
        _trajectory("deep", 1, 7, [("S8", "good", 2.0)]),
        _trajectory("deep", 2, 7, [("S8", "rare", 10.0)]),
        _trajectory("shallow", 0, 2, [("S3", "good", 0.0)]),
        _trajectory("shallow", 1, 2, [("S3", "good", 2.0)]),
        _trajectory("shallow", 2, 2, [("S3", "rare", 10.0)]),
        _trajectory("invalid", 0, 6, [("S7", bad, -0.1), ("S7", bad, -0.1), ("S7", "take", 10.0)]),
        _trajectory("invalid", 1, 6, [("S7", bad, -0.1), ("S7", "take", 0.0)]),
        _trajectory("stuck", 0, 7, [("S8x", bad, -0.1), ("S8x", bad, -0.1)]),
        _trajectory("stuck", 1, 7, [("S8x", bad, -0.1)]),
        _trajectory("flat", 0, 6, [("S7f", "x", 0.0)]),
        _trajectory("flat", 1, 6, [("S7f", "y", 0.0)]),
    ])


def _rows_at(batch: TrajectoryBatch, state: str) -> np.ndarray:
    return np.flatnonzero(np.asarray(batch.anchor_key) == state)


def _diagnostics(estimator: str, batch: TrajectoryBatch) -> tuple[np.ndarray, dict]:
    adv, own = compute_advantages(estimator, batch, CONFIG)
    return np.asarray(adv), own | credit_diagnostics(estimator, batch.credit_rows(), CONFIG, adv)


def test_ecpos_gate_and_its_failures_are_counted_on_any_runs_batch():
    batch = hand_batch()
    assert len(batch) == 81  # 24 + 9 + 17 + 17 + 14 rows
    rows = batch.credit_rows()
    # the invalid commands at S7 are one canonical action: two actions there, not four
    s7 = rows.anchor[_rows_at(batch, "S7")[0]]
    assert rows.anchor_sizes[s7] == 5 and rows.anchor_action_counts[s7] == 2
    for estimator in ("grpo", "gigpo_std", "ecpo"):
        _, diag = _diagnostics(estimator, batch)
        # five anchors: S8 and S7 pass StrictValid; S3 fails depth, S8x |U_s|, S7f B + W; ECPO gates those three
        assert diag["ecpo_strict_valid_fraction"] == pytest.approx(2 / 5)
        assert diag["ecpo_gated_fraction"] == pytest.approx(3 / 5)
        assert (diag["num_anchors_below_d_min"], diag["num_anchors_one_action"], diag["num_anchors_equal_returns"]) \
            == (1.0, 1.0, 1.0)
        assert diag["num_single_visit_states"] == 3 * 7 + 3 * 2 + 2 * 6 + 2 * 7 + 2 * 6
        assert diag["num_lucky_singletons"] == 2.0  # the rare actions at S8 and S3, whatever their depth
    # S8: B = (2 (1 - 4)^2 + (10 - 4)^2) / 3 = 18, W = 2 var(0, 2) / 3 = 2/3; rho = tanh(3/2) B / (B + W + eps)
    rho_s8 = math.tanh(1.5) * 18 / (18 + 2 / 3 + 1e-6)
    # S7: G = 9.8, 9.9, -0.1 (invalid), 10, 0 (take); means 6.5333, 5; mu = 3.92
    g_bad, g_take, mu = np.array([9.8, 9.9, -0.1]), np.array([10.0, 0.0]), 3.92
    b_s7 = (3 * (g_bad.mean() - mu) ** 2 + 2 * (g_take.mean() - mu) ** 2) / 5
    w_s7 = (3 * g_bad.var() + 2 * g_take.var()) / 5
    rho_s7 = max(math.tanh(2.5) * b_s7 / (b_s7 + w_s7 + 1e-6), 0.5)  # about 0.16: App. A's floor rho_min 0.5
    _, ecpo = _diagnostics("ecpo", batch)
    assert ecpo["ecpo_mean_rho"] == pytest.approx((rho_s8 + rho_s7) / 5)
    # for an ECPO run the gate seen from outside is its own
    for name in ("mean_rho", "mean_rho_strict_valid", "gated_fraction", "strict_valid_fraction"):
        assert ecpo[f"ecpo_{name}"] == ecpo[name], name
    assert ecpo["ecpo_mean_rho_strict_valid"] == pytest.approx((rho_s8 + rho_s7) / 2)
    # d_min is the run's: with d_min 3 the shallow anchor passes too
    shallow_ok = credit_diagnostics("grpo", rows, CreditConfig(gamma=1.0, d_min=3), np.zeros(len(batch)))
    assert shallow_ok["num_anchors_below_d_min"] == 0 and shallow_ok["ecpo_strict_valid_fraction"] == pytest.approx(3 / 5)


def test_step_credit_is_omega_times_the_step_term_and_lands_by_first_visit_depth():
    batch = hand_batch()
    grpo, _ = compute_advantages("grpo", batch, CONFIG)
    # ECPO: 0.5 rho A_act at S8 and S7 only. At S8 the calibrated means are (2*1 + 2*4)/4 = 2.5 (good) and
    # (10 + 2*4)/3 = 6 (rare); sigma_act = sqrt((1.5^2 + 2^2) / 2); A_act = -1.5 / sigma_act, 2 / sigma_act
    ecpo, diag = _diagnostics("ecpo", batch)
    sigma_act = math.sqrt((1.5**2 + 2**2) / 2)
    rho_s8 = math.tanh(1.5) * 18 / (18 + 2 / 3 + 1e-6)
    step = ecpo - np.asarray(grpo)
    expected_s8 = [0.5 * rho_s8 * a / (sigma_act + 1e-6) for a in (-1.5, -1.5, 2.0)]
    np.testing.assert_allclose(step[_rows_at(batch, "S8")], expected_s8, rtol=1e-12)
    assert np.all(step[_rows_at(batch, "S3")] == 0.0)  # gated by depth: ECPO gives no step credit there
    assert np.count_nonzero(step) == 8  # S8's 3 rows and S7's 5
    assert diag["step_credit_fraction"] == pytest.approx(8 / 81)
    assert diag["step_credit_depth_7_9"] == pytest.approx(1.0)  # S8 (depth 8) and S7 (depth 7)
    assert diag["step_credit_depth_1_3"] == diag["step_credit_below_d_min"] == 0.0
    # GiGPO w/std: 0.5 (G - mu_s) / (sigma_s + eps) wherever G varies: S8, S3, S7 and S8x (14 rows), not S7f
    gigpo, diag = _diagnostics("gigpo_std", batch)
    step = gigpo - np.asarray(grpo)
    expected_s3 = [0.5 * (g - 4.0) / (math.sqrt(28.0) + 1e-6) for g in (0.0, 2.0, 10.0)]  # std of 0, 2, 10: sqrt(28)
    np.testing.assert_allclose(step[_rows_at(batch, "S3")], expected_s3, rtol=1e-12)
    assert diag["step_credit_fraction"] == pytest.approx(14 / 81)

    def z_total(g):  # sum over an anchor's rows of |G - mu| / (sigma + eps)
        g = np.asarray(g)
        return np.abs(g - g.mean()).sum() / (g.std(ddof=1) + 1e-6)

    s3 = s8 = z_total([0.0, 2.0, 10.0])
    s7, s8x = z_total([9.8, 9.9, 10.0, -0.1, 0.0]), z_total([-0.2, -0.1, -0.1])
    total = s3 + s8 + s7 + s8x
    assert diag["step_credit_depth_1_3"] == pytest.approx(s3 / total)  # the shallow lucky singleton's anchor
    assert diag["step_credit_below_d_min"] == pytest.approx(s3 / total)
    assert diag["step_credit_depth_7_9"] == pytest.approx((s8 + s7 + s8x) / total)
    assert diag["step_credit_depth_4_6"] == diag["step_credit_depth_10_plus"] == 0.0
    # GRPO itself has none
    _, diag = _diagnostics("grpo", batch)
    assert diag["step_credit_fraction"] == 0.0 and diag["step_credit_below_d_min"] == 0.0


def _random_batch(seed: int) -> TrajectoryBatch:
    rng = np.random.default_rng(seed)
    trajectories = []
    for group in range(4):
        for index in range(6):
            length = int(rng.integers(2, 12))
            trajectories.append({
                "group_id": group, "traj_id": index,
                "anchor_keys": [f"s{rng.integers(0, 3)}_{t}" for t in range(length)],
                "action_keys": [INVALID_ACTION if rng.random() < 0.2 else str(rng.integers(0, 3)) for _ in range(length)],
                "rewards": [-0.1 * float(rng.random() < 0.2) for _ in range(length - 1)] + [10.0 * float(rng.random() < 0.5)]})
    return TrajectoryBatch.from_trajectories(trajectories)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_trajectory_term_of_ecpo_and_gigpo_std_is_exactly_grpos(seed):
    """A - A_GRPO is omega times ECPO's rho A_act and GiGPO w/std's anchor term, computed apart; every estimator
    listed as having GRPO's trajectory term adds nothing where a state is visited once."""
    batch, config = _random_batch(seed), CreditConfig(omega=0.7, d_min=2)
    rows = batch.credit_rows()
    grpo = np.asarray(compute_advantages("grpo", batch, config)[0])
    gate = ecpo_gate(rows, config)
    ecpo = np.asarray(compute_advantages("ecpo", batch, config)[0])
    np.testing.assert_allclose(ecpo - grpo, 0.7 * (gate.rho[rows.anchor] * gate.action_adv), rtol=1e-9, atol=1e-12)
    future = future_return(rows.reward, rows.traj, rows.position, rows.n_trajs, rows.horizon, config.gamma)
    anchor_term = gigpo_anchor_advantage(future, rows.anchor, rows.n_anchors, config.eps, True)
    gigpo = np.asarray(compute_advantages("gigpo_std", batch, config)[0])
    np.testing.assert_allclose(gigpo - grpo, 0.7 * anchor_term, rtol=1e-9, atol=1e-12)
    single = rows.anchor_sizes[rows.anchor] == 1
    assert single.any()
    declared = [name for name in available_estimators() if estimator_spec(name).grpo_trajectory]
    assert {"grpo", "gigpo_std", "ecpo", "pace", "graphgpo"} <= set(declared) and "pgpo" not in declared
    for name in declared:
        adv = np.asarray(compute_advantages(name, batch, config)[0])
        np.testing.assert_allclose(adv[single], grpo[single], rtol=0, atol=1e-12, err_msg=name)


def test_the_distance_to_gigpo_std_and_grpo_is_logged_beside_any_estimator():
    batch = hand_batch()
    grpo = np.asarray(compute_advantages("grpo", batch, CONFIG)[0])
    gigpo = np.asarray(compute_advantages("gigpo_std", batch, CONFIG)[0])
    _, diag = _diagnostics("gigpo_std", batch)
    assert (diag["corr_gigpo_std"], diag["rel_dist_gigpo_std"]) == (pytest.approx(1.0), 0.0)  # itself
    assert diag["corr_grpo"] == pytest.approx(np.corrcoef(gigpo, grpo)[0, 1])
    assert diag["rel_dist_grpo"] == pytest.approx(np.linalg.norm(gigpo - grpo) / np.linalg.norm(grpo))
    _, diag = _diagnostics("grpo", batch)
    assert (diag["corr_grpo"], diag["rel_dist_grpo"]) == (pytest.approx(1.0), 0.0)
    # estimators whose trajectory term is not GRPO's get the comparisons but no step credit
    _, diag = _diagnostics("rloo", batch)
    assert "corr_grpo" in diag and "rel_dist_gigpo_std" in diag and "step_credit_fraction" not in diag
    ppo = credit_diagnostics("ppo", batch.credit_rows(), CONFIG, np.linspace(-1, 1, len(batch)))
    assert "corr_gigpo_std" in ppo and "step_credit_fraction" not in ppo
    assert all(math.isfinite(v) for v in ppo.values())


def test_degenerate_batches_give_finite_diagnostics():
    # every return equal: every advantage 0, no anchor varies
    flat = TrajectoryBatch.from_trajectories([
        {"group_id": "g", "traj_id": i, "anchor_keys": ["s", f"t{i}"], "action_keys": ["a", "b"], "rewards": [0.0, 0.0]}
        for i in range(3)])
    _, diag = _diagnostics("ecpo", flat)
    assert all(math.isfinite(v) for v in diag.values())
    assert (diag["corr_grpo"], diag["rel_dist_grpo"], diag["step_credit_fraction"]) == (1.0, 0.0, 0.0)
    # A_ref all 0 but A not: no relative distance (left out rather than infinite), correlation 0
    some = credit_diagnostics("gigpo_std", flat.credit_rows(), CONFIG, np.arange(1.0, len(flat) + 1))
    assert "rel_dist_grpo" not in some and some["corr_grpo"] == 0.0 and some["step_credit_fraction"] == 1.0
    assert correlation(np.ones(3), np.ones(3)) == 1.0 and correlation(np.ones(3), np.arange(3.0)) == 0.0


def test_credit_step_adds_them_for_every_estimator_on_a_table():
    batch = hand_batch()
    for estimator in ("grpo", "ecpo", "gigpo_std"):
        config = TrainConfig(policy="tabular", estimator=estimator, credit=CONFIG)
        advantages, diagnostics = credit_step(config, batch)
        np.testing.assert_array_equal(advantages, compute_advantages(estimator, batch, CONFIG)[0])
        assert diagnostics["num_anchors_below_d_min"] == 1.0 and diagnostics["num_lucky_singletons"] == 2.0
        assert {"ecpo_strict_valid_fraction", "step_credit_below_d_min", "corr_gigpo_std", "rel_dist_grpo"} <= set(diagnostics)
        assert ("mean_rho" in diagnostics) == (estimator == "ecpo")  # a GiGPO run still has no rho of its own


def test_a_native_run_logs_them_and_ecpo_plot_draws_them(tmp_path):
    from ecpo_train.runtime.config import load_config
    from ecpo_train.runtime.plotting import logged_panels, plot_run
    from ecpo_train.runtime.run import train
    from ecpo_train.runtime.run_dir import read_metrics
    from ecpo_train.runtime.trainer import Trainer

    run_dir = tmp_path / "run"
    config = load_config("quickstart", [f"run_dir={run_dir}", "progress=false", "tensorboard=false", "val_every=0",
                                        "checkpoint_every=0", "iterations=1", "n_groups=2", "estimator=gigpo_std"])
    (metrics,) = train(Trainer, config)
    for key in ("success", "invalid_action_rate", "credit/num_lucky_singletons", "credit/divergent_anchor_fraction",
                "credit/ecpo_strict_valid_fraction", "credit/ecpo_mean_rho", "credit/ecpo_gated_fraction",
                "credit/num_anchors_below_d_min", "credit/num_anchors_one_action", "credit/num_anchors_equal_returns",
                "credit/num_single_visit_states", "credit/step_credit_fraction", "credit/step_credit_depth_1_3",
                "credit/step_credit_below_d_min", "credit/corr_gigpo_std", "credit/corr_grpo",
                "credit/rel_dist_gigpo_std"):
        assert math.isfinite(metrics[key]), key
    assert metrics["credit/corr_gigpo_std"] == pytest.approx(1.0) and metrics["credit/rel_dist_gigpo_std"] == 0.0
    logged = [key for key, _, _ in logged_panels({"run": read_metrics(run_dir)})]
    for key in ("invalid_action_rate", "credit/num_lucky_singletons", "credit/ecpo_strict_valid_fraction",
                "credit/step_credit_fraction", "credit/step_credit_below_d_min", "credit/corr_gigpo_std",
                "credit/corr_grpo"):
        assert key in logged, key
    assert plot_run(run_dir).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
