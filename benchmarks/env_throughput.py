"""Environment throughput, one section per environment (``benchmarks.speed env --env NAME``; docs/benchmarks.md):
plain functions registered in ``SECTIONS``; each environment's owner adds its own."""

from __future__ import annotations

import argparse
import itertools
import time
import typing
from collections.abc import Callable

from benchmarks.timing import latency, timed


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
        (records, instructions), generate_s = timed(generate_records, size, seed=0)
        products, load_s = timed(load_products, records, seed=42, attributes_by_asin=instructions)
        goals, goals_s = timed(build_goals, products, seed=42)
        _, index_s = timed(BM25Retriever, products)
        env, first_env_s = timed(WebShopGenEnv, num_products=size)  # builds its own cached catalogue
        _, cached_env_s = timed(WebShopGenEnv, num_products=size)
        if size == min(args.sizes):
            smallest = (products, goals)

        rng = np.random.default_rng(0)
        resets, by_kind = [], {"search": [], "click": [], "buy": [], "invalid": []}
        for episode in range(args.episodes):
            task_id = env.task_ids[int(rng.integers(len(env.task_ids)))]
            (_, info), elapsed = timed(env.reset, options={"task_id": task_id})
            resets.append(elapsed)
            # the expert's actions; or a random shopper's: the goal query, then random admissible clicks
            actions = expert_actions_for_task(env, task_id) if episode % 2 == 0 else [f"search[{env.goal.query}]"]
            for index in itertools.count():
                if index < len(actions):
                    action = actions[index]
                else:  # (the search box searches the goal's query; one action in ten is invalid)
                    admissible = info["admissible_actions"]
                    action = admissible[int(rng.integers(len(admissible)))]
                    action = f"search[{env.goal.query}]" if action == "search[<query>]" else action
                    action = "click[nothing here]" if rng.random() < 0.1 else action
                (_, _, terminated, truncated, info), elapsed = timed(env.step, action)
                kind = ("invalid" if not info["is_action_valid"] else "search" if action.startswith("search")
                        else "buy" if action == "click[buy now]" else "click")
                by_kind[kind].append(elapsed)
                if terminated or truncated:
                    break
        search = env.catalogue.retriever.search  # uncached searches: one distinct query each
        fresh = [timed(search, g.instruction_text.split(", and price")[0])[1] for g in goals[:200]]
        results[str(size)] = {
            "num_products": size, "uncached_search": latency(fresh), "num_goals": len(goals),
            "generate_s": generate_s, "load_and_goals_s": load_s + goals_s, "index_build_s": index_s,
            "first_env_s": first_env_s, "cached_env_s": cached_env_s,
            "reset": latency(resets), "step": latency([t for times in by_kind.values() for t in times]),
            "step_by_kind": {k: latency(v) for k, v in by_kind.items() if v},
        }
    return {"target": "median step < 1 ms at 1000 products", "episodes": args.episodes, "sizes": results,
            f"lucene_{min(args.sizes)}": webshop_lucene_row(*smallest, args.episodes)}


def webshop_lucene_row(products: list[typing.Any], goals: list[typing.Any], queries: int) -> dict[str, typing.Any]:
    """The original's engine (``search_backend="lucene"``) on one generated catalogue: JVM start, index build,
    query latency, and how often each engine ranks a goal's target in the top 10 for the goal's query."""
    import tempfile

    from ecpo_gym.lucene import lucene_available
    from ecpo_gym.webshop.search import BM25Retriever, LuceneRetriever

    (ok, why), jvm_s = timed(lucene_available)
    if not ok:
        return {"skipped": why}
    pairs = sorted({(g.asin, g.query) for g in goals})
    bm25 = BM25Retriever(products)
    with tempfile.TemporaryDirectory() as cache_dir:
        lucene, build_s = timed(LuceneRetriever, products, cache_dir=cache_dir)
        times, hits = [], {"lucene": 0, "bm25s": 0}
        for i, (asin, query) in enumerate(pairs):
            ranked, elapsed = timed(lucene.search, query)
            times += [elapsed] if i < queries else []
            hits["lucene"] += asin in ranked[:10]
            hits["bm25s"] += asin in bm25.search(query)[:10]
        lucene.close()
    return {"num_products": len(products), "jvm_start_s": jvm_s, "index_build_s": build_s, "query": latency(times),
            "target_in_top10": {k: v / len(pairs) for k, v in hits.items()}, "pairs": len(pairs)}


