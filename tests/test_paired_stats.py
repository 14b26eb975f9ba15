"""The statistics every report prints: McNemar's exact interval and power for paired binary outcomes, and the
rule that a t-based MDE needs enough seeds -- checked against values worked by hand."""

from __future__ import annotations

import math

import pytest
from scipy import optimize

from benchmarks import paired_stats


@pytest.fixture(scope="module")
def ps():
    return paired_stats


def _upper_tail(k: int, n: int, q: float) -> float:
    """P(X >= k) for X ~ Binomial(n, q), summed term by term."""
    return sum(math.comb(n, j) * q**j * (1 - q) ** (n - j) for j in range(k, n + 1))


def test_exact_interval_of_webshop_lora_seed0_is_the_issues_numbers(ps):
    """7 gained, 1 lost of 96: the difference is 6/96; conditional on the 8 discordant pairs the Clopper-Pearson
    bounds of q = P(gained) solve P(X >= 7 | q) = 0.025 and P(X <= 7 | q) = 0.025, i.e. 1 - q^8 = 0.025, and the
    difference is 8/96 * (2q - 1). The exact McNemar p is 2 * P(X >= 7 | 1/2) = 2 * 9/256."""
    out = ps.mcnemar_exact(7, 1, 96)
    q_low = optimize.brentq(lambda q: _upper_tail(7, 8, q) - 0.025, 1e-6, 1 - 1e-6)
    q_high = 0.975 ** (1 / 8)
    assert out["diff"] == pytest.approx(6 / 96)
    assert out["low"] == pytest.approx(8 / 96 * (2 * q_low - 1), abs=1e-9)
    assert out["high"] == pytest.approx(8 / 96 * (2 * q_high - 1), abs=1e-9)
    assert (round(out["low"], 3), round(out["high"], 3)) == (-0.004, 0.083)
    assert out["p"] == pytest.approx(18 / 256)
    # the paired t-interval over the 96 differences said [+0.005, +0.120]: it excluded 0, the exact one does not
    assert out["low"] < 0 < out["high"]


def test_exact_interval_edges_one_sided_counts_and_no_change(ps):
    every_pair_gained = ps.mcnemar_exact(5, 0, 50)  # q's upper bound is 1: the difference's is D/n
    assert every_pair_gained["high"] == pytest.approx(5 / 50)
    assert every_pair_gained["low"] == pytest.approx(5 / 50 * (2 * 0.025 ** (1 / 5) - 1))
    assert every_pair_gained["p"] == pytest.approx(2 / 32)
    unchanged = ps.mcnemar_exact(0, 0, 96)
    assert unchanged["diff"] == 0.0 and unchanged["p"] == 1.0 and math.isnan(unchanged["low"])
    with pytest.raises(ValueError, match="do not fit 10 pairs"):
        ps.mcnemar_exact(8, 5, 10)


def test_pairs_needed_for_two_points_when_twelve_percent_change(ps):
    """Connor's formula by hand: (1.959964 * sqrt(0.12) + 0.841621 * sqrt(0.12 - 0.0004))^2 / 0.0004 = 2352.3."""
    by_hand = (1.959964 * math.sqrt(0.12) + 0.841621 * math.sqrt(0.1196)) ** 2 / 0.0004
    assert ps.mcnemar_pairs_needed(0.02, 0.12) == pytest.approx(by_hand, rel=1e-5)
    assert round(ps.mcnemar_pairs_needed(0.02, 0.12)) == 2352
    # the MDE is its inverse: 2352.3 pairs at psi 0.12 detect 2 points
    assert ps.mcnemar_mde(by_hand, 0.12) == pytest.approx(0.02, rel=1e-4)
    # impossible differences (more than every changing pair one way) need no finite number of pairs
    assert math.isnan(ps.mcnemar_pairs_needed(0.2, 0.12))
    assert math.isnan(ps.mcnemar_mde(96, 0.0))
    # 7 of 96 changed: even all 7 one way (d = psi = 0.073) needs (1.96 sqrt(.073) + 0.84 sqrt(.0677))^2 / .0053
    # ~ 105 pairs > 96, so no difference has 80 % power here
    few = ps.mcnemar_exact(4, 3, 96)
    assert math.isnan(ps.detectable(few)) and ps.mde_text(few | {"mde": float("nan")}) == "no MDE (7 of 96 changed)"


def test_paired_outcomes_use_the_exact_interval_and_mcnemar_mde(ps):
    before = {k: k < 30 for k in range(96)}
    after = {k: (1 <= k < 30) or (30 <= k < 37) for k in range(96)}  # episode 0 lost, 30-36 gained
    out = ps.paired_outcomes(before, after)
    exact = ps.mcnemar_exact(7, 1, 96)
    assert {k: out[k] for k in ("gained", "lost", "low", "high", "p")} == {k: exact[k] for k in
                                                                          ("gained", "lost", "low", "high", "p")}
    assert out["mde"] == pytest.approx(ps.mcnemar_mde(96, 8 / 96))
    ps.apply_holm([out])
    assert ps.fmt_part(out) == f"+0.062 [-0.004, +0.083] (MDE {out['mde']:.3f})"


def test_a_t_mde_needs_five_seeds(ps):
    three = ps.paired_diff([0.01, 0.05, 0.02])
    five = ps.paired_diff([0.01, 0.05, 0.02, 0.0, 0.03])
    ps.apply_holm([three, five])
    assert math.isnan(three["mde"]) and math.isfinite(five["mde"])
    assert ps.fmt_part(three) == f"{three['diff']:+.3f} [{three['low']:+.3f}, {three['high']:+.3f}] (no MDE (3 seeds))"
    assert ps.fmt_part(three | {"unit": "checkpoints"}).endswith("(no MDE (3 checkpoints))")
    assert "(MDE " in ps.fmt_part(five)


def test_a_claim_with_no_significant_part_is_not_shown(ps):
    assert ps.claim_verdict(["not significant", "not supported"]) == "not shown"
    assert ps.claim_verdict(["holds", "saturated"]) == "holds"
    assert ps.claim_verdict(["holds", "contradicted"]) == "mixed"
    assert ps.claim_verdict(["contradicted", "not significant"]) == "contradicted"
    assert ps.claim_verdict(["holds", "not significant"]) == "partly holds"
