"""Real ALFWorld learned on one CPU: the small text policy (``policy: text``, not a language model) through the
paper's pipeline, expert warm start then group RL, judged on all 140 ``valid_seen`` games.

    python -m benchmarks.alfworld_text run --out runs/alfworld-text-study [--jobs 2]
    python -m benchmarks.alfworld_text report --out runs/alfworld-text-study --json benchmarks/results/alfworld_text.json

``run`` is resumable: a finished stage is skipped, a training run with a checkpoint continues (``--resume``), a
leaderboard evaluation continues its episode log. Every stage is a command of the ``ecpo`` CLI (the program adds
only the schedule): ``ecpo sft``, ``ecpo train``, ``ecpo leaderboard --agent checkpoint``.

Registered protocol (fixed in git before the runs; the report reads it from here)
---------------------------------------------------------------------------------
- Warm start: ``ecpo sft --config alfworld_text --episodes 3553 --epochs 6 --lr 1e-3 --batch-size 64`` (seed 0):
  the expert's play of every game of the train split, once each. One warm start, shared by every arm.
- Arms: ``ecpo`` (the paper's credit values), ``gigpo_std`` and ``grpo``; training seeds 1, 2, 3, 4, 5 for every arm
  (a seed starts every arm from the same random streams); preset ``alfworld_text`` (16 groups x 8 episodes,
  50 steps, train split, Adam lr 3e-4 in mini-batches of 512 rows, one pass, no KL) for ``ITERATIONS`` = 20
  iterations, ``threads=1``. The recipe was set before any RL run on real games and was not tuned on valid_seen.
- Endpoint: success on each of the 140 ``valid_seen`` games (manifest ``alfworld_valid_seen_by_type``), one episode
  per game at T = 0.4 with the leaderboard's episode seeds (``--seeds 1``: seed 0, ``episode_seed(0, game)``), for
  the warm start and for each arm's final checkpoint. The same game under two policies starts from the same reset
  and the same sampling stream.
- Comparisons (the training seed is the unit):
  1. each arm minus the warm start: per seed, paired by game (Tango's interval, McNemar's exact p); across seeds,
     the mean of the 5 per-seed differences with its t interval (df 4) and MDE;
  2. ECPO minus GiGPO w/std and ECPO minus GRPO: the per-seed differences of success, paired by seed, t interval;
     Holm's correction over these two.
  Each verdict is "shown" (the interval excludes 0) or "not shown at MDE x".
- Per task type, success in the paper's table layout (Pick, Clean, Heat, Cool, Look, Pick2, All): no interval
  (fewer than 5 task types' worth of games per cell would not support one per type at one seed).

The same schedule on generated households (``--testbed households``; issue 57's ``households`` column): preset
``households_text`` (the recipe above on 3,600 generated training households), warm start ``HOUSEHOLDS.warm_start``,
endpoint the 120 held-out households of manifest ``alfworld_gen`` (seeds 100000+), evaluated into ``alfworld_gen/``
instead of ``valid_seen/``. Its protocol is ``benchmarks/estimator_comparison.yaml``'s, not the one above.

    python -m benchmarks.alfworld_text run --testbed households --out runs/households-text-study --arms ecpo --seeds 1
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from benchmarks.study import StudyCommand, arms_by_seeds, run_jobs, run_stage, trained
from benchmarks.study_keep import evaluation_complete, keep_finished, restore_kept
from ecpo_train.evaluation.tables import ALFWORLD_COLUMNS

PRESET = "alfworld_text"
MANIFEST = "alfworld_valid_seen_by_type"
ARMS = ("ecpo", "gigpo_std", "grpo")
SEEDS = (1, 2, 3, 4, 5)
ITERATIONS = 20
WARM_START = ("--episodes", "3553", "--epochs", "6", "--lr", "1e-3", "--batch-size", "64")
TEMPERATURE = 0.4
WARM = "warm-start"
TYPES = ALFWORLD_COLUMNS[:-1]  # every task type in the paper's column order, without "All"
# The ALFWorld paper's text agent in TextWorld, seen split (arXiv 2010.03768, ICLR 2021 version, table 4 "Generalization
# within TextWorld environments", column sn): per-type columns are agents trained on that type alone, "All" one agent
# trained on every type (ours is the latter). BUTLER: DAgger, beam search (width 10) to recover from failed actions at
# test time; BUTLER_g: greedy. Best-training-score seed of 8; at most 50 steps; commands generated token by token.
PUBLISHED = {"BUTLER (DAgger, beam search)": {"Pick": 61, "Clean": 44, "Cool": 60, "Look": 39, "Heat": 81, "Pick2": 29,
                                              "All": 40},
             "BUTLER_g (DAgger, greedy)": {"Pick": 43, "Clean": 30, "Cool": 50, "Look": 31, "Heat": 69, "Pick2": 38,
                                           "All": 19}}


@dataclass(frozen=True)
class WarmStart:
    """One warm start of a testbed: the label its jobs' names start with (``""``: the jobs are ``ARM-sSEED``), its
    folder in the study folder, the name its own evaluation is logged under, and its ``ecpo sft`` overrides (its
    seed: independently trained warm starts differ in it)."""

    label: str
    folder: str
    name: str
    overrides: tuple[str, ...] = ()


ONE_WARM_START = (WarmStart("", "warm", "warm-start"),)


@dataclass(frozen=True)
class Testbed:
    """What the schedule plays: the ``ecpo train`` preset, the warm start's ``ecpo sft`` arguments, the leaderboard
    manifest of the endpoint and the study folder's subfolder its episode logs go to; the published rows of the
    report's table (``PUBLISHED`` for real ALFWorld's valid_seen, none for generated households); its warm starts
    (one, in ``warm/``, unless it says otherwise); the overrides every ``ecpo sft`` and ``ecpo train`` of it takes
    (``command_set=open``)."""

    name: str  # the testbed's name in benchmarks/estimator_comparison.yaml
    preset: str
    manifest: str
    warm_start: tuple[str, ...]
    folder: str
    published: dict[str, dict[str, int]] = field(default_factory=dict)
    warm_starts: tuple[WarmStart, ...] = ONE_WARM_START
    overrides: tuple[str, ...] = ()
    iterations: int = ITERATIONS  # the schedule's default
    recipe: tuple[str, ...] = ()  # overrides of ``ecpo train`` alone (not the warm start's): a tuned recipe's changes
    policy_seeds: tuple[int, ...] = ()  # the seeds whose final policies are kept (study_keep: float16, as differences)

    @property
    def warm_folders(self) -> tuple[str, ...]:
        return tuple(warm.folder for warm in self.warm_starts)

    def kept_policy_warm(self, name: str) -> str | None:
        """The warm-start folder of the job ``name`` (``job_name``'s) whose final policy this testbed keeps (its seed
        is one of ``policy_seeds``), else ``None``."""
        for warm in self.warm_starts:
            for seed in self.policy_seeds:
                prefix, suffix = f"{warm.label}-" if warm.label else "", f"-s{seed}"
                if name.startswith(prefix) and name.endswith(suffix) and len(name) > len(prefix) + len(suffix):
                    return warm.folder
        return None


def job_name(warm: WarmStart, arm: str, seed: int) -> str:
    """A trained policy's name: its run folder under ``runs/`` and its evaluation's name."""
    return f"{warm.label}-{arm}-s{seed}" if warm.label else f"{arm}-s{seed}"


# An arm is an estimator name, or one of these: an estimator with other credit settings (ECPO with StrictValid's
# depth threshold d_min at 1 instead of the paper's 7: issue 71's arm where the depth gate is off).
ARM_SETTINGS = {"ecpo_d1": ("estimator=ecpo", "credit.d_min=1")}


ALFWORLD = Testbed("alfworld_text", PRESET, MANIFEST, WARM_START, "valid_seen", PUBLISHED)
# Generated households: the alfworld_text recipe with its env changed (ecpo_train/runtime/configs/households_text.yaml).
# The warm start is alfworld_text's with the episodes set to the training households: each of the 3,600 played once
# by the generator's expert (as alfworld_text plays each of its 3,553 train games once), the same epochs, lr and batch.
HOUSEHOLDS = Testbed("households", "households_text", "alfworld_gen", ("--episodes", "3600", *WARM_START[2:]),
                     "alfworld_gen")
# Issue 71's regime study (benchmarks/regime_study.yaml): the paper's length (preset alfworld_text_paper, 150
# iterations), two independently trained warm starts (sft seeds 0 and 1), with the open command set (the study) or
# the admissible commands (the regime curves).
REGIME_WARM_STARTS = (WarmStart("a", "warm-a", "warm-a", ("seed=0",)), WarmStart("b", "warm-b", "warm-b", ("seed=1",)))
# The recipe is the one regime_study.yaml registers (its tuning chose kl_coef=0.3, round 2, on train games only).
REGIME_OPEN = Testbed("regime_open", "alfworld_text_paper", MANIFEST, WARM_START, "valid_seen", PUBLISHED,
                      REGIME_WARM_STARTS, ("command_set=open",), iterations=150, recipe=("kl_coef=0.3",),
                      policy_seeds=(101, 102))  # the study's first two seeds (its seeds are 101, 102, ...)
REGIME_ADMISSIBLE = replace(REGIME_OPEN, name="regime_admissible", overrides=(), policy_seeds=(1,))  # its one seed
TESTBEDS = {bed.name: bed for bed in (ALFWORLD, HOUSEHOLDS, REGIME_OPEN, REGIME_ADMISSIBLE)}


def testbed_named(name: str) -> Testbed:
    if name not in TESTBEDS:
        raise ValueError(f"benchmarks.alfworld_text has no testbed {name!r}: it runs {sorted(TESTBEDS)}")
    return TESTBEDS[name]


def ecpo(*args: str, log: Path) -> None:
    """One ``ecpo`` CLI command, its output appended to ``log``; a failure is one error line naming the log."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    with open(log, "a", encoding="utf-8") as out:
        out.write(f"\n$ ecpo {' '.join(args)}\n")
        out.flush()
        code = subprocess.call([sys.executable, "-m", "ecpo_train.apps.cli", *args], stdout=out, stderr=out, env=env)
    if code:
        tail = log.read_text(encoding="utf-8").strip().splitlines()[-1:]
        raise RuntimeError(f"ecpo {args[0]} failed (exit {code}): {tail[0] if tail else ''} (log: {log})")


