"""The one look at a pre-registered run: its validation before and after training, paired episode by episode.

A run whose preset fixes its endpoint before it starts (``alfworld_cpu_control``, ``alfworld_cpu_pool``) validates
before training (iteration 0) and after its last iteration on the same episodes with the same random draws, so
the two validations pair position by position. This script reads the run folder and reports, for the episodes of
the tasks the run trained on (the positive control's and the pool's primary endpoint) and for the others (unseen
tasks, secondary), Tango's unconditional interval, McNemar's exact test, the interval clustered by task (each task
is validated several times) and the smallest effect the run could detect (``stats``), beside what the run
was doing: rollout success per iteration, the share of ECPO's anchors the gate opened, lucky singletons per
batch, the share of rows that carried an advantage, optimizer steps.

    python -m benchmarks.registered_endpoint RUN_DIR [RUN_DIR ...] --out benchmarks/results/NAME.json
    python -m benchmarks.registered_endpoint --regime METRICS.jsonl ...   # the regime table of any runs
    python -m benchmarks.registered_endpoint RUN_A --versus RUN_B          # two arms of one protocol
    python -m benchmarks.registered_endpoint RUN_B --before-from RUN_A     # B skipped its before-validation

``--versus`` pairs two runs of one protocol (the same seed, tasks, validation draws and temperature, and warm
start, checked by its weights' hash where the weights are on this machine; another estimator) by their last
validations, position by position: RUN_A's success minus RUN_B's, on the trained tasks and on the
others, with the same statistics. For ``alfworld_cpu_pool`` (registered 2026-11-26, before the GiGPO w/std run
started): RUN_A the ECPO run, RUN_B GiGPO w/std from the same warm start and seed; primary the pool's 256
episodes after iteration 16, secondary the unseen 96; ECPO better (or worse) only where the interval excludes 0,
otherwise "not shown" with the MDE.

Learning is *shown* when the interval of after - before lies above 0 and McNemar's exact test rejects (two-sided
level 0.05). One run covers the validation's draws, not run-to-run variance: every figure here says so.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import yaml

from benchmarks import ArgumentParser, fail
from benchmarks.stats import ALPHA, fmt_clustered, paired_outcomes
from benchmarks.validation_parts import split
from ecpo_train.policies.atomic import write_text
from ecpo_train.runtime.config import upgraded
from ecpo_train.runtime.config_values import read_yaml


def read_run(run_dir: Path) -> tuple[dict, list[dict], list[dict]]:
    """A finished run folder's config, validations and metrics; a missing, damaged or torn file is one line."""
    from ecpo_train.runtime.run_dir import read_metrics_file, read_validation_file

    files = {name: run_dir / name for name in ("config.yaml", "validation.jsonl", "metrics.jsonl")}
    for path in files.values():
        if not path.is_file():
            fail(f"{path} does not exist: {run_dir} is not a finished `ecpo train` run folder")
    try:
        config = read_yaml(files["config.yaml"].read_text(encoding="utf-8"))  # (aliases refused: no bomb)
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        fail(f"{files['config.yaml']} is not valid YAML ({' '.join(str(error).split())[:200]})")
    if not isinstance(config, dict):
        fail(f"{files['config.yaml']} is not a run's config (a mapping of settings; found {type(config).__name__})")
    check_validation_file(files["validation.jsonl"])
    try:
        metrics = numeric_metrics(files["metrics.jsonl"], read_metrics_file(files["metrics.jsonl"])[0])
    except ValueError as error:
        fail(" ".join(str(error).split()))
    config = upgraded(config)  # a run recorded before a key was renamed (algorithm -> estimator) reads the same
    recorded = recorded_warm_start(run_dir / "history.jsonl")
    if recorded:  # the hash taken when the run started: it holds where the weights' folder is not on this machine
        config = config | {RECORDED_HASH: recorded}
    return config, read_validation_file(files["validation.jsonl"]), metrics


RECORDED_HASH = "_warm_start_sha256"  # not a config key: the hash history.jsonl recorded at the run's start


