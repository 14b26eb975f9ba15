"""ECPO against GiGPO w/std on one GPU: the same warm start, the same rollout seeds, the same validation episodes.

The first GPU run (``benchmarks/gpu_run.py`` part 4, one H100) showed ECPO's update learning unseen ALFWorld
households in 24 iterations of the ``alfworld_gpu`` preset. This command asks the paper's question on that
setting, in one command of at most 10 minutes:

1. ``ecpo sft``'s expert warm start on training households (``run_sft``, as part 4);
2. the validation before training on the preset's 800 unseen episodes (400 tasks x 2, every choice's random draw
   fixed by (seed, copy, step)): validation does not depend on the credit estimator, so one serves every arm;
3. for each arm (``--arms``, default ``ecpo gigpo_std``), a trainer from the warm start with that estimator and
   the same seed (the first iteration's rollouts are the same for every arm), N iterations, then the validation
   again. N is the same for every arm, sized from the first arm's first iteration so every arm and its closing
   validation fit the time limit (``--iterations`` fixes it instead);
4. the report: each arm's success before and after (paired, McNemar-consistent exact interval, MDE), and each
   later arm against the first on the same 800 episodes after training.

**Registered endpoint, fixed before any run of this command** (2026-11-26): success on the 800 unseen validation
episodes after N iterations, first arm (ECPO) minus second arm (GiGPO w/std), paired episode by episode, with
McNemar's exact test and its consistent interval at 0.95. ECPO is better (or worse) only if the interval excludes
0; otherwise "not shown", with the MDE. The training-task line of part 4 is not repeated here (time).

**On a preset with a fixed training pool** (``train_tasks``, e.g. ``alfworld_cpu_pool``; fixed 2026-11-26 before
any such run): each arm's after - before and the ECPO - GiGPO w/std comparison are also given on the validation
episodes of the trained tasks (primary, as in that preset's registered endpoint) and of the others (secondary).
``--sft-preset alfworld_cpu --sft-episodes 48`` makes that preset's warm start (its task order, not the pool's),
and ``--seed`` gives the arms a seed other than the preset's (the warm start keeps its preset's), so a lease can
run the protocol's ECPO vs GiGPO w/std pairs seed by seed.

    python -m benchmarks.gpu_comparison [--arms ecpo gigpo_std] [--time-limit 450] [--model DIR] [--out FILE]
    python -m benchmarks.gpu_comparison --preset alfworld_cpu_pool --sft-preset alfworld_cpu --sft-episodes 48 \
        --iterations 16 --seed 1
    python -m benchmarks.gpu_comparison --device cpu --smoke     # every step on tiny sizes (about a minute)

Results go to ``benchmarks/results/gpu_comparison.{json,md}`` on CUDA (``runs/gpu_comparison.json`` otherwise),
written after every stage, so a command stopped early returns what it finished.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import RESULTS, ArgumentParser, fail, refuse_without_cuda, rescore, write_report
from benchmarks.gpu_learning import (
    DEFAULT_MODEL,
    ROOT,
    iteration_figures,
    learning_overrides,
    mean_figures,
    validate_on,
    write_smoke_model,
)
from benchmarks.gpu_run import device_facts
from benchmarks.gpu_run_report import paired_test
from benchmarks.validation_parts import label, split

CLOSING_MARGIN = 1.15  # a closing validation's time, as a multiple of the one before training (plus 10 s)


def iterations_that_fit(left: float, first_wall: float, validation: float, build: float, arms: int) -> int:
    """N, the iterations every arm can run: the first arm has run 1 of them; what is ``left`` must hold its other
    N - 1, then for each later arm a trainer's build, N iterations, and every arm's closing validation."""
    closing = CLOSING_MARGIN * validation + 10.0
    n = (left - arms * closing - (arms - 1) * build + first_wall) / (arms * first_wall)
    return max(1, int(n))


def render(report: dict[str, Any]) -> str:
    """The markdown of a comparison JSON (whatever stages it holds)."""
    env = report.get("environment", {})
    smoke = " (smoke sizes: not a measurement)" if report.get("smoke") else ""
    lines = [f"# ECPO against GiGPO w/std on one GPU ({env.get('gpu') or env.get('device', 'unknown device')})", "",
             (f"Written by `benchmarks/gpu_comparison.py`{smoke}. Preset `{report.get('preset')}`, warm start "
              f"{(report.get('sft') or {}).get('steps', 'n/a')} expert steps; {report.get('iterations', 'n/a')} "
              "iterations per arm."), ""]
    for arm in report.get("arms", []):
        test = report.get("results", {}).get(arm, {}).get("gain")
        done = report.get("results", {}).get(arm, {}).get("iterations_done")
        if test:
            lines.append(f"- {arm} ({done} iterations): {_paired(test)}")
        elif arm in report.get("results", {}):
            lines.append(f"- {arm}: {done} iterations done, closing validation not reached")
        regime = _regime(report.get("results", {}).get(arm, {}).get("rates", {}))
        if regime:
            lines.append(f"  - regime, mean over iterations: {regime}")
    for name, test in report.get("comparisons", {}).items():
        first, other = name.split(" - ")
        lines += ["", (f"**Registered endpoint, {name}** after training, on the same {test['episodes']} episodes: "
                       f"{first} {test['success_after']:.3f}, {other} {test['success_before']:.3f}")]
        if "gained" not in test:
            lines.append(f"(paired test {test.get('test', 'not computed')})")
        elif test["gained"] + test["lost"] == 0:
            lines.append("(no episode differs between the two)")
        else:
            verdict = "not shown: the interval holds 0" if test["low"] <= 0 <= test["high"] else \
                f"{first} {'better' if test['diff'] > 0 else 'worse'}"
            lines.append(f"({first} won {test['gained']} episodes {other} lost, {test['lost']} the other way): "
                         f"{test['diff']:+.3f} [{test['low']:+.3f}, {test['high']:+.3f}] (exact, McNemar-consistent),"
                         f" p = {test['p']:.3g}, MDE {test['mde']:.3f}; {verdict}.")
    by_part = report.get("by_part", {})
    if by_part:
        lines += ["", f"By part of the validation ({report.get('train_task_count')} trained tasks; the rest unseen):"]
        for name, parts in by_part.items():
            for part, test in parts.items():
                lines.append(f"- {name}, {label(part)}: {_paired(test)}")
    if report.get("stopped"):
        lines += ["", f"Stopped early: {report['stopped']}"]
    return "\n".join(lines) + "\n"


def _regime(rates: dict[str, float]) -> str:
    """Whether the arm ran where ECPO should differ: gate-open share, lucky singletons, divergent anchors."""
    parts = []
    if "credit/gated_fraction" in rates:
        parts.append(f"the gate open at {1 - rates['credit/gated_fraction']:.2f} of anchors")
    if "credit/num_lucky_singletons" in rates:
        parts.append(f"{rates['credit/num_lucky_singletons']:.1f} lucky singletons per batch")
    if "credit/divergent_anchor_fraction" in rates:
        parts.append(f"{rates['credit/divergent_anchor_fraction']:.2f} of anchors divergent")
    return ", ".join(parts)


def _paired(test: dict[str, Any]) -> str:
    text = f"{test['success_before']:.3f} -> {test['success_after']:.3f} on {test['episodes']} paired episodes"
    if "gained" not in test:
        return f"{text}; paired test {test.get('test', 'not computed')}"
    if test["gained"] + test["lost"] == 0:
        return f"{text}; no episode changed its outcome"
    return (f"{text} ({test['gained']} gained, {test['lost']} lost): {test['diff']:+.3f} [{test['low']:+.3f}, "
            f"{test['high']:+.3f}] (exact, McNemar-consistent), p = {test['p']:.3g}, MDE {test['mde']:.3f}")


def split_parts(trained: frozenset[str], first: list[list], second: list[list]) -> dict[str, dict[str, Any]]:
    """``paired_test(first, second)`` on the episodes of the trained tasks and on the others (parts that hold no
    episode are left out)."""
    ours, theirs = (split([o[0] for o in side], trained) for side in (first, second))
    return {name: paired_test([first[i] for i in idx], [second[i] for i in theirs.get(name, [])])
            for name, idx in ours.items()}


def score(report: dict[str, Any]) -> dict[str, Any]:
    """The paired tests of a report, from its stored outcomes: each arm's after - before, the first arm against
    each later one, and both by part where the preset has a training pool. The GPU machine has no scipy, so there
    the tests read "not computed"; ``--rescore`` runs this again here on the JSON it returned."""
    outcomes = report.get("outcomes", {})
    before, arms = outcomes.get("before"), report.get("arms", [])
    trained = frozenset(report.get("train_tasks") or [])
    done = [a for a in arms if f"after_{a}" in outcomes and a in report.get("results", {})]
    for arm in done:
        after = outcomes[f"after_{arm}"]
        report["results"][arm]["gain"] = paired_test(before, after)
        if trained:
            report["by_part"][f"{arm} after - before"] = split_parts(trained, before, after)
        if arm != arms[0] and arms[0] in done:
            name = f"{arms[0]} - {arm}"
            report["comparisons"][name] = paired_test(after, outcomes[f"after_{arms[0]}"])
            if trained:
                report["by_part"][name] = split_parts(trained, after, outcomes[f"after_{arms[0]}"])
    return report


def save(report: dict[str, Any], out: Path) -> None:
    write_report(report, out, render)


def train_arm(trainer: Any, iterations: int, deadline: float, reserve: float) -> tuple[list[dict], str | None]:
    """Up to ``iterations`` iterations of ``trainer``, stopping early where the next one and ``reserve`` would pass
    ``deadline``; returns each iteration's figures (with its wall time) and why it stopped early, if it did."""
    rows: list[dict[str, float]] = []
    while len(rows) < iterations:
        started = time.monotonic()
        rows.append(iteration_figures(trainer.train_iteration()) | {"wall": 0.0})
        rows[-1]["wall"] = time.monotonic() - started
        mean_wall = float(np.mean([r["wall"] for r in rows]))
        if len(rows) < iterations and time.monotonic() + mean_wall + reserve > deadline:
            return rows, f"time limit after {len(rows)} of {iterations} iterations"
    return rows, None