def metrics_of(run_dir: Path) -> list[dict[str, float]]:
    """A run's metrics lines (none where it has written none)."""
    from ecpo_train.runtime.run_dir import RunFolder, read_metrics

    return read_metrics(run_dir) if RunFolder(run_dir).metrics.is_file() else []


# The schedule's three commands (``ecpo`` arguments), apart from running them so a test can read them.
def warm_start_command(warm: Path, bed: Testbed = ALFWORLD, start: WarmStart = ONE_WARM_START[0]) -> list[str]:
    return ["sft", "--config", bed.preset, "--out", str(warm), *bed.warm_start, *bed.overrides, *start.overrides]


def train_command(run_dir: Path, warm: Path, arm: str, seed: int, iterations: int,
                  bed: Testbed = ALFWORLD) -> list[str]:
    # a checkpoint: continue it; a run stopped before its first checkpoint: start it over (the same seed plays
    # the same iterations again); nothing there: start
    resume = ["--resume"] if (run_dir / "checkpoint.pt").is_file() else ["--overwrite"] if run_dir.is_dir() else []
    return ["train", "--config", bed.preset, *resume, f"model={warm}", *ARM_SETTINGS.get(arm, (f"estimator={arm}",)),
            f"seed={seed}", f"run_dir={run_dir}", f"iterations={iterations}", "threads=1", "progress=false",
            *bed.overrides, *bed.recipe]


