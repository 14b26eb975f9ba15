"""ECPO against GiGPO w/std on one GPU: the same warm start, the same rollout seeds, the same validation episodes.

The first GPU run (``benchmarks/gpu_run.py`` part 4, one H100) showed ECPO's update learning unseen ALFWorld
households in 24 iterations of the ``alfworld_gpu`` preset. This command runs one seed's pair of the paper's
question on that setting, in one command of at most 10 minutes:

1. ``ecpo sft``'s expert warm start on training households (``run_sft``, as part 4);
2. the validation before training on the preset's validation episodes (``alfworld_gpu``: 400 unseen tasks x 2,
   every choice's random draw fixed by (seed, copy, step)) at the preset's temperature (T = 0.4) and again greedily
   (T = 0) on the same episodes: validation does not depend on the credit estimator, so one serves every arm;
3. each arm (``--arms``, default ``ecpo gigpo_std``; ``--registered``: issue 57's nine, GiGPO w/std first): a
   trainer from the warm start with that estimator and the same seed (the first iteration's rollouts are the
   same for every arm), N iterations, then both validations again.
   N is the same for every arm, sized from the first iteration so every arm and its closing validations fit the
   time limit (``--iterations`` fixes it instead). On CUDA the arms run side by side, each in a process of its own
   on the one GPU (``--parallel``, the default there), elsewhere one after the other, both through
   ``benchmarks/arms.py`` (the arms' launcher every comparison program shares);
4. the report (``benchmarks/gpu_comparison_report.py``): each arm's success before and after, each later arm against
   the first on the same episodes after training, at both temperatures; each arm's regime (the share of anchors
   whose gate was open, lucky singletons per batch); the outcomes per household; and how many seed pairs one
   15-minute window holds at the first GPU run's rates (``benchmarks/gpu_window.py``; ``plan`` prints it alone).

**Registered endpoint** (fixed 2026-11-26 before any run of this command; the unit revised 2026-11-27, still
before any run): success on the preset's validation episodes after N iterations at T = 0.4, first arm (ECPO) minus
second arm (GiGPO w/std). **The unit is the training seed**: one command is one seed's pair, and the comparison of
the two methods is the mean of the per-seed differences over the seeds a protocol ran, with its t-interval at 0.95
(``benchmarks/comparison_seeds.py``). ECPO is better (or worse) only if that interval excludes 0; otherwise "not
shown", with the MDE from the seeds. A single seed's episode-level McNemar line is reported as what it is: which
of this seed's two trained policies won more of the same episodes (conditional on that pair), not a comparison of
the methods. The greedy (T = 0) validation is reported beside it as secondary; the training-task line of part 4 is
not repeated here (time).

**On a preset with a fixed training pool** (``train_tasks``, e.g. ``alfworld_cpu_pool``; fixed 2026-11-26 before
any such run): each arm's after - before and the ECPO - GiGPO w/std comparison are also given on the validation
episodes of the trained tasks (primary, as in that preset's registered endpoint) and of the others (secondary).
``--sft-preset alfworld_cpu --sft-episodes 48`` makes that preset's warm start (its task order, not the pool's),
and ``--seed`` gives the arms a seed other than the preset's (the warm start keeps its preset's), so a lease can
run the protocol's ECPO vs GiGPO w/std pairs seed by seed.

    python -m benchmarks.gpu_comparison run [--arms ecpo gigpo_std] [--time-limit 450] [--model DIR] [--out FILE]
    python -m benchmarks.gpu_comparison run --preset alfworld_cpu_pool --sft-preset alfworld_cpu --sft-episodes 48 \
        --iterations 16 --seed 1
    python -m benchmarks.gpu_comparison plan --preset alfworld_cpu_pool --iterations 16 --sft-episodes 48
    python -m benchmarks.gpu_comparison run --device cpu --smoke [--parallel]    # every step on tiny sizes

Results go to ``benchmarks/results/gpu_comparison.{json,md}`` on CUDA (``runs/gpu_comparison.json`` otherwise),
written after every stage, so a command stopped early returns what it finished; side by side, each arm's output
goes to ``OUT-ARM.log`` beside them.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import RESULTS, fail, refuse_without_cuda, rescore, write_report
from benchmarks.arms import Plan, open_arm, run_one_after_another, run_side_by_side, train_arm
from benchmarks.gpu_comparison_report import regime, render, score
from benchmarks.gpu_learning import (
    DEFAULT_MODEL,
    ROOT,
    learning_overrides,
    mean_figures,
    validate_on,
    write_smoke_model,
)
from benchmarks.gpu_run import device_facts
from benchmarks.gpu_window import GPU_RUN, closing_seconds, first_run_rates, plan_text, window_plan

# ---------------------------------------------------------------------------------------------- the arm
# An arm: a trainer from the warm start with one credit estimator, its iterations and its closing validations
# (T = 0.4 and greedy); ``benchmarks.arms`` runs it, side by side (a process each on the one GPU) or one after
# the other, with N decided once for every arm.
GREEDY_LABEL = "validation_greedy"  # the greedy pass's label in the run folder's validation.jsonl


def validate_both(run: Any) -> tuple[dict[str, list[list]], float]:
    """A started run's configured validation at the preset's temperature, then the same episodes (tasks, copies,
    random draws) greedily (T = 0); the outcomes of each and the seconds of both."""
    sampled, seconds = validate_on(run)
    engine = run.engine
    config = engine.config
    engine.config = dataclasses.replace(config, val_temperature=0.0)  # the engine's validation reads its config
    try:
        greedy, greedy_seconds = validate_on(run, list(engine.val_tasks), GREEDY_LABEL)
    finally:
        engine.config = config
    return {"sampled": sampled, "greedy": greedy}, seconds + greedy_seconds


def run_arm(spec: dict[str, Any], plan: Plan) -> dict[str, Any]:
    """One arm: build, one iteration, ``plan``, the other N - 1 iterations in the time left to it (the deadline
    less what the later arms need), then both closing validations. Returns its figures and outcomes."""
    run, build = open_arm(spec, overwrite=True)  # (an arm's folder is this command's: a rerun starts it over)
    with run:
        rows: list[dict[str, float]] = []
        train_arm(run, rows, 1, spec["deadline"], spec["reserve"])
        iterations, later_seconds = plan(rows[0]["wall"], build)
        stopped = train_arm(run, rows, iterations, spec["deadline"] - later_seconds, spec["reserve"])
        outcomes, seconds = validate_both(run)
    result = {"iterations_planned": iterations, "iterations_done": len(rows), "per_iteration": rows,
              "rates": mean_figures(rows), "build_seconds": build, "closing_validation_seconds": seconds}
    result["regime"] = regime(result["rates"])
    return result | ({"stopped": stopped} if stopped else {}) | {"outcomes": outcomes}


# ---------------------------------------------------------------------------------------------- the program
def registered_arms() -> list[str]:
    """Issue 57's arms (PGPO, HGPO, GraphGPO, PACE beside GRPO, GiGPO w/std and ECPO's), the reference first: the
    arm every other one is compared with here, as in the registered protocol."""
    from benchmarks.estimator_comparison import load_protocol

    protocol = load_protocol()
    return [protocol["reference"]] + [arm for arm in protocol["arms"] if arm != protocol["reference"]]


def iterations_that_fit(left: float, first_wall: float, validation: float, build: float, arms: int) -> int:
    """N, the iterations every arm can run: the first arm has run 1 of them; what is ``left`` must hold its other
    N - 1, then for each later arm a trainer's build, N iterations, and every arm's closing validation (arms side
    by side: ``arms=1``, ``build=0``, with the slowest arm's first iteration)."""
    n = (left - arms * closing_seconds(validation) - (arms - 1) * build + first_wall) / (arms * first_wall)
    return max(1, int(n))


def has_after_outcomes(report: dict[str, Any]) -> bool:
    return any(key.startswith("after_") for key in report.get("outcomes", {}))


def save(report: dict[str, Any], out: Path) -> None:
    write_report(report, out, render)


def load(flag: str, preset: str, extra: list[str]) -> Any:
    """``preset`` with ``extra`` overrides; a preset not found or an override it refuses is the one-line error."""
    from ecpo_train.runtime.config import load_config

    try:
        return load_config(preset, extra)
    except (FileNotFoundError, ValueError) as error:
        fail(f"{flag}: {' '.join(str(error).split())}")


def arm_configs(args: argparse.Namespace, work: Path) -> tuple[Any, Any, list[str]]:
    """The arms' config and the warm start's, each loaded once with the overrides the run uses; a missing model, a
    preset not found or an override it refuses is the command's one-line error (exit 2), before any model loads."""
    try:
        _, overrides = learning_overrides(args, work)
    except FileNotFoundError as error:
        fail(f"--model: {error}")
    seed = [f"seed={args.seed}"] if args.seed is not None else []
    config = load("--preset", args.preset, overrides + seed + [f"run_dir={work / 'arm0'}"])
    if args.smoke and config.train_tasks:  # the smoke validation then holds a trained task and an unseen one
        config = dataclasses.replace(config, val_tasks=[config.train_tasks[0], "gen/Pick/10000"])
        overrides.append(f"val_tasks=[{config.train_tasks[0]},gen/Pick/10000]")
    sft_config = load("--sft-preset", args.sft_preset or args.preset, overrides + [f"run_dir={work / 'sft'}"])
    return config, sft_config, overrides


def plan_for(args: argparse.Namespace, config: Any) -> dict[str, Any] | None:
    """How many seed pairs one 15-minute window holds for this command's sizes, at the first GPU run's rates
    (``None`` where its JSON is absent, and for the smoke's sizes)."""
    if args.smoke or not GPU_RUN.is_file():
        return None
    plan = window_plan(first_run_rates(), iterations=args.iterations or config.iterations,
                       episodes_per_iteration=config.n_groups * config.group_size,
                       validation_episodes=len(config.val_tasks) * config.val_episodes_per_task,
                       sft_episodes=args.sft_episodes, arms=len(args.arms))
    return plan | {"text": plan_text(plan)}


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
                              "sft_seed": sft_config.seed, "parallel": args.parallel,
                              "window_plan": plan_for(args, config), "results": {}, "comparisons": {}}
    if trained:
        report |= {"train_task_count": len(trained), "train_tasks": sorted(trained), "by_part": {}}
    report["sft"] = run_sft(sft_config, episodes=args.sft_episodes, epochs=args.sft_epochs, lr=args.sft_lr,
                            out=work / "sft_model") | {"seconds": time.monotonic() - started}
    save(report, out)

    seed = [f"seed={args.seed}"] if args.seed is not None else []
    specs = [{"arm": arm, "preset": args.preset, "device": args.device, "score_batch": args.score_batch,
              "deadline": deadline, "overrides": [*overrides, *seed, f"model={work / 'sft_model'}",
                                                  f"estimator={arm}", f"run_dir={work / f'arm{k}'}"]}
             for k, arm in enumerate(args.arms)]
    run, _ = open_arm(specs[0] | {"overrides": [*specs[0]["overrides"], f"run_dir={work / 'before'}"]},
                      overwrite=True)
    with run:
        before, seconds = validate_both(run)
    report["outcomes"] = {"before": before["sampled"], "greedy_before": before["greedy"]}
    report |= {"validation_seconds": seconds, "validation_episodes": len(before["sampled"]),
               "iterations": args.iterations}
    save(report, out)

    # side by side, each arm may be up to len(arms) times slower than alone: its closing validations too
    reserve = closing_seconds(seconds * (len(args.arms) if args.parallel else 1))
    specs = [spec | {"reserve": reserve} for spec in specs]

    def decide(walls: list[float], builds: list[float]) -> int:
        if args.parallel:  # the slowest arm's first iteration; the closing validations side by side
            n = iterations_that_fit(deadline - time.time(), max(walls), seconds * len(args.arms), 0.0, 1)
        else:  # the first arm's; the later arms each build, run N iterations and validate after it
            n = iterations_that_fit(deadline - time.time(), walls[0], seconds, builds[0], len(args.arms))
        report["iterations"] = args.iterations or min(args.max_iterations, n)
        return report["iterations"]

    def kept(arm: str, result: dict[str, Any]) -> None:
        keep(report, arm, result)
        save(report, out)

    if args.parallel:
        failed = run_side_by_side(specs, run_arm, work, decide, out.with_suffix(""), kept)
        if failed:
            report["stopped"] = str(failed)
    else:
        run_one_after_another(specs, run_arm, decide, kept)
    report["seconds"] = time.monotonic() - started
    if report["window_plan"]:
        report["window_plan"]["measured_pair_seconds"] = report["seconds"]
    save(score(report), out)
    return report


