"""Environment throughput: reset and step latency per environment, one section per ``--env``.

    python benchmarks/env_throughput.py --env webshop [--sizes 1000 100000]

Each section prints its figures and writes ``benchmarks/results/env_throughput_<env>.json``. Sections are
plain functions registered in ``SECTIONS``; each environment's owner adds its own.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary_ms(seconds: list[float]) -> dict[str, float]:
    ms = [s * 1000.0 for s in seconds]
    return {"median_ms": statistics.median(ms), "p90_ms": percentile(ms, 0.9), "mean_ms": statistics.fmean(ms),
            "count": len(ms)}


def write_results(env_name: str, payload: dict) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    payload = {"env": env_name, "machine": platform.platform(), "python": platform.python_version(), **payload}
    path = RESULTS_DIR / f"env_throughput_{env_name}.json"
    path.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {path}")
    return path


# ---------------------------------------------------------------------------------------------- webshop
def webshop_section(args: argparse.Namespace) -> dict:
    """Generated catalogue: build/index time, reset median, step median (expert + random actions)."""
    import numpy as np

    from ecpo_gym.webshop.catalogue import clear_catalogue_cache
    from ecpo_gym.webshop.env import WebShopGenEnv
    from ecpo_gym.webshop.expert import expert_actions_for_task
    from ecpo_gym.webshop.generator import generate_records
    from ecpo_gym.webshop.goals import build_goals
    from ecpo_gym.webshop.nouns import spacy_pipeline
    from ecpo_gym.webshop.products import load_products
    from ecpo_gym.webshop.search import BM25Retriever

    spacy_pipeline()  # model load is a one-off cost, not a step cost
    results: dict[str, dict] = {}
    for size in args.sizes:
        clear_catalogue_cache()
        t0 = time.perf_counter()
        records, instructions = generate_records(size, seed=0)
        t1 = time.perf_counter()
        products = load_products(records, seed=42, attributes_by_asin=instructions)
        goals = build_goals(products, seed=42)
        t2 = time.perf_counter()
        BM25Retriever(products)
        t3 = time.perf_counter()
        t_env = time.perf_counter()
        env = WebShopGenEnv(num_products=size)  # builds its own cached catalogue (same work as above)
        first_env_s = time.perf_counter() - t_env
        t_env = time.perf_counter()
        WebShopGenEnv(num_products=size)
        cached_env_s = time.perf_counter() - t_env

        rng = np.random.default_rng(0)
        resets, steps = [], []
        by_kind: dict[str, list[float]] = {"search": [], "click": [], "buy": [], "invalid": []}
        for episode in range(args.episodes):
            task_id = env.task_ids[int(rng.integers(len(env.task_ids)))]
            t = time.perf_counter()
            _, info = env.reset(options={"task_id": task_id})
            resets.append(time.perf_counter() - t)
            if episode % 2 == 0:
                actions = expert_actions_for_task(env, task_id)
            else:  # random shopper: the goal query, then random admissible clicks
                actions = [f"search[{env.goal.query}]"]
            done, index = False, 0
            while not done:
                if index < len(actions):
                    action = actions[index]
                else:
                    admissible = info["admissible_actions"]
                    action = admissible[int(rng.integers(len(admissible)))]
                    if action == "search[<query>]":
                        action = f"search[{env.goal.query}]"
                    if rng.random() < 0.1:
                        action = "click[nothing here]"
                index += 1
                t = time.perf_counter()
                _, _, terminated, truncated, info = env.step(action)
                elapsed = time.perf_counter() - t
                steps.append(elapsed)
                kind = ("invalid" if not info["is_action_valid"] else "search" if action.startswith("search")
                        else "buy" if action == "click[buy now]" else "click")
                by_kind[kind].append(elapsed)
                done = terminated or truncated
        fresh_queries = [g.instruction_text.split(", and price")[0] for g in goals[:200]]
        fresh = []
        for query in fresh_queries:  # uncached searches: one distinct query each
            t = time.perf_counter()
            env.catalogue.retriever.search(query)
            fresh.append(time.perf_counter() - t)
        row = {
            "num_products": size, "uncached_search": summary_ms(fresh), "num_goals": len(goals),
            "generate_s": t1 - t0, "load_and_goals_s": t2 - t1, "index_build_s": t3 - t2,
            "first_env_s": first_env_s, "cached_env_s": cached_env_s,
            "reset": summary_ms(resets), "step": summary_ms(steps),
            "step_by_kind": {k: summary_ms(v) for k, v in by_kind.items() if v},
        }
        results[str(size)] = row
        print(f"webshop n={size}: goals={len(goals)} generate={row['generate_s']:.2f}s "
              f"load+goals={row['load_and_goals_s']:.2f}s index={row['index_build_s']:.2f}s "
              f"cached env={cached_env_s * 1000:.2f}ms reset median={row['reset']['median_ms']:.3f}ms "
              f"step median={row['step']['median_ms']:.3f}ms p90={row['step']['p90_ms']:.3f}ms")
        print(f"    uncached search median={row['uncached_search']['median_ms']:.3f}ms")
        for kind, stats in row["step_by_kind"].items():
            print(f"    {kind:8s} median={stats['median_ms']:.3f}ms p90={stats['p90_ms']:.3f}ms n={stats['count']}")
    payload = {"target": "median step < 1 ms at 1000 products", "episodes": args.episodes, "sizes": results}
    write_results("webshop", payload)
    return payload


SECTIONS: dict[str, Callable[[argparse.Namespace], dict]] = {
    "webshop": webshop_section,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", required=True, choices=sorted(SECTIONS))
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 100000],
                        help="webshop: generated catalogue sizes")
    parser.add_argument("--episodes", type=int, default=300, help="episodes timed per configuration")
    args = parser.parse_args()
    SECTIONS[args.env](args)


if __name__ == "__main__":
    main()