def evaluate_command(out: Path, checkpoint: Path, name: str, bed: Testbed = ALFWORLD) -> list[str]:
    return ["leaderboard", "--agent", "checkpoint", "--checkpoint", str(checkpoint), "--manifest", bed.manifest,
            "--seeds", "1", "--temperature", str(TEMPERATURE), "--out-dir", str(out / bed.folder), "--name", name]


def run(out: Path, jobs: int, iterations: int, arms: list[str], seeds: list[int], bed: Testbed = ALFWORLD,
        keep: Path | None = None, warm_labels: list[str] | None = None) -> None:
    """Every stage not finished yet; with ``keep`` (``benchmarks.study_keep``), what it holds is restored first and
    every finished job is kept. ``warm_labels``: only the warm starts with these labels (default: all the bed's)."""
    import threading

    (out / "logs").mkdir(parents=True, exist_ok=True)
    if keep is not None and (restored := restore_kept(keep, out, bed)):
        print(f"restored from {keep}: {len(restored)} finished evaluations", flush=True)
    starts = [w for w in bed.warm_starts if warm_labels is None or w.label in warm_labels]
    for start in starts:
        if not (out / start.folder / "sft.json").is_file():
            ecpo(*warm_start_command(out / start.folder, bed, start), log=out / "logs" / f"{start.folder}.log")
    keeping = threading.Lock()

    def evaluate(checkpoint: Path, name: str) -> None:
        ecpo(*evaluate_command(out, checkpoint, name, bed), log=out / "logs" / f"eval-{name}.log")
        if keep is not None:
            with keeping:
                keep_finished(out, keep, bed)

    def warm_job(start: WarmStart) -> None:
        if not evaluation_complete(out, start.name, bed):
            evaluate(out / start.folder, start.name)

    def arm_job(job: Any) -> None:
        started, run_dir = time.time(), out / "runs" / job.name
        if evaluation_complete(out, job.name, bed):
            print(f"{job.name}: finished before", flush=True)
            return
        if not trained(metrics_of(run_dir), run_dir / "checkpoint.pt", iterations):
            ecpo(*train_command(run_dir, out / job.start.folder, job.arm, job.seed, iterations, bed),
                 log=out / "logs" / f"{job.name}.log")
        evaluate(run_dir, job.name)
        print(f"{job.name}: done in {time.time() - started:.0f} s", flush=True)

    run_jobs([*(lambda start=start: warm_job(start) for start in starts),
              *(lambda job=job: arm_job(job) for job in arms_by_seeds(arms, seeds, starts, job_name))], jobs)


