"""The paper's benchmarks with SmolLM2-135M-Instruct on one GPU: real ALFWorld games, WebShop, search-QA.

The stages, each ``--env``'s training and validation tasks (``BENCHMARKS`` below), the commands, the files each
needs and their minutes: docs/gpu.md ("The paper's benchmarks on one GPU"). Found only here: one command owns ``OUT``
at a time (``OUT/run.lock``: a second one is refused in one line naming the first); a resumed arm restarts AdamW's
moments (the presets save no optimizer state); WebShop runs on the generated catalogue because the real product
files cannot be had; search-QA generates its replies (the answer is open text a scoring policy cannot choose among);
the arms run side by side because the sampler is host-bound (``results/generation_profile.json``).

**Registered endpoints, fixed 2026-11-27 before any GPU run of this program.** Primary, for each benchmark: the
first arm's (ECPO's) success on all validation episodes after training minus before (ALFWorld: ``valid_seen``
All; WebShop: success on the 100 held-out goals x 2; search-QA: exact match on the 100 HotpotQA questions x 2 and
the generated set's 100 x 2 together, All), paired episode by episode, with the interval of
``stats.paired_outcomes`` at 0.95: learning is *shown* only where the interval lies above 0, otherwise
"not shown" with the MDE. Where both arms ran the same number of iterations: ECPO's success after minus GiGPO
w/std's after, on the same episodes, read the same way (ECPO better only where the interval excludes 0). Search-QA:
where the invalid-action rate exceeds 0.5 both before and after, no learning figure is read; the rate is the
result. The per-column changes (task types, WebShop's score, the separate QA sets) are secondary. The report is
read once, on the JSON the GPU run returns (``report --from-json``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import (
    arms,
    count,
    fail,
    natural,
    positive,
    refuse_without_cuda,
    rescore,
    write_json,
    write_report,
)
from benchmarks.gpu_learning import mean_figures, write_smoke_model
from benchmarks.gpu_run import device_facts
from benchmarks.paired_report import render_table, score_table
from ecpo_train.evaluation.tables import ALFWORLD_COLUMNS

REPORT = "report.json"  # the program's stages so far (the arm reads its training tasks there)
PLAN = "plan.json"  # the iterations every arm runs, fixed once by the slowest arm's first iteration


@dataclass(frozen=True)
class ValidationSet:
    """Validation episodes of one benchmark: a committed manifest's group, on its own environment."""

    manifest: str
    group: str
    first: int | None = None  # only the manifest group's first N tasks


@dataclass(frozen=True)
class Benchmark:
    title: str
    preset: str  # the recipe the program starts from
    overrides: tuple[str, ...]  # what makes the preset this benchmark (the paper's shape, its environment)
    validation: dict[str, ValidationSet]
    train_after: int = 0  # train on the environment's tasks from this position on (the earlier ones are held out)
    type_balanced: bool = False  # the warm start takes K tasks of each task type (ALFWorld), else 6 K tasks
    smoke_steps: int = 3  # an episode's steps under --smoke


PAPER_SHAPE = ("n_groups=16", "group_size=8", "val_before_training=false", "val_every=0", "checkpoint_every=0")
BENCHMARKS = {
    "alfworld": Benchmark(
        "Real ALFWorld games", "alfworld_gpu",
        (*PAPER_SHAPE, "env_id=ecpo/ALFWorld-v0", "env_kwargs={split: train}", "val_tasks=null", "credit={d_min: 7}"),
        {"valid_seen": ValidationSet("alfworld_valid_seen", "valid_seen")}, type_balanced=True),
    "webshop": Benchmark(
        "WebShop (generated catalogue)", "webshop_cpu",
        (*PAPER_SHAPE, "env_kwargs={}", "train_tasks=null", "val_tasks=null"),
        {"webshop_gen": ValidationSet("webshop_gen", "gen")}, train_after=100),
    "searchqa": Benchmark(
        "Search-QA (HotpotQA dev500 and the generated world)", "searchqa",
        (*PAPER_SHAPE, "env_id=ecpo/SearchQA-v0", "env_kwargs={dataset: hotpotqa, split: dev500}",
         "dtype=float32", "max_prompt_length=2048",
         "max_response_length=96", "mini_batch_size=64", "micro_batch_size=16", "lr=3.0e-6",
         "lr_warmup_steps=9", "kl_coef=0.0", "rollout_temperature=0.4", "env_workers=0", "val_tasks=null"),
        {"hotpotqa": ValidationSet("searchqa", "hotpotqa", first=100),
         "searchqa_gen_single_hop": ValidationSet("searchqa_gen", "single_hop"),
         "searchqa_gen_two_hop": ValidationSet("searchqa_gen", "two_hop")}, train_after=100, smoke_steps=2),
}


