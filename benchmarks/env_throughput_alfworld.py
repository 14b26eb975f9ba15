"""The ALFWorld section of ``python -m benchmarks.env_throughput --env alfworld``: raw textworld versus ecpo's ALFWorld
env on the same games (each measurement in a fresh process, so engine patches never leak between them), and the
group env's steps per second with 1 and 2 workers. Its own module because it is its own job: the other sections
time the generated catalogues and retrievers, this one an external engine.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import typing
from collections.abc import Callable


def _alfworld_latency(seconds: list[float]) -> dict[str, float]:
    """Median / p95 / mean in milliseconds."""
    import numpy as np

    arr = np.asarray(seconds, dtype=float) * 1000.0
    if arr.size == 0:
        return {"n": 0}
    return {"n": int(arr.size), "median_ms": float(np.median(arr)), "p95_ms": float(np.percentile(arr, 95)),
            "mean_ms": float(arr.mean())}


def _alfworld_games(count: int) -> tuple[str, list[str]]:
    """Real valid_seen games when data is configured, else generated ones."""
    from ecpo_gym.alfworld.engine import SUBTASKS
    from ecpo_gym.alfworld.env import ALFWorldEnv

    try:
        env = ALFWorldEnv()
    except FileNotFoundError:
        return "ecpo/ALFWorldGen-v0", [f"gen/{SUBTASKS[k % 6]}/{k}" for k in range(count)]
    ids = list(env.task_ids)
    env.close()
    step = max(1, len(ids) // count)
    return "ecpo/ALFWorld-v0", ids[::step][:count]


def _game_sources(env_id: str, task_ids: list[str]) -> list[tuple[typing.Any, list[str]]]:
    """Per game, what raw textworld loads (a path or an in-memory dict) and the commands to play."""
    from ecpo_gym.alfworld.env import ALFWorldEnv, ALFWorldGenEnv

    if env_id == "ecpo/ALFWorld-v0":
        split_dir = ALFWorldEnv().split_dir
        return [(str(split_dir / t), json.loads((split_dir / t).read_text())["walkthrough"]) for t in task_ids]
    env = ALFWorldGenEnv()
    sources = []
    for task_id in task_ids:
        env.reset(options={"task_id": task_id})
        sources.append((env.game(task_id).game, env.expert_plan()))
    env.close()
    return sources


def _time_raw_textworld(env_id: str, task_ids: list[str], with_memo: bool) -> dict[str, list[float]]:
    """Load, reset and play each game on textworld's PddlEnv + AlfredDemangler directly."""
    import textworld
    import textworld.envs.pddl
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler

    if with_memo:
        from ecpo_gym.alfworld.engine import install_grammar_parse_memo, install_translation_memo

        install_translation_memo()
        install_grammar_parse_memo()
    sources = _game_sources(env_id, task_ids)
    times: dict[str, list[float]] = {"first_reset": [], "reset": [], "step": []}
    for source, commands in sources:
        engine = AlfredDemangler(shuffle=False)(
            textworld.envs.pddl.PddlEnv(textworld.EnvInfos(admissible_commands=True, won=True)))
        t0 = time.perf_counter()
        engine.load(source)
        engine.reset()
        times["first_reset"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        engine.reset()
        times["reset"].append(time.perf_counter() - t0)
        for command in commands:
            t0 = time.perf_counter()
            engine.step(command)
            times["step"].append(time.perf_counter() - t0)
    return times


def _time_ours(env_id: str, task_ids: list[str]) -> dict[str, list[float]]:
    import gymnasium as gym

    import ecpo_gym  # noqa: F401
    from ecpo_gym.alfworld.expert import expert_plan

    times: dict[str, list[float]] = {"first_reset": [], "reset": [], "step": []}
    env = gym.make(env_id, disable_env_checker=True).unwrapped
    for task_id in task_ids:
        if env_id != "ecpo/ALFWorld-v0":  # generation time is not engine time: generate before timing
            env.game(task_id)
        t0 = time.perf_counter()
        env.reset(options={"task_id": task_id})
        times["first_reset"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        env.reset(options={"task_id": task_id})
        times["reset"].append(time.perf_counter() - t0)
        for command in expert_plan(env):
            t0 = time.perf_counter()
            env.step(command)
            times["step"].append(time.perf_counter() - t0)
    env.close()
    return times


def _in_fresh_process(fn: Callable[..., typing.Any], *args: typing.Any) -> typing.Any:
    """Run ``fn`` in a spawned process so process-wide engine patches do not leak between measurements."""
    import multiprocessing as mp

    with mp.get_context("spawn").Pool(1) as pool:
        return pool.apply(fn, args)


def _group_steps_per_second(env_id: str, task_ids: list[str], workers: int, steps: int,
                            num_groups: int, group_size: int) -> dict[str, float]:
    import numpy as np

    from ecpo_gym.group import GroupVectorEnv

    rng = np.random.default_rng(0)
    t_start = time.perf_counter()
    envs = GroupVectorEnv(env_id, num_groups=num_groups, group_size=group_size, num_workers=workers)
    started = time.perf_counter() - t_start
    t0 = time.perf_counter()
    results = envs.reset(task_ids=[task_ids[g % len(task_ids)] for g in range(num_groups)], seed=0)
    reset_s = time.perf_counter() - t0
    infos = [info for _, info in results]
    done = [False] * envs.num_envs
    stepped = 0
    t0 = time.perf_counter()
    for _ in range(steps):
        actions = []
        for i, info in enumerate(infos):
            options = info["admissible_actions"]
            actions.append(None if done[i] else options[int(rng.integers(len(options)))])
        stepped += sum(a is not None for a in actions)
        out = envs.step(actions)
        infos = [s.info for s in out]
        done = [d or s.terminated or s.truncated for d, s in zip(done, out)]
        if all(done):
            break
    elapsed = time.perf_counter() - t0
    envs.close()
    return {"workers": workers, "copies": envs.num_envs, "env_steps": stepped, "step_seconds": elapsed,
            "steps_per_s": stepped / elapsed, "reset_seconds": reset_s, "worker_start_seconds": started}


def alfworld_section(args: argparse.Namespace) -> dict[str, typing.Any]:
    """Raw textworld versus ecpo's ALFWorld env on the same games, and group-env steps/s."""
    env_id, task_ids = _alfworld_games(args.games)
    print(f"[alfworld] {env_id}: {len(task_ids)} games", flush=True)
    raw_stock = _in_fresh_process(_time_raw_textworld, env_id, task_ids, False)
    raw_memo = _in_fresh_process(_time_raw_textworld, env_id, task_ids, True)
    ours = _in_fresh_process(_time_ours, env_id, task_ids)
    table = {name: {k: _alfworld_latency(v) for k, v in times.items()}
             for name, times in (("raw_textworld", raw_stock), ("raw_textworld_with_ecpo_memos", raw_memo),
                                 ("ecpo_env", ours))}
    overhead = table["ecpo_env"]["step"]["median_ms"] / table["raw_textworld_with_ecpo_memos"]["step"]["median_ms"] - 1
    speedup = table["raw_textworld"]["step"]["median_ms"] / table["ecpo_env"]["step"]["median_ms"]
    for name, stats in table.items():
        print(f"  {name:32s} " + "  ".join(
            f"{k}: median {s['median_ms']:.1f} ms p95 {s['p95_ms']:.1f} ms" for k, s in stats.items()), flush=True)
    print(f"  wrapper step overhead vs the same engine: {overhead * 100:+.1f}% (target <= +5%); "
          f"step speed-up vs stock textworld: {speedup:.2f}x", flush=True)
    group = []
    for workers in (1, 2):
        stats = _group_steps_per_second(env_id, task_ids, workers, args.steps, args.groups, args.group_size)
        group.append(stats)
        print(f"  group env {args.groups}x{args.group_size}, {workers} worker(s): "
              f"{stats['steps_per_s']:.1f} env steps/s (reset {stats['reset_seconds']:.1f} s)", flush=True)
    payload = {"env_id": env_id, "games": task_ids, "load_average_1m": os.getloadavg()[0], "latency": table,
               "wrapper_step_overhead": overhead, "step_speedup_vs_stock_textworld": speedup, "group_env": group}
    return payload