# ---------------------------------------------------------------------------------------------- report
def outcomes(out: Path, name: str, bed: Testbed = ALFWORLD) -> dict[str, dict[str, Any]]:
    """``game -> record`` of one evaluated policy (its leaderboard episode log)."""
    from ecpo_train.evaluation.runner import collect_records, safe_name

    records = collect_records(out / bed.folder / safe_name(name), [bed.manifest])
    return {r["task_id"]: r for r in records if int(r["seed"]) == 0}


def by_type(records: dict[str, dict[str, Any]]) -> dict[str, float]:
    won = {kind: [bool(r["success"]) for r in records.values() if r["task_type"] == kind] for kind in TYPES}
    return {kind: sum(w) / len(w) if w else float("nan") for kind, w in won.items()} | {
        "All": sum(bool(r["success"]) for r in records.values()) / max(len(records), 1), "games": len(records)}


def verdict_text(part: dict[str, Any]) -> str:
    """"shown" where the 95 % interval excludes 0 (its sign named), else "not shown at MDE x". A part of a Holm
    family (it has ``holm_significant``) is shown only where Holm's procedure rejects; where its unadjusted interval
    excludes 0 but Holm keeps the null, the verdict says so, with its p."""
    from benchmarks.stats import holm_miss_text

    low, high = part.get("low", float("nan")), part.get("high", float("nan"))
    if missed := holm_miss_text(part):
        return f"not shown: {missed} (MDE {part['mde']:.3f})"
    if low > 0 or high < 0:
        return "shown: a gain" if low > 0 else "shown: a loss"
    return f"not shown at MDE {part.get('mde', float('nan')):.3f}"