def arm_configs(args: argparse.Namespace, work: Path) -> tuple[Any, Any, list[str]]:
    """The arms' config and the warm start's, each loaded once with the overrides the run uses; a missing model, a
    preset not found or an override it refuses is the command's one-line error (exit 2), before any model loads."""
    from ecpo_train.runtime.config import load_config

    def load(flag: str, preset: str, extra: list[str]) -> Any:
        try:
            return load_config(preset, extra)
        except (FileNotFoundError, ValueError) as error:
            fail(f"{flag}: {' '.join(str(error).split())}")

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


def run(args: argparse.Namespace, work: Path, out: Path, configs: tuple[Any, Any, list[str]]) -> dict[str, Any]:
    from ecpo_train.apps.sft import run_sft
    from ecpo_train.runtime.trainer import Trainer

    started = time.monotonic()
    deadline = started + args.time_limit
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
    save(report, out)

    before: list[list] = []
    afters: dict[str, list[list]] = {}
    iterations = args.iterations
    build_seconds = 0.0
    for k, arm in enumerate(args.arms):
        built = time.monotonic()
        arm_config = dataclasses.replace(config, model=str(work / "sft_model"), algorithm=arm,
                                         run_dir=str(work / f"arm{k}"))
        trainer = Trainer(arm_config)
        if args.device.startswith("cuda"):
            trainer.policy.score_batch_size = args.score_batch
        build_seconds = max(build_seconds, time.monotonic() - built)
        try:
            if k == 0:
                before, seconds = validate_on(trainer)
                report |= {"validation_seconds": seconds, "validation_episodes": len(before)}
                save(report, out)
            reserve = CLOSING_MARGIN * report["validation_seconds"] + 10.0
            later = len(args.arms) - k - 1  # what the later arms need after this one
            done: list[dict[str, float]] = []
            if iterations is None:  # sized from this (the first) arm's first iteration
                done, _ = train_arm(trainer, 1, deadline, reserve)
                iterations = min(args.max_iterations, iterations_that_fit(
                    deadline - time.monotonic(), done[0]["wall"], report["validation_seconds"], build_seconds,
                    len(args.arms)))
            report["iterations"] = iterations
            first_rows = report["results"][args.arms[0]]["per_iteration"] if k > 0 else done
            mean_wall = float(np.mean([r["wall"] for r in first_rows])) if first_rows else 0.0
            per_arm = iterations * mean_wall + reserve + build_seconds  # what each later arm is left
            rows, stopped = train_arm(trainer, iterations - len(done), deadline - later * per_arm, reserve)
            rows = done + rows
            result = {"iterations_done": len(rows), "per_iteration": rows, "rates": mean_figures(rows)}
            if stopped:
                result["stopped"] = stopped
                report["stopped"] = f"{arm}: {stopped}"
            report["results"][arm] = result
            save(report, out)
            after, _ = validate_on(trainer)
        finally:
            trainer.close()
        afters[arm] = after
        report["outcomes"] = {"before": before} | {f"after_{a}": o for a, o in afters.items()}
        score(report)
        save(report, out)
    report["seconds"] = time.monotonic() - started
    save(report, out)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(__spec__.name, description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes on any device (for tests)")
    parser.add_argument("--arms", nargs="+", default=["ecpo", "gigpo_std"], help="credit estimators, first = ECPO")
    parser.add_argument("--time-limit", type=float, default=450.0, help="seconds for the whole command")
    parser.add_argument("--iterations", type=int, default=None, help="iterations per arm (default: what fits)")
    parser.add_argument("--max-iterations", type=int, default=200)
    parser.add_argument("--model", default=str(DEFAULT_MODEL), help="SmolLM2 folder")
    parser.add_argument("--preset", default="alfworld_gpu")
    parser.add_argument("--sft-preset", default=None,
                        help="the preset whose task order and seed make the warm start (default: --preset)")
    parser.add_argument("--seed", type=int, default=None, help="the arms' seed (default: the preset's)")
    parser.add_argument("--sft-episodes", type=int, default=96)
    parser.add_argument("--sft-epochs", type=int, default=2)
    parser.add_argument("--sft-lr", type=float, default=1e-5)
    parser.add_argument("--score-batch", type=int, default=64, help="on CUDA: items per scoring forward")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--rescore", type=Path, default=None, metavar="JSON",
                        help="recompute the paired tests of a returned report (where scipy is) and rewrite it "
                             "(to --out if given) with its markdown")
    args = parser.parse_args(argv)
    if args.rescore is not None:
        rescore(args.rescore, args.out, "outcomes",
                "it holds no outcomes (the run stopped before its first closing validation)", score, render)
        return 0
    if len(args.arms) < 2 or len(set(args.arms)) != len(args.arms):
        fail(f"--arms {' '.join(args.arms)}: give two or more different estimators, the first the one the others "
             "are compared with")
    from ecpo_train.core.credit.registry import available_estimators

    unknown = [a for a in args.arms if a not in available_estimators()]
    if unknown:
        fail(f"--arms: unknown estimator {unknown[0]!r}; valid: {', '.join(available_estimators())}")
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
