"""Credit study (issue 9): do the paper's claims about divergent anchors and ECPO hold on cheap, exact MDPs?

For every (environment, estimator, group size N, seed) cell of the protocol in ``credit_study.yaml`` this trains a
fresh tabular softmax policy as a native ``ecpo_train.runtime.trainer.Trainer`` run, then writes the summary, the figures
and a report with a verdict per paper claim. One job per file:

* ``credit_study_protocol.py``: the protocol and one training run (the trainer, plus what is measured);
* ``credit_study_stats.py``: per-run scalars, intervals over seeds, verdicts (scipy.stats quantiles);
* ``credit_study_report.py``: the markdown report; ``credit_study_plots.py``: the PNGs;
* this file: the process pool, the outputs and the command line.

Outputs (``benchmarks/results/``): ``credit_study.json`` (raw per-run curves + the summary), ``credit_study.md``
(every number read from the JSON summary) and ``credit_study_*.png``. ``run --quick`` runs the same path on a tiny
budget (CI smoke) and writes ``credit_study_quick.*`` instead.

    python -m benchmarks.credit_study run            # the protocol (~30 min on 2 cores)
    python -m benchmarks.credit_study run --quick    # smoke
    python -m benchmarks.credit_study report --from-json benchmarks/results/credit_study.json   # no training
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks import RESULTS, refused
from benchmarks.credit_study_plots import plot_study
from benchmarks.credit_study_protocol import (
    PROTOCOL_PATH,
    available_envs,
    load_protocol,
    reference_success,
    run_specs,
    train_run,
)
from benchmarks.credit_study_report import render_report
from benchmarks.credit_study_stats import summarize
from benchmarks.study import in_processes
from ecpo_train.files.atomic import write_text
from ecpo_train.runtime.config_values import read_yaml


def cell_key(run: dict[str, Any]) -> tuple:
    """A run's (or a spec's) cell: (env, method, N, seed)."""
    return run["env_name"], run["method"], run["group_size"], run["seed"]


def run_study(protocol: dict[str, Any], env_names: Sequence[str] | None = None, workers: int | None = None,
              progress: bool = True, done: Sequence[dict[str, Any]] = (),
              on_run: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Train every cell of the protocol over a process pool; results in spec order of completion. Cells already
    in ``done`` (finished runs, e.g. read back after an interruption) are not trained again and are returned with
    the rest; ``on_run`` sees each new run as it finishes (to keep it on disk at once)."""
    finished = {cell_key(r) for r in done}
    specs = [spec for spec in run_specs(protocol, env_names) if cell_key(spec) not in finished]
    workers = int(workers or protocol.get("workers", 2))
    runs = []
    started = time.perf_counter()
    for k, run in enumerate(in_processes(train_run, specs, workers, ordered=False), 1):
        runs.append(run)
        if on_run is not None:
            on_run(run)
        if progress:
            print(f"[{k}/{len(specs)}] {run['env_name']} {run['method']} N={run['group_size']} "
                  f"seed={run['seed']}: final success {run['final_success']:.3f} "
                  f"({run['seconds']:.1f}s, {time.perf_counter() - started:.0f}s elapsed)", flush=True)
    runs = [*done, *runs]
    runs.sort(key=cell_key)
    return runs


def write_outputs(runs: Sequence[dict[str, Any]], protocol: dict[str, Any], runtime: float, out: Path,
                  skipped: dict[str, str]) -> dict[str, Any]:
    """Summary, figures, JSON and markdown report of a finished study; returns the summary."""
    summary = summarize(runs, protocol)
    summary["skipped_envs"] = skipped
    summary["reference"] = reference_success(protocol, summary["envs"])
    out.mkdir(parents=True, exist_ok=True)
    prefix = out / ("credit_study_quick" if protocol.get("quick") else "credit_study")
    images = plot_study(runs, summary, prefix)
    report = render_report(summary, protocol, runtime, images)
    if skipped:
        report += "\n## Skipped environments\n\n" + "\n".join(f"- {k}: {v}" for k, v in skipped.items()) + "\n"
    payload = {"protocol": protocol, "runtime_s": runtime, "summary": summary, "runs": list(runs)}
    write_text(prefix.with_suffix(".json"), json.dumps(payload, separators=(",", ":"), allow_nan=True))
    write_text(prefix.with_suffix(".md"), report)
    print(f"wrote {prefix.with_suffix('.md')}, {prefix.with_suffix('.json')} and {len(images)} figures "
          f"({runtime:.0f}s)")
    for claim in summary["claims"]:
        print(f"  {claim['id']} [{claim['env']}] {claim['verdict']}: {claim['claim']}")
    return summary


