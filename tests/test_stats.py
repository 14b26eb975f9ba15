"""The statistics every report prints: Tango's and Newcombe's intervals for paired binary outcomes against
published examples and a coverage simulation, McNemar's p, the MDE's power, the task-clustered interval, and the
rule that a t-based MDE needs enough seeds -- checked against values worked by hand."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from benchmarks import RESULTS
from benchmarks import stats as bench_stats


@pytest.fixture(scope="module")
def ps():
    return bench_stats


# Published values of Tango's (1998) score interval, as (both, gained, lost, neither), level, (low, high): Tango's
# own two examples and Agresti & Min (2005), as kept by R's ratesci (tests/testthat/test3.R: pairbinci, "Tango");
# Fagerland, Lydersen & Laake (2014, Stat Med 33:2850), Bentur et al.'s airway data (ratesci, same file) and Cavo
# et al.'s consolidation data (R's contingencytables, tests/testthat/test-ch8.R, -0.0621 [-0.1240, -0.0054]),
# with that package's one-sided edge cases (3 of 3 pairs changed one way: [-0.1230, 1]).
TANGO_PUBLISHED = [
    ((4, 9, 3, 16), 0.95, (-0.027, 0.390), 3),
    ((43, 0, 1, 0), 0.90, (-0.096, 0.037), 3),
    ((53, 16, 8, 9), 0.95, (-0.020, 0.207), 3),
    ((1, 1, 7, 12), 0.95, (-0.517, -0.026), 3),
    ((59, 6, 16, 80), 0.95, (-0.1240, -0.0054), 4),
    ((0, 3, 0, 0), 0.95, (-0.1230, 1.0), 4),
    ((0, 0, 3, 0), 0.95, (-1.0, 0.1230), 4),
]


@pytest.mark.parametrize("table, level, published, digits", TANGO_PUBLISHED)
def test_tango_interval_matches_published_examples(ps, table, level, published, digits):
    _, gained, lost, _ = table  # (both, gained, lost, neither): Tango's interval needs the discordant cells only
    low, high = ps.tango(gained, lost, sum(table), level)
    assert (round(low, digits), round(high, digits)) == published


def test_newcombe_method_10_matches_published_example(ps):
    """Cavo et al.'s data (Fagerland et al. 2014; contingencytables' test-ch8.R, Newcombe square-and-add):
    -0.0621 [-0.1186, -0.0046]."""
    out = ps.paired_binary(6, 16, 161, both_won=59)
    assert round(out["diff"], 4) == -0.0621
    assert (round(out["newcombe_low"], 4), round(out["newcombe_high"], 4)) == (-0.1186, -0.0046)


@pytest.mark.parametrize("gained, lost, n, issue", [(92, 3, 256, (0.288, 0.410)),   # the pool, trained tasks
                                                   (72, 1, 128, (0.463, 0.640)),   # the positive control
                                                   (191, 52, 800, (0.138, 0.210))])  # the GPU run's validation
def test_the_issues_reference_intervals(ps, gained, lost, n, issue):
    out = ps.paired_binary(gained, lost, n)
    assert (round(out["low"], 3), round(out["high"], 3)) == issue
    assert out["interval"] == "Tango score"


def test_the_gpu_runs_committed_outcomes_give_the_issues_intervals(ps):
    """From the raw outcomes committed in gpu_run.json: +0.174 [+0.138, +0.210], by household [+0.130, +0.218]."""
    stored = json.loads((RESULTS / "gpu_run.json").read_text())["parts"]["learning"]["outcomes"]["validation"]
    before = {(t, c): w for t, c, w in stored["before"]}
    after = {(t, c): w for t, c, w in stored["after"]}
    out = ps.paired_outcomes(before, after, task_of=lambda key: key[0])
    assert (round(out["diff"], 3), round(out["low"], 3), round(out["high"], 3)) == (0.174, 0.138, 0.210)
    by_task = out["clustered"]
    assert by_task["clusters"] == 400 and by_task["design_effect"] == pytest.approx(1.476, abs=1e-3)
    assert (round(by_task["low"], 3), round(by_task["high"], 3)) == (0.130, 0.218)


def test_mcnemar_p_and_edges(ps):
    """McNemar's exact p stays: 7 gained, 1 lost is 2 * P(X >= 7 | 8, 1/2) = 18/256. With no changed pair the
    interval is Tango's +-z^2 / (n + z^2) and p is 1; counts that do not fit are refused."""
    assert ps.paired_binary(7, 1, 96)["p"] == pytest.approx(18 / 256)
    unchanged = ps.paired_binary(0, 0, 96)
    z2 = 1.959963984540054**2
    assert unchanged["p"] == 1.0 and unchanged["high"] == pytest.approx(z2 / (96 + z2)) == -unchanged["low"]
    with pytest.raises(ValueError, match="do not fit 10 pairs"):
        ps.paired_binary(8, 5, 10)


