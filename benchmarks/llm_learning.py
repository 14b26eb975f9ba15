"""The paper's central comparison with an LLM policy: ECPO vs GiGPO w/std (and GRPO) training a real small LM.

Every cell (environment x group size N x method x seed) is one native training run from the same preset and the
same hyperparameters; only ``estimator`` (and the seed) change. The report: ``benchmarks.llm_learning_report``.
Commands: docs/benchmarks.md and ``--help``.

``run`` trains the cells seed-major (``benchmarks.study``); a GPU run scales by ``key=value`` overrides alone.
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from benchmarks import RESULTS, count, refused
from benchmarks.llm_learning_report import all_runs, plot, report
from benchmarks.stats import nanmean
from benchmarks.study import StudyCommand, arms_by_seeds, finished, in_processes, run_stage
from ecpo_train.files.atomic import write_text


@dataclass
class Protocol:
    preset: str
    envs: dict[str, list[str]]  # label -> overrides selecting the environment
    group_sizes: list[int]
    methods: list[str]
    seeds: list[int]
    overrides: list[str] = field(default_factory=list)


CORRIDOR, ALL = {"corridor": []}, ["ecpo", "gigpo_std", "grpo", "ecpo_anchor_scale"]
PROTOCOLS = {
    # two cores: the corridor task only; ~2 hours when the machine is otherwise idle
    "cpu": Protocol("corridor_llm", CORRIDOR, [8, 4], ALL, [0, 1, 2]),
    # what fitted this session's shared two cores (see the report): N = 8, 8 iterations, all four methods, 3 seeds
    "budget": Protocol("corridor_llm", CORRIDOR, [8], ALL, [0, 1, 2], ["iterations=8", "val_every=4"]),
    "budget_n4": Protocol("corridor_llm", CORRIDOR, [4], ALL, [0, 1, 2], ["iterations=8", "val_every=4"]),
    "quick": Protocol("corridor_llm", CORRIDOR, [8], ["ecpo", "gigpo_std"], [0], ["iterations=4", "val_every=2"]),
    # small households on two cores (issue 22): the presets alfworld_cpu / webshop_cpu as they are (ECPO, one seed),
    # and ECPO vs GiGPO w/std on the ALFWorld one with paired seeds (as many as fit: `report --from-runs` reports
    # them) (N = 4: the presets' own 4 groups x 4, the recipe they were tuned at)
    "alfworld_cpu": Protocol("alfworld_cpu", {"alfworld_small": []}, [4], ["ecpo"], [0]),
    "webshop_cpu": Protocol("webshop_cpu", {"webshop_small": []}, [4], ["ecpo"], [0]),
    "alfworld_cpu_pairs": Protocol("alfworld_cpu", {"alfworld_small": []}, [4], ["ecpo", "gigpo_std"], [0, 1, 2, 3, 4, 5]),
}


def run_cell(job: tuple[str, list[str], Path, int]) -> list[dict]:
    """One cell's training, ``(preset, overrides, run_dir, torch threads or 0)``, resumed or passed over where its
    folder holds it: its metrics history."""
    import torch

    from ecpo_train.runtime.config import load_config
    from ecpo_train.runtime.resume import RESUME_OR_START
    from ecpo_train.runtime.run import train
    from ecpo_train.runtime.trainer import Trainer

    preset, overrides, run_dir, threads = job
    if threads:
        torch.set_num_threads(threads)
    config = load_config(preset, overrides + [f"run_dir={run_dir}", "progress=false", "tensorboard=false"])
    return train(Trainer, config, resume=RESUME_OR_START)


def summarise_run(history: list[dict]) -> dict:
    """One run's figures. Late stage = the second half of training: validations at iteration >= half the run,
    rollout statistics of its iterations."""
    key = "val/exact_success" if any("val/exact_success" in m for m in history) else "val/success"
    series = [(int(m["iteration"]), float(m[key])) for m in history if key in m]
    last = max((int(m["iteration"]) for m in history), default=0)
    late = [s for i, s in series if i >= last / 2]
    late_iters = [m for m in history if int(m["iteration"]) >= max(1, last / 2)]
    mean_of = lambda key, rows: nanmean([m[key] for m in rows if key in m])  # (NaN where no row defines it)
    return {
        "success_kind": "exact" if key == "val/exact_success" else "sampled",
        "initial_success": series[0][1] if series else float("nan"),
        "final_success": series[-1][1] if series else float("nan"),
        "late_success": nanmean(late),
        "late_reward_std": mean_of("reward_std", late_iters),
        "divergent_fraction": mean_of("credit/divergent_anchor_fraction", history),
        "mean_rho": mean_of("credit/mean_rho", history),
        "mean_rho_strict_valid": mean_of("credit/mean_rho_strict_valid", history),
        "advantage_std": mean_of("credit/advantage_std", history),
        "advantage_range": nanmean([m["credit/advantage_max"] - m["credit/advantage_min"]
                                    for m in history if "credit/advantage_max" in m]),
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


def summaries_from_runs(folders: list[Path], methods: list[str]) -> tuple[dict, float]:
    """Summaries of every finished cell (its metrics reach its configured iterations) under ``folders``, and the
    seconds of training and validation they took."""
    from ecpo_train.runtime.run_dir import read_metrics, read_saved_config

    results: dict = {}
    seconds = 0.0
    for folder in folders:
        for run in sorted(folder.glob("*/N*/*/seed*")):
            config = read_saved_config(run / "config.yaml")
            history = read_metrics(run) if config and (run / "metrics.jsonl").is_file() else []
            if not config or not finished(history, int(config["iterations"])):
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


def run(args, protocol: Protocol) -> tuple[dict, float, str, str]:
    """``run``: every cell, a few at a time (``--jobs``, each in a spawned process: no model loads here), then the
    finished cells of the protocol's folder."""
    folder = Path(args.runs_dir) / args.protocol
    starts = [(env, n) for env in protocol.envs for n in protocol.group_sizes]
    jobs = arms_by_seeds(protocol.methods, protocol.seeds, starts, lambda s, arm, seed: f"{s[0]}/N{s[1]}/{arm}/seed{seed}")
    tasks = [(protocol.preset, [*protocol.envs[job.start[0]], *protocol.overrides, *args.overrides,
                                f"group_size={job.start[1]}", f"estimator={job.arm}", f"seed={job.seed}"],
              folder / job.name, 1 if args.jobs > 1 else 0) for job in jobs]
    for job, history in zip(jobs, in_processes(run_cell, tasks, args.jobs, spawn=True)):
        summary = summarise_run(history)
        print(f"{job.name}: success {summary['initial_success']:.3f} -> {summary['final_success']:.3f} (late "
              f"{summary['late_success']:.3f}), {summary['seconds_per_iteration']:.0f}s/iteration", flush=True)
    command = shlex.join(["python", "-m", "benchmarks.llm_learning", "run", "--protocol", args.protocol,
                          *args.overrides])
    return from_runs(args, protocol, [folder], command)


