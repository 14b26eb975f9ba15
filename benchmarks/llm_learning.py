"""The paper's central comparison with an LLM policy: ECPO vs GiGPO w/std (and GRPO) training a real small LM.

Every cell (environment x group size N x method x seed) is one native training run (``ecpo_train.runtime.trainer``)
from the same preset and the same hyperparameters; only ``estimator`` (and the seed) change. Reported per
method: success before training and at the end with 95 % t-intervals over seeds, late-stage success (mean of
the last third of the validations), late-stage reward sigma within a rollout batch, the divergent-anchor
fraction and mean rho over training, and the advantage std / range. Success is the *exact* success of the
policy (dynamic programming over the corridor's MDP with the LLM's action distribution at the validation
temperature) where the environment allows it, so seeds differ only in what they learned; elsewhere it is the
sampled validation success.

    python -m benchmarks.llm_learning run                      # the CPU protocol (see PROTOCOLS)
    python -m benchmarks.llm_learning run --protocol quick     # a few minutes: one seed, two methods
    python -m benchmarks.llm_learning run --protocol gpu model=/path/to/Qwen2.5-1.5B-Instruct device=cuda
    python -m benchmarks.llm_learning partial --protocol P     # the report of the cells finished so far
    python -m benchmarks.llm_learning report --protocol budget --from-json benchmarks/results/llm_learning.json
    python -m benchmarks.llm_learning report --protocol P --from-runs runs/llm_learning/P   # finished cells

Extra ``key=value`` arguments override the training preset (e.g. ``iterations=30``), so a GPU run scales by
config alone. Writes ``benchmarks/results/llm_learning_<protocol>.{md,json,png}``; the JSON of a run records its
command (``command``), which a report of it quotes.
"""

from __future__ import annotations

import json
import math
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from benchmarks import RESULTS, refused
from benchmarks.llm_learning_report import all_runs, plot, report
from ecpo_train.files.atomic import write_text


@dataclass
class Protocol:
    preset: str
    envs: dict[str, list[str]]  # label -> overrides selecting the environment
    group_sizes: list[int]
    methods: list[str]
    seeds: list[int]
    overrides: list[str] = field(default_factory=list)


PROTOCOLS = {
    # two cores: the corridor task only; ~2 hours when the machine is otherwise idle
    "cpu": Protocol("corridor_llm", {"corridor": []}, [8, 4], ["ecpo", "gigpo_std", "grpo", "ecpo_anchor_scale"],
                    [0, 1, 2]),
    # what fitted this session's shared two cores (see the report): N = 8, 8 iterations, all four methods, 3 seeds
    "budget": Protocol("corridor_llm", {"corridor": []}, [8], ["ecpo", "gigpo_std", "grpo", "ecpo_anchor_scale"],
                       [0, 1, 2], ["iterations=8", "val_every=4"]),
    "budget_n4": Protocol("corridor_llm", {"corridor": []}, [4], ["ecpo", "gigpo_std", "grpo", "ecpo_anchor_scale"],
                          [0, 1, 2], ["iterations=8", "val_every=4"]),
    "quick": Protocol("corridor_llm", {"corridor": []}, [8], ["ecpo", "gigpo_std"], [0],
                      ["iterations=4", "val_every=2"]),
    # small households on two cores (issue 22): the presets alfworld_cpu / webshop_cpu as they are (ECPO, one seed),
    # and ECPO vs GiGPO w/std on the ALFWorld one with paired seeds (as many as fit: the partial stage reports them)
    # (N = 4: the presets' own 4 groups x 4, the recipe they were tuned at)
    "alfworld_cpu": Protocol("alfworld_cpu", {"alfworld_small": []}, [4], ["ecpo"], [0]),
    "webshop_cpu": Protocol("webshop_cpu", {"webshop_small": []}, [4], ["ecpo"], [0]),
    "alfworld_cpu_pairs": Protocol("alfworld_cpu", {"alfworld_small": []}, [4], ["ecpo", "gigpo_std"],
                                   [0, 1, 2, 3, 4, 5]),
    # a GPU: the corridor and an ALFWorldGen subset (free generation would need a larger model), N = 4 and 8, 5 seeds
    "gpu": Protocol("corridor_llm", {
        "corridor": [],
        "alfworld_gen": ["env_id=ecpo/ALFWorldGen-v0", "env_kwargs={max_steps: 20}", "train_tasks=null",
                         "n_groups=8", "val_num_tasks=16", "val_episodes_per_task=2", "credit.d_min=7",
                         "iterations=60", "val_every=10"],
    }, [4, 8], ["ecpo", "gigpo_std", "grpo", "ecpo_anchor_scale"], [0, 1, 2, 3, 4]),
}


