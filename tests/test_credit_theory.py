"""Appendix C: Monte Carlo of the two-action divergent anchor against the closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
from theory import (
    eca_singleton_shrinkage_factor,
    gigpo_bad_event_probability,
    gigpo_bad_gap_expectation,
)

from ecpo_train.credit import (
    between_action_variance,
    compute_advantages,
    eca_shrinkage,
    reliability_weight,
    strict_valid,
    vargate_reliability,
    within_action_variance,
)

Z99 = 2.5758
M = 7  # visits of the frequent good action; the bad action is visited once
REPS = 20_000


def _sample(p_plus: float, p_minus: float, seed: int):
    rng = np.random.default_rng(seed)
    good = rng.random((REPS, M)) < p_plus
    bad = rng.random(REPS) < p_minus
    return good.astype(float), bad.astype(float)


@pytest.mark.parametrize("p_plus,p_minus", [(0.8, 0.3), (0.6, 0.4)])
def test_gigpo_bad_event_probability_and_gap_match_monte_carlo(p_plus, p_minus):
    good, bad = _sample(p_plus, p_minus, seed=17)
    # One group per replicate: M+1 single-step trajectories meeting at one anchor; return = success.
    outcome = np.concatenate([good, bad[:, None]], axis=1)  # (REPS, M+1), bad action last
    n = M + 1
    cols = {
        "group_ids": np.repeat(np.arange(REPS), n), "traj_ids": np.tile(np.arange(n), REPS), "steps": np.ones(REPS * n, int),
        "anchor_keys": ["anchor"] * (REPS * n), "action_keys": (["good"] * M + ["bad"]) * REPS, "rewards": outcome.reshape(-1),
    }
    gigpo, _ = compute_advantages("gigpo_std", cols)
    grpo, _ = compute_advantages("grpo", cols)
    anchor_term = (gigpo - grpo).reshape(REPS, n)
    gap = anchor_term[:, M] - anchor_term[:, :M].mean(axis=1)

    bad_event = gap > 1e-9
    p_hat = bad_event.mean()
    p_true = gigpo_bad_event_probability(p_plus, p_minus, M)
    assert abs(p_hat - p_true) <= Z99 * math.sqrt(p_true * (1 - p_true) / REPS)

    # eq. gigpo_bad_gap uses the population std of binary returns; our GiGPO_w/std uses the unbiased one
    # (ARCHITECTURE): rescale by sqrt(n/(n-1)) to compare (eps effects are ~1e-6 relative).
    positive_gap = np.maximum(gap, 0.0) * math.sqrt(n / (n - 1))
    expected = gigpo_bad_gap_expectation(p_plus, p_minus, M)
    assert abs(positive_gap.mean() - expected) <= Z99 * positive_gap.std() / math.sqrt(REPS)


@pytest.mark.parametrize("p_plus,p_minus", [(0.8, 0.3), (0.6, 0.4), (0.5, 0.1)])
def test_ecpo_erroneous_credit_is_at_most_one_over_one_plus_kappa_of_gigpo(p_plus, p_minus):
    """eq. ecpo_bad_bound, in GiGPO's local normalisation scale sigma_K, at a StrictValid anchor (floor on)."""
    kappa, tau, eps, rho_min = 2.0, 2.0, 1e-6, 0.5
    good, bad = _sample(p_plus, p_minus, seed=23)
    k = good.sum(axis=1)
    n = M + 1
    # per replicate: two canonical actions (good, bad) at one anchor -> vectorised over replicates
    action_mean = np.stack([k / M, bad], axis=1).reshape(-1)
    action_count = np.tile([float(M), 1.0], REPS)
    action_anchor = np.repeat(np.arange(REPS), 2)
    mu = (k + bad) / n
    anchor_size = np.full(REPS, float(n))
    calibrated = eca_shrinkage(action_mean, action_count, mu[action_anchor], kappa)
    returns = np.concatenate([good, bad[:, None]], axis=1).reshape(-1)
    action_of_row = (np.arange(REPS)[:, None] * 2 + np.array([0] * M + [1])).reshape(-1)
    between = between_action_variance(action_mean, action_count, mu, action_anchor, anchor_size, REPS)
    within = within_action_variance(returns, action_of_row, action_mean, action_count, action_anchor, anchor_size, REPS)
    strict = strict_valid(np.full(REPS, 7), anchor_size, np.full(REPS, 2), between, within, 7, eps)
    rho = reliability_weight(vargate_reliability(between, within, anchor_size, tau, eps), strict, rho_min)
    assert np.all((rho >= 0) & (rho <= 1))

    sigma_k = np.sqrt(mu * (1 - mu))
    lucky = bad == 1.0
    calibrated = calibrated.reshape(REPS, 2)
    # centred evidence of the lucky singleton: shrunk by exactly 1/(1+kappa) (eq. bad_shrinkage)
    np.testing.assert_allclose((calibrated[:, 1] - mu)[lucky], (1 - mu[lucky]) / (1 + kappa), rtol=1e-12, atol=1e-15)
    gigpo_err = np.where(lucky, (1 - mu) / (sigma_k + eps), 0.0)
    ecpo_err = np.where(lucky, rho * (calibrated[:, 1] - mu) / (sigma_k + eps), 0.0)
    bound = eca_singleton_shrinkage_factor(kappa)
    assert ecpo_err.mean() <= bound * gigpo_err.mean()
    # and the gap to the frequent action (eq. gigpo_bad_gap's Delta), same scale
    gigpo_gap = np.maximum(np.where(lucky, (1 - k / M) / (sigma_k + eps), 0.0), 0.0)
    ecpo_gap = np.maximum(np.where(lucky, rho * (calibrated[:, 1] - calibrated[:, 0]) / (sigma_k + eps), 0.0), 0.0)
    assert ecpo_gap.mean() <= bound * gigpo_gap.mean()


def test_closed_forms_by_hand_and_bad_input():
    assert gigpo_bad_event_probability(0.8, 0.3, 7) == pytest.approx(0.3 * (1 - 0.8**7))
    # m = 1, p+ = 0.5: only k = 0 contributes: 0.5 * (1 - 0) / (sqrt(0.25) + eps)
    assert gigpo_bad_gap_expectation(0.5, 1.0, 1, eps=0.0) == pytest.approx(0.5 / 0.5)
    assert gigpo_bad_gap_expectation(1.0, 0.5, 4) == 0.0  # a perfect frequent action is never out-ranked
    assert eca_singleton_shrinkage_factor(2.0) == pytest.approx(1 / 3)
    with pytest.raises(ValueError):
        gigpo_bad_event_probability(1.2, 0.1, 3)
    with pytest.raises(ValueError):
        gigpo_bad_gap_expectation(0.5, 0.1, 0)