def from_runs(args, protocol: Protocol, folders: list[Path] | None = None,
              command: str | None = None) -> tuple[dict, float, str, str | None]:
    """The finished cells of runs folders (``--from-runs``; ``run``'s own folder), with the command that wrote them."""
    results, seconds = summaries_from_runs(folders or [Path(d) for d in args.from_runs], protocol.methods)
    quoted = command or f"python -m benchmarks.llm_learning report --protocol {args.protocol} --from-runs " \
                        f"{' '.join(args.from_runs)}"
    return results, seconds, (f"{'Written' if command else 'Summarised'} by `{quoted}` from the finished cells of "
                               f"the runs ({seconds / 60:.0f} min of training and validation summed over cells)."), command


def from_json(args, protocol: Protocol) -> tuple[dict, float, str, str | None]:
    """Finished results merged into one (e.g. the N=8 and N=4 runs), with the command they record where they
    record one and the same (the command a report quotes, and for older results none: docs/benchmarks.md)."""
    results: dict = {}
    seconds, stored = 0.0, []
    for path in args.from_json:
        if not Path(path).is_file():
            raise ValueError(f"no stored results at {path[:200]}")
        loaded = json.loads(Path(path).read_text())
        stored.append(loaded)
        seconds += loaded["seconds"]
        for env, by_n in loaded["results"].items():
            for n, by_method in by_n.items():
                if any("seed" not in run for runs in by_method.values() for run in runs):
                    raise ValueError(f"{path[:200]} {env} N={n}: runs without seed ids cannot pair (results stored "
                                     "before dffe7ae: report them at that commit)")
                results.setdefault(env, {})[int(n)] = by_method
    commands = [part["command"] for part in stored if "command" in part]
    quoted = (f"python -m benchmarks.llm_learning {'report ' if commands else ''}--protocol {args.protocol} "
              f"--from-json {' '.join(args.from_json)}")
    how = (f"Re-reported by `{quoted}` from stored run summaries ({seconds / 60:.0f} min of training and validation "
           "summed over cells); no training was rerun.")
    return results, seconds, how, commands[0] if len(set(commands)) == 1 else None