def finished_protocol(protocol: Protocol, results: dict, overrides: list[str]) -> Protocol:
    """The protocol of the cells a report holds (finished or stored): their group sizes and seeds."""
    return Protocol(protocol.preset, protocol.envs, sorted({n for by_n in results.values() for n in by_n}),
                    protocol.methods, sorted({r["seed"] for r in all_runs(results)}), overrides)


def run_cell(job: tuple[str, list[str], Path, int]) -> list[dict]:
    """One cell's training, ``(preset, overrides, run_dir, torch threads or 0)``: its metrics history."""
    import torch

    from ecpo_train.runtime.config import load_config

    preset, overrides, run_dir, threads = job
    if threads:
        torch.set_num_threads(threads)
    from ecpo_train.runtime.run import train
    from ecpo_train.runtime.trainer import Trainer

    config = load_config(preset, overrides + [f"run_dir={run_dir}", "progress=false", "tensorboard=false"])
    return train(Trainer, config, overwrite=True)  # (the measurement's own folder: a rerun replaces it)


def success_series(history: list[dict]) -> list[tuple[int, float]]:
    key = "val/exact_success" if any("val/exact_success" in m for m in history) else "val/success"
    return [(int(m["iteration"]), float(m[key])) for m in history if key in m]


def summarise_run(history: list[dict]) -> dict:
    """One run's figures. Late stage = the second half of training: validations at iteration >= half the run,
    rollout statistics of its iterations."""
    series = success_series(history)
    last = max((int(m["iteration"]) for m in history), default=0)
    late = [s for i, s in series if i >= last / 2]
    late_iters = [m for m in history if int(m["iteration"]) >= max(1, last / 2)]

    def mean_of(key: str, rows: list[dict]) -> float:
        values = [m[key] for m in rows if key in m and math.isfinite(m[key])]
        return float(np.mean(values)) if values else float("nan")

    return {
        "success_kind": "exact" if any("val/exact_success" in m for m in history) else "sampled",
        "initial_success": series[0][1] if series else float("nan"),
        "final_success": series[-1][1] if series else float("nan"),
        "late_success": float(np.mean(late)) if late else float("nan"),
        "late_reward_std": mean_of("reward_std", late_iters),
        "divergent_fraction": mean_of("credit/divergent_anchor_fraction", history),
        "mean_rho": mean_of("credit/mean_rho", history),
        "mean_rho_strict_valid": mean_of("credit/mean_rho_strict_valid", history),
        "advantage_std": mean_of("credit/advantage_std", history),
        "advantage_range": float(np.mean(ranges)) if (ranges := [m["credit/advantage_max"] - m["credit/advantage_min"]
                                                                  for m in history if "credit/advantage_max" in m])
        else float("nan"),
        "seconds_per_iteration": mean_of("time/iteration", history),
        "curve": series,
        "divergent_curve": [(int(m["iteration"]), m.get("credit/divergent_anchor_fraction", float("nan")))
                            for m in history],
    }


def validation_episodes(run_dir: Path) -> dict:
    """A run folder's first and last validation, episode by episode (its ``validation.jsonl``):
    ``{"iterations": [first, last], "before": [[task, copy, won], ...], "after": [...]}``; empty when the run
    validated fewer than twice or predates the file."""
    from ecpo_train.runtime.run_dir import read_validation_file

    lines = read_validation_file(Path(run_dir) / "validation.jsonl")
    if len(lines) < 2:
        return {}
    rows = lambda line: [[t, int(c), bool(w)] for t, c, w in zip(line["task_ids"], line["copies"], line["won"])]
    return {"iterations": [int(lines[0]["iteration"]), int(lines[-1]["iteration"])], "before": rows(lines[0]),
            "after": rows(lines[-1])}


# The options each stage reads besides --protocol and --out (any other given is refused in one line); key=value
# overrides of the training preset are the run's and the partial report's only.
STAGE_OPTIONS = {"run": ("runs_dir", "jobs"), "partial": (), "report": ("from_json", "from_runs")}
STAGE_HELP = ("run: train every cell of the protocol (the report of the cells finished so far is kept in "
              "<stem>.partial.json); partial: the report of those cells and stop; report: the report of finished "
              "results (--from-json) or of finished cells in runs folders (--from-runs), without training")


