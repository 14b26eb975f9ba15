"""Issue 71's study: ECPO where its credit engages (the paper's 150 iterations, deep anchors, invalid commands), with
every run's credit diagnostics kept. The protocol is ``benchmarks/regime_study.yaml`` (registered before its runs);
the runs are ``benchmarks.alfworld_text``'s schedule on the testbeds ``regime_open`` and ``regime_admissible``.

    python -m benchmarks.alfworld_text run --testbed regime_open --out runs/regime --warm-starts a \\
        --arms grpo gigpo_std ecpo ecpo_d1 --seeds 1 2 3 --keep benchmarks/results/raw/regime_open   # the pilot
    python -m benchmarks.regime_study pilot-seeds --out runs/regime          # the seed count, by the registered rule
    python -m benchmarks.regime_study report --out runs/regime --json benchmarks/results/regime_study.json
    python -m benchmarks.regime_study figure --out runs/regime --png benchmarks/results/regime_diagnostics.png
    python -m benchmarks.regime_study tune --out runs/regime-tuning [--round 2] [--jobs 2]   # the recipe's tuning
    python -m benchmarks.regime_study tune-report --out runs/regime-tuning [--round 2] --json FILE   # its rule

``report`` reads the endpoint (read once, after the last run) and the validation curves;
``figure`` draws each arm's training success and diagnostics over the iterations beside the paper's noise proxy.
``tune`` trains the protocol's tuning round (each candidate recipe x ``tuning.arms``, train games only: no
``valid_seen`` game) and keeps each finished run's metrics, config and validation outcomes in ``tuning.keep``;
``tune-report`` applies the registered rule to them against the registered recipe's pilot runs (seed 1).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from benchmarks import ROOT
from benchmarks import alfworld_text as program  # (the protocol's program)
from benchmarks.study import StudyCommand, finished, read_protocol, run_jobs, run_stage
from benchmarks.study_keep import (
    check_kept,
    keep_runs,
    machine_of,
    manifest_games,
    restore_runs,
    units_spanning_machines,
)

PROTOCOL = Path(__file__).with_name("regime_study.yaml")
RESULT_JSON = "regime_study.json"  # the report, in benchmarks/results/ (written once, after the last run)


def protocol() -> dict[str, Any]:
    return read_protocol(PROTOCOL)


def _bed(name: str) -> Any:
    if not name.startswith("regime_"):
        raise ValueError(f"regime_study reads the regime testbeds, not {name[:80]!r}")
    return program.testbed_named(name)


def jobs(bed: Any, seeds: list[int], labels: list[str] | None = None, arms: list[str] | None = None
         ) -> list[tuple[Any, str, int]]:
    """Every (warm start, arm, seed) on ``bed`` of ``arms`` (default: the protocol's); only the warm starts ``labels``
    where given."""
    return [(start, arm, seed) for start in bed.warm_starts if labels is None or start.label in labels
            for arm in arms or protocol()["arms"] for seed in seeds]


def paired(values: dict[str, dict[tuple[str, int], float]], arm: str, reference: str
           ) -> tuple[list[tuple[str, int]], list[float]]:
    """The (warm start, seed) units ``arm`` shares with ``reference``, and ``arm - reference`` on each."""
    units = sorted(set(values.get(arm, {})) & set(values.get(reference, {})))
    return units, [values[arm][u] - values[reference][u] for u in units]


def diagnostics_summary(lines: list[dict[str, float]]) -> dict[str, float]:
    """The mean of the training success, invalid-action rate and every ``credit/*`` diagnostic over ``lines``."""
    keys = ["success", "invalid_action_rate"] + sorted({k for line in lines for k in line if k.startswith("credit/")})
    return {key: sum(float(line[key]) for line in lines if key in line) / max(1, sum(key in line for line in lines))
            for key in keys if any(key in line for line in lines)}


# ---------------------------------------------------------------------------------------------- seeds
def pilot_seeds(out: Path) -> dict[str, Any]:
    """The registered seed rule on the pilot's endpoint (``regime_study.yaml``'s ``pilot``)."""
    import numpy as np

    spec = protocol()
    bed = _bed(spec["testbeds"]["study"])
    runs = read_runs(out, bed, spec["pilot"]["seeds"], spec["pilot"]["warm_starts"])
    success = endpoint_success(runs, manifest_games(bed))
    sds = {}
    for arm in spec["family"]:
        diffs = paired(success, arm, spec["reference"])[1]
        sds[arm] = float(np.std(diffs, ddof=1)) if len(diffs) > 1 else float("nan")
    return {"sd": sds} | seed_count(list(sds.values()), spec)


def seed_count(sds: list[float], spec: dict[str, Any]) -> dict[str, Any]:
    """The registered rule: the fewest units whose exact-power MDE at Holm's first-step level is at most the target
    for the largest SD; seeds per warm start = half of them, rounded up, never below 5. An SD the pilot could not
    measure (a missing pair) is an error, not a smaller count."""
    from benchmarks.stats import seeds_for_mde

    if not sds or any(not math.isfinite(sd) for sd in sds):
        raise ValueError(f"the pilot lacks a paired difference of every family arm (SDs {sds}): finish its runs first")
    largest = max(sds)
    units = seeds_for_mde(largest, spec["mde_target"], alpha=spec["alpha"] / len(spec["family"]), power=spec["power"])
    return {"largest_sd": largest, "units": units, "seeds": max(5, math.ceil(units / len(spec["warm_starts"])))}


# ---------------------------------------------------------------------------------------------- report
Unit = tuple[str, int]  # (warm start, seed): the pairing unit


def unit_name(unit: Unit) -> str:
    """A unit as the report's JSON names it: ``a-s101``."""
    return f"{unit[0]}-s{unit[1]}"


@dataclass(frozen=True)
class StudyRun:
    """One job of the study as its files hold it, read once: its training metrics, its endpoint episodes
    (``game -> record``) and the CPU that played it (``None`` where not recorded)."""

    arm: str
    unit: Unit
    lines: list[dict[str, float]]
    records: dict[str, dict[str, Any]]
    cpu: str | None


def read_runs(out: Path, bed: Any, seeds: list[int], labels: list[str] | None = None
              ) -> dict[str, StudyRun]:
    """``job name -> StudyRun`` for every job of the protocol on ``bed`` (warm starts ``labels`` where given), each
    run's files read once for the gate and every summary of the report."""
    runs = {}
    for start, arm, seed in jobs(bed, seeds, labels):
        name = program.job_name(start, arm, seed)
        runs[name] = StudyRun(arm, (start.label, seed), program.metrics_of(out / "runs" / name),
                              program.outcomes(out, name, bed), machine_of(out, name, bed))
    return runs


def endpoint_success(runs: dict[str, StudyRun], games: int) -> dict[str, dict[Unit, float]]:
    """``arm -> (warm start, seed) -> share of the endpoint's games won``, for every run evaluated on all ``games``."""
    success: dict[str, dict[Unit, float]] = {}
    for run in runs.values():
        if len(run.records) == games:
            success.setdefault(run.arm, {})[run.unit] = sum(bool(r["success"]) for r in run.records.values()) / games
    return success


def validation_points(lines: list[dict[str, float]], iterations: int) -> list[float] | None:
    """val/success at each of a run's validation points, in order; ``None`` for a run that has not finished or has no
    validation point."""
    points = [float(line["val/success"]) for line in lines if "val/success" in line]
    return points if finished(lines, iterations) and points else None


VALIDATE_EVERY = 10  # regime_study.yaml: in-run validation after the first iteration and every 10th


def registered_points(lines: list[dict[str, float]], iterations: int) -> list[float] | None:
    """``validation_points`` of a run validated exactly once after each of iterations 1, 10, 20, ..., ``iterations``
    (the yaml's 16 points over 150); ``None`` for any other run (unfinished, never validated, a point missing or
    logged twice), so that the AUC is the mean over the same points in every run."""
    points = validation_points(lines, iterations)
    at = [int(line["iteration"]) for line in lines if "val/success" in line]
    return points if at == sorted({1, *range(VALIDATE_EVERY, iterations + 1, VALIDATE_EVERY)}) else None


def validation_auc(runs: dict[str, StudyRun], iterations: int) -> dict[str, dict[Unit, float]]:
    """``arm -> (warm start, seed) -> mean val/success over the run's 16 registered validation points`` (runs that
    finished with every point)."""
    auc: dict[str, dict[Unit, float]] = {}
    for run in runs.values():
        if points := registered_points(run.lines, iterations):
            auc.setdefault(run.arm, {})[run.unit] = sum(points) / len(points)
    return auc


def compare(values: dict[str, dict[tuple[str, int], float]]) -> dict[str, Any]:
    """The registered comparisons: each family arm minus the reference, paired by (warm start, seed), Holm over the
    family; each warm start's mean beside it."""
    from benchmarks.stats import apply_holm, paired_diff

    spec, parts = protocol(), []
    for arm in spec["family"]:
        units, diffs = paired(values, arm, spec["reference"])
        part = paired_diff(diffs, m=len(spec["family"])) if len(diffs) > 1 else {}
        by_warm = {label: sum(d for (w, _), d in zip(units, diffs) if w == label)
                   / max(1, sum(w == label for w, _ in units)) for label in sorted({w for w, _ in units})}
        parts.append(part | {"label": f"{arm} - {spec['reference']}", "units": len(units), "by_warm_start": by_warm})
    held = [p for p in parts if "diff" in p]
    judged = {p["label"]: p | {"verdict": program.verdict_text(p)} for p in apply_holm(held)} if held else {}
    return {p["label"]: judged.get(p["label"], p) for p in parts}


def study_seeds(spec: dict[str, Any]) -> list[int]:
    if spec["seeds"] is None:
        raise ValueError("regime_study.yaml has no seed count yet: run pilot-seeds and commit its `seeds` first")
    return [spec["seed_offset"] + k for k in range(1, int(spec["seeds"]) + 1)]


def unfinished(runs: dict[str, StudyRun], iterations: int, games: int) -> list[str]:
    """The study's jobs that have not trained all ``iterations`` with a validation at each registered point
    (``registered_points``) or whose endpoint log lacks one of the ``games``; nothing of the endpoint is read beyond
    the count of games."""
    return [name for name, run in runs.items()
            if registered_points(run.lines, iterations) is None or len(run.records) != games]


def report(out: Path) -> dict[str, Any]:
    """The registered report of the study testbed, read once, whole, after the last run: a ``ValueError`` (before
    any endpoint is read) while a job of the protocol has not finished its training, its registered validation points
    and its evaluation (``unfinished``)."""
    spec = protocol()
    bed, seeds = _bed(spec["testbeds"]["study"]), study_seeds(spec)
    runs, iterations, games = read_runs(out, bed, seeds), spec["iterations"], manifest_games(bed)
    if missing := unfinished(runs, iterations, games):
        restore = (f"python -m benchmarks.alfworld_text restore --testbed {bed.name} "
                   f"--keep {spec['keep'][bed.name]} --out {str(out)[:200]}")
        raise ValueError(f"--out {str(out)[:200]}: {len(missing)} of the study's {len(runs)} runs "
                         f"have not finished training, validation and evaluation (first: {missing[0]}); the "
                         f"report is read once, when all have (restore the kept runs first: {restore})")
    endpoint, auc = endpoint_success(runs, games), validation_auc(runs, iterations)
    diagnostics = {arm: diagnostics_summary([line for run in runs.values() if run.arm == arm for line in run.lines])
                   for arm in spec["arms"]}

    def by_run(values: dict[str, dict[Unit, float]]) -> dict[str, dict[str, float]]:
        return {arm: {unit_name(unit): value for unit, value in sorted(units.items())}
                for arm, units in values.items()}

    return {"protocol": str(PROTOCOL.name), "policy": "small text policy (policies/text.py), not a language model",
            "testbed": bed.name, "seeds": seeds,
            "endpoint": {"success": {arm: sum(v.values()) / len(v) for arm, v in endpoint.items() if v},
                         "by_run": by_run(endpoint), "comparisons": compare(endpoint)},
            "validation_auc": {"mean": {arm: sum(v.values()) / len(v) for arm, v in auc.items() if v},
                               "by_run": by_run(auc), "comparisons": compare(auc)},
            "diagnostics": diagnostics, "machines": machines(runs)}


def machines(runs: dict[str, StudyRun]) -> dict[str, Any]:
    """The CPU each run was played on (its ``machine.json``; ``not recorded`` where none) and the units (warm start,
    seed) whose arms span machines (``units_spanning_machines``): such a unit is paired across CPUs."""
    by_run = {name: run.cpu or "not recorded" for name, run in runs.items()}
    by_unit: dict[str, set[str]] = {}
    for name, run in runs.items():
        by_unit.setdefault(unit_name(run.unit), set()).add(by_run[name])
    return {"by_run": by_run, "units_spanning_machines": units_spanning_machines(by_unit)}


# ---------------------------------------------------------------------------------------------- figure
# training success (the paper's noise proxy), invalid commands, ECPO's gate on the batch whatever the arm, the share of
# rows with step credit, the share of step credit at anchors first visited below d_min, the distance to GRPO's advantages
FIGURE_KEYS = ("success", "invalid_action_rate", "credit/ecpo_strict_valid_fraction", "credit/step_credit_fraction",
               "credit/step_credit_below_d_min", "credit/rel_dist_grpo")


def figure(out: Path, bed_name: str, png: Path, seeds: list[int], keys: tuple[str, ...] = FIGURE_KEYS) -> Path:
    """Each arm's mean over its runs of ``keys`` per iteration, one panel a key; the paper's noise proxy (GiGPO's
    validation success at steps 0-150) on the success panel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spec, bed = protocol(), _bed(bed_name)
    figure_, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3.4))
    for axis, key in zip(axes, keys):
        for arm in spec["arms"]:
            by_iteration: dict[int, list[float]] = {}
            for job in jobs(bed, seeds, arms=[arm]):
                for line in program.metrics_of(out / "runs" / program.job_name(*job)):
                    if key in line:
                        by_iteration.setdefault(int(line["iteration"]), []).append(float(line[key]))
            if by_iteration:
                steps = sorted(by_iteration)
                axis.plot(steps, [sum(by_iteration[s]) / len(by_iteration[s]) for s in steps], label=arm, lw=1)
        if key == "success":
            proxy = spec["paper_noise_proxy"]
            axis.plot(list(map(int, proxy)), list(proxy.values()), "k--o", ms=3, label="paper: GiGPO val SR_t")
        axis.set(title=key, xlabel="iteration")
    axes[0].legend(fontsize=7)
    figure_.suptitle(f"{bed_name}: small text policy (not an LM), real ALFWorld", fontsize=9)
    figure_.tight_layout()
    figure_.savefig(png, dpi=110)
    plt.close(figure_)
    return png


# ---------------------------------------------------------------------------------------------- tuning
# The recipe's tuning (regime_study.yaml's `tuning`, registered before its runs): each candidate recipe (the registered
# one with the candidate's overrides) trains the arms `tuning.arms` from one warm start at one seed; validated on the
# preset's 48 train games only (no valid_seen game is played); judged by the registered rule (`choose`).
ROUNDS = {1: "candidates", 2: "second_round"}


def tuning_candidates(spec: dict[str, Any], round_: int) -> dict[str, list[str]]:
    """``candidate -> its overrides`` of the tuning's round ``round_`` (1: ``candidates``, 2: ``second_round``)."""
    if round_ not in ROUNDS:
        raise ValueError(f"--round {round_}: the registered tuning has rounds {sorted(ROUNDS)}")
    return {str(name): [str(o) for o in overrides] for name, overrides in spec["tuning"][ROUNDS[round_]].items()}


def tuning_name(candidate: str, arm: str, seed: int) -> str:
    """A tuning run's folder under ``runs/`` (and in the kept folder): ``CANDIDATE-ARM-sSEED``."""
    return f"{candidate}-{arm}-s{seed}"


def tuning_warm(spec: dict[str, Any]) -> Any:
    """The study testbed's warm start the tuning trains from (``tuning.warm_start``)."""
    bed = _bed(spec["testbeds"]["study"])
    return next(start for start in bed.warm_starts if start.label == spec["tuning"]["warm_start"])


def repo_path(path: str) -> Path:
    """A folder the protocol names (relative to the repository's root)."""
    return Path(path) if Path(path).is_absolute() else ROOT / path


def tune_command(out: Path, spec: dict[str, Any], candidate: str, arm: str, overrides: list[str]) -> list[str] | None:
    """The ``ecpo`` arguments that train ``arm`` under ``candidate``'s recipe in ``out``: the schedule's training
    command (``alfworld_text.train_command``: it resumes a run with a checkpoint) and the candidate's overrides after
    it; ``None`` where the run has finished (it is not trained again)."""
    tuning, bed = spec["tuning"], _bed(spec["testbeds"]["study"])
    run_dir = out / "runs" / tuning_name(candidate, arm, tuning["seed"])
    if finished(program.metrics_of(run_dir), tuning["iterations"]):
        return None
    return program.train_command(run_dir, out / tuning_warm(spec).folder, arm, tuning["seed"], tuning["iterations"],
                                 replace(bed, recipe=())) + overrides  # candidates change the recipe as registered


def tune(out: Path, round_: int, parallel: int, keep: Path, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every (candidate, arm) of the round trained in ``out`` where not finished, ``parallel`` at a time, from the
    warm start (made first where missing); each finished run's curve and config kept in ``keep`` as it finishes
    (``study_keep.keep_runs``). No run plays a valid_seen game."""
    import threading

    from ecpo_train.runtime.config import load_config

    spec = spec or protocol()
    tuning, bed, warm = spec["tuning"], _bed(spec["testbeds"]["study"]), tuning_warm(spec)
    candidates = tuning_candidates(spec, round_)
    if parallel < 1:
        raise ValueError(f"--jobs {parallel}: give a count >= 1")
    for candidate, overrides in candidates.items():  # a bad override is refused before any work
        try:
            load_config(bed.preset, [*bed.overrides, *overrides])
        except (ValueError, TypeError) as err:
            raise ValueError(f"tuning candidate {candidate[:80]!r}: {str(err)[:200]}") from None
    check_kept(keep, dropped_ok=True)  # a damaged kept folder is refused before the hours of training
    (out / "logs").mkdir(parents=True, exist_ok=True)
    if not (out / warm.folder / "sft.json").is_file():
        program.ecpo(*program.warm_start_command(out / warm.folder, bed, warm), log=out / "logs" / f"{warm.folder}.log")
    keeping, trained = threading.Lock(), {}

    def job(candidate: str, arm: str, overrides: list[str]) -> None:
        name = tuning_name(candidate, arm, tuning["seed"])
        command = tune_command(out, spec, candidate, arm, overrides)
        if command is not None:
            program.ecpo(*command, log=out / "logs" / f"{name}.log")
        if not finished(program.metrics_of(out / "runs" / name), tuning["iterations"]):
            raise RuntimeError(f"tuning run {name} stopped before iteration {tuning['iterations']} (log: "
                               f"{out / 'logs' / name}.log)")
        with keeping:
            keep_runs(out, keep, [name])
        trained[name] = "trained" if command is not None else "finished before"
        print(f"{name}: {trained[name]}", flush=True)

    run_jobs([lambda c=candidate, a=arm, o=overrides: job(c, a, o)
              for candidate, overrides in candidates.items() for arm in tuning["arms"]], parallel)
    return {"round": round_, "keep": str(keep), "runs": trained}


def run_lines(names: list[str], out: Path | None, keep: Path) -> dict[str, list[dict[str, float]]]:
    """Each run's metrics lines: ``out/runs/<name>``'s where ``out`` holds them, else ``keep``'s (checked once and read
    through a scratch folder: nothing is written to ``out``); a run neither holds is a ``ValueError`` naming it."""
    import tempfile

    lines = {name: program.metrics_of(out / "runs" / name) if out is not None else [] for name in names}
    if missing := [name for name in names if not lines[name]]:
        with tempfile.TemporaryDirectory() as scratch:
            restore_runs(keep, Path(scratch), missing)
            lines |= {name: program.metrics_of(Path(scratch) / "runs" / name) for name in missing}
    for name in names:
        if not lines[name]:
            where = f"{str(out / 'runs')[:200]} nor {str(keep)[:200]}" if out is not None else str(keep)[:200]
            raise ValueError(f"run {name} is missing: {'neither ' if out is not None else ''}{where} holds its metrics")
    return lines


def curve_summary(lines: list[dict[str, float]], iterations: int, name: str) -> dict[str, Any]:
    """A finished run's validation AUC (the mean of val/success over its validation points), its first and last
    point, and whether it collapsed (its last point below half its first); a run not finished, or never validated, is
    a ``ValueError`` naming it."""
    points = validation_points(lines, iterations)
    if points is None and finished(lines, iterations):
        raise ValueError(f"run {name} has no validation point (val/success): it was not validated")
    if points is None:
        end = int(lines[-1]["iteration"]) if lines else 0
        raise ValueError(f"run {name} has not finished: its metrics end at iteration {end} of {iterations}")
    first, last = points[0], points[-1]
    return {"run": name, "auc": sum(points) / len(points), "first": first, "last": last,
            "collapsed": last < 0.5 * first, "points": len(points)}


def choose(scores: dict[str, float], collapsed: dict[str, list[str]], registered: float, round_: int
           ) -> tuple[str, str]:
    """The registered rule: the candidate with the highest score is chosen if it beats the registered recipe's score
    and none of its arms collapsed (``collapsed[candidate]``: those that did); otherwise a second round follows (after
    round 1) or nothing is chosen (after round 2). Returns the choice and the reason in words."""
    otherwise = "none: run round 2" if round_ == 1 else "none"
    then = ("; the second round (tuning.second_round) follows" if round_ == 1
            else "; round 2 was the last registered round: no recipe is chosen")
    best = max(scores.values())
    top = [name for name, score in scores.items() if score == best]
    if len(top) > 1:
        return otherwise, f"{' and '.join(top)} tie at the highest score {best:.4f}: the rule names one" + then
    name = top[0]
    if not best > registered:
        return otherwise, (f"the highest-scoring candidate, {name} ({best:.4f}, the lower of its arms' validation AUC), "
                           f"does not beat the registered recipe's {registered:.4f}" + then)
    if collapsed[name]:
        return otherwise, (f"the highest-scoring candidate, {name} ({best:.4f}), beats the registered recipe's "
                           f"{registered:.4f}, but its {', '.join(collapsed[name])} collapsed (last validation point "
                           "below half its first)" + then)
    return name, (f"{name} has the highest score, {best:.4f} (the lower of its arms' validation AUC), beats the "
                  f"registered recipe's {registered:.4f}, and none of its arms collapsed")


def arm_curves(names: dict[str, str], out: Path | None, keep: Path, iterations: int) -> dict[str, dict[str, Any]]:
    """``arm -> curve_summary`` of each arm's run (``names``: arm -> run), read together (``run_lines``)."""
    lines = run_lines(list(names.values()), out, keep)
    return {arm: curve_summary(lines[name], iterations, name) for arm, name in names.items()}


def tune_report(out: Path | None, round_: int, keep: Path, spec: dict[str, Any] | None = None,
                registered_keep: Path | None = None) -> dict[str, Any]:
    """The registered rule on the round's runs (read from ``out``, else ``keep``) against the registered recipe's
    (the first pilot's runs of the tuning's arms at ``tuning.baseline_seed``, kept in the study testbed's kept folder,
    or ``registered_keep``)."""
    spec = spec or protocol()
    tuning, warm = spec["tuning"], tuning_warm(spec)
    registered_keep = registered_keep or repo_path(spec["keep"][spec["testbeds"]["study"]])
    pilot_seed = tuning["baseline_seed"]
    candidates = {}
    for candidate, overrides in tuning_candidates(spec, round_).items():
        arms = arm_curves({arm: tuning_name(candidate, arm, tuning["seed"]) for arm in tuning["arms"]}, out, keep,
                          tuning["iterations"])
        candidates[candidate] = {"overrides": overrides, "arms": arms,
                                 "score": min(part["auc"] for part in arms.values())}
    arms = arm_curves({arm: program.job_name(warm, arm, pilot_seed) for arm in tuning["arms"]}, None, registered_keep,
                      spec["iterations"])
    registered = {"arms": arms, "score": min(part["auc"] for part in arms.values())}
    scores = {candidate: part["score"] for candidate, part in candidates.items()}
    chosen, reason = choose(scores, {candidate: [arm for arm, p in part["arms"].items() if p["collapsed"]]
                                     for candidate, part in candidates.items()}, registered["score"], round_)
    return {"protocol": PROTOCOL.name, "round": round_,
            "policy": "small text policy (policies/text.py), not a language model",
            "validation": "in-run validation on the preset's 48 train games; no valid_seen game was played",
            "warm_start": warm.label, "seed": tuning["seed"], "iterations": tuning["iterations"],
            "rule": "score = the lowest of the arms' validation AUC; the highest score is chosen if it beats the "
                    "registered recipe's and no arm of it ends below half its first validation point",
            "candidates": candidates, "scores": scores, "registered": registered, "chosen": chosen, "reason": reason}


# The options each stage reads besides --out; --json: every stage's result written too.
STAGE_OPTIONS = {"pilot-seeds": ("json",), "report": ("json",),
                 "figure": ("json", "png", "seeds", "testbed"), "tune": ("json", "round", "jobs", "keep"),
                 "tune-report": ("json", "round", "keep")}
DEFAULTS = {"testbed": "regime_open", "round": 1, "jobs": 2}  # filled in once allowed; --keep: the protocol's


def main(argv: list[str] | None = None) -> int:
    command = StudyCommand(__spec__.name, __doc__.split("\n\n")[0], STAGE_OPTIONS, defaults=DEFAULTS)
    command.add("--out", required=True, common=True, help="the study folder (alfworld_text run's --out)")
    command.add("--testbed", help="figure: regime_open (default) or regime_admissible")
    command.add("--round", type=int, choices=sorted(ROUNDS), help="tune, tune-report: the tuning's round (default 1)")
    command.add("--jobs", type=int, help=f"tune: runs in parallel (default {DEFAULTS['jobs']})")
    command.add("--keep", help="tune, tune-report: the folder that keeps the tuning runs' metrics and configs "
                               "(default: the protocol's tuning.keep)")
    command.add("--json", help="write the result here as well")
    command.add("--png", help="figure: the image to write")
    command.add("--seeds", nargs="+", type=int, help="figure: the runs' seeds (default: the study's)")
    args = command.parse(argv)
    out = Path(args.out)

    def stage() -> dict[str, Any]:
        if args.stage == "pilot-seeds":
            return pilot_seeds(out)
        if args.stage == "report":
            return report(out)
        if args.stage in ("tune", "tune-report"):
            keep = Path(args.keep) if args.keep else repo_path(protocol()["tuning"]["keep"])
            if args.stage == "tune":
                return tune(out, args.round, args.jobs, keep)
            return tune_report(out, args.round, keep)
        if not args.png:
            raise ValueError("figure needs --png")
        return {"png": str(figure(out, args.testbed, Path(args.png), args.seeds or study_seeds(protocol())))}

    return run_stage(stage, args.json, default=str)


if __name__ == "__main__":
    sys.exit(main())