def searchqa_section(args: argparse.Namespace) -> dict:
    """HotpotQA paragraph corpus: index build time, per-query retrieval latency and recall@3 for bm25s and
    Lucene (skipped with a note when the ``lucene`` extra is missing), plus env reset/step latency."""
    import tempfile

    from ecpo_gym.searchqa.datasets import load_dataset
    from ecpo_gym.searchqa.env import SearchQAEnv, SearchQAGenEnv
    from ecpo_gym.searchqa.retrievers.bm25 import BM25sRetriever

    def measure(retriever, examples) -> dict:
        times, recall = [], 0.0
        for example in examples:
            hits, elapsed = timed(retriever.search, example.question, 3)
            times.append(elapsed)
            found = {hit.document.id for hit in hits} & set(example.supporting_doc_ids)
            recall += len(found) / len(example.supporting_doc_ids)
        return {"query": latency(times, 95), "recall_at_3": recall / len(examples)}

    data = load_dataset("hotpotqa", "dev500", data_dir=args.data_dir)
    examples, corpus = data.examples, data.corpus
    retrievers: dict[str, dict] = {}
    envs: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as cache_dir:
        bm25, build_s = timed(BM25sRetriever, corpus, cache_dir=cache_dir)
        _, load_s = timed(BM25sRetriever, corpus, cache_dir=cache_dir)
        measure(bm25, examples[:50])  # warm-up
        retrievers["bm25s"] = {"index_build_s": build_s, "index_load_from_cache_s": load_s, "k1": bm25.k1,
                               "b": bm25.b, **measure(bm25, examples)}
        batched_s = timed(bm25.batch_search, [e.question for e in examples], 3)[1]
        retrievers["bm25s"]["batched_per_query_ms"] = batched_s * 1000.0 / len(examples)

        from ecpo_gym.lucene import lucene_available
        from ecpo_gym.searchqa.retrievers.lucene import LuceneRetriever

        (ok, why), jvm_s = timed(lucene_available)
        if ok:
            lucene, build_s = timed(LuceneRetriever, corpus, cache_dir=cache_dir)
            measure(lucene, examples[:50])
            retrievers["lucene"] = {"jvm_start_s": jvm_s, "index_build_s": build_s, "k1": 0.9, "b": 0.4,
                                    **measure(lucene, examples)}
            lucene.close()
        else:
            retrievers["lucene"] = {"skipped": why}

        for name, environment in (("env_hotpotqa_bm25s", SearchQAEnv(data_dir=args.data_dir, cache_dir=cache_dir)),
                                  ("env_generated", SearchQAGenEnv())):
            resets, steps = [], []
            for task_id in environment.task_ids[: args.episodes]:
                (_, info), elapsed = timed(environment.reset, options={"task_id": task_id})
                resets.append(elapsed)
                for action in (f"<think>look</think><search>{info['task']}</search>", "<answer>unknown</answer>"):
                    steps.append(timed(environment.step, action)[1])
            envs[name] = {"reset": latency(resets, 95), "step": latency(steps, 95)}
    return {"corpus": {"name": corpus.name, "documents": len(corpus)}, "questions": len(examples),
            "retrievers": retrievers, "env": envs}


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


def _time_env(env_id: str, task_ids: list[str]) -> dict[str, list[float]]:
    """Load (first reset), reset and play each game's expert commands on ecpo's env (its default engine)."""
    import gymnasium as gym

    import ecpo_gym  # noqa: F401
    from ecpo_gym.alfworld.expert import expert_plan

    times: dict[str, list[float]] = {"first_reset": [], "reset": [], "step": []}
    env = gym.make(env_id, disable_env_checker=True).unwrapped
    for task_id in task_ids:
        if env_id != "ecpo/ALFWorld-v0":  # generation time is not engine time: generate before timing
            env.game(task_id)
        for key in ("first_reset", "reset"):
            times[key].append(timed(env.reset, options={"task_id": task_id})[1])
        times["step"] += [timed(env.step, command)[1] for command in expert_plan(env)]
    env.close()
    return times


def _group_steps_per_second(env_id: str, task_ids: list[str], workers: int, steps: int,
                            num_groups: int, group_size: int) -> dict[str, float]:
    import numpy as np

    from ecpo_gym.group import GroupVectorEnv

    rng = np.random.default_rng(0)
    envs, started = timed(GroupVectorEnv, env_id, num_groups=num_groups, group_size=group_size, num_workers=workers)
    results, reset_s = timed(envs.reset, task_ids=[task_ids[g % len(task_ids)] for g in range(num_groups)], seed=0)
    infos = [info for _, info in results]
    done = [False] * envs.num_envs
    stepped = 0
    t0 = time.perf_counter()
    for _ in range(steps):
        actions = [None if finished else info["admissible_actions"][int(rng.integers(len(info["admissible_actions"])))]
                   for finished, info in zip(done, infos)]
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
    """ecpo's ALFWorld env on the chosen games, and the group env's steps/s with 1 and 2 workers. (Its comparison
    with raw TextWorld, which the native engine superseded, is a finished one-off: docs/benchmarks.md.)"""
    env_id, task_ids = _alfworld_games(args.games)
    table = {"ecpo_env": {k: latency(v, 95) for k, v in _time_env(env_id, task_ids).items()}}
    group = [_group_steps_per_second(env_id, task_ids, workers, args.steps, args.groups, args.group_size)
             for workers in (1, 2)]
    return {"env_id": env_id, "games": task_ids, "latency": table, "group_env": group}


SECTIONS: dict[str, Callable[[argparse.Namespace], dict]] = {
    "alfworld": alfworld_section,
    "webshop": webshop_section,
    "searchqa": searchqa_section,
}