def reported_by(stage: str, protocol_name: str, sources: list[str], stored: list[dict] | None = None) -> str:
    """The command that writes a report from stored results, as the report quotes it: ``report --from-json`` (or
    ``--from-runs``). A report again from results stored before the stages (no ``command`` in any of their JSON)
    quotes the flag of then, as the committed reports do, so that they regenerate byte-identical."""
    option = f"--{stage.replace('_', '-')}"
    if stored is not None and stored and not any("command" in part for part in stored):
        return f"python -m benchmarks.llm_learning --protocol {protocol_name} {option} {' '.join(sources)}"
    return f"python -m benchmarks.llm_learning report --protocol {protocol_name} {option} {' '.join(sources)}"


def main(argv: list[str] | None = None) -> int:
    from benchmarks.study import StudyCommand, in_processes

    command = StudyCommand(__spec__.name, __doc__.split("\n")[0], STAGE_OPTIONS, STAGE_HELP,
                           defaults={"runs_dir": "runs/llm_learning", "jobs": 1})
    command.add("--protocol", choices=sorted(PROTOCOLS), default="cpu", common=True)
    command.add("--out", default=None, common=True,
                help="results file stem (default benchmarks/results/llm_learning_<protocol>)")
    command.add("--runs-dir", help="run: the cells' run folders (default runs/llm_learning)")
    command.add("--jobs", type=int, help="run: cells trained at once, each on one torch thread (2 on a 2-core machine)")
    command.add("overrides", nargs="*", common=True, help="run, partial: key=value overrides of the training preset")
    command.add("--from-runs", nargs="+",
                help="report: summarise the finished cells under these runs folders (<dir>/<env>/N<n>/<method>/seed<k>)")
    command.add("--from-json", nargs="+", help="report: merge finished results (e.g. the N=8 and N=4 runs) into one")
    args = command.parse(argv)
    if args is None:
        return 2
    if args.overrides and args.stage == "report":
        return refused("report takes no key=value overrides (the stored results keep the ones they ran with)")
    if args.stage == "report" and (args.from_json is None) == (args.from_runs is None):
        return refused("report needs one of --from-json FILE [FILE ...] or --from-runs DIR [DIR ...]")
    protocol = PROTOCOLS[args.protocol]
    overrides = protocol.overrides + list(args.overrides)
    stem = Path(args.out) if args.out else RESULTS / f"llm_learning_{args.protocol}"
    stem.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    results: dict = {}
    partial = stem.with_suffix(".partial.json")
    if args.from_runs:
        results, seconds = summaries_from_runs([Path(d) for d in args.from_runs], protocol.methods)
        protocol = finished_protocol(protocol, results, overrides)
        how = (f"Summarised by `{reported_by('from_runs', args.protocol, args.from_runs)}` from the finished cells of "
               f"those runs ({seconds / 60:.0f} min of training "
               "and validation summed over cells; cells ran one or two at a time, one torch thread each, on a shared "
               "2-core machine)." + (" The `budget` protocols are the `cpu` protocol cut to 8 iterations to fit "
                                     "one session's shared CPU." if args.protocol.startswith("budget") else ""))
        return write_outputs(stem, args.protocol, protocol, overrides, results, seconds, how=how)
    if args.from_json:
        seconds = 0.0
        stored = []
        for path in args.from_json:
            if not Path(path).is_file():
                return refused(f"no stored results at {path[:200]}")
            loaded = json.loads(Path(path).read_text())
            stored.append(loaded)
            seconds += loaded["seconds"]
            for env, by_n in loaded["results"].items():
                for n, by_method in by_n.items():
                    results.setdefault(env, {})[int(n)] = {m: with_seed_ids(runs, protocol.seeds, f"{path} {env} N={n} {m}")
                                                           for m, runs in by_method.items()}
        protocol = finished_protocol(protocol, results, overrides)
        how = (f"Re-reported by `{reported_by('from_json', args.protocol, args.from_json, stored)}` from stored run "
               f"summaries ({seconds / 60:.0f} min of training and validation "
               "summed over cells); no training was rerun.")
        commands = [part["command"] for part in stored if "command" in part]
        return write_outputs(stem, args.protocol, protocol, overrides, results, seconds, how=how,
                             command=commands[0] if len(set(commands)) == 1 else None)
    run_command = shlex.join(["python", "-m", "benchmarks.llm_learning", "run", "--protocol", args.protocol,
                              *args.overrides])
    if args.stage == "partial":
        if not partial.is_file():
            return refused(f"no cells finished so far: {partial} does not exist (run first)")
        loaded = json.loads(partial.read_text())
        results = {env: {int(n): runs for n, runs in by_n.items()} for env, by_n in loaded["results"].items()}
        return write_outputs(stem, args.protocol, protocol, overrides, results, loaded["seconds"], partial=True,
                             command=run_command)
    cells = [(env_label, n, method, seed, [*env_overrides, *overrides, f"group_size={n}", f"estimator={method}",
                                           f"seed={seed}"])
             for env_label, env_overrides in protocol.envs.items() for n in protocol.group_sizes
             for seed in protocol.seeds for method in protocol.methods]  # seed-major: every seed compares all methods
    run_dirs = [Path(args.runs_dir) / args.protocol / env_label / f"N{n}" / method / f"seed{seed}"
                for env_label, n, method, seed, _ in cells]
    jobs = [(protocol.preset, cell[-1], run_dir, 1 if args.jobs > 1 else 0) for cell, run_dir in zip(cells, run_dirs)]
    histories = in_processes(run_cell, jobs, args.jobs, spawn=True)  # (a cell's model never loads in this process)
    for (env_label, n, method, seed, _), run_dir, history in zip(cells, run_dirs, histories):
        summary = summarise_run(history) | {"seed": seed, "episodes": validation_episodes(run_dir)}
        results.setdefault(env_label, {}).setdefault(n, {}).setdefault(method, []).append(summary)
        print(f"{env_label} N={n} {method} seed={seed}: success {summary['initial_success']:.3f} -> "
              f"{summary['final_success']:.3f} (late {summary['late_success']:.3f}), "
              f"{summary['seconds_per_iteration']:.0f}s/iteration", flush=True)
        write_text(partial, json.dumps({"seconds": time.perf_counter() - started, "results": results}))
    write_outputs(stem, args.protocol, protocol, overrides, results, time.perf_counter() - started,
                  command=run_command)
    partial.unlink(missing_ok=True)
    return 0