def merge_studies(payloads: Sequence[dict[str, Any]], paths: Sequence[Path], method_order: Sequence[str]
                  ) -> dict[str, Any]:
    """One study from finished studies that trained different methods under the same protocol (seeds, group
    sizes, credit, optimiser, envs): their runs side by side, methods in ``method_order``, wall times added.
    The merged protocol records where each method's runs came from (the report says so)."""
    if len(payloads) == 1:
        return payloads[0]
    same = ("seeds", "group_sizes", "credit", "optim", "envs", "quick", "rollout_temperature", "eval_temperature")
    first = payloads[0]["protocol"]
    for payload, path in zip(payloads[1:], paths[1:]):
        differs = [k for k in same if payload["protocol"].get(k) != first.get(k)]
        if differs:
            raise ValueError(f"{path} was run under a different protocol ({', '.join(differs)}); cannot merge")
    runs = [run for payload in payloads for run in payload["runs"]]
    if len({cell_key(r) for r in runs}) != len(runs):
        raise ValueError("the studies share (env, method, N, seed) cells; merge only studies of different methods")
    methods = {m for payload in payloads for m in payload["protocol"]["methods"]}
    protocol = dict(first) | {
        "methods": [m for m in method_order if m in methods] + sorted(methods - set(method_order)),
        "merged_from": [{"file": path.name, "methods": payload["protocol"]["methods"],
                         "runtime_s": float(payload["runtime_s"])} for payload, path in zip(payloads, paths)],
    }
    skipped = {k: v for payload in payloads for k, v in payload["summary"].get("skipped_envs", {}).items()}
    return {"protocol": protocol, "runtime_s": sum(float(p["runtime_s"]) for p in payloads), "runs": runs,
            "summary": {"skipped_envs": skipped}}


# The options each stage reads besides --protocol and --out: any other given is refused in one line.
STAGE_OPTIONS = {"run": ("quick", "workers", "envs"), "report": ("from_json",)}


def main(argv: Sequence[str] | None = None) -> int:
    from benchmarks.study import StudyCommand

    command = StudyCommand(__spec__.name, __doc__.split("\n\n")[0], STAGE_OPTIONS,
                           "run: train every cell of the protocol, then the report; report: the report again from "
                           "finished studies' JSON, without training")
    command.add("--quick", action="store_const", const=True, help="run: tiny budget smoke run (CI)")
    command.add("--protocol", type=Path, default=PROTOCOL_PATH, common=True)
    command.add("--out", type=Path, default=RESULTS, common=True)
    command.add("--workers", type=int, help="run: processes (default: the protocol's)")
    command.add("--envs", nargs="*", help="run: subset of the protocol's env names")
    command.add("--from-json", type=Path, nargs="+",
                help="report: finished studies' JSON (runs and protocol); several files (same protocol, different "
                     "methods) are merged into one study")
    args = command.parse(argv)
    if args is None:
        return 2
    if args.stage == "report":
        if not args.from_json:
            return refused("report needs --from-json FILE [FILE ...]")
        missing = [str(path) for path in args.from_json if not path.exists()]
        if missing:
            return refused(f"no study results at {', '.join(missing)}: run `python -m benchmarks.credit_study run` first")
        payload = merge_studies([json.loads(path.read_text()) for path in args.from_json], args.from_json,
                                load_protocol(args.protocol)["methods"])
        protocol = payload["protocol"]
        if "notes" not in protocol:  # notes written after the run are prose only, never numbers of the run
            protocol["notes"] = read_yaml(args.protocol.read_text()).get("notes", [])
        write_outputs(payload["runs"], protocol, float(payload["runtime_s"]), args.out,
                      payload["summary"].get("skipped_envs", {}))
        return 0
    protocol = load_protocol(args.protocol, quick=bool(args.quick))
    usable, skipped = available_envs(protocol)
    names = [n for n in usable if not args.envs or n in args.envs]
    for name, why in skipped.items():
        print(f"skipping env {name}: {why}", file=sys.stderr)
    if not names:
        return refused("no environment of the protocol can be built")
    started = time.perf_counter()
    runs = run_study(protocol, names, args.workers)
    write_outputs(runs, protocol, time.perf_counter() - started, args.out, skipped)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