# ---------------------------------------------------------------------------------------------- setup
def validation_tasks(spec: Benchmark, smoke: bool) -> dict[str, tuple[str, dict, list[str]]]:
    """``{set: (env_id, env_kwargs, task ids)}`` of the benchmark's validation (under --smoke: one task of each
    ALFWorld task type, else two tasks per set)."""
    from ecpo_gym.alfworld.game_files import subtask_of
    from ecpo_train.evaluation.manifests import load_manifest

    out = {}
    for name, vset in spec.validation.items():
        manifest = load_manifest(vset.manifest)
        group = next(g for g in manifest.groups if g.name == vset.group)
        tasks = list(group.task_ids or [])[: vset.first]
        if smoke:
            tasks = list({subtask_of(t): t for t in tasks}.values()) if manifest.benchmark == "alfworld" else tasks[:2]
        out[name] = (manifest.env_id, manifest.group_env_kwargs(group), tasks)
    return out


def warm_start_tasks(spec: Benchmark, train_ids: list[str], per_type: int) -> list[str]:
    """The warm start's training tasks (docs/gpu.md): in a permutation of seed 0, ``per_type`` of
    each ALFWorld task type (interleaved type by type), or ``6 * per_type`` tasks of the others."""
    order = [train_ids[i] for i in np.random.default_rng(0).permutation(len(train_ids))]
    if not spec.type_balanced:
        return order[: 6 * per_type]
    from ecpo_gym.alfworld.game_files import subtask_of

    by_type = {t: [g for g in order if subtask_of(g) == t][:per_type] for t in ALFWORLD_COLUMNS[:-1]}
    return [games[k] for k in range(per_type) for games in by_type.values() if k < len(games)]


def load_configs(args: argparse.Namespace, work: Path) -> tuple[Any, list[str]]:
    """The arms' config (the benchmark's preset with its overrides, then the model, the device and the smoke sizes
    of ``arms.run_overrides``, less its generated households) and its override list; a bad value or a missing model
    is the one-line exit 2, before any model loads."""
    spec = BENCHMARKS[args.env]
    overrides = [*spec.overrides, *(o for o in arms.run_overrides(args, work)
                                    if not o.startswith(("env_kwargs=", "val_tasks=")))]
    if args.smoke:
        overrides.append(f"env_kwargs.max_steps={spec.smoke_steps}")
    elif not args.device.startswith("cuda"):
        overrides.append("mixed_precision=none")  # bf16 autocast is the GPU's
    overrides += [f"seed={args.seed}", f"val_episodes_per_task={args.val_episodes}"]
    return arms.load_preset(f"--env {args.env}", spec.preset, [*overrides, f"run_dir={work / 'arm'}"]), overrides


def training_tasks(config: Any, spec: Benchmark) -> list[str]:
    """The environment's task ids from ``spec.train_after`` on (``ValueError``/``OSError`` where its data is
    missing: the one-line refusal)."""
    import gymnasium as gym

    import ecpo_gym  # noqa: F401  (registers the ids)

    with gym.make(config.env_id, disable_env_checker=True, **config.env_kwargs) as env:
        return [str(t) for t in env.unwrapped.task_ids][spec.train_after:]