def write_outputs(stem: Path, name: str, protocol: Protocol, overrides: list[str], results: dict, seconds: float,
                  how: str, command: str | None = None) -> None:
    """The JSON (with ``command``, the run's command line, where known), the report and the figure at ``stem``."""
    stored = {"protocol": name, "overrides": overrides, "seconds": seconds, "complete": True}
    stored |= {"command": command} if command else {}
    stem.parent.mkdir(parents=True, exist_ok=True)
    write_text(stem.with_suffix(".json"), json.dumps(stored | {"results": results}, indent=1))
    held = replace(protocol, seeds=sorted({r["seed"] for r in all_runs(results)}), overrides=overrides)
    text = report(results, name, held, seconds, how)
    write_text(stem.with_suffix(".md"), text)
    plot(results, stem.with_suffix(".png"))
    print(text)


def main(argv: list[str] | None = None) -> int:
    command = StudyCommand(__spec__.name, __doc__.split("\n")[0],
                           {"run": ("runs_dir", "jobs"), "report": ("from_json", "from_runs")},
                           "run: train every cell of the protocol (resumable), then its report; report: the report of "
                           "finished results (--from-json) or of the finished cells in runs folders (--from-runs, also "
                           "while a run goes on), without training",
                           defaults={"runs_dir": "runs/llm_learning", "jobs": 1})
    command.add("--protocol", choices=sorted(PROTOCOLS), default="cpu", common=True)
    command.add("--out", default=None, common=True,
                help="results file stem (default benchmarks/results/llm_learning_<protocol>)")
    command.add("--runs-dir", help="run: the cells' run folders (default runs/llm_learning)")
    command.add("--jobs", type=count, help="run: cells trained at once, each on one torch thread (2 on a 2-core machine)")
    command.add("overrides", nargs="*", common=True, help="run: key=value overrides of the training preset")
    command.add("--from-runs", nargs="+",
                help="report: summarise the finished cells under these runs folders (<dir>/<env>/N<n>/<method>/seed<k>)")
    command.add("--from-json", nargs="+", help="report: merge finished results (e.g. the N=8 and N=4 runs) into one")
    command.parser.parse_args = command.parser.parse_intermixed_args  # (key=value after the options too)
    args = command.parse(argv)
    if args.overrides and args.stage == "report":
        return refused("report takes no key=value overrides (the stored results keep the ones they ran with)")
    if args.stage == "report" and (args.from_json is None) == (args.from_runs is None):
        return refused("report needs one of --from-json FILE [FILE ...] or --from-runs DIR [DIR ...]")
    protocol = PROTOCOLS[args.protocol]
    stage = run if args.stage == "run" else from_json if args.from_json else from_runs
    stem = Path(args.out) if args.out else RESULTS / f"llm_learning_{args.protocol}"
    return run_stage(lambda: write_outputs(stem, args.protocol, protocol, protocol.overrides + list(args.overrides),
                                           *stage(args, protocol)))


if __name__ == "__main__":
    sys.exit(main())
