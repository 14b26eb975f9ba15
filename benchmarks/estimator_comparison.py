"""Issue 57's pre-registered comparison of the step-credit estimators (GRPO, GiGPO w/std, ECPO and its ablations,
PGPO, HGPO, GraphGPO, PACE), one protocol for all: ``benchmarks/estimator_comparison.yaml``, committed before the
runs it covers. Each testbed's runs are the credit study's (``credit_study_protocol.train_run``: a native trainer
run of the tabular policy); each arm is compared with GiGPO w/std on the endpoint, paired by seed, Holm over the
testbed's comparisons, with the exact-power MDE beside every null (``benchmarks.stats``).

    python -m benchmarks.estimator_comparison pilot      # the pilot: its seeds (1000-1004) size the study
    python -m benchmarks.estimator_comparison run        # the confirmatory runs (the protocol's seed count)
    python -m benchmarks.estimator_comparison report --from-json benchmarks/results/estimator_comparison.json

Outputs: ``benchmarks/results/estimator_comparison_pilot.json`` (the pilot's runs and the seed count it gives),
``raw/estimator_comparison/runs.jsonl`` (each confirmatory run as it finishes; a rerun resumes from it),
``estimator_comparison.json`` and ``.md`` (one row per estimator, one column per testbed: interval and verdict).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks import RESULTS
from benchmarks.credit_study import run_study
from benchmarks.stats import apply_holm, fmt_part, mde, paired_diff, paired_values, seeds_for_mde
from ecpo_train.evaluation.options import error_line
from ecpo_train.files.atomic import write_text
from ecpo_train.runtime.config_values import read_yaml

if TYPE_CHECKING:
    from benchmarks.alfworld_text import Testbed

PROTOCOL = Path(__file__).with_name("estimator_comparison.yaml")
PILOT_JSON, RESULT_JSON = RESULTS / "estimator_comparison_pilot.json", RESULTS / "estimator_comparison.json"
RAW_RUNS = RESULTS / "raw" / "estimator_comparison" / "runs.jsonl"  # one finished run a line, kept as it finishes
NOT_RUN = "registered, not run yet"  # a testbed's cell before its column is read (and where it names no status)


def load_protocol(path: Path = PROTOCOL) -> dict[str, Any]:
    return read_yaml(path.read_text())


def runnable(protocol: dict[str, Any]) -> list[dict[str, Any]]:
    """The testbeds the credit study's runner trains (a testbed with a ``status`` is not run on the CPU; one with a
    ``program`` is run by that program: :func:`run_program_testbed`)."""
    return [t for t in protocol["testbeds"] if "status" not in t and "program" not in t]


def testbed(protocol: dict[str, Any], name: str) -> dict[str, Any]:
    found = [t for t in protocol["testbeds"] if t["name"] == name]
    if not found:
        raise ValueError(f"the protocol has no testbed {name!r}: {[t['name'] for t in protocol['testbeds']]}")
    return found[0]


def study_protocol(protocol: dict[str, Any], seeds: int, offset: int) -> dict[str, Any]:
    """The credit study's protocol for these arms, testbeds and seeds (its runner trains every cell)."""
    return {"methods": list(protocol["arms"]), "group_sizes": [int(protocol["group_size"])], "seeds": seeds,
            "seed_offset": offset, "credit": dict(protocol["credit"]), "optim": dict(protocol["optim"]),
            "envs": runnable(protocol), "rollout_temperature": protocol["rollout_temperature"],
            "eval_temperature": protocol["eval_temperature"], "workers": protocol["workers"], "quick": False}


KEPT = ("env_name", "method", "group_size", "seed", "final_success", "seconds", "iterations", "cpu")


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
    for bed in runnable(protocol):
        for arm in arms:
            _, diffs = paired_values(cells[(bed["name"], arm)], cells[(bed["name"], reference)])
            sds[f"{bed['name']}|{arm}"] = float(np.std(diffs, ddof=1))
    return seed_count_rule(sds, protocol)


def seed_count_rule(sds: dict[str, float], protocol: dict[str, Any]) -> dict[str, Any]:
    """The registered rule on the pilot's SDs of (arm - reference): the fewest seeds whose exact-power MDE at level
    alpha / m (m = the testbed's comparisons) is at most the target for the largest SD; at least 10."""
    largest = max(sds.values())
    alpha = protocol["alpha"] / (len(protocol["arms"]) - 1)
    seeds = max(10, seeds_for_mde(largest, protocol["mde_target"], alpha, protocol["power"]))
    return {"sd": sds, "largest_sd": largest, "alpha_per_comparison": alpha, "seeds": seeds,
            "mde_at_seeds": mde(largest / np.sqrt(seeds), seeds - 1, alpha, protocol["power"])}