def recorded_warm_start(history: Path) -> str | None:
    """The weights' sha256 of the warm start the run's first start recorded in ``history.jsonl`` (runs started
    before it was recorded: None)."""
    if not history.is_file():
        return None
    for line in history.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and isinstance(record.get("warm_start"), dict):
            return record["warm_start"].get("weights_sha256")
    return None


def check_validation_file(path: Path) -> None:
    """Every line of a ``validation.jsonl`` must be whole: a JSON object whose ``won`` and ``copies`` hold one entry
    per episode of ``task_ids``. A torn or short line is refused naming its iteration: dropping it would silently
    make an earlier validation the "after"."""
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        if not isinstance(row, dict):
            found = re.search(r'"iteration":\s*(\d+)', line)
            where = f"the validation of iteration {found.group(1)}" if found else "a validation"
            fail(f"{path} line {number}: {where} is torn (not a whole JSON line); this endpoint reads whole records "
                 "only")
        tasks = row.get("task_ids")
        if not isinstance(tasks, list) or any(not isinstance(row.get(k), list) or len(row[k]) != len(tasks)
                                              for k in ("won", "copies")) or "iteration" not in row:
            fail(f"{path} line {number}: the validation of iteration {_shown(row.get('iteration', '?'))} is short "
                 "(its won and copies lists do not hold one entry per episode of task_ids)")
        bad = next((won for won in row["won"] if won not in (0, 1) or not isinstance(won, (int, bool))), None)
        if bad is not None or any(won is None for won in row["won"]):
            fail(f"{path} line {number}: the validation of iteration {_shown(row['iteration'])} holds won "
                 f"{_shown(bad)}: each episode's outcome is 0 or 1")


# What two runs must share for their validations to pair episode by episode: the seed and the task lists fix
# each episode and its uniform draws, the temperatures what the draws pick (validation's) and what the run trained
# on (the rollouts'), and the warm start (checked by its
# weights' hash, :func:`warm_start`) the policy both runs started from.
PROTOCOL_KEYS = ("seed", "train_tasks", "val_tasks", "val_num_tasks", "val_episodes_per_task", "val_temperature",
                 "rollout_temperature", "env_id", "env_kwargs")


def warm_start(config: dict) -> dict[str, Any]:
    """The run's starting weights: ``model`` as its config names it and the sha256 over its weight files, as
    the run recorded it when it started, else computed where that folder is on this machine (the record a start
    writes, ``resume.warm_start``), else None."""
    from ecpo_train.runtime.resume import warm_start as start_record

    recorded = config.get(RECORDED_HASH)
    computed = None if recorded else start_record(config)
    return {"model": str(config.get("model")),
            "weights_sha256": recorded or (computed or {}).get("weights_sha256")}


