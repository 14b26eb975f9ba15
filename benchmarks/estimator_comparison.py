"""Issue 57's pre-registered comparison of the step-credit estimators (GRPO, GiGPO w/std, ECPO and its ablations,
PGPO, HGPO, GraphGPO, PACE) under one protocol, ``benchmarks/estimator_comparison.yaml``, committed before its runs:
the corridor's by the credit study's runner, a testbed with a ``program`` by ``benchmarks.alfworld_text``.

    python -m benchmarks.estimator_comparison report --from-json benchmarks/results/estimator_comparison.json \
        [--program-out alfworld_text=DIR] [--program-out households=DIR]

writes ``estimator_comparison.json`` and ``.md`` again from the finished study's runs. Every column is read:
the stages that ran them (``run``, ``run --testbed``) and the pilots are retired (docs/benchmarks.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import RESULTS
from benchmarks.stats import apply_holm, fmt_part, paired_diff, paired_values
from benchmarks.study import StudyCommand, read_protocol, run_stage
from benchmarks.study_keep import units_spanning_machines
from ecpo_train.files.atomic import write_text

PROTOCOL = Path(__file__).with_name("estimator_comparison.yaml")
RESULT_JSON = RESULTS / "estimator_comparison.json"
NOT_RUN = "registered, not run yet"  # a testbed's cell before its column is read
KEPT = ("env_name", "method", "group_size", "seed", "final_success", "seconds", "iterations", "cpu")


def load_protocol(path: Path = PROTOCOL) -> dict[str, Any]:
    return read_protocol(path)


def runnable(protocol: dict[str, Any]) -> list[dict[str, Any]]:
    """The testbeds the credit study's runner trains (one with a ``program`` is run by that program)."""
    return [t for t in protocol["testbeds"] if "program" not in t]


def program_testbeds(protocol: dict[str, Any]) -> list[str]:
    """The testbeds a program runs (``run --testbed``, ``--program-out``)."""
    return [t["name"] for t in protocol["testbeds"] if "program" in t]


def testbed(protocol: dict[str, Any], name: str) -> dict[str, Any]:
    found = [t for t in protocol["testbeds"] if t["name"] == name]
    if not found:
        raise ValueError(f"the protocol has no testbed {name!r}: {[t['name'] for t in protocol['testbeds']]}")
    return found[0]


def program_seeds(bed: dict[str, Any]) -> list[int]:
    return [int(bed["seed_offset"]) + 1 + i for i in range(int(bed["seeds"]))]


def program_runs(protocol: dict[str, Any], name: str, out: Path) -> list[dict[str, Any]]:
    """The runs of a program testbed in the credit study's shape (``env_name, method, seed, final_success``): each
    (arm, seed) whose evaluation covers every game the warm start's does."""
    from benchmarks import alfworld_text
    from benchmarks.study_keep import machine_of

    played = alfworld_text.testbed_named(name)  # (the program of every program testbed; any other name refused)
    games = len(alfworld_text.outcomes(out, alfworld_text.WARM, played))
    runs = []
    for seed in program_seeds(testbed(protocol, name)):
        for arm in protocol["arms"]:
            try:
                after = alfworld_text.outcomes(out, f"{arm}-s{seed}", played)
            except (OSError, ValueError):
                continue
            if games and len(after) == games:
                runs.append({"env_name": name, "method": arm, "group_size": int(protocol["group_size"]),
                             "seed": seed, "final_success": alfworld_text.by_type(after)["All"],
                             "cpu": machine_of(out, f"{arm}-s{seed}", played)})
    return runs


def program_column(protocol: dict[str, Any], name: str, folder: Path) -> list[dict[str, Any]]:
    """The runs of a program testbed's column from its study folder (``--program-out``), or a ``ValueError`` when
    the folder is missing or any (arm, seed) of the protocol lacks an evaluation of every game: a column is read
    once, whole, never as "not run" or with a seed silently left out."""
    label = f"--program-out {name}={str(folder)[:200]}"
    if not folder.is_dir():
        raise ValueError(f"{label}: no such folder (restore the kept jobs into it first: python -m "
                         f"benchmarks.alfworld_text restore --testbed {name} --keep DIR --out {str(folder)[:200]})")
    runs = program_runs(protocol, name, folder)
    wanted = [(arm, seed) for seed in program_seeds(testbed(protocol, name)) for arm in protocol["arms"]]
    missing = [job for job in wanted if job not in {(r["method"], r["seed"]) for r in runs}]
    if missing:
        raise ValueError(f"{label}: {len(missing)} of the {len(wanted)} runs have no evaluation of every game "
                         f"(first: {missing[0][0]}-s{missing[0][1]}): the column is read when all are finished")
    return runs