def _paired_tables(rng, n, before, after, rho, draws):
    """``draws`` 2x2 tables of n pairs with these marginal success rates and correlation rho (capped where the
    margins allow no more)."""
    s = math.sqrt(before * (1 - before) * after * (1 - after))
    both = min(before * after + rho * s, before, after)
    cells = [both, after - both, before - both, 1 - after - before + both]  # both, gained, lost, neither
    return rng.multinomial(n, cells, size=draws)


def test_tango_covers_95_percent_on_the_shapes_we_report_and_the_conditional_interval_did_not(ps):
    """Coverage by simulation (seeded): n 96-800 pairs, success rates 0.1-0.7 before and after, correlated pairs
    (rho 0.3 and 0.7). Tango's interval covers the true difference in at least 94 % of 10,000 draws on every
    shape; the conditional interval it replaced (Clopper-Pearson of gained / changed, scaled by the observed
    share changed) falls well short where many pairs change, as after real learning."""
    rng = np.random.default_rng(47)
    worst = 1.0
    for n in (96, 256, 800):
        for before, after in ((0.1, 0.1), (0.2, 0.5), (0.4, 0.7), (0.5, 0.6), (0.7, 0.4), (0.3, 0.3)):
            for rho in (0.3, 0.7):
                tables = _paired_tables(rng, n, before, after, rho, 10_000)
                low, high = ps.tango(tables[:, 1], tables[:, 2], n)
                worst = min(worst, float(np.mean((low <= after - before) & (after - before <= high))))
    assert worst >= 0.94
    tables = _paired_tables(rng, 256, 0.3, 0.65, 0.3, 10_000)  # a pool-like gain
    gained, lost = tables[:, 1], tables[:, 2]
    changed = gained + lost
    q_low = stats.beta.ppf(0.025, gained, lost + 1)
    q_high = np.where(lost > 0, stats.beta.ppf(0.975, gained + 1, np.maximum(lost, 1)), 1.0)
    covered = (changed / 256 * (2 * q_low - 1) <= 0.35) & (0.35 <= changed / 256 * (2 * q_high - 1))
    assert covered.mean() < 0.90  # 0.84 with this seed


def test_the_mde_is_what_the_interval_detects_with_80_percent_power(ps):
    """The MDE in the unconditional design: at n 256 and 30 % of pairs changing, a true difference of the MDE
    makes Tango's interval exclude 0 in about 80 % of draws (20,000 seeded, Monte Carlo error ~0.3 %)."""
    n, psi = 256, 0.3
    mde = ps.mcnemar_mde(n, psi)
    gained_share, lost_share = (psi + mde) / 2, (psi - mde) / 2
    tables = np.random.default_rng(1).multinomial(n, [gained_share, lost_share, 1 - psi], size=20_000)
    low, _ = ps.tango(tables[:, 0], tables[:, 1], n)
    assert np.mean(low > 0) == pytest.approx(0.80, abs=0.02)


