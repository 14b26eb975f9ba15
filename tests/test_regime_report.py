"""Issue 71's registered read (``regime_study report``) and seed rule (``pilot-seeds``) on hand-built study folders:
which runs count, the endpoint's share of the 140 games, the validation AUC over the 16 points, the pairing by
(warm start, seed) and the diagnostics, each number against a hand computation (no training)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from benchmarks import alfworld_text as program
from benchmarks import regime_study
from ecpo_train.evaluation.manifests import load_manifest

BED = program.REGIME_OPEN
GAMES = [(g.name, t) for g in load_manifest(BED.manifest).groups for t in g.task_ids]
VALIDATED = [1, *range(10, 151, 10)]


def endpoint(out, name, wins, games=GAMES):
    """``name``'s leaderboard log: the first ``wins`` of ``games`` won, the rest lost."""
    folder = out / BED.folder / name
    folder.mkdir(parents=True)
    lines = [json.dumps({"manifest": BED.manifest, "group": group, "task_id": task, "seed": 0, "task_type": "Pick",
                         "success": i < wins}) for i, (group, task) in enumerate(games)]
    (folder / f"{BED.manifest}.jsonl").write_text("\n".join(lines) + "\n")


def curve(out, name, points, last=150, strict=0.5):
    run = out / "runs" / name
    run.mkdir(parents=True)
    by_iteration = dict(zip(VALIDATED, points))
    lines = [{"iteration": i, "success": 0.3, "invalid_action_rate": 0.7, "credit/strict_valid_fraction": strict}
             | ({"val/success": by_iteration[i]} if i in by_iteration else {}) for i in range(1, last + 1)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


@pytest.fixture
def spec(monkeypatch):
    """The registered protocol with two study seeds (101, 102) set, as `pilot-seeds` would have them committed."""
    registered = regime_study.protocol() | {"seeds": 2}
    monkeypatch.setattr(regime_study, "protocol", lambda: registered)
    return registered


WINS = {"grpo": 60, "gigpo_std": 56, "ecpo": 63, "ecpo_d1": 50}  # games won of 140; each unit adds its offset


OFFSETS = {("a", 101): 0, ("a", 102): 2, ("b", 101): -3, ("b", 102): 5}  # each unit's games won beside WINS


def build_study(out):
    """Seeds 101-102 on both warm starts, every arm, trained and evaluated (ECPO wins one more game at odd seeds); a
    seed past them."""
    for (label, seed), offset in OFFSETS.items():
        for arm, wins in WINS.items():
            name = f"{label}-{arm}-s{seed}"
            endpoint(out, name, wins + offset + (seed % 2) * (arm == "ecpo"))
            curve(out, name, [(wins + offset) / 140] * 16, strict=0.5 if arm != "ecpo_d1" else 0.8)
    endpoint(out, "a-ecpo-s103", 140)  # a seed beyond the registered two: not read


def test_the_report_reads_every_unit_pairs_it_by_warm_start_and_seed(tmp_path, spec):
    out, offsets = tmp_path, OFFSETS
    build_study(out)
    result = regime_study.report(out)
    assert result["seeds"] == [101, 102]
    success = result["endpoint"]["success"]
    assert success["gigpo_std"] == pytest.approx(np.mean([(56 + o) / 140 for o in offsets.values()]))
    assert success["ecpo"] == pytest.approx(np.mean([(63 + o + u[1] % 2) / 140 for u, o in offsets.items()]))  # not s103
    ecpo = result["endpoint"]["comparisons"]["ecpo - gigpo_std"]
    diffs = [(63 - 56 + (seed % 2)) / 140 for _, seed in offsets]  # ecpo - gigpo_std in each unit
    assert ecpo["units"] == 4 and ecpo["diff"] == pytest.approx(np.mean(diffs))
    assert ecpo["sd"] == pytest.approx(np.std(diffs, ddof=1))
    assert ecpo["by_warm_start"] == pytest.approx({"a": np.mean(diffs[:2]), "b": np.mean(diffs[2:])})
    assert ecpo["verdict"] == "shown: a gain"  # 7-8 games of 140 in every unit: Holm rejects
    assert ecpo["m"] == 3 and result["endpoint"]["comparisons"]["grpo - gigpo_std"]["units"] == 4
    by_run = result["endpoint"]["by_run"]  # each run's share, so that the JSON can be checked on its own
    assert by_run["ecpo"] == pytest.approx({f"{w}-s{seed}": (63 + o + seed % 2) / 140
                                            for (w, seed), o in offsets.items()})
    assert result["validation_auc"]["by_run"]["gigpo_std"]["b-s102"] == pytest.approx((56 + 5) / 140)
    auc = result["validation_auc"]["mean"]
    assert auc["ecpo_d1"] == pytest.approx(np.mean([(50 + o) / 140 for o in offsets.values()]))
    assert result["diagnostics"]["ecpo_d1"]["credit/strict_valid_fraction"] == pytest.approx(0.8)
    assert result["diagnostics"]["grpo"]["invalid_action_rate"] == pytest.approx(0.7)


def test_the_report_names_each_runs_cpu_and_the_units_whose_arms_span_machines(tmp_path, spec):
    """A study resumed on another machine: the report says which CPU played each run and which (warm start, seed)
    pairs its arms across CPUs."""
    build_study(tmp_path)
    for name in (f"{label}-{arm}-s{seed}" for label, seed in OFFSETS for arm in WINS):
        cpu = "AMD EPYC" if name in ("b-ecpo-s101", "b-ecpo_d1-s101") or name.endswith("s102") else "Intel Xeon"
        if name != "a-grpo-s102":
            (tmp_path / BED.folder / name / "machine.json").write_text(json.dumps({"cpu": cpu, "cores": "2"}))
    machines = regime_study.report(tmp_path)["machines"]
    assert machines["by_run"]["a-ecpo-s101"] == "Intel Xeon" and machines["by_run"]["b-ecpo-s101"] == "AMD EPYC"
    assert machines["by_run"]["a-grpo-s102"] == "not recorded" and len(machines["by_run"]) == 16
    assert machines["units_spanning_machines"] == ["a-s102", "b-s101"]  # a-s102: one run's CPU unknown


@pytest.mark.parametrize("gap", ["evaluated on 139 games", "trained 149 iterations", "never run",
                                 "validated twice after iteration 10", "not validated after iteration 70"])
def test_the_report_refuses_a_study_with_a_run_not_finished_and_writes_nothing(tmp_path, spec, gap, capsys):
    """Read once, whole: while one run of the protocol lacks its last iteration or one endpoint game, `report` is one
    error line naming it (exit 2), before any endpoint figure is printed, and the result JSON is not written."""
    out = tmp_path / "study"
    build_study(out)
    if gap == "evaluated on 139 games":
        (out / BED.folder / "b-grpo-s102" / f"{BED.manifest}.jsonl").write_text(
            "\n".join(json.dumps({"manifest": BED.manifest, "group": g, "task_id": t, "seed": 0, "success": True})
                      for g, t in GAMES[:139]) + "\n")
    elif gap == "trained 149 iterations":
        metrics = out / "runs" / "b-grpo-s102" / "metrics.jsonl"
        metrics.write_text("".join(metrics.read_text().splitlines(keepends=True)[:149]))
    elif gap.startswith(("validated twice", "not validated")):
        metrics = out / "runs" / "b-grpo-s102" / "metrics.jsonl"
        lines = [json.loads(line) for line in metrics.read_text().splitlines()]
        if gap.startswith("validated twice"):
            lines.insert(10, dict(lines[9]))
        else:
            del lines[69]["val/success"]
        metrics.write_text("".join(json.dumps(line) + "\n" for line in lines))
    else:
        import shutil

        shutil.rmtree(out / "runs" / "b-grpo-s102")
        shutil.rmtree(out / BED.folder / "b-grpo-s102")
    with pytest.raises(ValueError, match=r"1 of the study's 16 runs have not finished .*first: b-grpo-s102"):
        regime_study.report(out)
    written = tmp_path / "regime_study.json"
    assert regime_study.main(["report", "--out", str(out), "--json", str(written)]) == 2
    printed = capsys.readouterr()
    assert printed.out.count("\n") <= 1 and "success" not in printed.out + printed.err and not written.exists()


def test_an_unfinished_run_has_no_validation_auc(tmp_path, spec):
    curve(tmp_path, "a-ecpo-s101", [0.5] * 15, last=149)  # stopped one iteration short
    curve(tmp_path, "a-gigpo_std-s101", [0.25] * 16)
    runs = regime_study.read_runs(tmp_path, BED, [101], ["a"])
    auc = regime_study.validation_auc(runs, 150)
    assert auc == {"gigpo_std": {("a", 101): 0.25}}


def test_the_pilot_seed_rule_reads_the_new_pilot_only(tmp_path):
    """`pilot-seeds` reads seeds 11-13 of warm start a (the registered new pilot), not the first pilot's seeds 1-3,
    and sets the count from the largest SD of the three paired differences."""
    diffs = {"grpo": [4, -2, 7], "ecpo": [10, 0, 2], "ecpo_d1": [-6, 8, 1]}  # games, each minus gigpo_std's 60
    for k, seed in enumerate((11, 12, 13)):
        endpoint(tmp_path, f"a-gigpo_std-s{seed}", 60)
        for arm, by_seed in diffs.items():
            endpoint(tmp_path, f"a-{arm}-s{seed}", 60 + by_seed[k])
    endpoint(tmp_path, "a-ecpo-s1", 140)  # the first pilot's: not read
    endpoint(tmp_path, "a-gigpo_std-s1", 0)
    result = regime_study.pilot_seeds(tmp_path)
    sds = {arm: float(np.std(np.array(d) / 140, ddof=1)) for arm, d in diffs.items()}
    assert result["sd"] == pytest.approx(sds)
    rule = regime_study.seed_count(list(sds.values()), regime_study.protocol())
    assert (result["units"], result["seeds"]) == (rule["units"], rule["seeds"]) and result["seeds"] >= 5
    assert result["largest_sd"] == pytest.approx(max(sds.values())) and math.isfinite(result["units"])


def test_the_registered_seed_count_is_the_rule_applied_to_the_kept_new_pilot(tmp_path):
    """regime_study.yaml's `seeds` is what `pilot-seeds` gives on the new pilot's runs as kept in git (restored into a
    scratch folder), and the kept result JSON says the same: anyone can recompute the study's size."""
    from benchmarks import ROOT

    keep = ROOT / "benchmarks/results/raw/regime_open"
    program.restore_kept(keep, tmp_path, program.REGIME_OPEN)
    result = regime_study.pilot_seeds(tmp_path)
    kept = json.loads((ROOT / "benchmarks/results/regime_pilot_seeds.json").read_text())
    assert result["sd"] == pytest.approx(kept["sd"])
    assert (result["units"], result["seeds"]) == (kept["units"], kept["seeds"])
    assert regime_study.protocol()["seeds"] == result["seeds"] == 5
    assert regime_study.study_seeds(regime_study.protocol()) == [101, 102, 103, 104, 105]


def test_the_ledger_holds_the_studys_claims_registered_until_its_report_is_committed(tmp_path, spec, monkeypatch):
    """E10-E12 (each family arm minus GiGPO w/std) stand registered with no figure while benchmarks/results has no
    report; once it has, each shows the report's paired difference, its Holm verdict by the ledger's rule, and the
    validation AUC beside it, not counted."""
    from benchmarks import claims_ledger, claims_sources

    results = tmp_path / "results"
    results.mkdir()
    monkeypatch.setattr(claims_sources, "RESULTS", results)
    rows = claims_sources.regime_study()
    assert [r["id"] for r in rows] == ["E10", "E11", "E12"] and {r["n"] for r in rows} == {0}
    assert [claims_ledger.verdict(r) for r in rows] == [claims_sources.UNDER_WAY] * 3
    assert claims_ledger.unit_short(rows[0]) == "0 of 4 pairs"  # 2 warm starts x the fixture's 2 seeds
    assert rows[0]["source"] == "benchmarks/results/regime_pilot_seeds.json"  # the registration's count, committed
    build_study(tmp_path / "study")
    report = regime_study.report(tmp_path / "study")
    (results / regime_study.RESULT_JSON).write_text(json.dumps(report))
    ecpo, ecpo_d1, grpo = claims_sources.regime_study()
    primary, auc = ecpo["parts"]
    assert primary["estimate"] == pytest.approx(report["endpoint"]["comparisons"]["ecpo - gigpo_std"]["diff"])
    assert auc["secondary"] and auc["estimate"] == pytest.approx(
        report["validation_auc"]["comparisons"]["ecpo - gigpo_std"]["diff"])
    assert ecpo["n"] == grpo["n"] == 4 and claims_ledger.unit_short(ecpo) == "4 of 4 pairs"
    assert ecpo["source"] == f"benchmarks/results/{regime_study.RESULT_JSON}"
    assert claims_ledger.verdict(ecpo) == "shown"  # +7-8 games of 140 in every unit
    assert claims_ledger.verdict(ecpo_d1) == "contradicted"  # -6 games in every unit, against the paper's direction
    assert claims_ledger.verdict(grpo) == "a difference shown"  # +4 games, either direction counts


def test_each_comparison_is_the_registered_paired_t_test_with_holm_over_three_per_endpoint(tmp_path, monkeypatch):
    """Against an independent computation (scipy's one-sample t test, Holm by hand, the power by integrating over
    the chi-square): each family arm minus GiGPO w/std, paired by (warm start, seed) over the 6 units of 3 seeds x 2
    warm starts; df = units - 1, two-sided p, unadjusted 95 % interval; Holm over the 3 comparisons, separately for
    the endpoint and for the validation AUC; the MDE at level 0.05 / 3 with exact power 0.8."""
    from scipy import integrate, stats

    registered = regime_study.protocol() | {"seeds": 3}
    monkeypatch.setattr(regime_study, "protocol", lambda: registered)
    units = [(label, seed) for label in ("a", "b") for seed in (101, 102, 103)]
    rng = np.random.default_rng(7)
    wins = {arm: {u: int(rng.integers(30, 110)) for u in units} for arm in registered["arms"]}
    aucs = {arm: {u: rng.uniform(0.1, 0.9, 16).tolist() for u in units} for arm in registered["arms"]}
    for arm in registered["arms"]:
        for label, seed in units:
            endpoint(tmp_path, f"{label}-{arm}-s{seed}", wins[arm][(label, seed)])
            curve(tmp_path, f"{label}-{arm}-s{seed}", aucs[arm][(label, seed)])
    result = regime_study.report(tmp_path)

    def power(effect, se, df, alpha):  # P(|T| > crit) for T = (Z + effect / se) / sqrt(V / df), V ~ chi2(df)
        crit = stats.t.ppf(1 - alpha / 2, df)
        tail = lambda v: stats.chi2.pdf(v, df) * (stats.norm.sf(crit * math.sqrt(v / df) - effect / se)
                                                   + stats.norm.cdf(-crit * math.sqrt(v / df) - effect / se))
        return integrate.quad(tail, 0, np.inf)[0]

    for key, value in (("endpoint", lambda arm, u: wins[arm][u] / 140),
                       ("validation_auc", lambda arm, u: float(np.mean(aucs[arm][u])))):
        comparisons, expected = result[key]["comparisons"], {}
        for arm in registered["family"]:
            diffs = [value(arm, u) - value("gigpo_std", u) for u in units]
            test = stats.ttest_1samp(diffs, 0.0)
            expected[arm] = (np.mean(diffs), test.pvalue, test.confidence_interval(0.95))
        order = sorted(registered["family"], key=lambda arm: expected[arm][1])
        holm, running = {}, 0.0
        for rank, arm in enumerate(order):
            running = max(running, min(1.0, (3 - rank) * expected[arm][1]))
            holm[arm] = running
        for arm in registered["family"]:
            part, (diff, p, interval) = comparisons[f"{arm} - gigpo_std"], expected[arm]
            assert (part["units"], part["n"], part["df"], part["m"]) == (6, 6, 5, 3)
            assert part["diff"] == pytest.approx(diff) and part["p"] == pytest.approx(p)
            assert (part["low"], part["high"]) == pytest.approx((interval.low, interval.high))
            assert part["p_holm"] == pytest.approx(holm[arm]) and part["holm_significant"] == (holm[arm] <= 0.05)
            assert power(part["mde"], part["se"], 5, 0.05 / 3) == pytest.approx(0.8, abs=1e-6)