def compare(runs: list[dict[str, Any]], protocol: dict[str, Any]) -> dict[str, Any]:
    """Per testbed, each arm minus the reference on the endpoint, paired by seed, Holm over the testbed's arms: *better*
    / *worse* where Holm rejects 0 on that side, else *no difference shown*."""
    cells: dict[tuple[str, str], dict[Any, float]] = {}
    for run in runs:
        cells.setdefault((run["env_name"], run["method"]), {})[run["seed"]] = float(run[protocol["endpoint"]])
    reference = protocol["reference"]
    table: dict[str, dict[str, Any]] = {}
    for bed_name in dict.fromkeys(r["env_name"] for r in runs):  # (in the runs' order: the same JSON every time)
        parts = []
        for arm in protocol["arms"]:
            if arm == reference:
                continue
            seeds, diffs = paired_values(cells[(bed_name, arm)], cells[(bed_name, reference)], label=f"{bed_name} {arm}")
            parts.append({"arm": arm, "seeds": seeds, **paired_diff(list(diffs))})
        apply_holm(parts)
        for part in parts:
            significant = part["holm_significant"]
            part["verdict"] = ("better" if part["diff"] > 0 else "worse") if significant else "no difference shown"
            table.setdefault(part["arm"], {})[bed_name] = part
        means = {arm: float(np.mean(list(cells[(bed_name, arm)].values()))) for arm in protocol["arms"]}
        table.setdefault(reference, {})[bed_name] = {"arm": reference, "reference": True, "mean": means[reference]}
        for arm in protocol["arms"]:
            table[arm][bed_name]["mean"] = means[arm]
    return table


def _seed_span(seeds: list[int]) -> str:
    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    run = seeds == list(range(seeds[0], seeds[-1] + 1))
    return f"seeds {seeds[0]}-{seeds[-1]}" if run else "seeds " + ", ".join(map(str, seeds))


def machines_line(runs: list[dict[str, Any]], bed_name: str) -> str | None:
    """Which CPUs a testbed's runs were played on (where recorded): the seed is the pairing unit, so each seed's arms
    on one machine is what the paired comparison needs; a seed whose arms span machines is named."""
    cpus: dict[int, set[str]] = {}
    for run in runs:
        if run["env_name"] == bed_name and run.get("cpu"):
            cpus.setdefault(int(run["seed"]), set()).add(run["cpu"])
    if not cpus:
        return None
    mixed, by_cpu = units_spanning_machines(cpus), {}
    for seed, names in sorted(cpus.items()):
        if seed not in mixed:
            by_cpu.setdefault(next(iter(names)), []).append(seed)
    text = "; ".join(f"{cpu} ({_seed_span(seeds)})" for cpu, seeds in by_cpu.items())
    tail = (f"; the arms of seeds {', '.join(map(str, mixed))} span machines" if mixed
            else "; every seed's arms on one machine")
    return f"{bed_name} was played on {text}{tail}."


def machines_text(runs: list[dict[str, Any]], bed_names: list[str]) -> str:
    """Every testbed's machines line (``machines_line``) in testbed order, one paragraph; empty where none recorded."""
    return " ".join(line for name in bed_names if (line := machines_line(runs, name)))


def render(table: dict[str, Any], protocol: dict[str, Any], runs: list[dict[str, Any]], runtime: float) -> str:
    bed_names = [t["name"] for t in protocol["testbeds"]]
    seeds = "; ".join(f"{name}: {len({r['seed'] for r in runs if r['env_name'] == name})} seeds per arm"
                      for name in bed_names if any(r["env_name"] == name for r in runs))
    lines = ["# Step-credit estimators under one protocol (issue 57)", "",
             (f"Protocol: `benchmarks/estimator_comparison.yaml` (committed before the runs). {seeds}; "
              f"N = {protocol['group_size']}, endpoint {protocol['endpoint']}; each cell is the arm minus GiGPO w/std, "
              "paired by seed (95 % t-interval), Holm over the testbed's 8 comparisons, the exact-power MDE beside a "
              f"null. {runtime / 60:.0f} min on 2 CPU cores (the corridor). `python -m benchmarks.estimator_comparison`."), ""]
    machines = machines_text(runs, bed_names)
    lines += [machines, ""] if machines else []
    lines += ["| estimator | " + " | ".join(bed_names) + " |", "| --- |" + " --- |" * len(bed_names)]
    said = lambda part: f"{fmt_part(part)}: {part['verdict']} (mean {part['mean']:.3f})"
    lines += [f"| {arm} | " + " | ".join(cell(table.get(arm, {}).get(name), said) for name in bed_names) + " |"
              for arm in protocol["arms"]]
    return "\n".join(lines) + "\n"


