"""Credit estimators: vectorised code against the loop reference, the paper's worked cases, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from credit_reference import advantages as reference_advantages
from credit_reference import anchor_evidence, future_returns
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ecpo_train.credit import (
    TaskHistory,
    available_estimators,
    compute_advantages,
    eca_shrinkage,
    estimator_spec,
)

ESTIMATORS = ["grpo", "rloo", "gigpo", "gigpo_std", "ecpo", "ecpo_eca_only", "ecpo_anchor_scale",
              "ecpo_anchor_scale_eca_only", "ecpo_vargate_only"]
EPS = 1e-6


def _columns(rows):
    g, t, s, st_, a, r = zip(*rows)
    return {"group_ids": list(g), "traj_ids": list(t), "steps": list(s), "anchor_keys": list(st_), "action_keys": list(a),
                "rewards": list(r)}


@st.composite
def step_batches(draw):
    """Random batches: groups of different sizes (singletons included), shared states at different steps,
    one-action anchors, invalid actions, zero-variance groups; rows shuffled."""
    rows = []
    n_groups = draw(st.integers(1, 3))
    reward_pool = draw(st.sampled_from([[0.0], [0.0, 10.0], [0.0, 10.0, -0.1], [0.0, 1.0, -0.1, 0.5, 10.0]]))
    states = draw(st.sampled_from([["s0"], ["s0", "s1"], ["s0", "s1", "s2", "s3"]]))
    actions = draw(st.sampled_from([["go"], ["go", "<invalid>"], ["go", "take", "<invalid>"]]))
    for group in range(n_groups):
        n_traj = draw(st.integers(1, 5))
        for traj in range(n_traj):
            length = draw(st.integers(1, 9))
            for step in range(1, length + 1):
                rows.append((
                    f"task{group}", traj, step,
                    draw(st.sampled_from(states)) if step > 1 or len(states) == 1 else "start",
                    draw(st.sampled_from(actions)),
                    draw(st.sampled_from(reward_pool)),
                ))
    order = draw(st.permutations(range(len(rows))))
    return [rows[i] for i in order]


HYPER = st.fixed_dictionaries({
    "gamma": st.sampled_from([0.05, 0.5, 0.95, 1.0]),
    "d_min": st.sampled_from([1, 2, 7]),
    "kappa": st.sampled_from([0.5, 2.0]),
    "tau": st.sampled_from([1.0, 2.0]),
    "rho_min": st.sampled_from([0.0, 0.5]),
    "omega": st.sampled_from([1.0, 0.3]),
})


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=step_batches(), hp=HYPER)
def test_vectorised_estimators_equal_loop_reference(rows, hp):
    cols = _columns(rows)
    for name in ESTIMATORS:
        adv, diag = compute_advantages(name, cols, hp)
        expected = reference_advantages(name, rows, **hp)
        np.testing.assert_allclose(adv, expected, rtol=1e-9, atol=1e-7, err_msg=name)
        assert diag["advantage_min"] == pytest.approx(min(expected), abs=1e-7)
        assert diag["advantage_max"] == pytest.approx(max(expected), abs=1e-7)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=step_batches(), compat_name=st.sampled_from(["gigpo", "gigpo_std"]))
def test_verl_agent_compat_equals_reference(rows, compat_name):
    adv, _ = compute_advantages(compat_name, _columns(rows), {"compat": "verl-agent"})
    np.testing.assert_allclose(adv, reference_advantages(compat_name, rows, compat="verl-agent"), rtol=1e-9, atol=1e-7)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=step_batches(), hp=HYPER)
def test_rho_lies_in_unit_interval_and_floor_only_on_strict_valid(rows, hp):
    g = future_returns(rows, hp["gamma"])
    _, _, info = anchor_evidence(rows, g, hp["kappa"], hp["tau"], hp["d_min"], hp["rho_min"], 1e-6)
    cols = _columns(rows)
    ecpo, diag = compute_advantages("ecpo", cols, hp)
    eca, _ = compute_advantages("ecpo_eca_only", cols, hp)
    grpo, _ = compute_advantages("grpo", cols, hp)
    for value in info.values():
        assert 0.0 <= value["rho_vg"] <= 1.0
        assert value["rho"] == (max(value["rho_vg"], hp["rho_min"]) if value["strict"] else 0.0)
    # the per-row rho the vectorised ECPO applied: (ECPO - GRPO) = rho * (ECA-only - GRPO)
    step_term = eca - grpo
    applied = ecpo - grpo
    for i, (group, _t, _s, state, _a, _r) in enumerate(rows):
        rho = info[(group, state)]["rho"]
        assert applied[i] == pytest.approx(rho * step_term[i], abs=1e-7)
    assert 0.0 <= diag["mean_rho"] <= 1.0


def _fig1_batch(depth: int = 7):
    """Paper fig. 1: 8 rollouts reach one anchor at step ``depth``; action A 7 visits / 6 successes,
    action B 1 visit / 1 success (success = reward 10 at the anchor step, the last step)."""
    rows = []
    actions = ["A"] * 7 + ["B"]
    success = [1, 1, 1, 1, 1, 1, 0, 1]
    for traj in range(8):
        for step in range(1, depth + 1):
            at_anchor = step == depth
            rows.append(("fig1", traj, step, "anchor" if at_anchor else f"corridor-{traj}-{step}",
                         actions[traj] if at_anchor else "walk", 10.0 * success[traj] if at_anchor else 0.0))
    anchor_rows = [i for i, row in enumerate(rows) if row[3] == "anchor"]
    return rows, anchor_rows


def test_fig1_divergent_anchor_gigpo_over_rewards_the_lucky_singleton():
    rows, anchor_rows = _fig1_batch()
    cols = _columns(rows)
    gigpo, diag = compute_advantages("gigpo_std", cols)
    grpo, _ = compute_advantages("grpo", cols)
    anchor_term = (gigpo - grpo)[anchor_rows]
    a_mean, b = anchor_term[:7].mean(), anchor_term[7]
    assert b > a_mean  # GiGPO ranks the rare lucky action B above the frequent action A
    # occurrence-level: mu_s = 8.75, unbiased sigma_s = sqrt(12.5)
    assert b == pytest.approx(1.25 / (math.sqrt(12.5) + 1e-6), rel=1e-12)
    assert diag["divergent_anchor_fraction"] == 1.0 and diag["num_anchors"] == 1.0
    assert diag["anchor_hit_rate"] == pytest.approx(1 / 7)


def test_fig1_batch_counts_one_lucky_singleton_for_every_estimator():
    # fig. 1: B, taken once, won (G = 10 > mu_s = 8.75) beside A taken 7 times: the one lucky singleton
    rows, _ = _fig1_batch()
    for name in ("grpo", "gigpo_std", "ecpo", "ecpo_eca_only"):
        assert compute_advantages(name, _columns(rows))[1]["num_lucky_singletons"] == 1.0
    # the same singleton losing (G = 0 < mu_s) is not lucky; nor is a singleton beside only singletons
    unlucky = [r[:5] + (0.0,) if r[3] == "anchor" and r[4] == "B" else r for r in rows]
    assert compute_advantages("ecpo", _columns(unlucky))[1]["num_lucky_singletons"] == 0.0
    pairs = [r for r in rows if r[1] in (6, 7)]  # A lost once, B won once: no action reached twice
    assert compute_advantages("ecpo", _columns(pairs))[1]["num_lucky_singletons"] == 0.0


def test_fig1_eca_shrinks_singleton_evidence_by_one_over_one_plus_kappa():
    # eq. bad_shrinkage: mu~ - mu_s = (Gbar - mu_s)/(1 + kappa) for a singleton, for any kappa
    mu_s = 70.0 / 8
    for kappa in (0.5, 2.0, 5.0):
        calibrated = eca_shrinkage(np.array([10.0]), np.array([1.0]), np.array([mu_s]), kappa)
        assert calibrated[0] - mu_s == pytest.approx((10.0 - mu_s) / (1 + kappa), rel=1e-13)


def test_fig1_ecpo_numbers_follow_the_equations():
    """ECPO on fig. 1, by hand: the (7, 1) two-action anchor gives A_act(B) = 3/sqrt(5), A_act(A) = -1/sqrt(5)
    (sigma_act normalises over the two actions), and rho = rho_min since rho_VG ~ 0.02 < 0.5."""
    rows, anchor_rows = _fig1_batch()
    cols = _columns(rows)
    ecpo, diag = compute_advantages("ecpo", cols)
    grpo, _ = compute_advantages("grpo", cols)
    term = (ecpo - grpo)[anchor_rows]
    mu_s = 8.75
    centred_a, centred_b = 7 / 9 * (60 / 7 - mu_s), 1 / 3 * (10 - mu_s)
    sigma_act = math.sqrt((centred_a**2 + centred_b**2) / 2)
    np.testing.assert_allclose(term[:7], 0.5 * centred_a / (sigma_act + 1e-6), rtol=1e-12)
    assert term[7] == pytest.approx(0.5 * centred_b / (sigma_act + 1e-6), rel=1e-12)
    assert term[7] == pytest.approx(0.5 * 3 / math.sqrt(5), rel=1e-5)
    assert diag["mean_rho"] == 0.5 and diag["gated_fraction"] == 0.0
    # ECA keeps the within-anchor order of actions (shrinkage is monotone) but not their raw evidence:
    assert term[7] > term[:7].mean()
    # Below d_min the anchor is not StrictValid: rho = 0 and ECPO falls back to GRPO exactly.
    rows, anchor_rows = _fig1_batch(depth=3)
    cols = _columns(rows)
    ecpo, diag = compute_advantages("ecpo", cols)
    np.testing.assert_array_equal(ecpo, compute_advantages("grpo", cols)[0])
    assert diag["gated_fraction"] == 1.0 and diag["strict_valid_fraction"] == 0.0
    # with d_min lowered the same anchor passes and gets the floor
    _, diag = compute_advantages("ecpo", cols, {"d_min": 3})
    assert diag["mean_rho"] == 0.5


def test_fig1_advantages_of_every_estimator_by_hand():
    """Fig. 1 (depth 7, StrictValid), every registered estimator, worked by hand: the advantage of a successful A
    occurrence, of the failed A occurrence and of B. Here R_i = G at the anchor (the only reward), so GRPO's and
    GiGPO's statistics are both over seven 10s and one 0: mean 8.75, unbiased std sqrt(12.5)."""
    rows, anchor_rows = _fig1_batch()
    cols = _columns(rows)
    sigma = math.sqrt(12.5) + EPS  # sigma_R = sigma_s, plus eps
    grpo_win, grpo_loss = 1.25 / sigma, -8.75 / sigma
    rho = 0.5  # rho_VG = tanh(4) * B/(B + W + eps) ~ 0.02 < rho_min on this StrictValid anchor
    centred_a, centred_b = 7 / 9 * (60 / 7 - 8.75), (10 - 8.75) / 3  # eq. eca_shrinkage, kappa = 2
    sigma_act = math.sqrt((centred_a**2 + centred_b**2) / 2)
    step = {  # name: step term (advantage - GRPO's) of (successful A, failed A, B)
        "grpo": (0.0, 0.0, 0.0),
        "gigpo": (1.25, -8.75, 1.25),
        "gigpo_std": (1.25 / sigma, -8.75 / sigma, 1.25 / sigma),
        "ecpo": (rho * centred_a / (sigma_act + EPS),) * 2 + (rho * centred_b / (sigma_act + EPS),),
        "ecpo_eca_only": (centred_a / (sigma_act + EPS),) * 2 + (centred_b / (sigma_act + EPS),),
        "ecpo_anchor_scale": (rho * centred_a / sigma,) * 2 + (rho * centred_b / sigma,),
        "ecpo_anchor_scale_eca_only": (centred_a / sigma,) * 2 + (centred_b / sigma,),
        "ecpo_vargate_only": (rho * 1.25 / sigma, rho * -8.75 / sigma, rho * 1.25 / sigma),
    }
    expected = {name: (grpo_win + a_win, grpo_loss + a_loss, grpo_win + b) for name, (a_win, a_loss, b) in step.items()}
    expected["rloo"] = (10 - 60 / 7, 0 - 10.0, 10 - 60 / 7)  # R_i - mean of the other seven
    # PACE: Q^(s, a) - V^(s), A's 60/7 and B's 10 against the anchor's 8.75, on GRPO's term
    expected["pace"] = (grpo_win + 60 / 7 - 8.75, grpo_loss + 60 / 7 - 8.75, grpo_win + 1.25)
    # PGPO, no episode term: at the last step delta = r_T - Phi = (1.25, -8.75), z-scored like GiGPO_w/std's term,
    # weighted by (1 - 7/8)^2 and added to it
    expected["pgpo"] = tuple(v * (1 + 1 / 64) / sigma for v in (1.25, -8.75, 1.25))
    # HGPO, no episode term: only level 1 (the anchor) has a group; population std sqrt(10.9375); weight 2/(2 + eps)
    expected["hgpo"] = tuple(v / (math.sqrt(10.9375) + EPS) * 2 / (2 + EPS) for v in (1.25, -8.75, 1.25))
    # GraphGPO: from the anchor, seven transitions reach success (d 0: 10) and one a dead end (d = 7 + 1: 1e-7)
    leaving = np.array([10.0] * 7 + [10 * 0.1**8])
    z = (leaving - leaving.mean()) / (leaving.std(ddof=1) + EPS)
    expected["graphgpo"] = (grpo_win + z[0], grpo_loss + z[7], grpo_win + z[0])
    # TIGPO on a task with no history yet: GraphGPO's graph on this update's transitions, GRPO's episode term
    expected["tigpo"] = expected["graphgpo"]
    assert set(expected) == set(available_estimators(needs_values=False))  # every critic-free estimator
    win, loss, b = anchor_rows[0], anchor_rows[6], anchor_rows[7]  # trajectory 6 is A's failure
    for name, values in expected.items():
        first_update = {"history": [TaskHistory()] * len(cols["rewards"])} if estimator_spec(name).keeps_state else {}
        adv, _ = compute_advantages(name, cols, **first_update)
        np.testing.assert_allclose(adv[[win, loss, b]], values, rtol=1e-12, atol=1e-15, err_msg=name)
    # the rounded step terms (successful A / B) quoted in issue 17 and docs/paper_notes.md
    quoted = {"gigpo_std": (0.354, 0.354), "ecpo": (-0.224, 0.671), "ecpo_eca_only": (-0.447, 1.342),
              "ecpo_anchor_scale": (-0.020, 0.059), "ecpo_anchor_scale_eca_only": (-0.039, 0.118)}
    for name, (a_term, b_term) in quoted.items():
        assert (round(step[name][0], 3), round(step[name][2], 3)) == (a_term, b_term), name
    # on the anchor scale B's centred evidence is GiGPO's shrunk by 1/(1 + kappa) (eq. bad_shrinkage)
    assert step["ecpo_anchor_scale_eca_only"][2] == pytest.approx(step["gigpo_std"][2] / 3, rel=1e-12)


