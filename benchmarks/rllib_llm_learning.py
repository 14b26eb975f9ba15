"""Does the RLlib ECPO algorithm teach an LLM, and what does RLlib cost per iteration next to the native trainer?

The ``corridor_llm`` preset (SmolLM2-135M scoring the doors of two 4-room corridors; the tiny random model when
SmolLM2 has not been pulled) is trained twice from the same seed: through ``ECPOConfig.from_train_config(...)
.build_algo()`` with ``--env-runners`` Ray actors and a local learner, and by the native trainer. Printed and
written to ``benchmarks/results/rllib_llm_learning.json``:

- exact success (the corridors' DP value of the policy at the validation temperature: no sampling noise)
  before training and after the last iteration, for both engines;
- the sampled validation success before and after, with 95% Wilson intervals, and the 95% interval of the
  gain (normal approximation of two independent proportions): the noise a sampled measurement carries;
- seconds per training iteration (median over iterations, validation excluded) and its split, side by side.

    python benchmarks/rllib_llm_learning.py                       # SmolLM2 if pulled, 12 iterations
    python benchmarks/rllib_llm_learning.py --iterations 3 --model /path/to/tiny --skip-native
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
SPLIT = ("time/generation", "time/env", "time/update")


def wilson(successes: float, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (centre - half, centre + half)


def gain_interval(before: float, after: float, n: int, z: float = 1.96) -> tuple[float, float]:
    se = math.sqrt(before * (1 - before) / n + after * (1 - after) / n)
    return (after - before - z * se, after - before + z * se)


def summarize(history: list[dict[str, float]], episodes: int, seconds: float) -> dict[str, object]:
    validated = [m for m in history if "val/success" in m]
    first, last = validated[0], validated[-1]
    trained = [m for m in history if "time/update" in m]
    per_iteration = [m["time/iteration"] - m.get("time/validation", 0.0) for m in trained]
    before, after = first["val/success"], last["val/success"]
    return {
        "exact_success_before": first.get("val/exact_success"), "exact_success_after": last.get("val/exact_success"),
        "val_success_before": before, "val_success_after": after, "val_episodes": episodes,
        "val_success_before_ci95": wilson(before * episodes, episodes),
        "val_success_after_ci95": wilson(after * episodes, episodes),
        "val_gain_ci95": gain_interval(before, after, episodes),
        "seconds_per_iteration_median": statistics.median(per_iteration),
        "split_median": {k: statistics.median(m[k] for m in trained) for k in SPLIT},
        "iterations": len(trained), "wall_seconds": seconds,
    }


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="model folder (default: pulled SmolLM2, else fail)")
    parser.add_argument("--iterations", type=int, default=12)
    parser.add_argument("--env-runners", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-native", action="store_true", help="only the RLlib engine")
    parser.add_argument("--out", default=str(RESULTS / "rllib_llm_learning.json"))
    args = parser.parse_args(argv)

    from ecpo_train.apps.models import default_cache_dir
    from ecpo_train.integrations.rllib.engine import train_with_rllib
    from ecpo_train.runtime.config import load_config
    from ecpo_train.runtime.trainer import Trainer

    model = args.model or str(default_cache_dir() / "smollm2-135m-instruct")
    if not (Path(model) / "config.json").exists():
        print(f"error: no model at {model}: run `ecpo models pull smollm2-135m-instruct` or pass --model",
              file=sys.stderr)
        raise SystemExit(2)
    out: dict[str, object] = {"model": model, "preset": "corridor_llm", "seed": args.seed,
                              "env_runners": args.env_runners, "machine": platform.platform(),
                              "cpus": os.cpu_count(), "load_average_start": os.getloadavg()}
    with tempfile.TemporaryDirectory() as folder:
        overrides = [f"model={model}", f"iterations={args.iterations}", f"seed={args.seed}", "progress=false",
                     f"val_every={args.iterations}"]
        config = load_config("corridor_llm", [*overrides, f"run_dir={folder}/rllib"])
        episodes = config.val_num_tasks * config.val_episodes_per_task
        started = time.perf_counter()
        history = train_with_rllib(config, num_env_runners=args.env_runners, progress=True)
        out["rllib"] = summarize(history, episodes, time.perf_counter() - started)
        if not args.skip_native:
            config = load_config("corridor_llm", [*overrides, f"run_dir={folder}/native"])
            trainer = Trainer(config)
            started = time.perf_counter()
            try:
                history = trainer.train()
            finally:
                trainer.close()
            out["native"] = summarize(history, episodes, time.perf_counter() - started)
    out["load_average_end"] = os.getloadavg()
    for engine in ("rllib", "native"):
        if engine in out:
            r = out[engine]
            print(f"{engine:6s} exact success {r['exact_success_before']:.3f} -> {r['exact_success_after']:.3f}; "
                  f"sampled {r['val_success_before']:.3f} -> {r['val_success_after']:.3f} "
                  f"(gain 95% CI {r['val_gain_ci95'][0]:+.3f}..{r['val_gain_ci95'][1]:+.3f}, n={episodes}); "
                  f"{r['seconds_per_iteration_median']:.1f} s/iteration")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