def _shown(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def protocol_difference(config_a: dict, config_b: dict) -> str | None:
    """Why two runs are not arms of one protocol (their first differing setting, or their warm starts), or None.
    Warm starts compare by their weights' hash where both folders are here, else by the path their configs name."""
    for key in PROTOCOL_KEYS:
        if config_a.get(key) != config_b.get(key):
            return f"their {key} differ ({_shown(config_a.get(key))} and {_shown(config_b.get(key))})"
    start_a, start_b = warm_start(config_a), warm_start(config_b)
    if start_a["weights_sha256"] and start_b["weights_sha256"]:
        if start_a["weights_sha256"] != start_b["weights_sha256"]:
            return (f"their warm starts' weights differ (sha256 {start_a['weights_sha256'][:12]} and "
                    f"{start_b['weights_sha256'][:12]})")
    elif start_a["model"] != start_b["model"]:
        return f"their warm starts differ ({start_a['model']} and {start_b['model']})"
    return None


def paired_split(before: dict, after: dict, trained: set[str]) -> dict[str, dict[str, Any]]:
    """after - before over the validation's episodes of trained tasks and of the others, paired by position (the
    validation plays the same list of episodes every time; a mismatch is refused): Tango's interval, McNemar's
    p, and the interval clustered by task where a task is validated more than once. ``shown``: Tango's interval
    lies above 0 and McNemar's exact test rejects (level 0.05), as the registration's McNemar-consistent
    interval required both at once."""
    if before["task_ids"] != after["task_ids"] or before["copies"] != after["copies"]:
        fail(f"validations at iterations {before['iteration']} and {after['iteration']} played different episodes")
    parts: dict[str, dict[str, Any]] = {}
    for name, idx in split(before["task_ids"], trained).items():
        b = {i: int(before["won"][i]) for i in idx}
        a = {i: int(after["won"][i]) for i in idx}
        test = paired_outcomes(b, a, task_of=lambda i: before["task_ids"][i])
        parts[name] = test | {"before": sum(b.values()) / len(idx), "after": sum(a.values()) / len(idx),
                              "tasks": len({before["task_ids"][i] for i in idx}),
                              "shown": bool(test["low"] > 0 and test["p"] < ALPHA)}
    return parts


REGIME_KEYS = ("iteration", "success", "credit/gated_fraction", "credit/num_lucky_singletons", "update/rows_computed",
               "num_steps", "update/optimizer_steps", "time/iteration", "credit/divergent_anchor_fraction")


def numeric_metrics(path: Path, metrics: list[dict]) -> list[dict]:
    """``metrics`` if every figure the regime reads is a finite number, else one ``ValueError`` naming the file."""
    for number, row in enumerate(metrics, 1):
        for key in REGIME_KEYS:
            value = row.get(key, 0)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"{path}: row {number} holds {key} {_shown(value)}, not a finite number")
    return metrics


def training_regime(metrics: list[dict]) -> dict[str, Any]:
    """What the iterations did: rollout success, the gate, lucky singletons, rows with an advantage."""
    its = [m for m in metrics if m.get("iteration", 0) >= 1 and "success" in m]

    def series(key: str, f=lambda v: v) -> list[float]:
        return [round(float(f(m[key])), 4) for m in its if key in m]

    rows = [(m.get("update/rows_computed", float("nan")), m.get("num_steps", float("nan"))) for m in its]
    return {
        "iterations": len(its),
        "rollout_success": series("success"),
        "gate_open_share": series("credit/gated_fraction", lambda g: 1 - g),
        "lucky_singletons": series("credit/num_lucky_singletons"),
        "rows_with_advantage_share": [round(c / n, 4) for c, n in rows if n],
        "optimizer_steps": int(sum(m.get("update/optimizer_steps", 0) for m in its)),
        "train_seconds": round(sum(m.get("time/iteration", 0.0) for m in its), 1),
    }


def _mean(values: list[float]) -> str:
    return f"{sum(values) / len(values):.3f}" if values else "not recorded"


def regime_table(paths: list[Path]) -> str:
    """Whether each run was in the regime the paper describes, from its ``metrics.jsonl``: the share of anchors
    ECPO's gate opened (rho > 0; GiGPO and GRPO runs have no gate), lucky singletons per batch (recorded since
    they were added to the credit diagnostics), the share of rows that carried an advantage, the share of
    anchors that are divergent; means over the run's iterations."""
    from ecpo_train.runtime.run_dir import read_metrics_file

    lines = ["| run | iterations | gate open share | lucky singletons / batch | rows with an advantage | divergent anchors |",
             "|---|---|---|---|---|---|"]
    for path in paths:
        try:
            metrics = numeric_metrics(path, read_metrics_file(path)[0])
        except ValueError as error:
            fail(" ".join(str(error).split()))
        t = training_regime(metrics)
        divergent = [m["credit/divergent_anchor_fraction"] for m in metrics
                     if m.get("iteration", 0) >= 1 and "credit/divergent_anchor_fraction" in m]
        if not t["iterations"]:
            lines.append(f"| {path} | 0 | no training iteration | | | |")
            continue
        gate = _mean(t["gate_open_share"]) if t["gate_open_share"] else "no gate"
        lines.append(f"| {path} | {t['iterations']} | {gate} | {_mean(t['lucky_singletons'])} | "
                     f"{_mean(t['rows_with_advantage_share'])} | {_mean(divergent)} |")
    return "\n".join(lines)