def test_clustered_interval_by_hand_and_with_one_episode_per_task(ps):
    """Two tasks of four episodes, differences (1, 1, 1, 1) and (0, 0, 0, -1): mean 3/8; by task the residual
    sums are 4 - 4 * 3/8 = 2.5 and -1 - 4 * 3/8 = -2.5, so the clustered variance is 2/1 * 12.5 / 64 = 0.390625;
    the independent one is sum (d - 3/8)^2 / (8 * 7) = 3.875 / 56; the design effect is their ratio, 5.6452.
    With one episode per task the design effect is 1 and the clustered interval is Tango's at t with n - 1 df."""
    diffs, tasks = [1, 1, 1, 1, 0, 0, 0, -1], ["a"] * 4 + ["b"] * 4
    assert ps.design_effect(diffs, tasks) == pytest.approx(0.390625 / (3.875 / 56))
    out = ps.clustered(diffs, tasks)
    z = stats.t.ppf(0.975, 1)
    deff = out["design_effect"]
    low, high = ps._tango_bounds(4 / deff, 1 / deff, 8 / deff, z)
    assert (out["low"], out["high"]) == pytest.approx((float(low), float(high)))
    rng = np.random.default_rng(3)
    diffs = list(rng.choice([-1, 0, 0, 1, 1], size=300))
    alone = ps.clustered(diffs, list(range(300)))
    plain = ps.paired_binary(diffs.count(1), diffs.count(-1), 300)
    assert alone["design_effect"] == pytest.approx(1.0)
    assert (alone["low"], alone["high"]) == pytest.approx((plain["low"], plain["high"]), abs=0.002)


def test_paired_outcomes_cluster_only_where_tasks_repeat(ps):
    before = {(t, c): int(t < 8 and c == 0) for t in range(16) for c in range(2)}
    after = {(t, c): int(t < 14) for t in range(16) for c in range(2)}
    out = ps.paired_outcomes(before, after, task_of=lambda key: key[0])
    assert (out["gained"], out["lost"], out["episodes"]) == (20, 0, 32)
    assert out["clustered"]["clusters"] == 16 and out["clustered"]["low"] < out["low"]
    assert "clustered" not in ps.paired_outcomes(before, after, task_of=lambda key: key)
    assert "clustered" not in ps.paired_outcomes(before, after)


def test_pairs_needed_for_two_points_when_twelve_percent_change(ps):
    """Connor's formula by hand: (1.959964 * sqrt(0.12) + 0.841621 * sqrt(0.12 - 0.0004))^2 / 0.0004 = 2352.3."""
    by_hand = (1.959964 * math.sqrt(0.12) + 0.841621 * math.sqrt(0.1196)) ** 2 / 0.0004
    assert ps.mcnemar_pairs_needed(0.02, 0.12) == pytest.approx(by_hand, rel=1e-5)
    assert round(ps.mcnemar_pairs_needed(0.02, 0.12)) == 2352
    # the exact MDE of that many pairs (ps.mcnemar_power): the formula plans them within a fraction of a point
    assert ps.mcnemar_mde(by_hand, 0.12) == pytest.approx(0.02, rel=0.01)
    # impossible differences (more than every changing pair one way) need no finite number of pairs
    assert math.isnan(ps.mcnemar_pairs_needed(0.2, 0.12))
    assert math.isnan(ps.mcnemar_mde(96, 0.0))
    # 3 of 96 changed: even all changing pairs one way (d = psi = 1/32) is detected only where 4 or more change
    # (|b - c| > 1.96 sqrt(b + c) needs b + c >= 4), P(Binomial(96, 1/32) >= 4) = 0.35: no MDE
    few = ps.paired_binary(2, 1, 96)
    assert ps.mcnemar_power(1 / 32, 96, 1 / 32) == pytest.approx(stats.binom.sf(3, 96, 1 / 32), rel=1e-12)
    assert math.isnan(ps.detectable(few)) and ps.mde_text(few | {"mde": float("nan")}) == "no MDE (3 of 96 changed)"


def test_the_exact_mcnemar_power_is_the_sum_over_every_table(ps):
    """``mcnemar_power`` by brute force: every (gained, lost) table of n = 40 pairs under the multinomial, a
    detection where Tango's interval excludes 0; and the MDE is where that exact power is 80 %."""
    n, psi, diff = 40, 0.3, 0.15
    probs = [(psi + diff) / 2, (psi - diff) / 2, 1 - psi]
    total = 0.0
    for b in range(n + 1):
        for c in range(n + 1 - b):
            low, high = ps.tango(b, c, n)
            if low > 0 or high < 0:
                total += stats.multinomial.pmf([b, c, n - b - c], n, probs)
    assert ps.mcnemar_power(diff, n, psi) == pytest.approx(total, rel=1e-9)
    mde = ps.mcnemar_mde(n, psi)
    assert ps.mcnemar_power(mde, n, psi) == pytest.approx(0.80, abs=1e-8)


