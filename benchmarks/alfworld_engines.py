"""ALFWorld engines side by side: steps/s and memory per env of the native engine and TextWorld's.

    OMP_NUM_THREADS=1 python -m benchmarks.alfworld_engines [--copies 128] [--games 10] [--steps 30]

Real valid_seen games when ``ECPO_DATA_DIR`` is set (else generated households). Every measurement runs in
a fresh spawned process so its RSS is its own:

- engine: the bare engines (no env wrapper), the same walks; load + reset reported apart;
- single: one env, seeded random admissible walks (``help`` left out) of ``--steps`` steps on ``--games``
  games; steps/s counts ``env.step`` only, resets are reported apart;
- memory: RSS after making and resetting ``--memory-envs`` envs (one game each) minus RSS after imports;
- group: a ``GroupVectorEnv`` of ``--copies`` copies (groups of 8, in-process), reset then stepped with
  random admissible actions for ``--group-steps`` steps: steps/s over all copies and RSS per copy.

Both engines replay the same walks (their admissible lists are identical). Writes
``benchmarks/results/alfworld_engines.json`` and prints a table.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import platform
import random
import sys
import time

from benchmarks import RESULTS as BENCH_RESULTS
from benchmarks import ArgumentParser
from ecpo_train.policies.atomic import write_text

RESULTS = BENCH_RESULTS / "alfworld_engines.json"
ENGINES = ("native", "textworld")


def rss_mb() -> float:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def env_spec() -> tuple[str, dict]:
    if os.environ.get("ECPO_DATA_DIR"):
        return "ecpo/ALFWorld-v0", {}
    return "ecpo/ALFWorldGen-v0", {"num_tasks": 60}


def _make(engine: str):
    import gymnasium as gym

    import ecpo_gym  # noqa: F401

    env_id, kwargs = env_spec()
    return gym.make(env_id, disable_env_checker=True, engine=engine, **kwargs).unwrapped


def _pick_games(env, count: int) -> list[str]:
    return random.Random(0).sample(list(env.task_ids), count)


def single(engine: str, games: int, steps: int) -> dict:
    env = _make(engine)
    step_s = reset_s = 0.0
    n_steps = 0
    for k, task_id in enumerate(_pick_games(env, games)):
        rng = random.Random(k)
        t0 = time.perf_counter()
        _, info = env.reset(options={"task_id": task_id})
        reset_s += time.perf_counter() - t0
        for _ in range(steps):
            action = rng.choice(info["admissible_actions"])
            t0 = time.perf_counter()
            _, _, terminated, truncated, info = env.step(action)
            step_s += time.perf_counter() - t0
            n_steps += 1
            if terminated or truncated:
                break
    env.close()
    return {"steps": n_steps, "steps_per_s": n_steps / step_s, "ms_per_step": 1000 * step_s / n_steps,
            "resets": games, "ms_per_reset": 1000 * reset_s / games}


def engine_only(engine: str, games: int, steps: int) -> dict:
    """The bare engines (no env wrapper): load + reset, then seeded random admissible commands."""
    import json as _json

    from ecpo_gym.alfworld.engine import make_engine, release_engine
    from ecpo_gym.alfworld.native import NativeEngine

    env = _make(engine)
    paths = [getattr(env, "split_dir", None) and env.split_dir / t for t in _pick_games(env, games)]
    datas = [_json.loads(p.read_text()) if p else env.game(t).game for p, t in zip(paths, _pick_games(env, games))]
    env.close()
    eng = NativeEngine() if engine == "native" else make_engine()
    load_s = step_s = 0.0
    n = 0
    for k, data in enumerate(datas):
        rng = random.Random(k)
        t0 = time.perf_counter()
        eng.load(data)
        state = eng.reset()
        load_s += time.perf_counter() - t0
        for _ in range(steps):
            command = rng.choice([c for c in state["admissible_commands"] if c != "help"])
            t0 = time.perf_counter()
            state, _, done = eng.step(command)
            step_s += time.perf_counter() - t0
            n += 1
            if done:
                break
    release_engine(eng)
    return {"steps": n, "steps_per_s": n / step_s, "ms_per_step": 1000 * step_s / n,
            "ms_per_load_and_reset": 1000 * load_s / games}


def memory(engine: str, envs: int) -> dict:
    import gymnasium  # noqa: F401

    import ecpo_gym
    import ecpo_gym.alfworld.env
    import ecpo_gym.alfworld.native  # noqa: F401

    if engine == "textworld":
        import textworld.envs.pddl  # noqa: F401
    base = rss_mb()
    made = []
    probe = _make(engine)
    for k, task_id in enumerate(_pick_games(probe, envs)):
        env = probe if k == 0 else _make(engine)
        _, info = env.reset(options={"task_id": task_id})
        for action in info["admissible_actions"][:3]:
            env.step(action)
        made.append(env)
    after = rss_mb()
    return {"envs": envs, "rss_after_imports_mb": base, "rss_with_envs_mb": after,
            "mb_per_env": (after - base) / envs}


def group(engine: str, copies: int, steps: int) -> dict:
    from ecpo_gym.group import GroupVectorEnv

    env_id, kwargs = env_spec()
    base = rss_mb()
    size = 8
    envs = GroupVectorEnv(env_id, num_groups=copies // size, group_size=size, num_workers=0,
                          env_kwargs={"engine": engine, **kwargs})
    t0 = time.perf_counter()
    results = envs.reset(seed=0)
    reset_s = time.perf_counter() - t0
    rng = random.Random(0)
    done = [False] * envs.num_envs
    n_steps, step_s = 0, 0.0
    for _ in range(steps):
        actions = [None if d else rng.choice(info["admissible_actions"]) for d, (_, info) in zip(done, results)]
        if all(a is None for a in actions):
            break
        t0 = time.perf_counter()
        out = envs.step(actions)
        step_s += time.perf_counter() - t0
        n_steps += sum(a is not None for a in actions)
        results = [(s.observation, s.info) for s in out]
        done = [d or s.terminated or s.truncated for d, s in zip(done, out)]
    after = rss_mb()
    envs.close()
    return {"copies": copies, "env_steps": n_steps, "steps_per_s": n_steps / step_s, "reset_all_s": reset_s,
            "rss_before_mb": base, "rss_after_mb": after, "mb_per_copy": (after - base) / copies}


def _run(func, *args) -> dict:
    with mp.get_context("spawn").Pool(1) as pool:
        return pool.apply(func, args)


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(__spec__.name, description=__doc__.split("\n\n")[0])
    parser.add_argument("--games", type=int, default=10)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--memory-envs", type=int, default=16)
    parser.add_argument("--copies", type=int, default=128)
    parser.add_argument("--textworld-copies", type=int, default=None,
                        help="copies for TextWorld's group run if 128 do not fit (the per-copy figures are "
                             "then extrapolated to --copies, and marked so)")
    parser.add_argument("--group-steps", type=int, default=10)
    args = parser.parse_args(argv)

    env_id, _ = env_spec()
    out: dict = {"env": env_id, "machine": platform.platform(), "python": platform.python_version(),
                 "cpus": os.cpu_count(), "args": vars(args), "engines": {}}
    for engine in ENGINES:
        copies = args.textworld_copies if engine == "textworld" and args.textworld_copies else args.copies
        print(f"[{engine}] single process ...", flush=True)
        res = {"engine": _run(engine_only, engine, args.games, args.steps)}
        print(f"[{engine}] env, single process ...", flush=True)
        res["single"] = _run(single, engine, args.games, args.steps)
        print(f"[{engine}] memory ...", flush=True)
        res["memory"] = _run(memory, engine, args.memory_envs)
        print(f"[{engine}] group of {copies} ...", flush=True)
        res["group"] = _run(group, engine, copies, args.group_steps)
        if copies != args.copies:
            res["group"]["extrapolated_to"] = args.copies
            res["group"]["extrapolated_rss_mb"] = res["group"]["mb_per_copy"] * args.copies
        out["engines"][engine] = res
    nat, tw = out["engines"]["native"], out["engines"]["textworld"]
    out["ratios"] = {
        "engine_steps_per_s": nat["engine"]["steps_per_s"] / tw["engine"]["steps_per_s"],
        "single_steps_per_s": nat["single"]["steps_per_s"] / tw["single"]["steps_per_s"],
        "reset": tw["single"]["ms_per_reset"] / nat["single"]["ms_per_reset"],
        "group_steps_per_s": nat["group"]["steps_per_s"] / tw["group"]["steps_per_s"],
        "memory_per_env": tw["memory"]["mb_per_env"] / max(nat["memory"]["mb_per_env"], 1e-3),
        "memory_per_group_copy": tw["group"]["mb_per_copy"] / max(nat["group"]["mb_per_copy"], 1e-3),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    write_text(RESULTS, json.dumps(out, indent=2) + "\n")
    rows = [("engine: steps/s", "engine", "steps_per_s"), ("engine: ms/step", "engine", "ms_per_step"),
            ("engine: ms/load+reset", "engine", "ms_per_load_and_reset"),
            ("env: steps/s", "single", "steps_per_s"), ("env: ms/step", "single", "ms_per_step"),
            ("env: ms/reset", "single", "ms_per_reset"), ("memory: MB/env", "memory", "mb_per_env"),
            (f"group x{args.copies}: steps/s", "group", "steps_per_s"),
            (f"group x{args.copies}: MB/copy", "group", "mb_per_copy")]
    print(f"\n{env_id}   {'native':>12} {'textworld':>12}")
    for label, section, key in rows:
        print(f"{label:<24} {nat[section][key]:>12.2f} {tw[section][key]:>12.2f}")
    if "extrapolated_to" in tw["group"]:
        print(f"(TextWorld group measured with {tw['group']['copies']} copies; per-copy figures extrapolated)")
    print("ratios (native vs textworld):", {k: round(v, 1) for k, v in out["ratios"].items()})
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
