"""Counterfactual credit updates (issue 23): can one update tell ECPO from GiGPO on identical batches?

The design, the effects measured and what they cannot tell: docs/credit_experiments.md, "Counterfactual updates";
the commands: docs/benchmarks.md. Per arm of ``credit_counterfactual.yaml``, :func:`make_checkpoints` saves a GRPO
checkpoint at each target concentration; :func:`measure_batch` samples one batch from a checkpoint and applies every
estimator's ONE update to it from the same state (the metrics: ``credit_counterfactual_report.LABELS``). The
statistics and markdown are ``credit_counterfactual_report``'s, the registered claim-level test
``credit_counterfactual_claim``'s.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import math
import shlex
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import RESULTS, count, fraction, read_json, refused, rescore, write_json_gz, write_report
from benchmarks.credit_counterfactual_claim import claim_markdown, claim_report
from benchmarks.credit_counterfactual_report import render, summarize
from benchmarks.stats import nanmean
from benchmarks.study import StudyCommand, in_processes, read_protocol
from ecpo_train.files.atomic import write_text

PROTOCOL_PATH = Path(__file__).with_name("credit_counterfactual.yaml")  # the arms, their K and targets, notes
PROTOCOL = read_protocol(PROTOCOL_PATH, ("estimators", "arms", "quick", "notes", "batch_seed_base",
                                         "full_arm_minutes"))
ESTIMATORS: tuple[str, ...] = tuple(PROTOCOL["estimators"])
ARMS: dict[str, dict[str, Any]] = PROTOCOL["arms"]
BATCH_SEED_BASE = int(PROTOCOL["batch_seed_base"])


def arm_protocol(name: str, args: Any, seed: int) -> dict[str, Any]:
    """Arm ``name`` (with ``--quick``'s settings) as ``run``'s options change it, from checkpoint seed ``seed``."""
    arm = json.loads(json.dumps(ARMS[name] | (PROTOCOL["quick"][ARMS[name]["policy"]] if args.quick else {})))
    return arm | {"K": int(args.k or arm["K"]), "targets": sorted(args.targets) if args.targets else arm["targets"],
                  "max_iterations": args.max_iterations or arm["max_iterations"], "quick": args.quick,
                  "checkpoint_seed": seed, "batch_seed_base": args.batch_seed_base}


def replicate_seed(record: dict[str, Any]) -> int:
    return int(record["protocol"]["checkpoint_seed"])


def replicates(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An arm's finished records by checkpoint seed; refused where a seed comes twice, or where two seeds'
    protocols differ beyond the seed (they would not be replicates)."""
    parts = sorted(parts, key=replicate_seed)
    for first, other in itertools.pairwise(parts):
        if replicate_seed(first) == replicate_seed(other):
            raise ValueError(f"arm {other['arm']}: checkpoint seed {replicate_seed(other)} is in two runs")
        if differing := sorted(k for k in first["protocol"].keys() | other["protocol"].keys()
                               if k != "checkpoint_seed" and first["protocol"].get(k) != other["protocol"].get(k)):
            raise ValueError(f"arm {other['arm']}: checkpoint seeds {replicate_seed(first)} and "
                             f"{replicate_seed(other)} ran different protocols ({', '.join(differing)})")
    return parts


def finished_arm(source: Path, name: str) -> list[dict[str, Any]]:
    """Arm ``name``'s records as finished runs left them (``<source>/<name>_ckpt<seed>.json``), or those under
    ``arms`` when ``source`` is a report's JSON (which keeps every arm's raw batches); empty where it has none."""
    if source.is_file():
        return read_json(source).get("arms", {}).get(name, [])
    return [read_json(path) for path in sorted(source.glob(f"{name}_ckpt*.json"))]


def arm_config(arm: dict[str, Any], run_dir: str, seed: int) -> Any:
    """The native ``TrainConfig`` of an arm (GRPO; the estimator is chosen per update, not here)."""
    from ecpo_train.runtime.config import config_dict, load_config, make_config

    values = {"run_dir": run_dir, "seed": seed, "estimator": "grpo", "env_id": arm["env_id"],
              "env_kwargs": dict(arm["env_kwargs"]), "val_every": 0, "checkpoint_every": 0, "tensorboard": False,
              "progress": False, "val_temperature": 0.4, "rollout_temperature": 1.0, **arm["config"]}
    if arm["policy"] == "tabular":
        return make_config({"policy": "tabular", "device": "cpu", **values})
    base = config_dict(load_config(arm["preset"]))
    return make_config(base | values | {"credit": dict(base["credit"]) | dict(arm["config"].get("credit", {}))})


def probe_env(arm: dict[str, Any]) -> tuple[Any, dict[str, str]]:
    """The arm's corridor env, and state_key -> the good door of that room for every room of every task."""
    import ecpo_gym  # noqa: F401
    from ecpo_gym.group_workers import make_env

    env = make_env(arm["env_id"], dict(arm["env_kwargs"])).unwrapped
    layouts = {task: env.layout(task) for task in env.task_ids}
    return env, {f"{task}:room{room}": doors[good] for task, layout in layouts.items()
                 for room, (doors, good) in enumerate(zip(layout.doors, layout.good_door))}


def state_distributions(policy: Any, env: Any, temperature: float, env_name: str = "") -> dict[str, dict[str, float]]:
    """pi(. | s) at ``temperature`` in every room: the tabular policy's table, or the scoring LM on the room's
    context as the env shows it (history-free prompts, as ``builders.exact_success`` uses them)."""
    from ecpo_train.runtime.builders import context_distributions

    states = [s for task in env.task_ids for s in env.transition_model(task)]
    if hasattr(policy, "action_probabilities"):
        return {s: policy.action_probabilities(s, env.state_view(s)["admissible_actions"], temperature=temperature)
                for s in states}
    return context_distributions(policy, env, env_name, states, temperature)


def concentration(policy: Any, env: Any, good: dict[str, str], env_name: str = "") -> float:
    """Mean over rooms of pi(good door | room) at T = 1."""
    dist = state_distributions(policy, env, 1.0, env_name)
    return float(np.mean([dist[s][good[s]] for s in good]))


def exact_j(trainer: Any) -> float:
    from ecpo_train.runtime.builders import exact_success

    cfg = trainer.config
    value = exact_success(trainer.policy, cfg.env_id, cfg.env_kwargs, trainer.train_tasks, cfg.val_temperature,
                          history_length=cfg.history_length)
    if value is None:
        raise ValueError(f"{cfg.env_id} with this policy has no exact success (needs history_length=0 for an LLM)")
    return float(value)


def supervised_step(trainer: Any, env: Any, good: dict[str, str], env_name: str, lr: float | None = None) -> float:
    """One step of the trainer's AdamW (at ``lr`` for this step only) on -mean over rooms of log pi(good door |
    room) at T = 1, the scoring LM on history-free prompts; returns the loss before the step."""
    from ecpo_train.runtime.builders import state_contexts
    from ecpo_train.runtime.sft import Demonstration, candidate_rows, reply_cross_entropy

    policy, states = trainer.policy, list(good)
    demos = [Demonstration(ctx, good[s]) for ctx, s in zip(state_contexts(env, env_name, states), states)]
    rows, chosen, _ = candidate_rows(policy, demos)  # the good door is always admissible: nothing is left out
    nll, count = reply_cross_entropy(policy, rows, chosen)
    loss = nll / count
    trainer.optimizer_step(loss, lr)
    return float(loss.detach())


def make_checkpoints(arm: dict[str, Any], folder: Path, seed: int = 0, log: Any = print) -> list[dict[str, Any]]:
    """Train the arm and save a checkpoint the first time mean pi(good) reaches each target, by GRPO or by
    supervised steps then settling (``arm["reach"]``; docs/credit_experiments.md, "Counterfactual updates")."""
    from ecpo_train.runtime.run import open_run
    from ecpo_train.runtime.trainer import Trainer

    folder.mkdir(parents=True, exist_ok=True)
    run = open_run(Trainer, arm_config(arm, str(folder / "train"), seed), overwrite=True)  # (this search's own folder)
    trainer = run.engine
    env, good = probe_env(arm)
    supervised = arm.get("reach", "grpo") == "supervised"
    saved, targets, steps = [], list(arm["targets"]), 0

    def save(level: float) -> None:
        path = trainer.save(folder / f"pi{targets[0]:.2f}.pt")
        saved.append({"target": targets[0], "concentration": level, "iteration": trainer.iteration,
                      "supervised_steps": steps, "exact_success": exact_j(trainer), "path": str(path)})
        log(f"  checkpoint pi(good) >= {targets[0]}: {level:.3f} at GRPO iteration {trainer.iteration}"
            + (f", after {steps} supervised steps" if supervised else ""))
        targets.pop(0)

    def reached(_: dict[str, float]) -> bool:  # the run shell's stop hook: after each GRPO iteration
        level = concentration(trainer.policy, env, good, arm["env_id"])
        if trainer.iteration % 10 == 0:
            log(f"  GRPO iteration {trainer.iteration}: mean pi(good) = {level:.3f}")
        while targets and level >= targets[0]:
            save(level)
        return not targets

    with run, contextlib.redirect_stderr(io.StringIO()):
        if not supervised:
            run.train(arm["max_iterations"], stop=reached)
        while supervised and targets and steps < arm["max_iterations"]:
            supervised_step(trainer, env, good, arm["env_id"], arm.get("reach_lr"))
            steps += 1
            level = concentration(trainer.policy, env, good, arm["env_id"])
            if level >= targets[0]:  # settle, then save whatever concentration the settling left
                trainer.clear_optimizer_moments()  # no supervised momentum may carry into the GRPO steps
                if int(arm.get("settle", 0)):
                    run.train(int(arm["settle"]))
                save(concentration(trainer.policy, env, good, arm["env_id"]))
    for target in targets:
        log(f"  target pi(good) = {target} not reached in {arm['max_iterations']} iterations")
    return saved


def lucky_singletons(batch: Any, good: dict[str, str], won: dict[int, bool], d_min: int) -> list[dict[str, Any]]:
    """The batch's lucky-singleton anchors: per (group, state), a non-good door with one visit, in a won episode,
    beside the good door with >= 2 visits, at least one in a lost episode. ``won``: traj id -> episode won."""
    visits: dict[tuple, list[tuple[str, int, int, int]]] = {}
    for row, (g, t, step, s, a) in enumerate(zip(batch.group_id, batch.traj_id, batch.step, batch.anchor_key,
                                                 batch.action_key)):
        visits.setdefault((int(g), str(s)), []).append((str(a), int(t), int(step), row))
    found = []
    for (g, s), rows in visits.items():
        if s not in good:
            continue
        first_step = min(step for _, _, step, _ in rows)
        good_rows = [r for r in rows if r[0] == good[s]]
        if len(good_rows) < 2 or all(won[t] for _, t, _, _ in good_rows):
            continue
        for action in {a for a, *_ in rows if a != good[s]}:
            taken = [r for r in rows if r[0] == action]
            if len(taken) == 1 and won[taken[0][1]]:
                found.append({"group": g, "state": s, "rare": action, "good": good[s], "row": taken[0][3],
                              "strict_valid": first_step >= d_min})
    return found


def rare_at_strict_valid(batch: Any, good: dict[str, str], d_min: int) -> set[tuple[str, str]]:
    """(state, non-good door) pairs sampled at anchors (>= 2 visits, >= 2 distinct doors) first visited at step
    >= d_min in their group: where ECPO's gate can open."""
    visits: dict[tuple, list[tuple[str, int]]] = {}
    for g, step, s, a in zip(batch.group_id, batch.step, batch.anchor_key, batch.action_key):
        visits.setdefault((int(g), str(s)), []).append((str(a), int(step)))
    pairs = set()
    for (_, s), rows in visits.items():
        if s in good and len(rows) >= 2 and len({a for a, _ in rows}) >= 2 and min(t for _, t in rows) >= d_min:
            pairs |= {(s, a) for a, _ in rows if a != good[s]}
    return pairs


def one_update_each(trainer: Any, checkpoint: str, rollout: Any, advantages: dict[str, np.ndarray],
                    probe: Any) -> dict[str, Any]:
    """For each estimator: reload ``checkpoint`` (weights + optimizer state), apply ONE update
    (``Trainer.update_policy``) with its advantages and the same shuffle seed, and return ``probe(trainer)``.
    Identical advantage vectors give an identical update, so their probe is computed once."""
    done: dict[bytes, Any] = {}
    out = {}
    for name, adv in advantages.items():
        key = np.asarray(adv, dtype=np.float64).tobytes()
        if key not in done:
            trainer.load(Path(checkpoint))
            with contextlib.redirect_stderr(io.StringIO()):
                trainer.update_policy(rollout.batch, adv, np.random.default_rng(12345))  # the same shuffle for all
            done[key] = probe(trainer)
        out[name] = done[key]
    return out


def measure_batch(trainer: Any, checkpoint: str, batch_seed: int, env: Any, good: dict[str, str]) -> dict[str, Any]:
    """One batch (seeded by ``batch_seed``) at one checkpoint: every estimator's one-update effects."""
    from ecpo_train.core.credit import compute_advantages
    from ecpo_train.core.iteration import draw_iteration

    cfg = trainer.config
    trainer.load(Path(checkpoint))
    tasks, env_seed = draw_iteration(cfg, trainer.train_tasks, np.random.default_rng(batch_seed), iteration=0)
    rollout = trainer.sample(tasks, env_seed, sampling_seed=batch_seed)
    batch = rollout.batch
    won = {int(e.traj_id): bool(e.won) for e in rollout.episodes}
    d_min = int(cfg.credit.d_min)
    lucky = lucky_singletons(batch, good, won, d_min)
    pairs = {"lucky": {(x["state"], x["rare"]) for x in lucky},
             "lucky_sv": {(x["state"], x["rare"]) for x in lucky if x["strict_valid"]},
             "rare_sv": rare_at_strict_valid(batch, good, d_min)}
    before = state_distributions(trainer.policy, env, 1.0, cfg.env_id)
    j_before = exact_j(trainer)
    rows = batch.credit_rows()
    hyper = cfg.credit_hyperparameters()
    advantages = {name: np.asarray(compute_advantages(name, rows, hyper)[0]) for name in ESTIMATORS}

    def probe(updated: Any) -> dict[str, float]:
        after = state_distributions(updated.policy, env, 1.0, cfg.env_id)
        return {"delta_j": exact_j(updated) - j_before} | {
            k: nanmean([math.log(after[s][a]) - math.log(before[s][a]) for s, a in v]) for k, v in pairs.items()}

    effects = one_update_each(trainer, checkpoint, rollout, advantages, probe)
    out: dict[str, Any] = {"seed": batch_seed, "j_before": j_before, "n_lucky": len(lucky),
                           "n_lucky_sv": sum(x["strict_valid"] for x in lucky), "n_rare_sv": len(pairs["rare_sv"]),
                           "success": float(np.mean(list(won.values()))), "estimators": {}}
    for name in ESTIMATORS:
        term = advantages[name] - advantages["grpo"]
        out["estimators"][name] = dict(effects[name]) | {
            "term_lucky": nanmean([term[x["row"]] for x in lucky]),
            "term_lucky_sv": nanmean([term[x["row"]] for x in lucky if x["strict_valid"]])}
    return out


def run_arm(job: tuple[str, dict[str, Any], str]) -> dict[str, Any]:
    """One arm's checkpoints and batches (a process-pool job), kept in ``runs_dir`` (not run again)."""
    import torch

    from ecpo_train.runtime.trainer import Trainer

    torch.set_num_threads(1)
    name, arm, runs_dir = job
    seed = int(arm["checkpoint_seed"])
    kept = Path(runs_dir) / f"{name}_ckpt{seed}.json"
    if kept.is_file() and (finished := read_json(kept))["protocol"] == arm:
        return finished
    folder = Path(runs_dir) / f"{name}_ckpt{seed}"
    started = time.perf_counter()
    log = lambda text: print(f"[{name} ckpt{seed}] {text}", flush=True)
    checkpoints = make_checkpoints(arm, folder, seed=seed, log=log)
    env, good = probe_env(arm)
    trainer = Trainer(arm_config(arm, str(folder / "measure"), seed))
    batches: dict[str, list[dict[str, Any]]] = {}
    try:
        for level in checkpoints:
            key = f"{level['target']:.2f}"
            for k in range(arm["K"]):
                batch_seed = int(arm["batch_seed_base"]) + k  # the same batch seeds at every checkpoint
                batches.setdefault(key, []).append(measure_batch(trainer, level["path"], batch_seed, env, good))
                if arm["policy"] != "tabular" or (k + 1) % 100 == 0:
                    log(f"pi(good) {key}: batch {k + 1}/{arm['K']} ({time.perf_counter() - started:.0f}s)")
    finally:
        trainer.close()
    result = {"arm": name, "protocol": arm, "checkpoints": checkpoints, "batches": batches,
              "seconds": time.perf_counter() - started}
    write_text(kept, json.dumps(result))
    return result


def write_outputs(results: Sequence[dict[str, Any]], protocol: dict[str, Any], runtime: float, out: Path) -> dict:
    arms = {name: sorted((r for r in results if r["arm"] == name), key=replicate_seed)
            for name in dict.fromkeys(r["arm"] for r in results)}
    protocol = protocol | {"arms": {name: {k: v for k, v in records[0]["protocol"].items() if k != "checkpoint_seed"}
                                    | {"checkpoint_seeds": [replicate_seed(r) for r in records]}
                                    for name, records in arms.items()},
                           "full_arm_minutes": PROTOCOL["full_arm_minutes"]}
    summary = summarize(arms)
    stem = out / ("credit_counterfactual_quick" if protocol.get("quick") else "credit_counterfactual")
    out.mkdir(parents=True, exist_ok=True)
    payload = {"protocol": protocol, "runtime_s": runtime, "summary": summary, "arms": arms}
    write_json_gz(stem.with_suffix(".json.gz"), payload)  # 15 MB of raw batches as plain JSON, 3 MB gzipped
    claim = None
    if not protocol.get("quick") and summary["verdict_unit"] == "checkpoints":  # the registered claim-level test
        claim = claim_report(summary)
        write_report(claim, out / "credit_counterfactual_claim.json", claim_markdown)
    write_text(stem.with_suffix(".md"), render(summary, protocol, runtime, claim))
    print(f"wrote {stem.with_suffix('.md')} and {stem.with_suffix('.json.gz')} ({runtime:.0f}s)")
    for claim in summary["claims"]:
        print(f"  {claim['id']}: {claim['claim']}: {claim['verdicts']}")
    return summary


STAGE_OPTIONS = {  # (besides --out)
    "run": ("quick", "arms", "k", "targets", "max_iterations", "checkpoint_seeds", "batch_seed_base", "workers",
            "runs_dir"),
    "report": ("from_raw", "arms"),
    "claim": ("from_json",),
}
DEFAULTS = {"arms": list(ARMS), "checkpoint_seeds": [0], "batch_seed_base": BATCH_SEED_BASE, "workers": 2,
            "runs_dir": Path("runs/credit_counterfactual"), "quick": False,
            "from_json": RESULTS / "credit_counterfactual.json.gz"}


def command_line(args: Any) -> str:
    """The stage's command as the report quotes it: the options that shape its numbers, defaults left out."""
    words = ["python", "-m", "benchmarks.credit_counterfactual", args.stage] + (["--quick"] if args.quick else [])
    if args.stage == "report":
        words += ["--from-raw", *map(str, args.from_raw)]
    if args.arms != list(ARMS):
        words += ["--arms", *args.arms]
    if args.stage == "run":
        words += ["--k", str(args.k)] if args.k else []
        words += ["--targets", *map(str, args.targets)] if args.targets else []
        words += ["--max-iterations", str(args.max_iterations)] if args.max_iterations else []
        words += ["--checkpoint-seeds", *map(str, args.checkpoint_seeds)] if args.checkpoint_seeds != [0] else []
        words += ["--batch-seed-base", str(args.batch_seed_base)] if args.batch_seed_base != BATCH_SEED_BASE else []
    return shlex.join(words)


def main(argv: Sequence[str] | None = None) -> int:
    command = StudyCommand(__spec__.name, __doc__.split("\n\n")[0], STAGE_OPTIONS,
                           "run: train the arms' checkpoints and measure their batches, then the report; report: "
                           "the report again from finished arms (--from-raw), without running; claim: the "
                           "registered claim-level test of a written report (credit_counterfactual_claim)", DEFAULTS)
    command.add("--quick", action="store_const", const=True,
                help="run: machinery smoke run (small K, two GRPO checkpoints)")
    command.add("--arms", nargs="+", choices=list(ARMS), metavar="ARM", help=f"a subset of {', '.join(ARMS)}")
    command.add("--k", type=count, help="run: batches per checkpoint (default: the protocol's)")
    command.add("--targets", type=fraction, nargs="+", help="run: pi(good) targets of the checkpoints (default: the arm's)")
    command.add("--max-iterations", type=count,
                help="run: GRPO iterations allowed to reach the targets (default: the arm's protocol)")
    command.add("--checkpoint-seeds", type=int, nargs="+",
                help="run: train each arm's checkpoints once per seed (default 0); verdicts take the checkpoint as "
                     "the unit from 3 seeds on")
    command.add("--batch-seed-base", type=int,
                help=f"run: batch k is drawn from seed BASE + k at every checkpoint (default {BATCH_SEED_BASE})")
    command.add("--workers", type=count, help="run: processes (default 2)")
    command.add("--runs-dir", type=Path, help="run: the arms' folders (default runs/credit_counterfactual)")
    command.add("--out", type=Path, default=RESULTS, common=True)
    command.add("--from-raw", type=Path, nargs="+",
                help="report: the finished arms' <arm>_ckpt<seed>.json in these folders, or the arms of a written "
                     "report's JSON (e.g. the committed one); an arm's checkpoint seeds from several places are "
                     "reported together")
    command.add("--from-json", type=Path,
                help="claim: a written report's JSON, whose summary the test reads (default: the committed one)")
    args = command.parse(argv)
    if args.stage == "claim":  # the registered claim-level test, its power and the exploratory evaluation
        rescore(args.from_json, args.out / "credit_counterfactual_claim.json", "summary", "no summary",
                lambda report: claim_report(report["summary"]), claim_markdown)
        return 0
    if len(set(args.checkpoint_seeds)) != len(args.checkpoint_seeds) or min(args.checkpoint_seeds) < 0:
        return refused(f"--checkpoint-seeds must be distinct non-negative integers, got {args.checkpoint_seeds}")
    if args.batch_seed_base < 0:
        return refused(f"--batch-seed-base must be >= 0, got {args.batch_seed_base}")
    base = {"quick": args.quick, "estimators": list(ESTIMATORS), "notes": PROTOCOL["notes"], "command": command_line(args)}
    if args.stage == "report":
        if not args.from_raw:
            return refused("report needs --from-raw DIR_OR_JSON [...]")
        results = []
        for a in args.arms:  # (an arm with no finished record adds none)
            try:
                results += replicates([part for d in args.from_raw for part in finished_arm(d, a)])
            except ValueError as error:
                return refused(f"--from-raw: {error}")
        if not results:
            return refused(f"no finished arm under {', '.join(map(str, args.from_raw))}")
        base["quick"] = any(r["protocol"]["quick"] for r in results)
        base["from_raw"] = [str(d) for d in args.from_raw]
        write_outputs(results, base, sum(r["seconds"] for r in results), args.out)
        return 0
    runs_dir = args.runs_dir / ("quick" if args.quick else "full")
    runs_dir.mkdir(parents=True, exist_ok=True)
    jobs = [(a, arm_protocol(a, args, seed), str(runs_dir)) for a in args.arms for seed in args.checkpoint_seeds]
    jobs.sort(key=lambda j: j[1]["policy"] == "tabular")  # the slow LLM arm first
    started = time.perf_counter()
    results = list(in_processes(run_arm, jobs, args.workers))
    write_outputs(results, base, time.perf_counter() - started, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
