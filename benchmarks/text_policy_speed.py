"""How fast the small text policy (``policy: text``) decides, and how long one iteration of group RL on real ALFWorld
games takes with it, environment steps included.

    python -m benchmarks.text_policy_speed [--model DIR] [--json benchmarks/results/text_policy_speed.json]

1. Decisions per second: the contexts of one real-game rollout (16 groups x 8 copies of train-split games, up to
   50 steps; the policy's own play), replayed through ``act`` in batches of ``--batch`` (128: one rollout step),
   at 1 and 2 torch threads. Target (issue: real ALFWorld on one CPU): at least 5,000 decisions/s on 2 cores.
2. Iteration time: ``--iterations`` iterations of the preset ``alfworld_text`` (16 x 8 episodes, 50-step limit,
   rollout, credit, update), from ``--model`` (a warm start) or random weights; ``time/iteration`` of each and its
   split (generation, env, update). Target: 30 s or less per iteration on 2 idle cores. ``--engines native
   rllib`` times both engines one after the other in this run (RLlib: 2 env-runner actors and 2 learner actors).
3. ``--threads 1 2``: the thread rule of the text-policy recipe (docs/cpu_training.md). At each torch thread count
   in turn: the native iteration (as in 2, the preset with ``threads=N``) and the warm start's optimizer steps
   (``ecpo sft``'s ``fine_tune``: batches of 64 expert steps of train-split games, AdamW), per second; the load
   average before and after each count. With ``--json`` they go to the same file under the key ``threads``.

The machine's load average is recorded beside the figures: on a shared machine they are upper bounds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def recorded_contexts(policy: Any, groups: int = 16, copies: int = 8) -> list[Any]:
    """The step contexts of one rollout of ``policy`` on train-split games (the first ``groups`` games)."""
    import gymnasium as gym

    import ecpo_gym  # noqa: F401
    from ecpo_gym.group import GroupVectorEnv
    from ecpo_train.core.rollout import collect_rollout

    contexts: list[Any] = []

    class Recorder:
        def act(self, batch, temperature=1.0):
            contexts.extend(batch)
            return policy.act(batch, temperature)

    envs = GroupVectorEnv(lambda: gym.make("ecpo/ALFWorld-v0", split="train", disable_env_checker=True),
                          num_groups=groups, group_size=copies)
    try:
        collect_rollout(envs, Recorder(), list(envs.task_ids)[:groups], env_name="ecpo/ALFWorld-v0", temperature=1.0,
                        seed=0, history_length=50)
    finally:
        envs.close()
    return contexts


def decisions_per_second(policy: Any, contexts: list[Any], batch: int, threads: int, repeats: int = 3) -> float:
    import torch

    torch.set_num_threads(threads)
    batches = [contexts[i : i + batch] for i in range(0, len(contexts), batch)]
    policy.act(batches[0])
    best = 0.0
    for _ in range(repeats):  # the best of a few passes: other processes only ever slow a pass down
        started = time.perf_counter()
        for chunk in batches:
            policy.act(chunk)
        best = max(best, len(contexts) / (time.perf_counter() - started))
    return best


def iteration_times(model: str | None, iterations: int, engine: str = "native",
                    threads: int | None = None) -> list[dict[str, float]]:
    """``iterations`` iterations of the preset on ``engine``: ``native`` (this process) or ``rllib`` (2 env-runner
    actors and 2 learner actors, DDP over gloo, half a CPU each); ``threads``: the preset's ``threads`` replaced."""
    from ecpo_train.runtime.config import load_config

    with tempfile.TemporaryDirectory() as folder:
        overrides = [f"run_dir={folder}/run", f"iterations={iterations}", "val_every=0", "progress=false",
                     "tensorboard=false", "checkpoint_every=0"] + ([f"model={model}"] if model else [])
        overrides += [f"threads={threads}"] if threads is not None else []
        config = load_config("alfworld_text", overrides)
        from ecpo_train.runtime.run import train

        if engine == "rllib":
            from ecpo_train.integrations.rllib.llm.engine import RLlibEngine

            history = train(RLlibEngine, config, num_env_runners=2, num_learners=2, actor_cpus=0.5)
        else:
            from ecpo_train.runtime.trainer import Trainer

            history = train(Trainer, config)
    keys = ("time/iteration", "time/generation", "time/env", "time/update", "success", "num_steps")
    return [{key: float(h[key]) for key in keys if key in h} for h in history]


