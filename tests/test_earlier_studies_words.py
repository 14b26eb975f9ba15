"""Issue 71 item 7: the words of the earlier studies say what their kept files give. The pooled 15-seed ECPO - GiGPO
w/std on real ALFWorld that docs/cpu_training.md quotes beside the registered study's table is recomputed from the
two studies' kept episode logs, and the per-type game counts it quotes are valid_seen's own."""

from __future__ import annotations

import json
import re

import pytest

from benchmarks import RESULTS
from benchmarks.alfworld_text import by_type, outcomes
from benchmarks.stats import paired_diff, paired_values

ROOT = RESULTS.parent.parent
RAW = RESULTS / "raw"
DOC = ROOT / "docs" / "cpu_training.md"


def _success(folder: str) -> dict[str, dict[int, float]]:
    """``arm -> {seed: share of the 140 valid_seen games won}`` from a study's kept episode logs."""
    cells: dict[str, dict[int, float]] = {}
    for run in sorted(p.name for p in (RAW / folder / "valid_seen").iterdir() if not p.name.startswith("warm")):
        arm, seed = run.rsplit("-s", 1)
        games = outcomes(RAW / folder, run)
        assert len(games) == 140, run
        cells.setdefault(arm, {})[int(seed)] = by_type(games)["All"]
    return cells


def test_the_pooled_alfworld_text_difference_is_the_kept_logs_own():
    study, column = _success("alfworld_text"), _success("estimators_alfworld")
    # each study's own figure reproduces from its logs (the registered +0.030 and the column's -0.029)
    for cells, registered in ((study, json.loads((RESULTS / "alfworld_text.json").read_text())["comparisons"]
                               ["ecpo - gigpo_std"]["diff"]),
                              (column, json.loads((RESULTS / "estimator_comparison.json").read_text())["table"]
                               ["ecpo"]["alfworld_text"]["diff"])):
        assert paired_diff(list(paired_values(cells["ecpo"], cells["gigpo_std"])[1]))["diff"] == \
            pytest.approx(registered, abs=1e-12)
    seeds, diffs = paired_values(study["ecpo"] | column["ecpo"], study["gigpo_std"] | column["gigpo_std"])
    assert len(seeds) == 15
    pooled = paired_diff(list(diffs))
    quoted = (f"the 15 seeds give ECPO - GiGPO w/std {pooled['diff']:+.3f} [{pooled['low']:+.3f}, "
              f"{pooled['high']:+.3f}], p {pooled['p']:.2f}, MDE {pooled['mde']:.3f}")
    text = " ".join(DOC.read_text().split())
    assert quoted in text
    assert "a descriptive pooling of two registered studies, not a registered comparison" in text
    assert "**51.6**" not in text  # no bold on a difference that is not shown


def test_the_per_type_game_counts_are_valid_seens():
    manifest = json.loads((ROOT / "ecpo_train" / "manifests" / "alfworld_valid_seen_by_type.json").read_text())
    counts = [len(group["task_ids"]) for group in manifest["groups"].values()]
    assert f"The per-type cells hold {min(counts)}-{max(counts)} games each" in " ".join(DOC.read_text().split())
    assert not re.search(r"13-39 games", DOC.read_text())