def keep(report: dict[str, Any], arm: str, result: dict[str, Any]) -> None:
    """An arm's result in the report: its figures under ``results``, its outcomes beside the others, scored."""
    outcomes = result.pop("outcomes")
    report["results"][arm] = result
    report["outcomes"] |= {f"after_{arm}": outcomes["sampled"], f"greedy_after_{arm}": outcomes["greedy"]}
    if result.get("stopped"):
        report["stopped"] = f"{arm}: {result['stopped']}"
    score(report)


# The options each stage reads: any other given is refused in one line (benchmarks.study).
RUN_OPTIONS = ("device", "smoke", "arms", "registered", "time_limit", "iterations", "max_iterations", "model", "preset",
               "sft_preset", "seed", "sft_episodes", "sft_epochs", "sft_lr", "score_batch", "parallel", "out")
STAGE_OPTIONS = {"run": RUN_OPTIONS, "plan": ("arms", "registered", "iterations", "preset", "sft_episodes"),
                 "report": ("from_json", "out"), "seeds": ("from_json", "out")}
DEFAULTS = {"device": "cuda", "smoke": False, "arms": ["ecpo", "gigpo_std"], "registered": False,
            "time_limit": 450.0, "max_iterations": 200, "model": str(DEFAULT_MODEL), "preset": "alfworld_gpu",
            "sft_episodes": 96, "sft_epochs": 2, "sft_lr": 1e-5, "score_batch": 64}


