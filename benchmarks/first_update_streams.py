"""How much does one update's effect depend on which random draws sampled its batch? (the RLlib runners' question)

With several env runners, runner ``k`` samples its groups from its own stream (seed + RUNNER_SEED_STRIDE
(k - 1)); one runner, or the native trainer, samples every group from one stream. The algorithm is otherwise
the same (``tests/test_rllib_llm_algorithm.py``: two runners give exactly the native update on their own
streams). This replays the first iteration of ``corridor_llm`` (SmolLM2 scoring doors; ``--model`` for
another) in one process, three ways per seed, with the driver's tasks and env seeds shared:

- ``one``: both groups drawn from the run's stream in one rollout (the native trainer, one runner);
- ``two``: group ``g`` drawn from seed + RUNNER_SEED_STRIDE g in its own rollout (two runners);
- ``same``: every group from a fresh stream of the run's seed (two runners sharing one seed);

then applies the native credit and update and measures the exact (DP) success J at the validation
temperature. Printed and written to ``benchmarks/results/first_update_streams.json``: J per seed and arm,
each arm's mean and SD over seeds, and the paired differences (``two - one``, ``same - one``) with their 95 %
t-intervals and MDEs (Holm over the two).

    python -m benchmarks.first_update_streams --seeds 0 1 2 3 4 5 6 7 8 9
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from benchmarks import RESULTS, ArgumentParser
from ecpo_train.policies.atomic import write_text

ARMS = ("one", "two", "same")


def first_update(model: str, seed: int, arm: str) -> dict[str, float]:
    import numpy as np
    import torch

    from ecpo_train.core.iteration import credit_step, draw_iteration
    from ecpo_train.core.rollout import collect_rollout
    from ecpo_train.integrations.rllib.llm.runner import RUNNER_SEED_STRIDE, replay_runner_sampling
    from ecpo_train.runtime.builders import update_on_table
    from ecpo_train.runtime.config import load_config
    from ecpo_train.runtime.trainer import Trainer

    cfg = load_config("corridor_llm", [f"model={model}", "iterations=1", f"seed={seed}", "progress=false",
                                       "run_dir=runs/first-update-streams", "tensorboard=false"])
    trainer = Trainer(cfg)
    try:
        trainer.policy.eval()
        # the run's stream, as the trainer's first iteration uses it: the draw, then the update's shuffle
        stream = np.random.default_rng(cfg.seed)
        tasks, env_seed = draw_iteration(cfg, trainer.train_tasks, stream, iteration=0)
        play = {"env_name": cfg.env_id, "temperature": cfg.rollout_temperature, "anchor_key": cfg.anchor_key,
                "history_length": cfg.history_length}
        if arm == "one":
            torch.manual_seed(seed)
            batch = collect_rollout(trainer.envs, trainer.policy, tasks, seed=env_seed, **play).batch
        else:  # each group alone, from its runner's stream (two runners) or from the run's seed (sharing one)
            seeds = [seed + (RUNNER_SEED_STRIDE * g if arm == "two" else 0) for g in range(cfg.n_groups)]
            batch = replay_runner_sampling(trainer.policy, cfg, tasks, env_seed, seeds)
        advantages, _ = credit_step(cfg, batch)
        stats = update_on_table(trainer.policy, cfg, batch, torch.as_tensor(np.asarray(advantages), dtype=torch.float32),
                                trainer.optimizer, stream, reference=trainer.reference)
        exact = trainer.validate()["val/exact_success"]
    finally:
        trainer.close()
    won = {t for t, r in zip(batch.traj_id, batch.reward) if r > 0}
    return {"J_after": float(exact), "rollout_success": len(won) / len(set(batch.traj_id)),
            "ratio_max_dev": float(stats["ratio_max_dev"])}


def main(argv: list[str] | None = None) -> dict:
    parser = ArgumentParser(__spec__.name, description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="model folder (default: pulled SmolLM2)")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--out", default=str(RESULTS / "first_update_streams.json"))
    args = parser.parse_args(argv)
    from benchmarks.stats import apply_holm, mde_text, paired_diff
    from ecpo_train.runtime.models import default_cache_dir

    model = args.model or str(default_cache_dir() / "smollm2-135m-instruct")
    if not (Path(model) / "config.json").exists():
        print(f"error: no model at {model}: run `ecpo models pull smollm2-135m-instruct` or pass --model",
              file=sys.stderr)
        raise SystemExit(2)
    cells: dict[str, dict[int, dict]] = {arm: {} for arm in ARMS}
    for seed in args.seeds:
        for arm in ARMS:
            cells[arm][seed] = first_update(model, seed, arm)
            print(json.dumps({"seed": seed, "arm": arm} | cells[arm][seed]), flush=True)
    out: dict = {"model": model, "preset": "corridor_llm", "seeds": args.seeds, "cells": cells, "arms": {}}
    for arm in ARMS:
        values = [cells[arm][s]["J_after"] for s in args.seeds]
        out["arms"][arm] = {"J_after_mean": statistics.fmean(values),
                            "J_after_sd": statistics.stdev(values) if len(values) > 1 else float("nan")}
    parts = [paired_diff([cells[arm][s]["J_after"] - cells["one"][s]["J_after"] for s in args.seeds])
             | {"claim": f"{arm} - one", "direction": 1} for arm in ("two", "same")]
    out["comparisons"] = apply_holm(parts)
    for arm, a in out["arms"].items():
        print(f"{arm:4s}: J after one update {a['J_after_mean']:.3f} (SD over {len(args.seeds)} seeds {a['J_after_sd']:.3f})")
    for c in out["comparisons"]:
        found = "significant" if c["holm_significant"] else f"not significant ({mde_text(c) or 'no MDE'})"
        print(f"{c['claim']}: {c['diff']:+.3f} [{c['low']:+.3f}, {c['high']:+.3f}], {found}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    write_text(Path(args.out), json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
