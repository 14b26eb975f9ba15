"""ECPO against GiGPO w/std on one GPU: the same warm start, the same rollout seeds, the same validation episodes.

One command is one seed's pair: the stages, the report and the commands are in docs/gpu.md ("ECPO against GiGPO
w/std"). One validation before training serves every arm (it does not depend on the estimator). The report is
written after every stage, so a command stopped early returns what it finished.

**Registered endpoint** (fixed 2026-11-26 before any run of this command; the unit revised 2026-11-27, still
before any run): success on the preset's validation episodes after N iterations at T = 0.4, first arm (ECPO) minus
second arm (GiGPO w/std). **The unit is the training seed**: one command is one seed's pair, and the comparison of
the two methods is the mean of the per-seed differences over the seeds a protocol ran, with its t-interval at 0.95
(``seeds``). ECPO is better (or worse) only if that interval excludes 0; otherwise "not shown", with the MDE from
the seeds. A single seed's episode-level McNemar line is reported as what it is: which of this seed's two trained
policies won more of the same episodes (conditional on that pair), not a comparison of the methods. The greedy
(T = 0) validation is reported beside it as secondary; the training-task line of ``gpu_run`` part 4 is not repeated
here (time).

**On a preset with a fixed training pool** (``train_tasks``, e.g. ``alfworld_cpu_pool``; fixed 2026-11-26 before
any such run): each arm's after - before and the ECPO - GiGPO w/std comparison are also given on the validation
episodes of the trained tasks (primary, as in that preset's registered endpoint) and of the others (secondary).
``--sft-preset alfworld_cpu --sft-episodes 48`` makes that preset's warm start (its task order, not the pool's),
and ``--seed`` gives the arms a seed other than the preset's (the warm start keeps its preset's), so a lease can
run the protocol's ECPO vs GiGPO w/std pairs seed by seed.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import arms, count, fail, natural, positive, refuse_without_cuda, rescore, write_report
from benchmarks.gpu_learning import mean_figures, validate_on, write_smoke_model
from benchmarks.gpu_run import default_out, device_facts
from benchmarks.paired_report import read_reports, regime, render_pair, render_seeds, score_pair, summarise


def validate_both(run: Any) -> tuple[dict[str, list[list]], float]:
    """A started run's configured validation at the preset's temperature, then the same episodes (tasks, copies,
    random draws) greedily (T = 0); the outcomes of each and the seconds of both."""
    sampled, seconds = validate_on(run)
    engine = run.engine
    config = engine.config
    engine.config = dataclasses.replace(config, val_temperature=0.0)  # the engine's validation reads its config
    try:
        greedy, greedy_seconds = validate_on(run, list(engine.val_tasks), "validation_greedy")
    finally:
        engine.config = config
    return {"sampled": sampled, "greedy": greedy}, seconds + greedy_seconds


def run_arm(spec: dict[str, Any], plan: arms.Plan) -> dict[str, Any]:
    """One arm (``benchmarks.arms`` runs it): a trainer from the warm start with one credit estimator, its
    iterations (N decided once for every arm by ``plan``) in the time left to it, then both closing validations.
    Returns its figures and outcomes."""
    run, build = arms.open_arm(spec, overwrite=True)  # (an arm's folder is this command's: a rerun starts it over)
    with run:
        rows: list[dict[str, float]] = []
        iterations, stopped = arms.train_planned(run, rows, spec, plan)
        outcomes, seconds = validate_both(run)
    result = {"iterations_planned": iterations, "iterations_done": len(rows), "per_iteration": rows,
              "rates": mean_figures(rows), "build_seconds": build, "closing_validation_seconds": seconds}
    result["regime"] = regime(result["rates"])
    return result | ({"stopped": stopped} if stopped else {}) | {"outcomes": outcomes}


def registered_arms() -> list[str]:
    """Issue 57's arms (PGPO, HGPO, GraphGPO, PACE beside GRPO, GiGPO w/std and ECPO's), the reference first: the
    arm every other one is compared with here, as in the registered protocol."""
    from benchmarks.estimator_comparison import load_protocol

    protocol = load_protocol()
    return [protocol["reference"]] + [arm for arm in protocol["arms"] if arm != protocol["reference"]]


def arm_configs(args: argparse.Namespace, work: Path) -> tuple[Any, Any, list[str]]:
    """The arms' config and the warm start's, each loaded once with the overrides the run uses (a missing model, a
    preset not found or an override it refuses: the one-line exit 2, before any model loads)."""
    overrides = arms.run_overrides(args, work)
    seed = [f"seed={args.seed}"] if args.seed is not None else []
    config = arms.load_preset("--preset", args.preset, overrides + seed + [f"run_dir={work / 'arm0'}"])
    if args.smoke and config.train_tasks:  # the smoke validation then holds a trained task and an unseen one
        config = dataclasses.replace(config, val_tasks=[config.train_tasks[0], "gen/Pick/10000"])
        overrides.append(f"val_tasks=[{config.train_tasks[0]},gen/Pick/10000]")
    sft_config = arms.load_preset("--sft-preset", args.sft_preset or args.preset,
                                  overrides + [f"run_dir={work / 'sft'}"])
    return config, sft_config, overrides


def run(args: argparse.Namespace, work: Path, out: Path, configs: tuple[Any, Any, list[str]]) -> dict[str, Any]:
    from ecpo_train.runtime.sft import run_sft

    started = time.monotonic()
    deadline = time.time() + args.time_limit
    config, sft_config, overrides = configs
    write_smoke_model(args, work)
    trained = frozenset(str(t) for t in (config.train_tasks or []))
    report: dict[str, Any] = {"smoke": args.smoke, "preset": args.preset, "arms": args.arms, "overrides": overrides,
                              "environment": device_facts(args.device), "time_limit": args.time_limit,
                              "seed": config.seed, "sft_preset": args.sft_preset or args.preset,
                              "sft_seed": sft_config.seed, "results": {}, "comparisons": {}}
    if trained:
        report |= {"train_task_count": len(trained), "train_tasks": sorted(trained), "by_part": {}}
    report["sft"] = run_sft(sft_config, episodes=args.sft_episodes, epochs=args.sft_epochs, lr=args.sft_lr,
                            out=work / "sft_model") | {"seconds": time.monotonic() - started}
    write_report(report, out, render_pair)

    specs = [{"arm": arm, "preset": args.preset, "device": args.device, "score_batch": args.score_batch,
              "deadline": deadline, "overrides": [*overrides, f"seed={config.seed}", f"model={work / 'sft_model'}",
                                                  f"estimator={arm}", f"run_dir={work / f'arm{k}'}"]}
             for k, arm in enumerate(args.arms)]
    run, _ = arms.open_arm(specs[0] | {"overrides": [*specs[0]["overrides"], f"run_dir={work / 'before'}"]},
                           overwrite=True)
    with run:
        before, seconds = validate_both(run)
    report["outcomes"] = {"before": before["sampled"], "greedy_before": before["greedy"]}
    report |= {"validation_seconds": seconds, "validation_episodes": len(before["sampled"]),
               "iterations": args.iterations}
    write_report(report, out, render_pair)

    # side by side, each arm may be up to len(arms) times slower than alone: its closing validations too
    reserve = arms.closing_seconds(seconds * len(args.arms))
    specs = [spec | {"reserve": reserve} for spec in specs]

    def decide(walls: list[float]) -> int:
        n = arms.iterations_that_fit(deadline - time.time(), max(walls), seconds * len(args.arms))
        report["iterations"] = args.iterations or min(args.max_iterations, n)
        return report["iterations"]

    def keep(arm: str, result: dict[str, Any]) -> None:
        """An arm's result in the report: its figures under ``results``, its outcomes beside the others, scored."""
        outcomes = result.pop("outcomes")
        report["results"][arm] = result
        report["outcomes"] |= {f"after_{arm}": outcomes["sampled"], f"greedy_after_{arm}": outcomes["greedy"]}
        if result.get("stopped"):
            report["stopped"] = f"{arm}: {result['stopped']}"
        write_report(score_pair(report), out, render_pair)

    failed = arms.run_side_by_side(specs, run_arm, work, decide, out.with_suffix(""), keep)
    if failed:
        report["stopped"] = str(failed)
    report["seconds"] = time.monotonic() - started
    write_report(score_pair(report), out, render_pair)
    return report