def with_seed_ids(runs: list[dict], seeds: list[int], where: str) -> list[dict]:
    """Summaries stored before seeds were recorded came from ``--from-runs``, which reads seed folders in sorted
    order: their ids are the protocol's seeds in that order, recovered only when the counts match (else refused)."""
    if all("seed" in r for r in runs):
        return runs
    if any("seed" in r for r in runs) or len(runs) != len(seeds):
        raise ValueError(f"{where}: {len(runs)} stored runs without seed ids for seeds {seeds}; cannot pair them")
    return [r | {"seed": seed, "seed_recovered": True} for r, seed in zip(runs, sorted(seeds))]


def summaries_from_runs(folders: list[Path], methods: list[str]) -> tuple[dict, float]:
    """Summaries of every finished cell (its metrics reach the configured iterations) under ``folders``."""
    from ecpo_train.runtime.config_values import read_yaml

    results: dict = {}
    seconds = 0.0
    for folder in folders:
        for run in sorted(folder.glob("*/N*/*/seed*")):
            metrics, config = run / "metrics.jsonl", run / "config.yaml"
            if not (metrics.exists() and config.exists()):
                continue
            history = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
            if not history or int(history[-1]["iteration"]) < int(read_yaml(config.read_text())["iterations"]):
                continue  # unfinished cell
            env_label, n, method = run.parts[-4], int(run.parts[-3][1:]), run.parts[-2]
            results.setdefault(env_label, {}).setdefault(n, {}).setdefault(method, []).append(
                summarise_run(history) | {"seed": int(run.parts[-1].removeprefix("seed")),
                                          "episodes": validation_episodes(run)})
            seconds += sum(m.get("time/iteration", 0.0) + m.get("time/validation", 0.0) for m in history)
    for env_label, by_n in results.items():  # the protocol's method order
        for n, by_method in by_n.items():
            by_n[n] = {m: by_method[m] for m in methods if m in by_method}
    return results, seconds


def write_outputs(stem: Path, name: str, protocol: Protocol, overrides: list[str], results: dict, elapsed: float,
                  partial: bool = False, how: str = "", command: str | None = None) -> int:
    """The JSON (with ``command``, the run's command line, where known), the report and the figure at ``stem``."""
    stored = {"protocol": name, "overrides": overrides, "seconds": elapsed, "complete": not partial}
    stored |= {"command": command} if command else {}
    stem.with_suffix(".json").write_text(json.dumps(stored | {"results": results}, indent=1))
    text = report(results, name, protocol, elapsed, how or (f"Written by `{command}` in {elapsed / 60:.1f} min."
                                                             if command else ""))
    if partial:
        text += ("\n**Partial run**: the protocol was stopped when its time budget ran out; the tables hold the "
                 "cells that finished (seed-major order, so each finished seed has every method up to the cut).\n")
    write_text(stem.with_suffix(".md"), text)
    plot(results, stem.with_suffix(".png"))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