def table(result: dict[str, Any], published: dict[str, dict[str, int]] = PUBLISHED) -> str:
    """The paper's table layout: success % per task type on the endpoint's games (arms: the mean over their seeds),
    then the ``published`` rows."""
    lines = ["| policy | " + " | ".join(TYPES) + " | All | games |", "|---|" + ":-:|" * (len(TYPES) + 2)]
    rows = [("warm start (text policy, not an LM)", result["warm_start"]["by_type"])]
    for arm, part in result["arms"].items():
        seeds = [entry["by_type"] for entry in part["seeds"].values()]
        if seeds:
            mean = {k: sum(s[k] for s in seeds) / len(seeds) for k in (*TYPES, "All")}
            rows.append((f"{arm} (text policy, mean of {len(seeds)} seeds)", mean | {"games": seeds[0]["games"]}))
    for row_name, row in rows:
        lines.append(f"| {row_name} | " + " | ".join(f"{100 * row[k]:.1f}" for k in (*TYPES, "All"))
                     + f" | {row['games']} |")
    for name, row in published.items():
        lines.append(f"| {name}, published | " + " | ".join(str(row[k]) for k in (*TYPES, "All")) + " | 140 |")
    return "\n".join(lines)


def report(out: Path, arms: list[str], seeds: list[int], bed: Testbed = ALFWORLD) -> dict[str, Any]:
    from benchmarks.stats import apply_holm, paired_diff, paired_outcomes

    warm = outcomes(out, WARM, bed)
    if not warm:  # (a typo in --out: an empty report would replace the committed one)
        raise ValueError(f"--out {str(out)[:200]} holds no evaluation of the warm start ({bed.folder}/{WARM}): is it "
                         "the study's folder? (a kept study: `restore --keep DIR --out OUT` first)")
    result: dict[str, Any] = {"protocol": {"preset": bed.preset, "manifest": bed.manifest, "arms": arms,
                                           "seeds": seeds, "iterations": ITERATIONS, "temperature": TEMPERATURE,
                                           "warm_start": " ".join(bed.warm_start)},
                              "policy": "small text policy (policies/text.py), not a language model",
                              "warm_start": {"by_type": by_type(warm)}, "arms": {}, "comparisons": {}}
    success: dict[str, dict[int, float]] = {}
    for arm in arms:
        per_seed, gains = {}, []
        for seed in seeds:
            after = outcomes(out, f"{arm}-s{seed}", bed)
            if len(after) != len(warm) or not after:
                continue
            pair = paired_outcomes({g: warm[g]["success"] for g in warm}, {g: after[g]["success"] for g in after},
                                   label=f"{arm} seed {seed}")
            per_seed[seed] = {"by_type": by_type(after), "minus_warm_start": pair | {"verdict": verdict_text(pair)}}
            gains.append(pair["diff"])
            success.setdefault(arm, {})[seed] = by_type(after)["All"]
        across = paired_diff(gains)
        result["arms"][arm] = {"seeds": per_seed, "minus_warm_start": across | {"verdict": verdict_text(across)}}
    common = {other: sorted(set(success["ecpo"]) & set(success[other])) for other in ("gigpo_std", "grpo")
              if "ecpo" in success and other in success}
    parts = [paired_diff([success["ecpo"][s] - success[other][s] for s in seeds], m=2)
             | {"label": f"ecpo - {other}", "seeds": seeds} for other, seeds in common.items()]
    for part in apply_holm(parts):
        result["comparisons"][part["label"]] = part | {"verdict_text": verdict_text(part)}
    result["published"] = bed.published
    result["table"] = table(result, bed.published)
    return result


# The options each stage reads (besides --out and --testbed): any other given is an error, not silently ignored.
STAGE_OPTIONS = {"run": ("jobs", "iterations", "arms", "seeds", "keep", "warm_starts"),
                 "report": ("arms", "seeds", "json"),
                 "keep": ("keep",), "restore": ("keep",)}
DEFAULTS = {"jobs": 2, "arms": list(ARMS), "seeds": list(SEEDS)}  # filled in once allowed; --iterations: the bed's