def _divergent_batch(m: int, a_wins: int, depth: int = 7):
    """An anchor at step ``depth`` reached by m + 3 rollouts: action A m times (``a_wins`` successes), action C
    twice (one success), action B once (a success). Reward 1 on success, at the anchor step only."""
    rows = []
    plan = ([("A", k < a_wins) for k in range(m)] + [("C", True), ("C", False), ("B", True)])
    for traj, (action, won) in enumerate(plan):
        for step in range(1, depth + 1):
            at_anchor = step == depth
            rows.append(("g", traj, step, "anchor" if at_anchor else f"c-{traj}-{step}",
                         action if at_anchor else "walk", float(won) if at_anchor else 0.0))
    return rows, [("A", "C", "B").index(a) for a, _ in plan]


@pytest.mark.parametrize("m, a_wins", [(2, 1), (3, 1), (7, 6), (12, 5)])
@pytest.mark.parametrize("kappa", [0.5, 2.0, 5.0])
def test_anchor_scale_eca_is_gigpo_mean_term_times_n_over_n_plus_kappa(m, a_wins, kappa):
    """App. C on its own scale: with eq. eca_adv divided by GiGPO's sigma_s, ECA's step term for action u is exactly
    GiGPO w/std's mean term for u times n_u/(n_u + kappa) (a singleton's: GiGPO's term/(1 + kappa), eq. bad_shrinkage),
    and the full estimator's is that times rho <= 1 (eq. ecpo_bad_bound)."""
    rows, action_of = _divergent_batch(m, a_wins)
    cols = _columns(rows)
    anchor_rows = [i for i, row in enumerate(rows) if row[3] == "anchor"]
    grpo, _ = compute_advantages("grpo", cols, {"kappa": kappa})
    gigpo_term = (compute_advantages("gigpo_std", cols, {"kappa": kappa})[0] - grpo)[anchor_rows]
    eca_term = (compute_advantages("ecpo_anchor_scale_eca_only", cols, {"kappa": kappa})[0] - grpo)[anchor_rows]
    full, diag = compute_advantages("ecpo_anchor_scale", cols, {"kappa": kappa})
    full_term = (full - grpo)[anchor_rows]
    rho = diag["mean_rho"]  # the batch's only anchor (corridor states are visited once)
    assert diag["num_anchors"] == 1.0 and 0.5 <= rho <= 1.0
    action_of = np.asarray(action_of)
    for u, n in enumerate((m, 2, 1)):
        mine = action_of == u
        np.testing.assert_allclose(eca_term[mine], gigpo_term[mine].mean() * n / (n + kappa), rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(full_term[mine], rho * eca_term[mine], rtol=1e-12, atol=1e-15)
    b = action_of == 2
    assert eca_term[b][0] == pytest.approx(gigpo_term[b][0] / (1 + kappa), rel=1e-12)
    assert 0 < full_term[b][0] <= gigpo_term[b][0] / (1 + kappa)
    # ecpo proper divides by sigma_act instead: there the singleton's term does not shrink with kappa this way
    ecpo_eca, _ = compute_advantages("ecpo_eca_only", cols, {"kappa": kappa})
    assert (ecpo_eca - grpo)[anchor_rows][b][0] > eca_term[b][0]


def test_every_estimator_is_a_trainer_choice():
    from ecpo_train.runtime.config import TrainConfig, apply_overrides

    for name in available_estimators():
        values = apply_overrides({"policy": "tabular"}, [f"estimator={name}"])
        assert TrainConfig(**values).estimator == name


def test_rho_is_zero_for_non_comparable_anchor():
    # 4 rollouts share an anchor at step 8 but all take the same canonical action: rho = 0 despite variance
    rows = []
    for traj in range(4):
        for step in range(1, 9):
            rows.append(("g", traj, step, "anchor" if step == 8 else f"c{traj}{step}", "open door",
                         10.0 * (traj % 2) if step == 8 else 0.0))
    cols = _columns(rows)
    ecpo, diag = compute_advantages("ecpo", cols)
    np.testing.assert_array_equal(ecpo, compute_advantages("grpo", cols)[0])
    assert diag["mean_rho"] == 0.0 and diag["gated_fraction"] == 1.0
    eca, _ = compute_advantages("ecpo_eca_only", cols)  # one action: A_act = 0 exactly
    np.testing.assert_array_equal(eca, ecpo)


def test_future_return_and_grpo_by_hand():
    # one group, two trajectories given in scrambled row order
    cols = {"group_ids": ["g"] * 5, "traj_ids": ["b", "a", "a", "b", "a"], "steps": [2, 3, 1, 1, 2],
                "anchor_keys": ["x", "y", "z", "w", "v"], "action_keys": ["u"] * 5, "rewards": [10.0, 10.0, -0.1, 0.0, 0.0]}
    adv, _ = compute_advantages("grpo", cols)
    r_a, r_b = 9.9, 10.0
    mean, sd = (r_a + r_b) / 2, abs(r_a - r_b) / math.sqrt(2)
    expected = {"a": (r_a - mean) / (sd + 1e-6), "b": (r_b - mean) / (sd + 1e-6)}
    np.testing.assert_allclose(adv, [expected[t] for t in cols["traj_ids"]], rtol=1e-12)
    gigpo, _ = compute_advantages("gigpo", cols | {"anchor_keys": ["s"] * 5}, {"gamma": 0.5})
    # G: traj a (steps 1..3: -0.1, 0, 10) -> [-0.1 + 0.25*10, 5, 10]; traj b (0, 10) -> [5, 10]
    g = {("a", 1): 2.4, ("a", 2): 5.0, ("a", 3): 10.0, ("b", 1): 5.0, ("b", 2): 10.0}
    mu = sum(g.values()) / 5
    rows_g = [g[(t, s)] for t, s in zip(cols["traj_ids"], cols["steps"])]
    np.testing.assert_allclose(gigpo - adv, [x - mu for x in rows_g], rtol=1e-12)


def test_rloo_and_singleton_group():
    cols = {"group_ids": [0, 0, 0, 1], "traj_ids": [0, 1, 2, 0], "steps": [1, 1, 1, 1], "anchor_keys": ["s"] * 4,
                "action_keys": ["a"] * 4, "rewards": [1.0, 2.0, 6.0, 5.0]}
    adv, _ = compute_advantages("rloo", cols)
    np.testing.assert_allclose(adv, [1 - 4, 2 - 3.5, 6 - 1.5, 0.0])
    grpo, _ = compute_advantages("grpo", cols)
    assert grpo[3] == 0.0  # a group of one gets 0 (native); verl-agent compat gives R itself
    verl, _ = compute_advantages("gigpo", cols, {"compat": "verl-agent"})
    assert verl[3] == 5.0
