"""Rollout waves inside one runner: ``collect_rollout(waves=1)`` (lock-step) against ``waves=2`` (one wave's
batched policy call runs while the other wave's env steps run in the env workers), on ALFWorld households.

The households are ``alfworld_cpu``'s (generated Look and Pick tasks, 4-5 receptacles, at most 12 steps), played
on TextWorld's engine (the slow one, ~30 ms a step) and on the native engine, with ``--workers`` env worker
processes, by the tiny random 2-layer Qwen2 scoring the admissible actions (``--policy tiny``, one torch thread:
a cheap LM) or by the tabular softmax policy (``--policy tabular``: a call of about a millisecond, so the waves
can hide next to nothing and the figure is their overhead). Each rollout plays the same tasks, env seed and shared draws for both settings; the
rollouts alternate between the settings so that the machine's load falls on both alike. Per setting: the median
wall seconds of a rollout, its generation and exposed-env seconds, and whether the step rows equal the
lock-step ones (actions, rewards, token columns, log-probs; a policy call's floats can depend on the batch it is
in, which the waves change).

On a machine whose cores are busy with other work the overlap can hide only what the other processes leave free.

    python -m benchmarks.rollout_waves                            # both engines, 3 rollouts per setting
    python -m benchmarks.rollout_waves --engines native --repeats 5
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks import ArgumentParser
from ecpo_train.policies.atomic import write_text

HOUSEHOLDS = {"task_types": ["Look", "Pick"], "num_receptacles": [4, 5], "max_steps": 12, "num_tasks": 500}
ENV_ID = "ecpo/ALFWorldGen-v0"


def _rows(rollout) -> dict:
    batch = rollout.batch
    return {"columns": {name: getattr(batch, name).tolist() for name in batch.column_names()},
            "prompt_ids": [list(map(int, p)) for p in batch.prompt_ids],
            "response_ids": [list(map(int, r)) for r in batch.response_ids],
            "old_logprobs": batch.old_logprobs.tolist()}


def measure(engine: str, policy, args) -> dict:
    from ecpo_gym.group import GroupVectorEnv
    from ecpo_train.core.rollout import collect_rollout

    tasks = [f"gen/{('Look', 'Pick')[g % 2]}/{g}" for g in range(args.groups)]
    runs: dict[int, list[dict]] = {1: [], 2: []}
    rows: dict[int, dict] = {}
    with GroupVectorEnv(ENV_ID, num_groups=args.groups, group_size=args.group_size, num_workers=args.workers,
                        env_kwargs=HOUSEHOLDS | {"engine": engine}) as envs:
        collect_rollout(envs, policy, tasks, env_name=ENV_ID, temperature=0.4, seed=0, history_length=0)  # warm-up
        for repeat in range(args.repeats):
            for waves in (1, 2) if repeat % 2 == 0 else (2, 1):
                started = time.perf_counter()
                rollout = collect_rollout(envs, policy, tasks, env_name=ENV_ID, temperature=0.4, seed=100 + repeat,
                                          history_length=0, draws_seed=repeat, waves=waves)
                runs[waves].append({"wall_s": time.perf_counter() - started, "rows": len(rollout.batch),
                                    "generation_s": rollout.generation_seconds, "env_s": rollout.env_seconds})
                if repeat == 0:
                    rows[waves] = _rows(rollout)
    out = {}
    for waves, records in runs.items():
        out[f"waves={waves}"] = {key: statistics.median(r[key] for r in records)
                                 for key in ("wall_s", "generation_s", "env_s", "rows")}
        out[f"waves={waves}"]["runs"] = records
    out["speedup"] = out["waves=1"]["wall_s"] / out["waves=2"]["wall_s"]
    out["equal_rows"] = rows[1] == rows[2]
    out["equal_actions_and_rewards"] = all(rows[1]["columns"][k] == rows[2]["columns"][k]
                                           for k in ("action_key", "reward", "traj_id", "step"))
    if out["equal_actions_and_rewards"]:
        import numpy as np

        out["max_abs_logprob_difference"] = float(np.max(np.abs(np.asarray(rows[1]["old_logprobs"])
                                                                - np.asarray(rows[2]["old_logprobs"]))))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(__spec__.name, description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", default="textworld,native", help="comma-separated: textworld, native")
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2, help="env worker processes")
    parser.add_argument("--repeats", type=int, default=3, help="rollouts per setting")
    parser.add_argument("--policy", default="tiny", choices=("tiny", "tabular"))
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads of the policy")
    parser.add_argument("--out", default="benchmarks/results/rollout_waves.json")
    args = parser.parse_args(argv)
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    if not engines or set(engines) - {"textworld", "native"}:
        parser.error(f"--engines {args.engines!r}: choose from textworld, native")
    if min(args.groups, args.group_size, args.repeats) < 1 or args.workers < 0:
        parser.error("--groups, --group-size and --repeats must be >= 1, --workers >= 0")

    import torch

    from ecpo_train.policies.tabular import TabularSoftmaxPolicy
    from ecpo_train.runtime.builders import build_policy
    from ecpo_train.runtime.config import TrainConfig
    from ecpo_train.runtime.models import write_tiny_model

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    described = {"tiny": "tiny random Qwen2 (2 layers), scoring", "tabular": "tabular softmax"}[args.policy]
    result = {"env": ENV_ID, "env_kwargs": HOUSEHOLDS, "groups": args.groups, "group_size": args.group_size,
              "workers": args.workers, "repeats": args.repeats, "policy": described, "torch_threads": args.threads,
              "cpu_count": os.cpu_count(), "load_average_at_start": os.getloadavg(), "machine": platform.machine()}
    with tempfile.TemporaryDirectory() as folder:
        if args.policy == "tabular":
            policy = TabularSoftmaxPolicy(seed=0)
        else:
            config = TrainConfig(policy="llm", model=str(write_tiny_model(Path(folder) / "tiny")), policy_mode="score",
                                 env_id=ENV_ID, history_length=0, prompt_style="compact", device="cpu")
            policy = build_policy(config)
        policy.eval()
        for engine in engines:
            result[engine] = measure(engine, policy, args)
            line = result[engine]
            print(f"{engine}: waves=1 {line['waves=1']['wall_s']:.2f} s (gen {line['waves=1']['generation_s']:.2f}, "
                  f"env {line['waves=1']['env_s']:.2f}); waves=2 {line['waves=2']['wall_s']:.2f} s "
                  f"(gen {line['waves=2']['generation_s']:.2f}, exposed env {line['waves=2']['env_s']:.2f}); "
                  f"speed-up x{line['speedup']:.2f}; equal rows: {line['equal_rows']}, equal actions and rewards: "
                  f"{line['equal_actions_and_rewards']} (log-probs within {line.get('max_abs_logprob_difference')})",
                  flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    write_text(Path(args.out), json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