def test_paired_outcomes_use_tango_newcombe_and_mcnemar_mde(ps):
    before = {k: k < 30 for k in range(96)}
    after = {k: (1 <= k < 30) or (30 <= k < 37) for k in range(96)}  # episode 0 lost, 30-36 gained
    out = ps.paired_outcomes(before, after)
    table = ps.paired_binary(7, 1, 96, both_won=29)
    assert out == pytest.approx(table, nan_ok=True)
    assert out["mde"] == pytest.approx(ps.mcnemar_mde(96, 8 / 96))
    ps.apply_holm([out])
    # Tango's interval excludes 0 while McNemar's p (0.070) does not pass: the p the verdict rests on stands beside it
    assert ps.fmt_part(out) == f"+0.062 [{out['low']:+.3f}, {out['high']:+.3f}] (p 0.070; MDE {out['mde']:.3f})"


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


def test_the_clustered_interval_covers_where_tasks_differ_and_the_plain_one_does_not(ps):
    """16 tasks x 16 episodes (the pool's shape), each task with its own success before (Beta(2, 3)) and its own
    gain (normal, mean 0.3, sd 0.15), one uniform draw per episode shared by before and after. For the mean gain
    over tasks like these, the by-task interval covers in 97 % of 300 seeded studies; Tango's, which treats the
    256 episodes as independent, in 85 %."""
    rng = np.random.default_rng(5)
    tasks, copies = 16, 16
    truth = 0.2836  # the mean clipped gain over the task distribution (400,000 draws)
    covered, covered_plain = 0, 0
    for _ in range(300):
        before = rng.beta(2, 3, tasks)
        after = np.clip(before + rng.normal(0.3, 0.15, tasks), 0.01, 0.99)
        u = rng.random(tasks * copies)
        diffs = list((u < np.repeat(after, copies)).astype(int) - (u < np.repeat(before, copies)).astype(int))
        by_task = ps.clustered(diffs, list(np.repeat(np.arange(tasks), copies)))
        low, high = ps.tango(diffs.count(1), diffs.count(-1), len(diffs))
        covered += by_task["low"] <= truth <= by_task["high"]
        covered_plain += low <= truth <= high
    assert covered / 300 >= 0.92 and covered_plain / 300 < 0.88


def test_the_mde_where_the_first_side_won_nothing_is_the_rate_that_reaches_the_fewest_shown_gains():
    # 24 games the untrained model lost: 5 gains of 24 are not shown (McNemar's exact p = 2 / 2**5 = 0.0625),
    # 6 are (p = 0.031, Tango's interval above 0); the MDE is the win rate reaching 6 gains in 80 % of draws
    fewest, rate = bench_stats.mde_from_none_won(24)
    assert fewest == 6
    assert bench_stats.paired_binary(5, 0, 24)["p"] == pytest.approx(0.0625)
    assert bench_stats.paired_binary(6, 0, 24)["low"] > 0
    assert stats.binom.sf(5, 24, rate) == pytest.approx(0.8, abs=1e-9)
    draws = np.random.default_rng(0).binomial(24, rate, size=200_000)
    assert np.mean(draws >= 6) == pytest.approx(0.8, abs=0.005)


