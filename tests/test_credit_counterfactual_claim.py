"""benchmarks/credit_counterfactual_claim.py: the registered claim-level test of the counterfactual benchmark (an
exact sign-flip test with the training run as the unit), its power, and the committed report it heads."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks import RESULTS, read_json
from benchmarks import credit_counterfactual_claim as claim
from benchmarks.credit_counterfactual_report import BASELINE, render


def test_the_exact_sign_flip_test_equals_scipys_permutation_test_and_hand_values():
    from scipy.stats import permutation_test

    scores = [-2, -1, -3, 1, -2, 0, -1]
    exact = permutation_test((np.asarray(scores, float),), np.sum, permutation_type="samples",
                             n_resamples=10_000, alternative="less")  # 2^7 patterns: scipy enumerates them all
    assert claim.cluster_sign_test(scores, -1) == pytest.approx(exact.pvalue)
    assert claim.cluster_sign_test([-s for s in scores], +1) == pytest.approx(exact.pvalue)
    # 9 runs all below 0: only the observed pattern is as extreme, p = 2^-9; a zero score carries no sign
    assert claim.cluster_sign_test([-3] * 8 + [-2, 0], -1) == pytest.approx(1 / 512)
    # the plain sign test is the case of one cell per run: 8 of 10 below 0 -> binomial tail P(X >= 8 | 10, 1/2)
    assert claim.cluster_sign_test([-1] * 8 + [1] * 2, -1) == pytest.approx(56 / 1024)
    assert claim.cluster_sign_test([], -1) == 1.0


def test_run_scores_sum_each_runs_cell_signs_and_leave_out_saturated_cells_and_other_seeds():
    def part(arm, target, seed, diff, verdict="not significant"):
        return {"a": "ecpo", "b": BASELINE, "metric": "lucky", "arm": arm, "target": target,
                "checkpoint_seed": seed, "diff": diff, "verdict": verdict}

    parts = [part("x", "0.50", 0, -0.1), part("x", "0.80", 0, -0.2), part("x", "0.95", 0, +0.1),
             part("x", "0.50", 1, +0.3), part("y", "0.50", 0, -0.1), part("y", "0.95", 0, -1.0, "saturated"),
             part("x", "0.50", 3, -0.1), part("y", "0.80", 0, float("nan"))]
    assert claim.run_scores(parts, "ecpo", [0, 1, 2]) == {"x/0": -1, "x/1": 1, "y/0": -1}
    assert claim.run_scores(parts, "ecpo_anchor_scale", [0, 1, 2]) == {}


def test_the_registered_seeds_are_not_the_seeds_the_claim_was_formed_on():
    assert not set(claim.REGISTRATION["checkpoint_seeds"]) & set(claim.EXPLORATORY_SEEDS)
    assert claim.REGISTRATION["baseline"] == BASELINE
    assert claim.REGISTRATION["command"].endswith(" ".join(map(str, claim.REGISTRATION["checkpoint_seeds"])))


def test_power_rises_with_the_effect_and_holds_alpha_without_one():
    spread = {"a|0.5": (-3.0, 1.0), "a|0.8": (-3.0, 1.0), "b|0.5": (-3.0, 1.0)}  # every cell below 0 (p 0.999)
    assert claim.power(spread, 5, 0.025, simulations=400) > 0.95
    null = {key: (0.0, 1.0) for key in spread}
    assert claim.power(null, 5, 0.025, simulations=400) <= 0.05


def test_the_committed_report_is_the_claim_over_the_committed_checkpoints():
    payload = read_json(RESULTS / "credit_counterfactual.json.gz")
    committed = json.loads((RESULTS / "credit_counterfactual_claim.json").read_text())
    summary = payload["summary"]
    # the docs' figure: 48 of the 80 comparisons over checkpoints keep their sign at all 3 checkpoints
    assert claim.sign_kept(summary["over_checkpoints"]) == (48, 80) == tuple(committed["sign_kept"].values())
    exploratory = json.loads(json.dumps(claim.evaluate(summary, list(claim.EXPLORATORY_SEEDS))))
    assert committed["exploratory"] == {"seeds": list(claim.EXPLORATORY_SEEDS)} | exploratory
    assert "registered_result" not in committed  # no checkpoint of the registered seeds has run yet
    assert committed["registration"] == claim.REGISTRATION
    text = render(summary, payload["protocol"], payload["runtime_s"], committed)
    assert text == (RESULTS / "credit_counterfactual.md").read_text()
    assert "**Exploratory (seeds seen before the claim was written; not evidence)**" in text


def test_the_claim_stage_writes_the_committed_claim_files_again_and_refuses_a_missing_report(tmp_path, capsys):
    """``python -m benchmarks.credit_counterfactual claim``: the committed claim report, byte for byte, from the
    committed counterfactual report (gzipped); a report that is not there is the one-line refusal, exit 2."""
    from benchmarks import credit_counterfactual as cf

    assert cf.main(["claim", "--out", str(tmp_path)]) == 0
    for name in ("credit_counterfactual_claim.json", "credit_counterfactual_claim.md"):
        assert (tmp_path / name).read_bytes() == (RESULTS / name).read_bytes(), name
    capsys.readouterr()
    with pytest.raises(SystemExit) as stopped:
        cf.main(["claim", "--from-json", str(tmp_path / "none.json.gz"), "--out", str(tmp_path)])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --from-json ") and err.count("\n") == 1