# The options each stage reads: any other given is refused in one line (benchmarks.study).
RUN_OPTIONS = ("device", "smoke", "arms", "registered", "time_limit", "iterations", "max_iterations", "model", "preset",
               "sft_preset", "seed", "sft_episodes", "sft_epochs", "sft_lr", "score_batch", "out")
STAGE_OPTIONS = {"run": RUN_OPTIONS, "report": ("from_json", "out"), "seeds": ("from_json", "out")}
DEFAULTS = arms.DEFAULTS | {"registered": False, "time_limit": 450.0, "preset": "alfworld_gpu", "sft_episodes": 96}


def main(argv: list[str] | None = None) -> int:
    from benchmarks.study import StudyCommand

    command = StudyCommand(__spec__.name, __doc__.split("\n\n")[0], STAGE_OPTIONS,
                           "run: one seed's pair; report: a returned report's paired tests again (where scipy is); "
                           "seeds: the reports of one protocol, one per seed, summarised (the seed as the unit)",
                           DEFAULTS)
    arms.add_options(command)
    command.add("--registered", action="store_const", const=True,
                help="run: the arms of issue 57's registered comparison (benchmarks/estimator_comparison.yaml), "
                     "its reference GiGPO w/std first; replaces --arms")
    command.add("--time-limit", type=positive, help="run: seconds for the whole command (default 450)")
    command.add("--iterations", type=count, help="run: iterations per arm (default: what fits)")
    command.add("--preset", help="run: default alfworld_gpu")
    command.add("--sft-preset", help="run: the preset whose task order and seed make the warm start (default: --preset)")
    command.add("--seed", type=natural, help="run: the arms' seed (default: the preset's)")
    command.add("--sft-episodes", type=count, help="run: default 96")
    command.add("--out", type=Path, help="run: the report (default benchmarks/results/gpu_comparison.json on CUDA); "
                                         "report: where the rescored report goes (default: over itself); seeds: the "
                                         "summary's JSON (its markdown beside it)")
    command.add("--from-json", type=Path, nargs="+", metavar="JSON",
                help="report: a returned report (one); seeds: gpu_comparison reports, one per seed")
    args = command.parse(argv)
    if args.stage in ("report", "seeds") and not args.from_json:
        fail(f"{args.stage} needs --from-json JSON")
    if args.stage == "seeds":
        summary = summarise(read_reports(args.from_json))
        print(render_seeds(summary), end="")
        if args.out:
            write_report(summary, args.out, render_seeds)
        return 0
    if args.stage == "report":
        if len(args.from_json) != 1:
            fail("report --from-json: give one report (seeds summarises several)")
        rescore(args.from_json[0], args.out, lambda r: any(k.startswith("after_") for k in r.get("outcomes", {})),
                "it holds no outcomes after training (the run stopped before its first closing validation)",
                score_pair, render_pair)
        return 0
    args.arms = registered_arms() if args.registered else args.arms
    arms.check_arms(args.arms, fewest=2)
    if refuse_without_cuda(args.device, "gpu_comparison"):
        return 2
    if args.smoke:
        args.sft_episodes, args.sft_epochs, args.max_iterations = 2, 1, min(args.max_iterations, 2)
    out = args.out or default_out(args.device, args.smoke, "gpu_comparison")
    with tempfile.TemporaryDirectory(prefix="gpu_comparison-") as tmp:
        run(args, Path(tmp), out, arm_configs(args, Path(tmp)))
    print(f"wrote {out} and {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