def program_testbeds(protocol: dict[str, Any]) -> list[str]:
    """The testbeds a program runs (``run --testbed``, ``pilot-seeds --testbed``, ``--program-out``)."""
    return [t["name"] for t in protocol["testbeds"] if "program" in t]


def pilot_json(name: str) -> Path:
    """Where a program testbed's pilot seed count is written."""
    return RESULTS / f"estimator_comparison_{name}_pilot.json"


def program_pilot_seed_count(protocol: dict[str, Any], name: str, root: Path = RESULTS.parent.parent) -> dict[str, Any]:
    """A program testbed's seed count from its pilot (a ``benchmarks.alfworld_text report`` JSON: each arm's
    per-seed success on the endpoint's games; for the real-ALFWorld column, the registered ``alfworld_text``
    study): the SD of (arm - reference) for each arm the pilot ran, then :func:`seed_count_rule`."""
    bed = testbed(protocol, name)
    if "pilot" not in bed:
        raise ValueError(f"testbed {name} names no pilot results (its `pilot: {{results: ...}}`)")
    results = root / bed["pilot"]["results"]
    if not results.is_file():
        raise ValueError(f"no pilot results at {bed['pilot']['results']}: run `python -m benchmarks.alfworld_text run "
                         f"--testbed {name} --out DIR` and its `report --testbed {name} --out DIR --json "
                         f"{bed['pilot']['results']}` first")
    pilot = json.loads(results.read_text())
    success = {arm: {int(s): float(v["by_type"]["All"]) for s, v in part["seeds"].items()}
               for arm, part in pilot["arms"].items()}
    reference = protocol["reference"]
    sds = {}
    for arm, values in success.items():
        if arm != reference:
            _, diffs = paired_values(values, success[reference], label=f"pilot {arm}")
            sds[f"{name}|{arm}"] = float(np.std(diffs, ddof=1))
    return seed_count_rule(sds, protocol) | {"pilot_arms": sorted(success), "pilot_seeds": sorted(success[reference])}


def program_seeds(bed: dict[str, Any]) -> list[int]:
    if not bed.get("seeds"):
        raise ValueError(f"testbed {bed['name']} has no seed count yet: run pilot-seeds --testbed {bed['name']} and "
                         "commit the count first")
    return [int(bed["seed_offset"]) + 1 + i for i in range(int(bed["seeds"]))]


def program_testbed(protocol: dict[str, Any], name: str) -> tuple[dict[str, Any], Testbed]:
    """A program testbed's protocol entry and the program's ``Testbed`` of the same name (its preset, manifest,
    warm start and results folder)."""
    from benchmarks import alfworld_text

    bed = testbed(protocol, name)
    if bed.get("program") != "benchmarks.alfworld_text":
        raise ValueError(f"testbed {name!r} is not run by a program")
    return bed, alfworld_text.testbed_named(name)


def run_program_testbed(protocol: dict[str, Any], name: str, out: Path, jobs: int, keep: Path | None = None) -> None:
    """Train and evaluate every (arm, seed) of a program testbed, seed-major, resuming what ``out`` holds (and, with
    ``keep``, what that committed folder holds: ``alfworld_text.run``)."""
    from benchmarks import alfworld_text

    bed, played = program_testbed(protocol, name)
    alfworld_text.run(out, jobs, int(bed["iterations"]), list(protocol["arms"]), program_seeds(bed), played, keep)


def program_runs(protocol: dict[str, Any], name: str, out: Path) -> list[dict[str, Any]]:
    """The runs of a program testbed in the credit study's shape (``env_name, method, seed, final_success``): each
    (arm, seed) whose evaluation covers every game the warm start's does."""
    from benchmarks import alfworld_text
    from benchmarks.study_keep import machine_of

    bed, played = program_testbed(protocol, name)
    games = len(alfworld_text.outcomes(out, alfworld_text.WARM, played))
    runs = []
    for seed in program_seeds(bed):
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