def test_the_t_mde_has_exact_power():
    """The MDE of a paired t-test is the difference with 80 % power under the noncentral t: G*Power's paired
    t-test at n 10, alpha 0.05 two-sided, gives d_z = 0.9959 (se 1 / sqrt(10)); at Holm's first-step level for 12
    comparisons the old formula (t_{1-a/2} + t_{0.8}) se had power 0.772 only. A simulation of 20,000 t-tests at
    the MDE rejects in 80 % of draws."""
    se = 1 / math.sqrt(10)
    assert bench_stats.mde(se, 9) / se / math.sqrt(10) == pytest.approx(0.9959, abs=5e-4)
    alpha = 0.05 / 12
    old = (stats.t.ppf(1 - alpha / 2, 9) + stats.t.ppf(0.8, 9)) * se
    assert bench_stats.t_power(old, se, 9, alpha) == pytest.approx(0.772, abs=0.001)
    assert bench_stats.t_power(bench_stats.mde(se, 9, alpha), se, 9, alpha) == pytest.approx(0.80, abs=1e-9)
    draws = np.random.default_rng(4).normal(bench_stats.mde(se, 9, alpha), 1.0, size=(20_000, 10))
    t = draws.mean(axis=1) / (draws.std(axis=1, ddof=1) / math.sqrt(10))
    assert np.mean(np.abs(t) > stats.t.ppf(1 - alpha / 2, 9)) == pytest.approx(0.80, abs=0.01)
    assert math.isnan(bench_stats.mde(0.0, 9))  # two identical arms: nothing to detect against


def test_ratio_of_means_by_fieller():
    """Fieller's interval by hand: a = (10, 12, 14), b = (5, 6, 7): means 12 and 6, variances of the means 4/3 and
    1/3, Welch df (5/3)^2 / ((16/9 + 1/9) / 2) = 2.941; it brackets 2 and is wider above than below."""
    out = bench_stats.ratio_of_means([10, 12, 14], [5, 6, 7])
    t = stats.t.ppf(0.975, (5 / 3) ** 2 / ((16 / 9 + 1 / 9) / 2))
    g = t * t * (1 / 3) / 36
    half = t / 6 * math.sqrt(4 / 3 + 4 * (1 / 3) - g * 4 / 3)
    assert out["ratio"] == 2.0 and (out["low"], out["high"]) == pytest.approx(((2 - half) / (1 - g), (2 + half) / (1 - g)))
    assert out["high"] - 2 > 2 - out["low"]


def test_holms_adjusted_p_is_the_step_down_one_and_decides_as_holm_does(ps):
    # sorted 0.01, 0.03, 0.04 of m = 3: 3 x 0.01, max(that, 2 x 0.03), max(that, 1 x 0.04); NaN stays out of m
    assert ps.holm_adjusted([0.04, 0.01, float("nan"), 0.03]) == pytest.approx([0.06, 0.03, float("nan"), 0.06],
                                                                               nan_ok=True)
    assert ps.holm_adjusted([0.9, 0.6]) == [1.0, 1.0]
    rng = np.random.default_rng(7)
    for _ in range(200):
        p = list(rng.uniform(0, 0.08, size=int(rng.integers(1, 9))))
        assert [a <= 0.05 for a in ps.holm_adjusted(p)] == ps.holm(p)


def test_a_holm_verdict_beside_an_unadjusted_interval_carries_its_adjusted_p(ps):
    """Issue 71: where an unadjusted 95 % interval excludes 0 in a Holm family, the verdict is Holm's, so the
    adjusted p it rests on stands beside it; where the interval holds 0 nothing is added."""
    strong = ps.paired_diff([0.10, 0.12, 0.09, 0.11, 0.13, 0.10])
    weak = ps.paired_diff([0.02, 0.05, 0.00, 0.04, 0.03, 0.00])  # past 0 on its own, not at Holm's 0.05 / 2
    null = ps.paired_diff([0.02, -0.05, 0.01, 0.04, -0.03, 0.00])
    ps.apply_holm([strong, null])
    assert strong["holm_significant"] and strong["p_holm"] == pytest.approx(2 * strong["p"]) and strong["p_holm"] < 1e-3
    assert ps.fmt_part(strong) == f"+0.108 [{strong['low']:+.3f}, {strong['high']:+.3f}] (Holm-adjusted p < 0.001)"
    assert "Holm" not in ps.fmt_part(null) and ps.holm_miss_text(null) == ""
    ps.apply_holm([weak, null])
    assert 0.025 < weak["p"] < 0.05 and weak["low"] > 0 and not weak["holm_significant"]
    assert ps.holm_miss_text(weak) == f"p {weak['p']:.3f} misses Holm's level, Holm-adjusted p {weak['p_holm']:.3f}"
    assert ps.fmt_part(weak).endswith(f"] (Holm-adjusted p {weak['p_holm']:.3f}; MDE {weak['mde']:.3f})")