def main(argv: list[str] | None = None) -> Any:
    from benchmarks.study import StudyCommand

    command = StudyCommand(__spec__.name, __doc__.split("\n\n")[0], STAGE_OPTIONS,
                           "run: one seed's pair; plan: how many seed pairs one 15-minute window holds for these "
                           "sizes; report: a returned report's paired tests again (where scipy is); seeds: the "
                           "reports of one protocol, one per seed, summarised (the seed as the unit)", DEFAULTS)
    command.add("--device", help="run: default cuda")
    command.add("--smoke", action="store_const", const=True, help="run: tiny sizes on any device (for tests)")
    command.add("--arms", nargs="+", help="run, plan: credit estimators, first = ECPO (default ecpo gigpo_std)")
    command.add("--registered", action="store_const", const=True,
                help="run, plan: the arms of issue 57's registered comparison (benchmarks/estimator_comparison.yaml), "
                     "its reference GiGPO w/std first; replaces --arms")
    command.add("--time-limit", type=float, help="run: seconds for the whole command (default 450)")
    command.add("--iterations", type=int, help="run, plan: iterations per arm (default: what fits)")
    command.add("--max-iterations", type=int, help="run: default 200")
    command.add("--model", help="run: SmolLM2 folder")
    command.add("--preset", help="run, plan: default alfworld_gpu")
    command.add("--sft-preset", help="run: the preset whose task order and seed make the warm start (default: --preset)")
    command.add("--seed", type=int, help="run: the arms' seed (default: the preset's)")
    command.add("--sft-episodes", type=int, help="run, plan: default 96")
    command.add("--sft-epochs", type=int, help="run: default 2")
    command.add("--sft-lr", type=float, help="run: default 1e-5")
    command.add("--score-batch", type=int, help="run, on CUDA: items per scoring forward (default 64)")
    command.add("--parallel", action=argparse.BooleanOptionalAction,
                help="run: the arms side by side, a process each on the one device (default: on CUDA)")
    command.add("--out", type=Path, help="run: the report (default benchmarks/results/gpu_comparison.json on CUDA); "
                                         "report: where the rescored report goes (default: over itself); seeds: the "
                                         "summary's JSON (its markdown beside it)")
    command.add("--from-json", type=Path, nargs="+", metavar="JSON",
                help="report: a returned report (one); seeds: gpu_comparison reports, one per seed")
    args = command.parse(argv)
    if args is None:
        return 2
    if args.stage in ("report", "seeds") and not args.from_json:
        fail(f"{args.stage} needs --from-json JSON")
    if args.stage == "seeds":
        from benchmarks import comparison_seeds

        return comparison_seeds.summarise_reports(args.from_json, args.out)
    if args.stage == "report":
        if len(args.from_json) != 1:
            fail("report --from-json: give one report (seeds summarises several)")
        rescore(args.from_json[0], args.out, has_after_outcomes,
                "it holds no outcomes after training (the run stopped before its first closing validation)",
                score, render)
        return 0
    if args.registered:
        args.arms = registered_arms()
    if len(args.arms) < 2 or len(set(args.arms)) != len(args.arms):
        fail(f"--arms {' '.join(args.arms)}: give two or more different estimators, the first the one the others "
             "are compared with")
    from ecpo_train.core.credit.registry import available_estimators

    unknown = [a for a in args.arms if a not in available_estimators()]
    if unknown:
        fail(f"--arms: unknown estimator {unknown[0]!r}; valid: {', '.join(available_estimators())}")
    if args.stage == "plan":
        plan = plan_for(args, load("--preset", args.preset, []))
        print(plan["text"] if plan else f"no first GPU run to plan from ({GPU_RUN.name} is absent)")
        return 0
    if args.parallel is None:
        args.parallel = args.device.startswith("cuda")
    if refuse_without_cuda(args.device, "gpu_comparison"):
        return 2
    if args.smoke:
        args.sft_episodes, args.sft_epochs, args.max_iterations = 2, 1, min(args.max_iterations, 2)
    out = args.out or (RESULTS / "gpu_comparison.json" if args.device.startswith("cuda") and not args.smoke
                       else ROOT / "runs" / "gpu_comparison.json")
    with tempfile.TemporaryDirectory(prefix="gpu_comparison-") as tmp:
        run(args, Path(tmp), out, arm_configs(args, Path(tmp)))
    print(f"wrote {out} and {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
