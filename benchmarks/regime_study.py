"""Issue 71's study: ECPO where its credit engages (the paper's 150 iterations, deep anchors, invalid commands), with
every run's credit diagnostics kept. The protocol is ``benchmarks/regime_study.yaml`` (registered before its runs);
the runs are ``benchmarks.alfworld_text``'s schedule on the testbeds ``regime_open`` and ``regime_admissible``.

    python -m benchmarks.regime_study probe --testbed regime_open --out runs/regime-probe       # 3 iterations per arm
    python -m benchmarks.alfworld_text run --testbed regime_open --out runs/regime --warm-starts a \\
        --arms grpo gigpo_std ecpo ecpo_d1 --seeds 1 2 3 --keep benchmarks/results/raw/regime_open   # the pilot
    python -m benchmarks.regime_study pilot-seeds --out runs/regime          # the seed count, by the registered rule
    python -m benchmarks.regime_study report --out runs/regime --json benchmarks/results/regime_study.json
    python -m benchmarks.regime_study figure --out runs/regime --png benchmarks/results/regime_diagnostics.png

``probe`` trains each arm a few iterations from each warm start and prints the credit diagnostics (StrictValid share,
the share of rows whose advantage differs from GRPO's, the invalid-action rate): the regime before any study run. It
plays no ``valid_seen`` game. ``report`` reads the endpoint (read once, after the last run) and the validation curves;
``figure`` draws each arm's training success and diagnostics over the iterations beside the paper's noise proxy.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

from benchmarks import alfworld_text as program  # (the protocol's program)

PROTOCOL = Path(__file__).with_name("regime_study.yaml")
VALIDATION_KEYS = ("val/success", "val/invalid_action_rate")


def protocol() -> dict[str, Any]:
    from ecpo_train.runtime.config_values import read_yaml

    return read_yaml(PROTOCOL.read_text(encoding="utf-8"))


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


# ---------------------------------------------------------------------------------------------- probe
def probe(out: Path, bed_name: str, iterations: int = 3, labels: list[str] | None = None
          ) -> dict[str, Any]:
    """Each registered arm trained ``iterations`` iterations from each warm start (seed 0, not a study seed), and the
    mean of its diagnostics over them. Warm starts are made first where missing (the study's own commands)."""
    bed, arms = _bed(bed_name), protocol()["arms"]
    (out / "logs").mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"testbed": bed_name, "iterations": iterations, "arms": {}}
    for start in bed.warm_starts:
        if labels is not None and start.label not in labels:
            continue
        warm = out / start.folder
        if not (warm / "sft.json").is_file():
            program.ecpo(*program.warm_start_command(warm, bed, start), log=out / "logs" / f"{start.folder}.log")
        for arm in arms:
            run_dir = out / "runs" / f"{start.label}-{arm}-probe"
            if len(program.metrics_of(run_dir)) < iterations:
                # the warm start validated before training (iteration 0) and the run after its last iteration, on
                # the preset's 48 train games: their success and invalid-action rate
                command = program.train_command(run_dir, warm, arm, 0, iterations, bed) + [
                    "val_before_training=true", "val_after_first=false", "val_every=1000"]
                program.ecpo(*command, log=out / "logs" / f"{start.label}-{arm}-probe.log")
            lines = program.metrics_of(run_dir)
            validated = {int(line["iteration"]): {k: v for k, v in line.items() if k in VALIDATION_KEYS}
                         for line in lines if "val/success" in line}
            result["arms"].setdefault(arm, {})[start.label] = diagnostics_summary(
                [line for line in lines if int(line["iteration"]) > 0]) | {"validation": validated}
    return result