# ---------------------------------------------------------------------------------------------- stages
class Stages:
    """The out folder: ``report.json`` (every stage's results), the warm start's model, the plan, each arm's run
    folder and ``arm_<name>.json``."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.path = out / REPORT
        self.report: dict[str, Any] = read_record(self.path) or {}  # (one line naming it if cut or foreign)

    def save(self) -> None:
        """``report.json`` with each arm's progress read from its run folder (``arm_result``), a closing validation
        only where it was taken at that progress."""
        for arm in self.report.get("arms", []):
            result = arm_result(self.out, arm)
            after = result.pop("after", None)
            self.report.setdefault("arm_results", {})[arm] = result
            if after is not None:
                self.report.setdefault("episodes", {})[f"after_{arm}"] = after
            else:
                self.report.get("episodes", {}).pop(f"after_{arm}", None)
        write_report(score_table(self.report), self.path, render_table)

    def plan(self) -> int | None:
        record = read_record(self.out / PLAN, ("iterations",))
        n = record and record["iterations"]
        if record and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
            raise ValueError(f"{self.out / PLAN}: iterations={n!r} is not a count; delete it to plan again")
        return n


# ---------------------------------------------------------------------------------------------- the arms
def validate(run: Any, sets: dict[str, tuple[str, dict, list[str]]]) -> tuple[list[dict], float]:
    """Every validation set once, each on its own environment, through the native validation pass
    (``builders.validation_outcome``: the draws fixed by (seed, copy, step)), recorded in the run's
    ``validation.jsonl`` under its name; the episodes (``paired_report``) and the seconds taken."""
    from ecpo_gym.group import GroupVectorEnv
    from ecpo_train.core.tasks import validation_seed
    from ecpo_train.runtime.builders import validation_outcome

    started = time.perf_counter()
    trainer, cfg, episodes = run.engine, run.config, []
    for name, (env_id, env_kwargs, tasks) in sets.items():
        env_kwargs = {**env_kwargs, **{k: v for k, v in cfg.env_kwargs.items() if k == "max_steps"}}
        config = dataclasses.replace(cfg, env_id=env_id, env_kwargs=env_kwargs)
        envs = GroupVectorEnv(env_id, len(tasks), cfg.val_episodes_per_task, env_kwargs=env_kwargs)
        try:
            played, _ = validation_outcome(trainer.policy, config, envs, tasks, validation_seed(cfg.seed))
        finally:
            envs.close()
        run.log.append_validation(trainer.iteration, played, tasks=name)
        copies: dict[str, int] = {}
        for e in played:
            copies[e.task_id] = copies.get(e.task_id, -1) + 1
            graded = next((e.final_info[k] for k in ("score", "em") if e.final_info.get(k) is not None), e.won)
            episodes.append({"set": name, "task": e.task_id, "copy": copies[e.task_id], "type": e.task_type,
                             "won": int(e.won), "score": float(graded), "invalid": int(e.invalid_steps),
                             "steps": int(e.length)})
    return episodes, time.perf_counter() - started


def read_record(path: Path, keys: tuple[str, ...] = ()) -> dict[str, Any] | None:
    """The JSON object in ``path`` (``None`` where there is none) holding ``keys``; anything else (cut, empty, a
    list, a key missing) is one ``ValueError`` naming the file."""
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"{path} cannot be read ({type(error).__name__}); delete it to redo its stage") from None
    missing = [key for key in keys if not isinstance(record, dict) or key not in record]
    if not isinstance(record, dict) or missing:
        raise ValueError(f"{path} is not this program's record (no {', '.join(missing) or 'mapping'}); delete it to "
                         "redo its stage")
    return record


def arm_progress(run_dir: Path) -> list[dict[str, float]]:
    """An arm's iterations done, from its run folder alone: each iteration's :func:`benchmarks.arms.arm_row` that
    ``metrics.jsonl`` logged up to the checkpoint's iteration. A line logged after the checkpoint (a kill before
    the checkpoint was written) is not done: the resume trains it again."""
    from ecpo_train.runtime.checkpoint_io import checkpoint_iteration
    from ecpo_train.runtime.run_dir import RunFolder, read_metrics_file

    folder = RunFolder(run_dir)
    done = checkpoint_iteration(folder.checkpoint()) if folder.checkpoint().is_file() else 0
    if not done or not folder.metrics.is_file():
        return []
    rows = [row for row in read_metrics_file(folder.metrics)[0] if 0 < row.get("iteration", 0) <= done]
    if any("time/iteration" not in row for row in rows):
        raise ValueError(f"{folder.metrics} holds iterations without time/iteration: not an arm of this program; "
                         "give another --out")
    return [arms.arm_row(row) for row in rows]


def arm_result(out: Path, arm: str) -> dict[str, Any]:
    """What the report holds of an arm: its iterations from its run folder (:func:`arm_progress`), why it stopped
    early and its closing validation where ``arm_<arm>.json`` recorded them at that same iteration."""
    rows = arm_progress(out / f"run_{arm}")
    record = read_record(out / f"arm_{arm}.json", ("iteration",)) or {"iteration": -1}
    current = record["iteration"] == len(rows)
    return ({"iterations_done": len(rows), "per_iteration": rows, "rates": mean_figures(rows)}
            | ({"stopped": record["stopped"]} if current and record.get("stopped") else {})
            | ({"after": record["after"]} if current and "after" in record else {}))


def run_arm(spec: dict[str, Any], plan: arms.Plan) -> dict[str, Any]:
    """One arm (``benchmarks.arms`` runs it; ``spec``: the arms' config, the out folder, the validation ``sets``): a
    run from the warm start in ``OUT/run_<arm>``, started or resumed by the run shell (``runtime.run.open_run``),
    iterations up to the plan, each checkpointed, then the closing validation. ``OUT/arm_<arm>.json`` (written
    whole) only records, at an iteration, why the arm stopped or its closing validation."""
    from ecpo_train.runtime.resume import RESUME_OR_START
    from ecpo_train.runtime.run_dir import RunFolder, holds_run

    out, arm = Path(spec["out"]), spec["arm"]
    path, run_dir = out / f"arm_{arm}.json", out / f"run_{arm}"
    if "after" in arm_result(out, arm):
        return arm_result(out, arm)
    train_tasks = read_record(out / REPORT, ("train_tasks",))["train_tasks"]
    # a folder holding the arm's first lines but no checkpoint (killed in its first iteration) starts over
    fresh = holds_run(run_dir) and not RunFolder(run_dir).checkpoint().is_file()
    run, _ = arms.open_arm(spec, resume=False if fresh else RESUME_OR_START, overwrite=fresh,
                           model=str(out / "sft_model"), estimator=arm, run_dir=str(run_dir),
                           train_tasks=train_tasks, checkpoint_every=1)

    def record(**fields: Any) -> dict[str, Any]:
        write_json(path, {"iteration": run.engine.iteration} | fields, indent=1)
        return arm_result(out, arm)

    with run:
        rows = arm_progress(run_dir)
        if len(rows) != run.engine.iteration:
            raise ValueError(f"{run_dir} logs {len(rows)} iterations and its checkpoint holds {run.engine.iteration}: "
                             "not an arm of this program; give another --out")
        _, stopped = arms.train_planned(run, rows, spec, plan)
        if stopped:
            return record(stopped=f"{stopped}: run the command again to continue")
        after, _ = validate(run, spec["sets"])
        return record(after=after)


# ---------------------------------------------------------------------------------------------- the program
def run(args: argparse.Namespace) -> arms.Failure | None:
    """Every stage not yet in ``OUT`` (docs/gpu.md); an arm's failure, if one (the others were stopped)."""
    from ecpo_train.runtime.sft import SFT_SUMMARY, run_sft

    out: Path = args.out  # (made by main's lock)
    stages = Stages(out)
    report = stages.report
    config, overrides = load_configs(args, out)
    if not (out / "tiny" / "config.json").is_file():  # (under --smoke; a second command keeps the first one's)
        write_smoke_model(args, out)
    spec = BENCHMARKS[args.env]
    sets = validation_tasks(spec, args.smoke)
    started = time.time()
    report.setdefault("seconds_spent", 0.0)
    report |= {"benchmark": args.env, "title": spec.title, "smoke": args.smoke, "arms": args.arms,
               "overrides": overrides, "seed": config.seed, "val_episodes_per_task": config.val_episodes_per_task,
               "environment": device_facts(args.device), "command_started": started,
               "time_limit": args.time_limit, "total_time": args.total_time}
    base = {"preset": spec.preset, "overrides": [*overrides, f"run_dir={out / 'arm'}"], "device": args.device,
            "score_batch": args.score_batch}
    failed = None
    try:
        if "train_tasks" not in report:
            try:
                train = training_tasks(config, spec)
            except (OSError, ValueError) as error:
                fail(f"--env {args.env}: the training tasks: {' '.join(str(error).split())}")
            report["train_tasks"] = train
            report["sft_tasks"] = warm_start_tasks(spec, train, args.sft_per_type)
        if not (out / "sft_model" / SFT_SUMMARY).is_file():
            sft_started = time.time()
            sft_config = dataclasses.replace(config, train_tasks=report["sft_tasks"], run_dir=str(out / "sft_run"))
            report["sft"] = run_sft(sft_config, episodes=len(report["sft_tasks"]), epochs=args.sft_epochs,
                                    lr=args.sft_lr, out=out / "sft_model", batch_size=args.sft_batch) | {
                "seconds": time.time() - sft_started}
            stages.save()
        if "before" not in report.get("episodes", {}):
            run, _ = arms.open_arm(base, overwrite=True, model=str(out / "sft_model"), run_dir=str(out / "run_before"))
            with run:
                before, seconds = validate(run, sets)
            report.setdefault("episodes", {})["before"] = before
            report["validation_seconds"] = seconds
        stages.save()  # the arm processes read the stages so far

        def decide(walls: list[float]) -> int:
            """N from the slowest arm's first iteration, once (``OUT/plan.json``; a second command keeps it)."""
            if stages.plan() is None:
                left = args.total_time - report["seconds_spent"] - (time.time() - started)
                n = arms.iterations_that_fit(left, max(walls), report["validation_seconds"])
                write_json(out / PLAN, {"iterations": min(args.max_iterations, n)}, indent=None)
            return stages.plan()

        reserve = arms.closing_seconds(report["validation_seconds"])
        specs = [base | {"arm": arm, "out": str(out), "sets": sets, "deadline": started + args.time_limit,
                         "reserve": reserve} for arm in args.arms]
        report.pop("arm_errors", None)  # (an earlier command's: this one runs the arms again)
        failed = arms.run_side_by_side(specs, run_arm, out / "arms", decide, out / "arm", lambda arm, result: None)
        if failed:
            report["arm_errors"] = {failed.arm: str(failed)}
    finally:
        report["seconds_spent"] += time.time() - started
        report["iterations_planned"] = stages.plan()
        stages.save()
    return failed


# ---------------------------------------------------------------------------------------------- main
# The options each stage reads: any other given is refused in one line (benchmarks.study).
RUN_OPTIONS = ("env", "out", "device", "smoke", "arms", "time_limit", "total_time", "max_iterations", "model", "seed",
               "val_episodes", "sft_per_type", "sft_epochs", "sft_lr", "sft_batch", "score_batch")
STAGE_OPTIONS = {"run": RUN_OPTIONS, "report": ("from_json", "out")}
DEFAULTS = arms.DEFAULTS | {"env": "alfworld", "time_limit": 540.0, "seed": 0, "val_episodes": 2, "sft_batch": 2}


def main(argv: list[str] | None = None) -> int:
    from benchmarks.study import StudyCommand

    command = StudyCommand(__spec__.name, __doc__.split("\n\n")[0], STAGE_OPTIONS,
                           "run: warm start, validation, the arms side by side, validation after (resumable); report: "
                           "a returned report.json's paired tests again (where scipy is)", DEFAULTS)
    command.add("--env", choices=sorted(BENCHMARKS), help="default alfworld")
    command.add("--out", type=Path, help="run: the out folder (a second command continues it); report: "
                                         "where the rescored report goes")
    arms.add_options(command)
    command.add("--time-limit", type=positive, help="seconds for this command (default 540)")
    command.add("--total-time", type=positive, help="seconds for the whole program over its commands (default: "
                                                 "--time-limit)")
    command.add("--seed", type=natural, help="default 0")
    command.add("--val-episodes", type=count, help="validation episodes per task (default 2)")
    command.add("--sft-per-type", type=count, help="warm-start tasks per type (16 CUDA, 2 CPU)")
    command.add("--sft-batch", type=count, help="expert steps per optimizer step of the warm start (default 2)")
    command.add("--from-json", type=Path, metavar="JSON", help="report: a returned report.json")
    args = command.parse(argv)
    if args.stage == "report":
        if args.from_json is None:
            fail("report needs --from-json JSON")
        rescore(args.from_json, args.out, "episodes", "it holds no validation episodes", score_table, render_table)
        return 0
    if args.out is None:
        fail("--out DIR: the folder the program writes (and a second command continues)")
    arms.check_arms(args.arms)
    if refuse_without_cuda(args.device, "paper_benchmarks"):
        return 2
    args.total_time = args.total_time or args.time_limit
    if args.sft_per_type is None:
        args.sft_per_type = 1 if args.smoke else (16 if args.device.startswith("cuda") else 2)
    if args.smoke:
        args.sft_epochs, args.max_iterations, args.val_episodes = 1, 2, 1
    from ecpo_train.runtime.run_lock import acquire_run_lock

    lock = None
    try:  # one command per --out at a time: a second one is refused naming the first (the run folder's lock)
        lock = acquire_run_lock(args.out, engine="paper_benchmarks", label=f"--out {args.out}")
        failed = run(args)
    except (ValueError, OSError) as error:  # the library's refusal: a damaged checkpoint, a model that won't load
        fail(" ".join(str(error).split()))
    finally:
        if lock is not None:
            lock.release()
    print(f"wrote {args.out / REPORT} and {(args.out / REPORT).with_suffix('.md')}")
    if failed:
        print(f"error: arm {failed}", file=sys.stderr)
        return 2 if failed.code == 2 else 1  # the arm's own one-line refusal, or a crash (its log says more)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