def endpoint(run_dir: Path, before_from: Path | None = None) -> dict[str, Any]:
    """The run's validation before training (iteration 0) against its last one, by part. ``before_from``: take
    the before-validation from that run instead -- another arm of the same protocol (:func:`protocol_difference`:
    the same seed, tasks, validation draws and temperature, and the same warm start) that validated the same
    episodes under the same starting weights, for a run that skipped its own (``val_before_training=false``)."""
    config, validations, metrics = read_run(run_dir)
    source, before_validations = run_dir, validations
    if before_from is not None:
        source_config, before_validations, _ = read_run(before_from)
        differ = protocol_difference(source_config, config)
        if differ:
            fail(f"--before-from {before_from}: not the same protocol as {run_dir}: {differ}")
        source = before_from
    if not before_validations or before_validations[0]["iteration"] != 0:
        fail(f"{source}/validation.jsonl holds no validation before training (iteration 0)")
    if not validations or validations[-1]["iteration"] == 0:
        fail(f"{run_dir}/validation.jsonl holds no validation after training")
    before, after = before_validations[0], validations[-1]
    return {"run_dir": str(run_dir), "estimator": config.get("estimator"), "seed": config.get("seed"),
            "before_from": str(source), "warm_start": warm_start(config), "units": ONE_RUN,
            "iteration_before": before["iteration"], "iteration_after": after["iteration"],
            "paired": paired_split(before, after, set(train_tasks(config))), "training": training_regime(metrics)}


ONE_RUN = "one run: covers validation draws, not run-to-run variance"


def train_tasks(config: dict) -> list[str]:
    """A run folder's training tasks as its config.yaml lists them (empty where the preset has no pool)."""
    return [str(t) for t in (config.get("train_tasks") or [])]


def versus(run_a: Path, run_b: Path) -> dict[str, Any]:
    """RUN_A's last validation against RUN_B's on the same episodes (``paired_split`` with B as "before"): two
    arms of one protocol (:func:`protocol_difference`), never a run against itself."""
    if run_a.resolve() == run_b.resolve():
        fail(f"--versus {run_b}: that is the run itself; compare two arms of one protocol")
    config_a, validations_a, _ = read_run(run_a)
    config_b, validations_b, _ = read_run(run_b)
    differ = protocol_difference(config_a, config_b)
    if differ:
        fail(f"{run_a} and {run_b} are not two arms of one protocol: {differ}")
    if not validations_a or not validations_b:
        fail(f"{run_a if not validations_a else run_b}/validation.jsonl holds no validation")
    a, b = validations_a[-1], validations_b[-1]
    if a["iteration"] != b["iteration"]:
        fail(f"{run_a} and {run_b} are not two arms of one protocol (the iterations of their last validation, "
             f"{a['iteration']} and {b['iteration']}, differ)")
    return {"run_a": str(run_a), "run_b": str(run_b), "estimators": [config_a.get("estimator"), config_b.get("estimator")],
            "seeds": [config_a.get("seed"), config_b.get("seed")], "iteration": a["iteration"],
            "warm_start": warm_start(config_a),
            "units": "one pair of runs (one seed): covers validation draws, not run-to-run variance; a comparison "
                     "of the methods takes the seed as its unit (benchmarks/comparison_seeds.py)",
            "paired": paired_split(b, a, set(train_tasks(config_a)))}