def warm_start_steps_per_second(threads: int, steps: int, episodes: int = 64, batch: int = 64) -> float:
    """``ecpo sft``'s optimizer steps per second at ``threads`` torch threads: ``fine_tune`` (AdamW, batches of
    ``batch`` rows) of a fresh text policy on the expert's steps of ``episodes`` train-split games, ``steps`` steps
    (the first, warming up, untimed)."""
    import torch

    from ecpo_train.runtime.config import load_config
    from ecpo_train.runtime.sft import (
        TEXT_MAX_TOKENS,
        expert_demonstrations,
        fine_tune,
        text_policy_for,
        text_rows,
    )

    config = load_config("alfworld_text", [])
    demonstrations = expert_demonstrations(config.env_id, episodes=episodes, env_kwargs=config.env_kwargs,
                                           history_length=config.history_length)
    policy = text_policy_for(config, demonstrations)
    prompts, replies, _ = text_rows(policy, demonstrations)
    rows = (steps * batch) // len(prompts) + 1
    prompts, replies = (prompts * rows)[: steps * batch], (replies * rows)[: steps * batch]
    torch.set_num_threads(threads)
    fine_tune(policy, prompts[:batch], replies[:batch], epochs=1, lr=1e-3, batch_size=batch, max_tokens=TEXT_MAX_TOKENS)
    started = time.perf_counter()
    fine_tune(policy, prompts, replies, epochs=1, lr=1e-3, batch_size=batch, max_tokens=TEXT_MAX_TOKENS)
    return steps / (time.perf_counter() - started)


def thread_sweep(model: str | None, counts: list[int], iterations: int, sft_steps: int) -> dict[str, Any]:
    """Per torch thread count, one after the other: the native iteration's seconds and the warm start's optimizer
    steps per second, with the 1-minute load average before and after."""
    out = {}
    for threads in counts:
        load_before = os.getloadavg()[0]
        rows = iteration_times(model, iterations, "native", threads=threads)
        out[str(threads)] = {"iteration_seconds": [r["time/iteration"] for r in rows],
                             "iteration_median_seconds": statistics.median(r["time/iteration"] for r in rows),
                             "sft_steps_per_second": warm_start_steps_per_second(threads, sft_steps),
                             "load_average_1m": {"before": load_before, "after": os.getloadavg()[0]}}
        print(json.dumps({f"threads_{threads}": out[str(threads)]}), flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="a text-policy folder (ecpo sft output); default: random weights")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--engines", nargs="*", default=["native"], choices=["native", "rllib"],
                        help="time the iteration on these engines, one after the other in this run (none: skip)")
    parser.add_argument("--threads", nargs="+", type=int, default=[],
                        help="also time the native iteration and the warm start's steps at each of these thread counts")
    parser.add_argument("--sft-steps", type=int, default=100, help="warm-start optimizer steps timed per count")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    if args.batch < 1 or args.iterations < 1 or args.sft_steps < 1 or any(t < 1 for t in args.threads):
        print("error: --batch, --iterations, --sft-steps and --threads must be >= 1", file=sys.stderr)
        return 2
    from ecpo_train.policies.text import TextPolicy

    try:
        policy = TextPolicy.from_pretrained(args.model) if args.model else TextPolicy(seed=0)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    policy.eval()
    load_before = os.getloadavg()[0]
    contexts = recorded_contexts(policy)
    rates = {f"threads_{t}": decisions_per_second(policy, contexts, args.batch, t) for t in (1, 2)}
    steps = {engine: iteration_times(args.model, args.iterations, engine) for engine in args.engines}
    result = {
        "machine": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version(),
        "model": Path(args.model).name if args.model else "random weights",
        "load_average_1m": {"before": load_before, "after": os.getloadavg()[0]},
        "decisions": {"contexts": len(contexts), "batch": args.batch, "per_second": rates,
                      "mean_commands": statistics.mean(len(c.admissible_actions) for c in contexts),
                      "target_per_second": 5000},
        "iteration": {"groups_x_copies": "16 x 8", "max_steps": 50, "target_seconds": 30,
                      "engines": {engine: {"iterations": rows,
                                           "median_seconds": statistics.median(r["time/iteration"] for r in rows)}
                                  for engine, rows in steps.items()}},
    }
    if args.threads:
        result["threads"] = thread_sweep(args.model, args.threads, args.iterations, args.sft_steps)
    text = json.dumps(result, indent=1)
    if args.json:
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
