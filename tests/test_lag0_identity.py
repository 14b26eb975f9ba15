"""Lag 0 (``max_policy_lag=0``, the default) reproduces, bit for bit, the lock-step RLlib iterations of the code
before the pipelined iteration existed: the same 3-iteration run (the tiny random Qwen2 scoring the corridors'
doors, one env-runner actor, a local learner, seed 5) with the baseline commit's code, unpacked by ``git
archive``, and with this checkout's, each in a fresh process on its own Ray session; every non-timing number of
``result["ecpo"]`` that both report is equal (committed result: ``benchmarks/results/lag0_identity.json``).

One line of the baseline is changed, the one that issue 72 changed on purpose: its scoring policy drew a sampled
choice by ``torch.multinomial`` from torch's global stream; the one candidate chooser (``policies/choose.py``)
takes one float64 uniform from the policy's own generator (seeded with the run's seed in the one runner) and picks
by its inverse CDF. The baseline's line is replaced by that rule, so the comparison is still of the pipelining."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_values

ROOT = Path(__file__).resolve().parents[1]
BASELINE = "56ef19a^"  # the parent of the commit that added max_policy_lag
RUN = """
import json, sys
import ray
from ecpo_train.integrations.rllib import ECPOConfig
from ecpo_train.runtime.config import TrainConfig, make_config
values = json.loads(sys.argv[1])
if "num_epochs" not in TrainConfig.__dataclass_fields__:  # the baseline predates the key's rename
    values["update_epochs"] = values.pop("num_epochs")
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
algo = ECPOConfig.from_train_config(make_config(values)).env_runners(num_env_runners=1).build_algo()
rows = []
try:
    for _ in range(int(sys.argv[2])):
        rows.append({k: v for k, v in algo.train()["ecpo"].items() if isinstance(v, (int, float))})
finally:
    algo.stop()
    ray.shutdown()
print("RESULT " + json.dumps(rows))
"""


# the baseline's sampled choice among candidates, and the one chooser's rule put in its place (module docstring)
OLD_CHOICE = "index = int(torch.multinomial(logp.exp(), 1))"
ONE_CHOOSER = ("index = inverse_cdf_index(logp.exp(), float(torch.rand((), dtype=torch.float64, generator="
               "self.__dict__.setdefault('chooser', torch.Generator().manual_seed({seed})))))")


def with_the_one_chooser(tree: Path, seed: int) -> None:
    """The baseline ``tree``'s scoring policy choosing as ``policies.choose`` does (its one line replaced)."""
    path = tree / "ecpo_train" / "policies" / "scoring.py"
    text = path.read_text()
    assert text.count(OLD_CHOICE) == 1, "the baseline's sampled choice is not the line this test replaces"
    path.write_text(text.replace(OLD_CHOICE, ONE_CHOOSER.format(seed=int(seed))))


def run_checkout(checkout: Path, values: dict, folder: Path, iterations: int) -> list[dict]:
    """``result["ecpo"]``'s numbers, iteration by iteration, of the run ``values`` with ``checkout``'s code."""
    env = os.environ | {"PYTHONPATH": str(checkout)}
    done = subprocess.run([sys.executable, "-c", RUN, json.dumps(values), str(iterations)], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=1800, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{checkout}: exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(lines[-1][len("RESULT "):])


def compare(baseline: list[dict], current: list[dict]) -> dict:
    """Every numeric key both report, outside ``time/``: equal bit for bit, iteration by iteration."""
    compared, differences = 0, []
    for k, (old, new) in enumerate(zip(baseline, current), 1):
        for key in sorted(set(old) & set(new)):
            if key.startswith("time/"):
                continue
            compared += 1
            same = old[key] == new[key] or (isinstance(old[key], float) and math.isnan(old[key])
                                            and isinstance(new[key], float) and math.isnan(new[key]))
            if not same:
                differences.append({"iteration": k, "key": key, "baseline": old[key], "current": new[key]})
    only = sorted({key for row in current for key in row} - {key for row in baseline for key in row})
    return {"values_compared": compared, "differences": differences, "keys_only_in_current": only}


def test_equal_runs_differ_only_in_their_timers():
    baseline = [{"success": 0.5, "time/iteration": 3.0, "credit/advantage_std": math.nan},
                {"success": 0.75, "time/iteration": 2.0}]
    current = [{"success": 0.5, "time/iteration": 9.0, "credit/advantage_std": math.nan, "sampling/policy_lag_max": 0.0},
               {"success": 0.75, "time/iteration": 1.0}]
    out = compare(baseline, current)
    assert out == {"values_compared": 3, "differences": [], "keys_only_in_current": ["sampling/policy_lag_max"]}


def test_a_difference_names_its_iteration_and_key():
    out = compare([{"success": 0.5}, {"success": 0.75}], [{"success": 0.5}, {"success": 0.7500001}])
    assert out["differences"] == [{"iteration": 2, "key": "success", "baseline": 0.75, "current": 0.7500001}]


@pytest.mark.slow
def test_lag_zero_reproduces_the_lock_step_iterations_of_the_code_before_pipelining(tiny_model_dir, tmp_path):
    """The real check: each checkout's run in a fresh process; every non-timing number equal bit for bit."""
    if subprocess.run(["git", "cat-file", "-e", f"{BASELINE}^{{commit}}"], cwd=ROOT, capture_output=True,
                      check=False).returncode != 0:
        pytest.skip(f"this clone lacks the baseline commit {BASELINE} (a shallow clone?)")
    baseline_tree = tmp_path / "baseline"
    baseline_tree.mkdir()
    archive = subprocess.run(["git", "archive", BASELINE], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(baseline_tree)], input=archive.stdout, check=True)
    with_the_one_chooser(baseline_tree, run_values(tiny_model_dir, tmp_path)["seed"])
    runs = {}
    for label, checkout in (("baseline", baseline_tree), ("current", ROOT)):
        folder = tmp_path / f"run_{label}"
        folder.mkdir()
        values = run_values(tiny_model_dir, folder, run_dir=str(folder), threads=1)
        runs[label] = run_checkout(checkout, values, folder, 3)
    report = compare(runs["baseline"], runs["current"])
    assert report["differences"] == [] and report["values_compared"] >= 90
    assert "sampling/policy_lag_max" in report["keys_only_in_current"]  # the baseline really ran the old code