def line(name: str, part: dict[str, Any], first: str = "after", second: str = "before") -> str:
    """One endpoint's figures; ``first`` and ``second`` name the two sides (a run's after and before, or two arms)."""
    n = part["episodes"]
    if (first, second) == ("after", "before"):
        head = (f"{name} ({part['tasks']} tasks, {n} paired episodes): {part['before']:.3f} -> {part['after']:.3f}, "
                f"{part['gained']} gained, {part['lost']} lost")
    else:
        head = (f"{name} ({part['tasks']} tasks, {n} paired episodes): {second} {part['before']:.3f}, {first} "
                f"{part['after']:.3f}; {first} won {part['gained']} that {second} lost, {part['lost']} the other way")
    if part["gained"] + part["lost"] == 0:
        return head + ": no episode differs"
    mde = f"MDE {part['mde']:.3f}" if math.isfinite(part["mde"]) else "no MDE at this share of changing episodes"
    worse = part["high"] < 0 and part["p"] < ALPHA
    if (first, second) == ("after", "before"):
        verdict = "learning shown" if part["shown"] else ("worse" if worse else "not significant")
    else:
        verdict = f"{first} better" if part["shown"] else (f"{first} worse" if worse else "not shown")
    by_task = f"; by task {fmt_clustered(part)}" if part.get("clustered") else ""
    return (head + f"; {first} - {second} {part['diff']:+.3f}, Tango 95 % [{part['low']:+.3f}, {part['high']:+.3f}]"
            f"{by_task}, McNemar p {part['p']:.3g} ({verdict}; {mde})")


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = ArgumentParser(__spec__.name, description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", nargs="*", type=Path)
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    parser.add_argument("--regime", nargs="+", type=Path, metavar="METRICS",
                        help="print the regime table of these metrics.jsonl files instead")
    parser.add_argument("--before-from", type=Path, metavar="RUN",
                        help="take the validation before training from this run of the same protocol (for runs "
                             "started with val_before_training=false)")
    parser.add_argument("--versus", type=Path, metavar="RUN_B",
                        help="compare the one RUN_DIR's last validation with this run's (two arms of one protocol)")
    args = parser.parse_args(argv)
    if args.versus is not None:
        if len(args.run_dirs) != 1:
            fail("--versus compares one run folder with another: name exactly one RUN_DIR")
        if args.before_from is not None:
            fail("--before-from reads a run's own before -> after; --versus compares two runs' last validations: "
                 "give one of them")
        result = versus(args.run_dirs[0], args.versus)
        a, b = result["estimators"]
        print(f"{result['run_a']} ({a}) - {result['run_b']} ({b}), after iteration {result['iteration']}, "
              f"seeds {result['seeds']} (\"before\" = {b}, \"after\" = {a}):")
        for name, part in result["paired"].items():
            print("  " + line(name, part, a, b))
        print(f"  ({result['units']})")
        if args.out:
            write_text(args.out, json.dumps(result, indent=1) + "\n")
        return [result]
    if args.regime:
        missing = [str(p) for p in args.regime if not p.is_file()]
        if missing:
            fail(f"{missing[0]} does not exist (a run folder's metrics.jsonl)")
        print(regime_table(args.regime))
        return []
    if not args.run_dirs:
        fail("name a run folder (or --regime METRICS.jsonl ...)")
    results = [endpoint(d, args.before_from) for d in args.run_dirs]
    for r in results:
        t = r["training"]
        source = "" if r["before_from"] == r["run_dir"] else f", before-validation from {r['before_from']}"
        print(f"{r['run_dir']} ({r['estimator']}, seed {r['seed']}{source}, iterations {r['iteration_before']} -> "
              f"{r['iteration_after']}, {t['optimizer_steps']} optimizer steps, {t['train_seconds']:.0f} s of training)")
        for name, part in r["paired"].items():
            print("  " + line(name, part))
        print(f"  rollout success by iteration: {t['rollout_success']}")
        print(f"  gate open share: {t['gate_open_share']}; lucky singletons per batch: {t['lucky_singletons']}")
        print(f"  share of rows with an advantage: {t['rows_with_advantage_share']}")
        print(f"  ({r['units']})")
    if args.out:
        write_text(args.out, json.dumps(results, indent=1) + "\n")
    return results


if __name__ == "__main__":
    main()