def cell(part: dict[str, Any] | None, said: Callable[[dict[str, Any]], str]) -> str:
    """A cell of the table (here and in the claims ledger): ``NOT_RUN`` without a result, the reference arm's mean,
    else the arm's result as ``said`` words it."""
    if part is None:
        return NOT_RUN
    return f"reference (mean {part['mean']:.3f})" if part.get("reference") else said(part)


def finished_runs(path: Path, protocol: dict[str, Any]) -> tuple[list[dict[str, Any]], float]:
    """``--from-json``'s runs of the testbeds this program trains, and its runtime, or a ``ValueError`` when the
    file is missing, is not a study's JSON, or lacks a run of the protocol (a (testbed, arm, seed) cell)."""
    label = f"--from-json {str(path)[:200]}"
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:  # (missing, a folder, not JSON, not UTF-8)
        raise ValueError(f"{label} is not a readable JSON file ({type(err).__name__}): give the study's JSON") from None
    runtime, runs = (payload.get("runtime_s"), payload.get("runs")) if isinstance(payload, dict) else (None, None)
    if not isinstance(runtime, (int, float)) or isinstance(runtime, bool) or not isinstance(runs, list):
        raise ValueError(f"{label} is not a study's JSON (an object with 'runs' and 'runtime_s')")  # noqa: TRY004
    endpoint = protocol["endpoint"]
    if not all(isinstance(r, dict) and isinstance(r.get("env_name"), str) and isinstance(r.get("method"), str)
               and isinstance(r.get("seed"), int) and isinstance(r.get(endpoint), (int, float)) for r in runs):
        raise ValueError(f"{label} holds an entry that is not a run (env_name, method, seed, {endpoint})")
    kept = [r for r in runs if r["env_name"] not in program_testbeds(protocol)]
    seeds = range(int(protocol["seed_offset"]), int(protocol["seed_offset"]) + int(protocol["seeds"]))
    missing = sorted({(bed["name"], arm, seed) for bed in runnable(protocol) for arm in protocol["arms"] for seed in seeds}
                     - {(r["env_name"], r["method"], r["seed"]) for r in kept})
    if missing:
        raise ValueError(f"{label} lacks {len(missing)} runs of the protocol (first: {missing[0][1]} seed "
                         f"{missing[0][2]} on {missing[0][0]}): it is not the finished study's JSON")
    return kept, float(runtime)


def write_comparison(protocol: dict[str, Any], runs: list[dict[str, Any]], runtime: float) -> None:
    table = compare(runs, protocol)
    runs = [{key: run[key] for key in KEPT if key in run} for run in runs]  # (a run's curve is not kept here)
    write_text(RESULT_JSON, json.dumps({"protocol": protocol, "table": table, "runs": runs, "runtime_s": runtime},
                                       separators=(",", ":"), allow_nan=True))
    write_text(RESULT_JSON.with_suffix(".md"), render(table, protocol, runs, runtime))
    print(f"wrote {RESULT_JSON} and {RESULT_JSON.with_suffix('.md')}")


def stage(protocol: dict[str, Any], args: Any) -> None:
    """Every input checked before any work, then the report: the finished study's runs (``--from-json``) with
    the program testbeds' columns (``--program-out``), compared and written."""
    programs = program_testbeds(protocol)
    outs: dict[str, Path] = {}
    for value in args.program_out:
        name, sep, folder = value.partition("=")
        if not sep or not name or not folder:
            raise ValueError(f"--program-out {value[:200]!r}: give TESTBED=DIR, e.g. households=runs/households-study")
        if name not in programs:
            raise ValueError(f"--program-out {value[:200]!r}: {name!r} is not a program testbed of the protocol "
                             f"({programs})")
        if name in outs:
            raise ValueError(f"--program-out: testbed {name} is given twice")
        outs[name] = Path(folder)
    if args.from_json is None:
        raise ValueError("report needs --from-json (the finished study's JSON)")
    columns = [run for name, folder in outs.items() for run in program_column(protocol, name, folder)]
    runs, runtime = finished_runs(args.from_json, protocol)
    write_comparison(protocol, runs + columns, runtime)


def main(argv: list[str] | None = None) -> int:
    protocol = load_protocol()
    programs = ", ".join(program_testbeds(protocol))
    command = StudyCommand(__spec__.name, __doc__.split("\n\n")[0], {"report": ("from_json", "program_out")},
                           "report: the report again from a finished study's JSON", {"program_out": []})
    command.add("--program-out", action="append", metavar="TESTBED=DIR",
                help=f"add a program testbed's column ({programs}) from its study folder; repeatable; a "
                     "program testbed's column comes from its folder only")
    command.add("--from-json", type=Path, help="the finished study's JSON to re-analyse")
    args = command.parse(argv)
    return run_stage(lambda: stage(protocol, args))


if __name__ == "__main__":
    raise SystemExit(main())
