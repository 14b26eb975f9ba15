"""Issue 57's pre-registered comparison of the step-credit estimators (GRPO, GiGPO w/std, ECPO and its ablations,
PGPO, HGPO, GraphGPO, PACE), one protocol for all: ``benchmarks/estimator_comparison.yaml``, committed before the
runs it covers. Each testbed's runs are the credit study's (``credit_study_protocol.train_run``: a native trainer
run of the tabular policy); each arm is compared with GiGPO w/std on the endpoint, paired by seed, Holm over the
testbed's comparisons, with the exact-power MDE beside every null (``benchmarks.stats``).

    python -m benchmarks.estimator_comparison --pilot      # the pilot: its seeds (1000-1004) size the study
    python -m benchmarks.estimator_comparison              # the confirmatory runs (the protocol's seed count)
    python -m benchmarks.estimator_comparison --from-json benchmarks/results/estimator_comparison.json

Outputs: ``benchmarks/results/estimator_comparison_pilot.json`` (the pilot's runs and the seed count it gives),
``raw/estimator_comparison/runs.jsonl`` (each confirmatory run as it finishes; a rerun resumes from it),
``estimator_comparison.json`` and ``.md`` (one row per estimator, one column per testbed: interval and verdict).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import RESULTS, ArgumentParser
from benchmarks.credit_study import run_study
from benchmarks.stats import apply_holm, fmt_part, mde, paired_diff, paired_values, seeds_for_mde
from ecpo_train.policies.atomic import write_text
from ecpo_train.runtime.config_values import read_yaml

PROTOCOL = Path(__file__).with_name("estimator_comparison.yaml")
PILOT_JSON, RESULT_JSON = RESULTS / "estimator_comparison_pilot.json", RESULTS / "estimator_comparison.json"
RAW_RUNS = RESULTS / "raw" / "estimator_comparison" / "runs.jsonl"  # one finished run a line, kept as it finishes


def load_protocol(path: Path = PROTOCOL) -> dict[str, Any]:
    return read_yaml(path.read_text())


def runnable(protocol: dict[str, Any]) -> list[dict[str, Any]]:
    """The testbeds this program runs (a testbed with a ``status`` is someone else's, or not run on the CPU)."""
    return [t for t in protocol["testbeds"] if "status" not in t]


def study_protocol(protocol: dict[str, Any], seeds: int, offset: int) -> dict[str, Any]:
    """The credit study's protocol for these arms, testbeds and seeds (its runner trains every cell)."""
    return {"methods": list(protocol["arms"]), "group_sizes": [int(protocol["group_size"])], "seeds": seeds,
            "seed_offset": offset, "credit": dict(protocol["credit"]), "optim": dict(protocol["optim"]),
            "envs": runnable(protocol), "rollout_temperature": protocol["rollout_temperature"],
            "eval_temperature": protocol["eval_temperature"], "workers": protocol["workers"], "quick": False}


KEPT = ("env_name", "method", "group_size", "seed", "final_success", "seconds", "iterations")


def slim(run: dict[str, Any]) -> dict[str, Any]:
    """What a run keeps on disk: its cell, endpoint and time, and its validation curve (the rest of the credit
    study's curves would make 846 runs some 10 MB)."""
    return {key: run[key] for key in KEPT if key in run} | {"eval_success": run["curves"]["eval_success"]}


def _cells(runs: list[dict[str, Any]], endpoint: str) -> dict[tuple[str, str], dict[Any, float]]:
    cells: dict[tuple[str, str], dict[Any, float]] = {}
    for run in runs:
        cells.setdefault((run["env_name"], run["method"]), {})[run["seed"]] = float(run[endpoint])
    return cells


def pilot_seed_count(runs: list[dict[str, Any]], protocol: dict[str, Any]) -> dict[str, Any]:
    """The registered rule: the largest pilot SD of (arm - reference) on the endpoint, and the fewest seeds whose
    exact-power MDE at level alpha / m (m = the testbed's comparisons) is at most the target; at least 10."""
    cells = _cells(runs, protocol["endpoint"])
    reference, arms = protocol["reference"], [a for a in protocol["arms"] if a != protocol["reference"]]
    sds = {}
    for testbed in runnable(protocol):
        for arm in arms:
            _, diffs = paired_values(cells[(testbed["name"], arm)], cells[(testbed["name"], reference)])
            sds[f"{testbed['name']}|{arm}"] = float(np.std(diffs, ddof=1))
    largest = max(sds.values())
    alpha = protocol["alpha"] / len(arms)
    seeds = max(10, seeds_for_mde(largest, protocol["mde_target"], alpha, protocol["power"]))
    return {"sd": sds, "largest_sd": largest, "alpha_per_comparison": alpha, "seeds": seeds,
            "mde_at_seeds": mde(largest / np.sqrt(seeds), seeds - 1, alpha, protocol["power"])}


def compare(runs: list[dict[str, Any]], protocol: dict[str, Any]) -> dict[str, Any]:
    """Per testbed, each arm minus the reference on the endpoint, paired by seed; Holm over the testbed's arms.
    A cell's verdict: *better* / *worse* than GiGPO w/std where Holm rejects 0 on that side, else *no difference
    shown* with its MDE."""
    cells = _cells(runs, protocol["endpoint"])
    reference = protocol["reference"]
    table: dict[str, dict[str, Any]] = {}
    for testbed in {r["env_name"] for r in runs}:
        parts = []
        for arm in protocol["arms"]:
            if arm == reference:
                continue
            seeds, diffs = paired_values(cells[(testbed, arm)], cells[(testbed, reference)], label=f"{testbed} {arm}")
            parts.append({"arm": arm, "seeds": seeds, **paired_diff(list(diffs))})
        apply_holm(parts, [1] * len(parts))
        for part in parts:
            significant = part["holm_significant"]
            part["verdict"] = ("better" if part["diff"] > 0 else "worse") if significant else "no difference shown"
            table.setdefault(part["arm"], {})[testbed] = part
        means = {arm: float(np.mean(list(cells[(testbed, arm)].values()))) for arm in protocol["arms"]}
        table.setdefault(reference, {})[testbed] = {"arm": reference, "reference": True, "mean": means[reference]}
        for arm in protocol["arms"]:
            table[arm][testbed]["mean"] = means[arm]
    return table


def render(table: dict[str, Any], protocol: dict[str, Any], seeds: int, runtime: float) -> str:
    testbeds = [t["name"] for t in protocol["testbeds"]]
    lines = ["# Step-credit estimators under one protocol (issue 57)", "",
             (f"Protocol: `benchmarks/estimator_comparison.yaml` (committed before the runs). {seeds} seeds per arm, "
              f"N = {protocol['group_size']}, endpoint {protocol['endpoint']}; each cell is the arm minus GiGPO w/std, "
              "paired by seed (95 % t-interval), Holm over the testbed's 8 comparisons, the exact-power MDE beside a "
              f"null. {runtime / 60:.0f} min on 2 CPU cores. `python -m benchmarks.estimator_comparison`."), "",
             "| estimator | " + " | ".join(testbeds) + " |", "| --- |" + " --- |" * len(testbeds)]
    for arm in protocol["arms"]:
        row = []
        for testbed in testbeds:
            part = table.get(arm, {}).get(testbed)
            status = next((t.get("status") for t in protocol["testbeds"] if t["name"] == testbed), None)
            if part is None:
                row.append(status if status and status.startswith("not run") else f"not run: {status}" if status else "not run")
            elif part.get("reference"):
                row.append(f"reference (mean {part['mean']:.3f})")
            else:
                row.append(f"{fmt_part(part)}: {part['verdict']} (mean {part['mean']:.3f})")
        lines.append(f"| {arm} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(__spec__.name, description=__doc__.split("\n\n")[0])
    parser.add_argument("--pilot", action="store_true", help="run the pilot and print the seed count it gives")
    parser.add_argument("--from-json", type=Path, default=None, help="re-analyse a finished study's JSON")
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args(argv)
    protocol = load_protocol()
    started = time.perf_counter()
    if args.pilot:
        runs = run_study(study_protocol(protocol, protocol["pilot"]["seeds"], protocol["pilot"]["seed_offset"]),
                         workers=args.workers)
        count = pilot_seed_count(runs, protocol)
        write_text(PILOT_JSON, json.dumps({"protocol": protocol, "seed_count": count, "runs": runs,
                                           "runtime_s": time.perf_counter() - started}, separators=(",", ":")))
        print(f"pilot: largest SD {count['largest_sd']:.3f} -> {count['seeds']} seeds (MDE {count['mde_at_seeds']:.3f})")
        return 0
    if args.from_json is not None:
        payload = json.loads(args.from_json.read_text())
        runs, runtime = payload["runs"], payload["runtime_s"]
    else:
        if not protocol.get("seeds"):
            print("error: the protocol has no seed count yet: run --pilot and commit the count first")
            return 2
        done = [json.loads(line) for line in RAW_RUNS.read_text().splitlines()] if RAW_RUNS.is_file() else []
        RAW_RUNS.parent.mkdir(parents=True, exist_ok=True)
        with RAW_RUNS.open("a") as raw:  # every finished run at once: an interrupted study resumes from it
            runs = run_study(study_protocol(protocol, protocol["seeds"], protocol["seed_offset"]), workers=args.workers,
                             done=done, on_run=lambda run: (raw.write(json.dumps(slim(run)) + "\n"), raw.flush()))
        runtime = time.perf_counter() - started + sum(float(r.get("seconds", 0.0)) for r in done) / 2
    table = compare(runs, protocol)
    runs = [{key: run[key] for key in KEPT if key in run} for run in runs]  # the curves stay in RAW_RUNS
    write_text(RESULT_JSON, json.dumps({"protocol": protocol, "table": table, "runs": runs, "runtime_s": runtime},
                                       separators=(",", ":"), allow_nan=True))
    write_text(RESULT_JSON.with_suffix(".md"), render(table, protocol, int(protocol["seeds"]), runtime))
    print(f"wrote {RESULT_JSON} and {RESULT_JSON.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