def main(argv: list[str] | None = None) -> int:
    command = StudyCommand(__spec__.name, __doc__.split("\n\n")[0],
                           STAGE_OPTIONS, "keep: copy the finished evaluations of --out into --keep now; restore: put "
                                          "--keep's back into --out (then report reads them)", DEFAULTS)
    command.add("--testbed", choices=sorted(TESTBEDS), default=ALFWORLD.name, common=True,
                help="real ALFWorld's valid_seen (the registered study) or generated households")
    command.add("--out", required=True, common=True)
    command.add("--jobs", type=int, help=f"run: parallel jobs (default {DEFAULTS['jobs']})")
    command.add("--iterations", type=int, help="run: training iterations (default: the testbed's, "
                                               f"{ITERATIONS} for alfworld_text and households)")
    command.add("--warm-starts", nargs="+", help="run: only the warm starts with these labels (a, b)")
    command.add("--arms", nargs="+", help=f"run, report (default {' '.join(DEFAULTS['arms'])})")
    command.add("--seeds", nargs="+", type=int, help=f"run, report (default {' '.join(map(str, DEFAULTS['seeds']))})")
    command.add("--json", help="write the report here")
    command.add("--keep", help="a folder (committed to git) that holds the finished jobs across sessions: run restores "
                               "them from it first and copies each job into it as it finishes")
    args = command.parse(argv)
    out, bed = Path(args.out), TESTBEDS[args.testbed]
    if args.iterations is None:
        args.iterations = bed.iterations

    def stage() -> dict[str, Any] | None:
        check_study_input(args)
        keep = Path(args.keep) if args.keep else None
        if args.stage == "keep":
            print(f"kept in {keep}: {len(keep_finished(out, keep, bed))} newly finished evaluations")
        elif args.stage == "restore":
            print(f"restored into {out}: {len(restore_kept(keep, out, bed))} finished evaluations")
        elif args.stage == "run":
            run(out, args.jobs, args.iterations, args.arms, args.seeds, bed, keep, args.warm_starts)
        else:
            return report(out, args.arms, args.seeds, bed)
        return None

    return run_stage(stage, args.json)


def check_study_input(args: argparse.Namespace) -> None:
    """The whole input of a stage, checked before any work (a bad arm is refused before the warm start's hours, a
    report's ``--json`` before it is computed): a ``ValueError`` naming the option."""
    from ecpo_train.core.credit.registry import available_estimators

    if args.jobs < 1 or args.iterations < 1:
        raise ValueError("--jobs and --iterations must be >= 1")
    known = available_estimators()
    for arm in args.arms:
        if arm not in known and arm not in ARM_SETTINGS:
            raise ValueError(f"--arms {arm[:80]!r} is not an estimator nor one of {sorted(ARM_SETTINGS)}: give some "
                             f"of {', '.join(known)}")
    labels = {w.label for w in TESTBEDS[args.testbed].warm_starts}
    if args.warm_starts is not None and not set(args.warm_starts) <= labels:
        raise ValueError(f"--warm-starts: testbed {args.testbed} has the warm starts {sorted(labels)}")
    if len(set(args.arms)) != len(args.arms) or len(set(args.seeds)) != len(args.seeds):
        raise ValueError("--arms and --seeds: give each once")
    if any(not 0 <= seed < 2**31 for seed in args.seeds):
        raise ValueError(f"--seeds: each seed must be in [0, 2**31) (got {min(args.seeds)}..{max(args.seeds)})")
    if args.stage == "report":
        if args.json and Path(args.json).is_dir():
            raise ValueError(f"--json {args.json[:200]} is a folder: give the report's file")
        if args.json and not Path(args.json).absolute().parent.is_dir():
            raise ValueError(f"--json {args.json[:200]}: its folder does not exist")
    if args.stage in ("keep", "restore") and args.keep is None:
        raise ValueError(f"{args.stage} needs --keep DIR")
    if args.keep is not None and Path(args.keep).exists() and not Path(args.keep).is_dir():
        raise ValueError(f"--keep {args.keep[:200]} is a file, not a folder")
    # (a misspelt folder restored or kept nothing, and said so with exit status 0)
    if args.stage == "restore" and not Path(args.keep).is_dir():
        raise ValueError(f"restore --keep {args.keep[:200]}: no such folder, so nothing to restore")
    if args.stage == "keep" and not Path(args.out).is_dir():
        raise ValueError(f"keep --out {args.out[:200]}: no such folder, so nothing to keep")


if __name__ == "__main__":
    sys.exit(main())
