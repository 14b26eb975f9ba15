"""Environment throughput: reset and step latency per environment, one section per ``--env``.

    python -m benchmarks.env_throughput --env webshop [--sizes 1000 100000]

Each section prints its figures and writes ``benchmarks/results/env_throughput_<env>.json``. Sections are
plain functions registered in ``SECTIONS``; each environment's owner adds its own.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
import typing
from collections.abc import Callable
from pathlib import Path

from benchmarks import RESULTS, ArgumentParser
from ecpo_train.files.atomic import write_text

RESULTS_DIR = RESULTS


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
    write_text(path, json.dumps(payload, indent=2) + "\n")
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
    payload: dict[str, typing.Any] = {"target": "median step < 1 ms at 1000 products", "episodes": args.episodes,
                                      "sizes": results}
    size = min(args.sizes)
    payload[f"lucene_{size}"] = webshop_lucene_row(size, args.episodes)
    return payload


def webshop_lucene_row(size: int, queries: int) -> dict[str, typing.Any]:
    """The original's engine (``search_backend="lucene"``) on one generated catalogue: JVM start, index build,
    query latency, and how often each engine ranks a goal's target in the top 10 for the goal's query."""
    import tempfile

    from ecpo_gym.lucene import lucene_available
    from ecpo_gym.webshop.generator import generate_records
    from ecpo_gym.webshop.goals import build_goals
    from ecpo_gym.webshop.products import load_products
    from ecpo_gym.webshop.search import BM25Retriever, LuceneRetriever

    t = time.perf_counter()
    ok, why = lucene_available()
    jvm_s = time.perf_counter() - t
    if not ok:
        print(f"webshop lucene: skipped ({why})")
        return {"skipped": why}
    records, instructions = generate_records(size, seed=0)
    products = load_products(records, seed=42, attributes_by_asin=instructions)
    pairs = sorted({(g.asin, g.query) for g in build_goals(products, seed=42)})
    bm25 = BM25Retriever(products)
    with tempfile.TemporaryDirectory() as cache_dir:
        t = time.perf_counter()
        lucene = LuceneRetriever(products, cache_dir=cache_dir)
        build_s = time.perf_counter() - t
        times, hits = [], {"lucene": 0, "bm25s": 0}
        for i, (asin, query) in enumerate(pairs):
            t = time.perf_counter()
            ranked = lucene.search(query)
            if i < queries:
                times.append(time.perf_counter() - t)
            hits["lucene"] += asin in ranked[:10]
            hits["bm25s"] += asin in bm25.search(query)[:10]
        lucene.close()
    row = {"num_products": size, "jvm_start_s": jvm_s, "index_build_s": build_s, "query": summary_ms(times),
           "target_in_top10": {k: v / len(pairs) for k, v in hits.items()}, "pairs": len(pairs)}
    print(f"webshop lucene n={size}: jvm={jvm_s:.2f}s index={build_s:.2f}s "
          f"query median={row['query']['median_ms']:.3f}ms target in top 10: "
          f"lucene {row['target_in_top10']['lucene']:.3f}, bm25s {row['target_in_top10']['bm25s']:.3f} "
          f"({len(pairs)} goal queries)")
    return row


# ---------------------------------------------------------------------------------------------- searchqa
def searchqa_section(args: argparse.Namespace) -> dict:
    """HotpotQA paragraph corpus: index build time, per-query retrieval latency and recall@3 for bm25s and
    Lucene (skipped with a note when the ``lucene`` extra is missing), plus env reset/step latency."""
    import tempfile

    from ecpo_gym.searchqa.datasets import load_dataset
    from ecpo_gym.searchqa.env import SearchQAEnv, SearchQAGenEnv
    from ecpo_gym.searchqa.retrievers.bm25 import BM25sRetriever

    def latency(seconds: list[float]) -> dict[str, float]:
        ms = [x * 1000.0 for x in seconds]
        return {"median_ms": statistics.median(ms), "p95_ms": percentile(ms, 0.95),
                "mean_ms": statistics.fmean(ms), "count": len(ms)}

    def measure(retriever, examples) -> dict:
        times, recall = [], 0.0
        for example in examples:
            t = time.perf_counter()
            hits = retriever.search(example.question, 3)
            times.append(time.perf_counter() - t)
            found = {hit.document.id for hit in hits} & set(example.supporting_doc_ids)
            recall += len(found) / len(example.supporting_doc_ids)
        return {"query": latency(times), "recall_at_3": recall / len(examples)}

    data_dir = args.data_dir or os.path.join(os.environ.get("ECPO_DATA_DIR", "../shared/data"), "searchqa")
    data = load_dataset("hotpotqa", "dev500", data_dir=data_dir)
    examples, corpus = data.examples, data.corpus
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as cache_dir:
        t = time.perf_counter()
        bm25 = BM25sRetriever(corpus, cache_dir=cache_dir)
        build_s = time.perf_counter() - t
        t = time.perf_counter()
        BM25sRetriever(corpus, cache_dir=cache_dir)
        load_s = time.perf_counter() - t
        measure(bm25, examples[:50])  # warm-up
        row = {"index_build_s": build_s, "index_load_from_cache_s": load_s, "k1": bm25.k1, "b": bm25.b,
               **measure(bm25, examples)}
        t = time.perf_counter()
        bm25.batch_search([e.question for e in examples], 3)
        row["batched_per_query_ms"] = (time.perf_counter() - t) * 1000.0 / len(examples)
        results["bm25s"] = row

        from ecpo_gym.lucene import lucene_available
        from ecpo_gym.searchqa.retrievers.lucene import LuceneRetriever

        t = time.perf_counter()
        ok, why = lucene_available()
        jvm_s = time.perf_counter() - t
        if ok:
            t = time.perf_counter()
            lucene = LuceneRetriever(corpus, cache_dir=cache_dir)
            build_s = time.perf_counter() - t
            measure(lucene, examples[:50])
            results["lucene"] = {"jvm_start_s": jvm_s, "index_build_s": build_s, "k1": 0.9, "b": 0.4,
                                 **measure(lucene, examples)}
            lucene.close()
        else:
            results["lucene"] = {"skipped": why}

        env = SearchQAEnv(data_dir=data_dir, cache_dir=cache_dir)
        gen = SearchQAGenEnv()
        for name, environment in (("env_hotpotqa_bm25s", env), ("env_generated", gen)):
            resets, steps = [], []
            for task_id in environment.task_ids[: args.episodes]:
                t = time.perf_counter()
                _, info = environment.reset(options={"task_id": task_id})
                resets.append(time.perf_counter() - t)
                for action in (f"<think>look</think><search>{info['task']}</search>", "<answer>unknown</answer>"):
                    t = time.perf_counter()
                    environment.step(action)
                    steps.append(time.perf_counter() - t)
            results[name] = {"reset": latency(resets), "step": latency(steps)}
    for name, row in results.items():
        if "skipped" in row:
            print(f"searchqa {name}: skipped ({row['skipped']})")
        elif "query" in row:
            print(f"searchqa {name}: build={row['index_build_s']:.2f}s query median={row['query']['median_ms']:.3f}ms "
                  f"p95={row['query']['p95_ms']:.3f}ms recall@3={row['recall_at_3']:.3f}")
        else:
            print(f"searchqa {name}: reset median={row['reset']['median_ms']:.3f}ms "
                  f"step median={row['step']['median_ms']:.3f}ms p95={row['step']['p95_ms']:.3f}ms")
    payload = {"corpus": {"name": corpus.name, "documents": len(corpus)}, "questions": len(examples),
               "load_average_1m": os.getloadavg()[0],  # the machine is shared: p95 tails track its load
               "retrievers": {k: v for k, v in results.items() if not k.startswith("env_")},
               "env": {k: v for k, v in results.items() if k.startswith("env_")}}
    return payload


# ---------------------------------------------------------------------------------------------- ALFWorld
def alfworld_section(args: argparse.Namespace) -> dict:
    """Raw textworld versus ecpo's ALFWorld env, and group-env steps/s (``env_throughput_alfworld.py``)."""
    from benchmarks import env_throughput_alfworld

    return env_throughput_alfworld.alfworld_section(args)


SECTIONS: dict[str, Callable[[argparse.Namespace], dict]] = {
    "alfworld": alfworld_section,
    "webshop": webshop_section,
    "searchqa": searchqa_section,
}


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(__spec__.name, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", required=True, choices=sorted(SECTIONS))
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 100000],
                        help="webshop: generated catalogue sizes")
    parser.add_argument("--episodes", type=int, default=300, help="episodes timed per configuration")
    parser.add_argument("--data-dir", default=None,
                        help="searchqa: folder holding hotpotqa_dev500_ircot.jsonl (default $ECPO_DATA_DIR/searchqa)")
    parser.add_argument("--games", type=int, default=20, help="alfworld: games timed")
    parser.add_argument("--steps", type=int, default=10, help="alfworld: group-env steps per measurement")
    parser.add_argument("--groups", type=int, default=2, help="alfworld: group-env groups")
    parser.add_argument("--group-size", type=int, default=4, help="alfworld: group-env copies per group")
    args = parser.parse_args(argv)
    write_results(args.env, SECTIONS[args.env](args))


if __name__ == "__main__":
    main()
