"""Environment steps per second through an ``ecpo serve`` server (1, 8 and 32 concurrent sessions) beside the same
env stepped in process, in one run.

    python -m benchmarks.openenv_throughput [--env ecpo/DivergentAnchor-v0] [--sessions 1 8 32] [--steps 600]

The server is a real ``ecpo serve`` child process on 127.0.0.1; the sessions are OpenEnv's own async client
(``ECPOEnvClient``), all in this process's one event loop, each playing episodes with a seeded random admissible
action (an invalid text one step in ten). A level's ``--steps`` are split evenly over its sessions; its wall time
counts everything from the first reset to the last step (resets included, connections opened before). The
in-process baseline plays the same policy on one ``gymnasium.make`` env. Client and server share the machine, so
the figures are a floor on a machine with spare cores. Prints a table and writes
``benchmarks/results/openenv_throughput.json`` with the machine and its load average before and after.
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
import time
from pathlib import Path
from typing import Any

from benchmarks import RESULTS, ArgumentParser, fail
from ecpo_train.files.atomic import write_text

ROOT = Path(__file__).resolve().parent.parent
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
        t0 = time.perf_counter()
        _, _, terminated, truncated, info = env.step(choose(rng, info["admissible_actions"]))
        latencies.append(time.perf_counter() - t0)
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
        fail(f"ecpo serve did not start: {line.strip() or process.stderr.read()[-500:]}")
    return process, line.split(" on ", 1)[1].split()[0]


def machine() -> dict[str, Any]:
    model = ""
    if Path("/proc/cpuinfo").is_file():
        model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("model name")), "")
    return {"platform": platform.platform(), "python": platform.python_version(), "cpu": model,
            "cpus": os.cpu_count(), "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
            else os.cpu_count()}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = ArgumentParser(__spec__.name if __spec__ else "benchmarks.openenv_throughput",
                            description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="ecpo/DivergentAnchor-v0", help="a registered id")
    parser.add_argument("--env-kwargs", default="{}", help="constructor arguments (a JSON object)")
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--steps", type=int, default=600, help="steps per level, split over its sessions")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS / "openenv_throughput.json")
    args = parser.parse_args(argv)
    try:
        env_kwargs = json.loads(args.env_kwargs)
    except ValueError as err:
        parser.error(f"--env-kwargs: {err}")
    if not isinstance(env_kwargs, dict):
        parser.error("--env-kwargs must be a JSON object")
    if args.steps < 1 or any(n < 1 or n > 4096 for n in args.sessions):
        parser.error("--steps must be >= 1 and every --sessions in [1, 4096]")

    load_before = os.getloadavg()[0]
    baseline = in_process(args.env, env_kwargs, args.steps, args.seed)
    process, url = start_server(args.env, env_kwargs, max(args.sessions))
    try:
        levels = [asyncio.run(through_server(url, n, args.steps, args.seed)) for n in args.sessions]
    finally:
        process.terminate()
        process.wait(timeout=60)
    report = {"env_id": args.env, "env_kwargs": env_kwargs, "invalid_share": INVALID_SHARE,
              "machine": machine(), "load_average_1m_before": load_before, "load_average_1m_after": os.getloadavg()[0],
              "in_process": baseline, "server": levels,
              "note": "client and server on the same machine; wall time includes resets"}
    print(f"{args.env} ({json.dumps(env_kwargs)}), load {load_before:.1f} -> {report['load_average_1m_after']:.1f}")
    print(f"{'where':<22}{'steps/s':>10}{'median ms':>12}")
    print(f"{'in process':<22}{baseline['steps_per_s']:>10.0f}{baseline['step_median_ms']:>12.3f}")
    for level in levels:
        print(f"{'server, ' + str(level['sessions']) + ' sessions':<22}{level['steps_per_s']:>10.0f}"
              f"{level['step_median_ms']:>12.3f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text(args.out, json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return report


if __name__ == "__main__":
    main()