def compare(runs: list[dict[str, Any]], protocol: dict[str, Any]) -> dict[str, Any]:
    """Per testbed, each arm minus the reference on the endpoint, paired by seed; Holm over the testbed's arms.
    A cell's verdict: *better* / *worse* than GiGPO w/std where Holm rejects 0 on that side, else *no difference
    shown* with its MDE."""
    cells = _cells(runs, protocol["endpoint"])
    reference = protocol["reference"]
    table: dict[str, dict[str, Any]] = {}
    for bed_name in dict.fromkeys(r["env_name"] for r in runs):  # (in the runs' order: the same JSON every time)
        parts = []
        for arm in protocol["arms"]:
            if arm == reference:
                continue
            seeds, diffs = paired_values(cells[(bed_name, arm)], cells[(bed_name, reference)], label=f"{bed_name} {arm}")
            parts.append({"arm": arm, "seeds": seeds, **paired_diff(list(diffs))})
        apply_holm(parts, [1] * len(parts))
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
    mixed, by_cpu = [], {}
    for seed, names in sorted(cpus.items()):
        if len(names) > 1:
            mixed.append(seed)
        else:
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
    for arm in protocol["arms"]:
        row = []
        for bed_name in bed_names:
            part = table.get(arm, {}).get(bed_name)
            status = next((t.get("status") for t in protocol["testbeds"] if t["name"] == bed_name), None)
            if part is None:
                row.append(status if status and status.startswith("not run") else f"not run: {status}" if status
                           else NOT_RUN)
            elif part.get("reference"):
                row.append(f"reference (mean {part['mean']:.3f})")
            else:
                row.append(f"{fmt_part(part)}: {part['verdict']} (mean {part['mean']:.3f})")
        lines.append(f"| {arm} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


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


def finished_runs(path: Path, protocol: dict[str, Any], programs: list[str]) -> tuple[list[dict[str, Any]], float]:
    """``--from-json``'s runs of the testbeds this program trains, and its runtime, or a ``ValueError`` when the
    file is missing, is not a study's JSON, or lacks a run of the protocol (a (testbed, arm, seed) cell)."""
    label = f"--from-json {str(path)[:200]}"
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{label}: no such file") from None
    except IsADirectoryError:
        raise ValueError(f"{label} is a folder: give the study's JSON") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"{label} is not JSON ({type(err).__name__}): give the study's JSON") from None
    runtime = payload.get("runtime_s") if isinstance(payload, dict) else None
    runs = payload.get("runs") if isinstance(payload, dict) else None
    if not isinstance(runtime, (int, float)) or isinstance(runtime, bool) or not isinstance(runs, list):
        raise ValueError(f"{label} is not a study's JSON (an object with 'runs' and 'runtime_s')")  # noqa: TRY004
    for number, run in enumerate(runs):
        if not (isinstance(run, dict) and isinstance(run.get("env_name"), str) and isinstance(run.get("method"), str)
                and isinstance(run.get("seed"), int) and isinstance(run.get(protocol["endpoint"]), (int, float))):
            raise ValueError(f"{label}: run {number} is not a run (env_name, method, seed, {protocol['endpoint']})")  # noqa: TRY004
    kept = [r for r in runs if r["env_name"] not in programs]
    have = {(r["env_name"], r["method"], r["seed"]) for r in kept}
    offset = int(protocol.get("seed_offset") or 0)
    seeds = range(offset, offset + int(protocol.get("seeds") or 0))
    for bed in runnable(protocol):
        for seed in seeds:
            for arm in protocol["arms"]:
                if (bed["name"], arm, seed) not in have:
                    raise ValueError(f"{label} lacks the run of {arm} seed {seed} on {bed['name']}: it is not the "
                                     "finished study's JSON")
    return kept, float(runtime)


def program_out(value: str) -> tuple[str, Path]:
    """``--program-out TESTBED=DIR``, split (the testbed is checked against the protocol's in ``main``)."""
    name, sep, folder = value.partition("=")
    if not sep or not name or not folder:
        raise ValueError(f"--program-out {value!r}: give TESTBED=DIR, e.g. households=runs/households-study")
    return name, Path(folder)


# The options each stage reads: any other given is refused in one line (benchmarks.study).
STAGE_OPTIONS = {"pilot": ("workers",), "pilot-seeds": ("testbed",),
                 "run": ("testbed", "out", "jobs", "keep", "workers", "alfworld_out", "program_out"),
                 "report": ("from_json", "alfworld_out", "program_out")}