# ---------------------------------------------------------------------------------------------- seeds
def pilot_seeds(out: Path) -> dict[str, Any]:
    """The registered seed rule on the pilot's endpoint (``regime_study.yaml``'s ``pilot``)."""
    import numpy as np

    spec = protocol()
    bed = _bed(spec["testbeds"]["study"])
    success = endpoint_success(out, bed, spec["pilot"]["seeds"], spec["pilot"]["warm_starts"])
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
def endpoint_success(out: Path, bed: Any, seeds: list[int], labels: list[str] | None = None
                     ) -> dict[str, dict[tuple[str, int], float]]:
    """``arm -> (warm start, seed) -> share of the endpoint's games won``, for every run evaluated on all of them."""
    from benchmarks.study_keep import manifest_games

    games, success = manifest_games(bed), {}
    for start, arm, seed in jobs(bed, seeds, labels):
        records = program.outcomes(out, program.job_name(start, arm, seed), bed)
        if len(records) == games:
            success.setdefault(arm, {})[(start.label, seed)] = sum(bool(r["success"]) for r in records.values()) / games
    return success


def validation_auc(out: Path, bed: Any, seeds: list[int]) -> dict[str, dict[tuple[str, int], float]]:
    """``arm -> (warm start, seed) -> mean val/success over the run's validation points`` (runs that finished)."""
    iterations, auc = protocol()["iterations"], {}
    for start, arm, seed in jobs(bed, seeds):
        lines = program.metrics_of(out / "runs" / program.job_name(start, arm, seed))
        points = [float(line["val/success"]) for line in lines if "val/success" in line]
        if lines and int(lines[-1]["iteration"]) == iterations and points:
            auc.setdefault(arm, {})[(start.label, seed)] = sum(points) / len(points)
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


def report(out: Path) -> dict[str, Any]:
    """The registered report of the study testbed (read once, after the last run)."""
    spec = protocol()
    bed, seeds = _bed(spec["testbeds"]["study"]), study_seeds(spec)
    endpoint, auc = endpoint_success(out, bed, seeds), validation_auc(out, bed, seeds)
    diagnostics = {arm: diagnostics_summary([line for job in jobs(bed, seeds, arms=[arm])
                                             for line in program.metrics_of(out / "runs" / program.job_name(*job))])
                   for arm in spec["arms"]}
    return {"protocol": str(PROTOCOL.name), "policy": "small text policy (policies/text.py), not a language model",
            "testbed": bed.name, "seeds": seeds,
            "endpoint": {"success": {arm: sum(v.values()) / len(v) for arm, v in endpoint.items() if v},
                         "comparisons": compare(endpoint)},
            "validation_auc": {"mean": {arm: sum(v.values()) / len(v) for arm, v in auc.items() if v},
                               "comparisons": compare(auc)},
            "diagnostics": diagnostics}


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


# The options each stage reads besides --out and --testbed (probe, figure); --json: every stage's result written too.
STAGE_OPTIONS = {"probe": ("json", "warm_starts"), "pilot-seeds": ("json",), "report": ("json",),
                 "figure": ("json", "png", "seeds")}


def main(argv: list[str] | None = None) -> int:
    from benchmarks.study import StudyCommand, run_stage

    command = StudyCommand(__spec__.name, __doc__.split("\n\n")[0], STAGE_OPTIONS)
    command.add("--out", required=True, common=True, help="the study folder (alfworld_text run's --out)")
    command.add("--testbed", default="regime_open", common=True, help="probe, figure: regime_open or regime_admissible")
    command.add("--json", help="write the result here as well")
    command.add("--png", help="figure: the image to write")
    command.add("--seeds", nargs="+", type=int, help="figure: the runs' seeds (default: the study's)")
    command.add("--warm-starts", nargs="+", help="probe: only these warm starts (a, b; default both)")
    args = command.parse(argv)
    if args is None:
        return 2
    out = Path(args.out)

    def stage() -> dict[str, Any]:
        if args.stage == "probe":
            return probe(out, args.testbed, labels=args.warm_starts)
        if args.stage == "pilot-seeds":
            return pilot_seeds(out)
        if args.stage == "report":
            return report(out)
        if not args.png:
            raise ValueError("figure needs --png")
        return {"png": str(figure(out, args.testbed, Path(args.png), args.seeds or study_seeds(protocol())))}

    return run_stage(stage, args.json, default=str)


if __name__ == "__main__":
    sys.exit(main())
