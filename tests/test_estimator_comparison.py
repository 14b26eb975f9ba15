"""Issue 57's registered comparison: the seed count is the pilot's by the registered rule, and each cell's verdict
is Holm's on the paired difference with GiGPO w/std."""

from __future__ import annotations

import json
import math

import numpy as np

from benchmarks import estimator_comparison as ec
from benchmarks.stats import mde, seeds_for_mde


def test_the_protocols_seed_count_is_the_pilots_by_the_registered_rule():
    protocol = ec.load_protocol()
    pilot = json.loads(ec.PILOT_JSON.read_text())
    assert ec.pilot_seed_count(pilot["runs"], protocol)["seeds"] == pilot["seed_count"]["seeds"] == protocol["seeds"]
    sd, alpha = pilot["seed_count"]["largest_sd"], protocol["alpha"] / (len(protocol["arms"]) - 1)
    n = protocol["seeds"]
    assert mde(sd / math.sqrt(n), n - 1, alpha) <= 0.10 < mde(sd / math.sqrt(n - 1), n - 2, alpha)
    assert seeds_for_mde(sd, 0.10, alpha) == n


def test_verdicts_are_holms_on_the_paired_difference():
    protocol = ec.load_protocol() | {"arms": ["gigpo_std", "better", "same"], "reference": "gigpo_std"}
    rng = np.random.default_rng(0)
    base = rng.uniform(0.5, 0.9, size=20)
    runs = [{"env_name": "corridor", "method": m, "group_size": 8, "seed": s, "final_success": v}
            for m, values in (("gigpo_std", base), ("better", base + 0.05 + rng.normal(0, 0.01, 20)),
                              ("same", base + rng.normal(0, 0.05, 20)))
            for s, v in enumerate(values)]
    table = ec.compare(runs, protocol)
    assert table["better"]["corridor"]["verdict"] == "better" and table["better"]["corridor"]["m"] == 2
    assert table["same"]["corridor"]["verdict"] == "no difference shown"
    assert table["gigpo_std"]["corridor"]["reference"]