def main(argv: list[str] | None = None) -> int:
    from benchmarks.study import StudyCommand

    protocol = load_protocol()
    programs = program_testbeds(protocol)
    command = StudyCommand(__spec__.name, __doc__.split("\n\n")[0], STAGE_OPTIONS,
                           "pilot: the corridor's pilot and the seed count it gives; pilot-seeds: a program testbed's "
                           "seed count from its pilot; run: the confirmatory runs (resumable), then the report; report: "
                           "the report again from a finished study's JSON", {"jobs": 1, "program_out": []})
    command.add("--testbed", help=f"pilot-seeds, run: a program testbed ({', '.join(programs)}); run without it: the "
                                  "tabular testbeds")
    command.add("--out", type=Path, help="run --testbed: the program testbed's study folder")
    command.add("--jobs", type=int, help="run --testbed: runs at a time (default 1)")
    command.add("--keep", type=Path, help="run --testbed: a folder committed to git that keeps each finished job (its "
                                          "evaluation's episode log, its curve, the warm start) and restores them into "
                                          "--out first, so a study longer than a session resumes on a fresh machine")
    command.add("--alfworld-out", type=Path, help="run, report: add the alfworld_text column from this study folder")
    command.add("--program-out", action="append", metavar="TESTBED=DIR",
                help=f"run, report: add a program testbed's column ({', '.join(programs)}) from its study folder; "
                     "repeatable (--alfworld-out DIR is --program-out alfworld_text=DIR); with report, a program "
                     "testbed's column comes from its folder only")
    command.add("--from-json", type=Path, help="report: the finished study's JSON to re-analyse")
    command.add("--workers", type=int, help="pilot, run: processes of the tabular runs")
    args = command.parse(argv)
    if args is None:
        return 2
    parser = command.parser
    if args.jobs < 1:
        parser.error("--jobs must be >= 1")
    if args.testbed is not None and args.testbed not in programs:
        parser.error(f"--testbed {args.testbed[:80]!r} is not a program testbed of the protocol ({programs})")
    if args.keep is not None and args.testbed is None:
        parser.error("--keep goes with run --testbed")
    outs = {"alfworld_text": args.alfworld_out} if args.alfworld_out is not None else {}
    for value in args.program_out:
        try:
            name, folder = program_out(value)
        except ValueError as err:
            parser.error(str(err))
        if name not in programs:
            parser.error(f"--program-out {value!r}: {name!r} is not a program testbed of the protocol ({programs})")
        if name in outs:
            parser.error(f"--program-out: testbed {name} is given twice")
        outs[name] = folder
    if args.stage == "pilot-seeds" and args.testbed is None:
        parser.error("pilot-seeds needs --testbed")
    if args.stage == "report" and args.from_json is None:
        parser.error("report needs --from-json (run writes the report after its runs)")
    started = time.perf_counter()
    try:  # every input checked before any work: the columns' folders and the JSON re-analysed
        columns = [] if args.stage in ("pilot", "pilot-seeds") or args.testbed else \
            [run for name, folder in outs.items() for run in program_column(protocol, name, folder)]
        if args.from_json is not None:
            runs, runtime = finished_runs(args.from_json, protocol, programs)
    except (RuntimeError, ValueError, OSError) as err:
        print(f"error: {error_line(err)}", file=sys.stderr)
        return 2
    try:
        if args.stage == "pilot-seeds":
            count = program_pilot_seed_count(protocol, args.testbed)
            written = pilot_json(args.testbed)
            write_text(written, json.dumps(count, indent=1) + "\n")
            print(f"{args.testbed} pilot: largest SD {count['largest_sd']:.3f} -> {count['seeds']} seeds "
                  f"(MDE {count['mde_at_seeds']:.3f}); wrote {written}")
            return 0
        if args.testbed:
            if args.out is None:
                parser.error("run --testbed needs --out")
            run_program_testbed(protocol, args.testbed, args.out, args.jobs, args.keep)
            return 0
    except (RuntimeError, ValueError, OSError) as err:
        print(f"error: {error_line(err)}", file=sys.stderr)
        return 2
    if args.stage == "pilot":
        runs = run_study(study_protocol(protocol, protocol["pilot"]["seeds"], protocol["pilot"]["seed_offset"]),
                         workers=args.workers)
        count = pilot_seed_count(runs, protocol)
        write_text(PILOT_JSON, json.dumps({"protocol": protocol, "seed_count": count, "runs": runs,
                                           "runtime_s": time.perf_counter() - started}, separators=(",", ":")))
        print(f"pilot: largest SD {count['largest_sd']:.3f} -> {count['seeds']} seeds (MDE {count['mde_at_seeds']:.3f})")
        return 0
    if args.stage == "run":
        if not protocol.get("seeds"):
            print("error: the protocol has no seed count yet: run the pilot and commit the count first", file=sys.stderr)
            return 2
        done = [json.loads(line) for line in RAW_RUNS.read_text().splitlines()] if RAW_RUNS.is_file() else []
        RAW_RUNS.parent.mkdir(parents=True, exist_ok=True)
        with RAW_RUNS.open("a") as raw:  # every finished run at once: an interrupted study resumes from it
            runs = run_study(study_protocol(protocol, protocol["seeds"], protocol["seed_offset"]), workers=args.workers,
                             done=done, on_run=lambda run: (raw.write(json.dumps(slim(run)) + "\n"), raw.flush()))
        runtime = time.perf_counter() - started + sum(float(r.get("seconds", 0.0)) for r in done) / 2
    runs += columns
    table = compare(runs, protocol)
    runs = [{key: run[key] for key in KEPT if key in run} for run in runs]  # the curves stay in RAW_RUNS
    write_text(RESULT_JSON, json.dumps({"protocol": protocol, "table": table, "runs": runs, "runtime_s": runtime},
                                       separators=(",", ":"), allow_nan=True))
    write_text(RESULT_JSON.with_suffix(".md"), render(table, protocol, runs, runtime))
    print(f"wrote {RESULT_JSON} and {RESULT_JSON.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
