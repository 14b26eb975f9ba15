"""The speed benchmarks, one stage each (``env|openenv|text_policy|credit``; ``benchmarks.timing`` is their harness;
what each measures and writes: docs/benchmarks.md, docs/openenv.md, docs/cpu_training.md).

Speed targets live here and in the JSON, never in timed tests. ``openenv``: each session plays seeded random
admissible actions, an invalid one step in ten, a level's ``--steps`` split over its sessions, timed from the first
reset with the connections opened before. ``credit``: each method timed from fresh per-step Python strings (no cached
hashes) to the advantage array, the methods interleaved on one thread, as a run pays them.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import RESULTS, fail
from benchmarks.study import StudyCommand, run_stage
from benchmarks.timing import ROOT, load, machine, seconds, timed

INVALID_SHARE = 0.1


def choose(rng: random.Random, admissible: list[str]) -> str:
    return "wander off" if rng.random() < INVALID_SHARE or not admissible else rng.choice(admissible)


def in_process(env_id: str, env_kwargs: dict[str, Any], steps: int, seed: int) -> dict[str, Any]:
    import gymnasium as gym

    import ecpo_gym  # noqa: F401

    env = gym.make(env_id, disable_env_checker=True, **env_kwargs)
    rng, latencies, episodes = random.Random(seed), [], 1
    start = time.perf_counter()
    _, info = env.reset(seed=seed)
    for _ in range(steps):
        (_, _, terminated, truncated, info), elapsed = timed(env.step, choose(rng, info["admissible_actions"]))
        latencies.append(elapsed)
        if terminated or truncated:
            _, info = env.reset(seed=rng.randrange(1 << 30))
            episodes += 1
    wall = time.perf_counter() - start
    env.close()
    return {"sessions": 0, "steps": steps, "episodes": episodes, "wall_s": wall, "steps_per_s": steps / wall,
            "step_median_ms": 1000 * statistics.median(latencies)}


async def _play(client: Any, steps: int, seed: int, latencies: list[float]) -> int:
    rng, episodes = random.Random(seed), 1
    result = await client.reset(seed=seed)
    for _ in range(steps):
        t0 = time.perf_counter()
        result = await client.step(choose(rng, result.observation.admissible_actions))
        latencies.append(time.perf_counter() - t0)
        if result.done:
            result = await client.reset(seed=rng.randrange(1 << 30))
            episodes += 1
    return episodes


async def through_server(url: str, sessions: int, steps: int, seed: int) -> dict[str, Any]:
    from ecpo_train.integrations.openenv.client import ECPOEnvClient

    per_session = max(1, steps // sessions)
    latencies: list[float] = []
    clients = [ECPOEnvClient(base_url=url, message_timeout_s=120) for _ in range(sessions)]
    try:
        await asyncio.gather(*(client.connect() for client in clients))  # connected before the clock starts
        start = time.perf_counter()
        episodes = await asyncio.gather(*(_play(client, per_session, seed + k, latencies)
                                          for k, client in enumerate(clients)))
        wall = time.perf_counter() - start
    finally:
        await asyncio.gather(*(client.close() for client in clients), return_exceptions=True)
    total = per_session * sessions
    return {"sessions": sessions, "steps": total, "episodes": sum(episodes), "wall_s": wall,
            "steps_per_s": total / wall, "step_median_ms": 1000 * statistics.median(latencies),
            "step_p90_ms": 1000 * sorted(latencies)[int(0.9 * (len(latencies) - 1))]}


def start_server(env_id: str, env_kwargs: dict[str, Any], max_sessions: int) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen(
        [sys.executable, "-m", "ecpo_train.apps.cli", "serve", env_id, "--port", "0", "--max-sessions",
         str(max_sessions), "--env-kwargs", json.dumps(env_kwargs)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = process.stdout.readline()
    if not line.startswith("serving"):
        process.kill()
        raise RuntimeError(f"ecpo serve did not start: {line.strip() or process.stderr.read()[-500:]}")
    return process, line.split(" on ", 1)[1].split()[0]


def openenv(args: Any) -> dict[str, Any]:
    try:
        env_kwargs = json.loads(args.env_kwargs)
    except ValueError as err:
        raise ValueError(f"--env-kwargs: {err}") from None
    if not isinstance(env_kwargs, dict):
        raise ValueError("--env-kwargs must be a JSON object")  # noqa: TRY004 (the one refusal of bad input)
    if args.steps < 1 or any(n < 1 or n > 4096 for n in args.sessions):
        raise ValueError("--steps must be >= 1 and every --sessions in [1, 4096]")
    load_before = load()
    baseline = in_process(args.env, env_kwargs, args.steps, args.seed)
    process, url = start_server(args.env, env_kwargs, max(args.sessions))
    try:
        levels = [asyncio.run(through_server(url, n, args.steps, args.seed)) for n in args.sessions]
    finally:
        process.terminate()
        process.wait(timeout=60)
    return {"env_id": args.env, "env_kwargs": env_kwargs, "invalid_share": INVALID_SHARE, "machine": machine(),
            "load_average_1m_before": load_before, "load_average_1m_after": load(), "in_process": baseline,
            "server": levels, "note": "client and server on the same machine; wall time includes resets"}


def alfworld_text_config(model: str | None, *overrides: str) -> Any:
    from ecpo_train.runtime.config import load_config

    return load_config("alfworld_text", [*overrides, *([f"model={model}"] if model else [])])


def recorded_contexts(model: str | None, groups: int = 16, copies: int = 8) -> tuple[Any, list[Any]]:
    """The preset's policy (``--model`` or random weights) and the step contexts of its rollout on the first ``groups``
    training games, ``copies`` each, every batch recorded on its way to the policy."""
    from ecpo_train.runtime.trainer import Trainer

    trainer = Trainer(alfworld_text_config(model, f"n_groups={groups}", f"group_size={copies}"))
    contexts: list[Any] = []

    class Recorder:
        def __getattr__(self, name: str) -> Any:
            return getattr(trainer.policy, name)

        def act(self, batch: Any, *args: Any, **kwargs: Any) -> Any:
            contexts.extend(batch)
            return trainer.policy.act(batch, *args, **kwargs)

    trainer.act_with(Recorder())
    try:
        trainer.sample(trainer.train_tasks[:groups], seed=0)
    finally:
        trainer.close()
    return trainer.policy, contexts


def decisions_per_second(policy: Any, contexts: list[Any], batch: int, threads: int, repeats: int = 3) -> float:
    """The best of ``repeats`` passes over the contexts (other processes only ever slow a pass down)."""
    import torch

    torch.set_num_threads(threads)
    batches = [contexts[i : i + batch] for i in range(0, len(contexts), batch)]
    policy.act(batches[0])
    return len(contexts) / min(seconds(lambda: [policy.act(chunk) for chunk in batches], repeats))


def iteration_times(model: str | None, iterations: int, engine: str = "native") -> list[dict[str, float]]:
    """``iterations`` iterations of the preset on ``engine``: ``native`` (this process) or ``rllib`` (2 env-runner
    actors and 2 learner actors, DDP over gloo, half a CPU each)."""
    from ecpo_train.runtime.engines import engine_spec
    from ecpo_train.runtime.run import train

    actors = {"num_env_runners": 2, "num_learners": 2, "actor_cpus": 0.5} if engine == "rllib" else {}
    with tempfile.TemporaryDirectory() as folder:
        config = alfworld_text_config(model, f"run_dir={folder}/run", f"iterations={iterations}", "val_every=0",
                                      "progress=false", "tensorboard=false", "checkpoint_every=0")
        history = train(engine_spec(engine).engine_class(), config, **actors)
    keys = ("time/iteration", "time/generation", "time/env", "time/update", "success", "num_steps")
    return [{key: float(h[key]) for key in keys if key in h} for h in history]


def text_policy(args: Any) -> dict[str, Any]:
    if args.batch < 1 or args.iterations < 1:
        raise ValueError("--batch and --iterations must be >= 1")
    load_before = load()
    policy, contexts = recorded_contexts(args.model)
    rates = {f"threads_{t}": decisions_per_second(policy, contexts, args.batch, t) for t in (1, 2)}
    steps = {engine: iteration_times(args.model, args.iterations, engine) for engine in args.engines}
    return {
        "machine": machine(), "model": Path(args.model).name if args.model else "random weights",
        "load_average_1m": {"before": load_before, "after": load()},
        "decisions": {"contexts": len(contexts), "batch": args.batch, "per_second": rates,
                      "mean_commands": statistics.mean(len(c.admissible_actions) for c in contexts),
                      "target_per_second": 5000},
        "iteration": {"groups_x_copies": "16 x 8", "max_steps": 50, "target_seconds": 30,
                      "engines": {engine: {"iterations": rows,
                                           "median_seconds": statistics.median(r["time/iteration"] for r in rows)}
                                  for engine, rows in steps.items()}},
    }


RECEPTACLES = ["cabinet", "countertop", "drawer", "fridge", "garbagecan", "shelf", "sinkbasin", "stoveburner",
               "microwave", "coffeemachine", "toaster", "diningtable", "sidetable", "dresser", "bed", "desk"]
OBJECTS = ["apple", "mug", "knife", "potato", "lettuce", "soapbar", "cellphone", "book", "pencil", "plate",
           "spatula", "tomato", "egg", "bowl", "keychain", "creditcard"]


def _observation(rng: Any, task: int, detail: str) -> str:
    """An ALFWorld-like observation (~0.8-1.5k characters): room description, task, admissible actions."""
    seen = ", ".join(f"a {RECEPTACLES[i % 16]} {1 + i // 16}" for i in rng.permutation(40)[:30])
    admissible = "\n ".join(f"go to {RECEPTACLES[i % 16]} {1 + i // 16}" for i in rng.permutation(40)[:20])
    return (
        "-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly around you, "
        f"you see {seen}.\n\nYour task is to: put a clean {OBJECTS[task % 16]} in {RECEPTACLES[task % 16]}.\n"
        f"{detail}\nYour admissible actions of the current situation are: [\n {admissible}\n]."
    )


def build_batch(seed: int, groups: int = 16, rollouts: int = 8, max_steps: int = 50, shared_prob: float = 0.38):
    """Rows (group_ids, traj_ids, steps, anchor_keys, action_keys, rewards) as Python lists that mimic one ALFWorld
    iteration of the paper (App. A.1: 16 groups x 8 rollouts, up to 50 steps, long observations as anchor keys,
    ~35-40 % of rows on a shared anchor, reward 10 on success, -0.1 per invalid action)."""
    import numpy as np

    from ecpo_gym.canonical import INVALID_ACTION

    rng = np.random.default_rng(seed)
    cols: dict[str, list] = {k: [] for k in ("group_ids", "traj_ids", "steps", "anchor_keys", "action_keys", "rewards")}
    for group in range(groups):
        shared_states = [_observation(rng, group, f"You arrive at {RECEPTACLES[j]} {j}.") for j in range(12)]
        actions = [f"go to {RECEPTACLES[j]} {1 + j % 3}" for j in range(10)] + [f"take {OBJECTS[group]} 1 from shelf 1"]
        action_weights = np.array([2.0**-j for j in range(len(actions))])
        action_weights /= action_weights.sum()
        for traj in range(rollouts):
            success = rng.random() < 0.5
            length = int(rng.integers(15, max_steps + 1)) if success else max_steps
            for step in range(1, length + 1):
                if rng.random() < shared_prob:
                    state = shared_states[int(rng.integers(len(shared_states)))]
                else:
                    state = _observation(rng, group, f"You are at step {step} of rollout {traj}; nothing happens.")
                invalid = rng.random() < 0.1
                action = INVALID_ACTION if invalid else actions[int(rng.choice(len(actions), p=action_weights))]
                reward = (10.0 if success and step == length else 0.0) - (0.1 if invalid else 0.0)
                for key, value in zip(cols, (f"task-{group}", traj, step, state, action, reward)):
                    cols[key].append(value)
    return cols


def fresh_strings(cols: dict[str, list]) -> dict[str, list]:
    """New str objects for every key (a new rollout's strings carry no cached hash)."""
    return cols | {key: [(s + "\x00")[:-1] for s in cols[key]] for key in ("group_ids", "anchor_keys", "action_keys")}


def credit(args: Any) -> dict[str, Any]:
    """Every method's median milliseconds over ``--reps`` repetitions on ``build_batch(--seed)``, and the ratios."""
    if args.reps < 1:
        raise ValueError(f"--reps {args.reps}: at least one repetition is needed for a median")
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # before numpy and torch load
        os.environ.setdefault(var, "1")
    import numpy as np
    import torch

    from ecpo_train.core.credit import CreditConfig, compute_advantages, prepare_rows
    from ecpo_train.core.credit.diagnostics import credit_diagnostics

    torch.set_num_threads(1)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

    cols = build_batch(args.seed)
    ecpo_adv, diag = compute_advantages("ecpo", cols)
    rows = prepare_rows(*cols.values())

    methods = {
        "grpo": lambda c: compute_advantages("grpo", c),
        "gigpo_std": lambda c: compute_advantages("gigpo_std", c),
        "ecpo": lambda c: compute_advantages("ecpo", c),
        "ecpo_torch_cpu": lambda c: compute_advantages("ecpo", c | {"rewards": torch.tensor(c["rewards"])}),
        "credit_diagnostics": lambda c: credit_diagnostics("ecpo", rows, CreditConfig(), ecpo_adv),
    }
    times: dict[str, list[float]] = {name: [] for name in methods}
    for rep in range(args.reps + 2):  # two warm-up repetitions
        for name, fn in methods.items():
            elapsed = timed(fn, fresh_strings(cols))[1]  # (the fresh strings made before the clock starts)
            if rep >= 2:
                times[name].append(elapsed * 1e3)
    median = {name: statistics.median(values) for name, values in times.items()}
    return {
        "batch": {"rows": len(cols["rewards"]), "groups": 16, "rollouts_per_group": 8, "max_steps": 50,
                  "mean_state_key_chars": float(np.mean([len(s) for s in cols["anchor_keys"]])),
                  "anchor_hit_rate": diag["anchor_hit_rate"], "num_anchors": diag["num_anchors"],
                  "divergent_anchor_fraction": diag["divergent_anchor_fraction"]},
        "median_ms": median,
        "ratios": {
            "ecpo_over_gigpo": median["ecpo"] / median["gigpo_std"],
            "gigpo_over_grpo": median["gigpo_std"] / median["grpo"],
            "diagnostics_over_ecpo": median["credit_diagnostics"] / median["ecpo"],
        },
        "targets": {"ecpo_over_gigpo_max": 1.3, "ecpo_ms_max": 25.0,
                    "met": median["ecpo"] / median["gigpo_std"] <= 1.3 and median["ecpo"] <= 25.0},
        "reps": args.reps, "threads": 1, "python": platform.python_version(), "numpy": np.__version__,
        "torch": torch.__version__, "machine": platform.processor() or platform.machine(), "host": machine(),
    }


def env(args: Any) -> dict[str, Any]:
    from benchmarks.env_throughput import SECTIONS

    if args.env not in SECTIONS:
        raise ValueError(f"--env {args.env!r}: choose from {', '.join(sorted(SECTIONS))}")
    return {"env": args.env, "machine": machine(), **SECTIONS[args.env](args)}


STAGES = {  # each stage's function and the options it reads, with their defaults (any other given is refused)
    "env": (env, {"env": None, "sizes": [1000, 100000], "episodes": 300, "data_dir": None, "games": 20, "steps": 10,
                  "groups": 2, "group_size": 4, "out": None}),
    "openenv": (openenv, {"env": "ecpo/DivergentAnchor-v0", "env_kwargs": "{}", "sessions": [1, 8, 32], "steps": 600,
                          "seed": 0, "out": RESULTS / "openenv_throughput.json"}),
    "text_policy": (text_policy, {"model": None, "batch": 128, "iterations": 3, "engines": ["native"],
                                  "out": RESULTS / "text_policy_speed.json"}),
    "credit": (credit, {"reps": 30, "seed": 0, "out": RESULTS / "credit_overhead.json"}),
}


def main(argv: list[str] | None = None) -> int:
    cmd = StudyCommand(__spec__.name if __spec__ else "benchmarks.speed", __doc__.split("\n\n")[0],
                       {stage: options for stage, (_, options) in STAGES.items()})
    cmd.add("--out", help="the figures' JSON (default: the stage's file in benchmarks/results/)")
    cmd.add("--env", help="env: alfworld, webshop or searchqa; openenv: a registered id")
    cmd.add("--sizes", type=int, nargs="+", help="env webshop: generated catalogue sizes")
    cmd.add("--episodes", type=int, help="env: episodes timed per configuration")
    cmd.add("--data-dir", help="env searchqa: the folder of hotpotqa_dev500_ircot.jsonl ($ECPO_DATA_DIR/searchqa)")
    cmd.add("--games", type=int, help="env alfworld: games timed")
    cmd.add("--steps", type=int, help="env alfworld: group-env steps per measurement; openenv: steps per level")
    cmd.add("--groups", type=int, help="env alfworld: group-env groups")
    cmd.add("--group-size", type=int, help="env alfworld: group-env copies per group")
    cmd.add("--env-kwargs", help="openenv: constructor arguments (a JSON object)")
    cmd.add("--sessions", type=int, nargs="+", help="openenv: concurrent sessions per level")
    cmd.add("--seed", type=int)
    cmd.add("--model", help="text_policy: a text-policy folder (ecpo sft output; default: random weights)")
    cmd.add("--batch", type=int, help="text_policy: contexts per act call")
    cmd.add("--iterations", type=int, help="text_policy: iterations timed per engine")
    cmd.add("--engines", nargs="*", choices=["native", "rllib"], help="text_policy: engines timed (none: skip)")
    cmd.add("--reps", type=int, help="credit: repetitions (their median)")
    args = cmd.parse(argv)
    args.out = args.out or RESULTS / f"env_throughput_{args.env}.json"  # (env: one file per environment)
    if not Path(args.out).parent.is_dir():  # checked before the minutes of timing
        fail(f"--out {args.out}: the folder {Path(args.out).parent} does not exist")
    return run_stage(lambda: STAGES[args.stage][0](args), args.out)


if __name__ == "__main__":
    sys.exit(main())
