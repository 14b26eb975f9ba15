"""Does the RLlib ECPO algorithm teach an LLM, and what does RLlib cost per iteration next to the native trainer?

The ``corridor_llm`` preset (SmolLM2-135M scoring the doors of two 4-room corridors; ``--model`` for another)
is trained from each ``--seeds`` seed twice: through ``ECPOConfig.from_train_config(...).build_algo()`` with
``--env-runners`` Ray actors and a local learner, and by the native trainer. Printed and written to
``benchmarks/results/rllib_llm_learning.json``:

- per seed: exact success (the corridors' DP value of the policy at the validation temperature: no sampling
  noise) before training and after the last iteration; the sampled validation success before and after, with
  95% Wilson intervals and the 95% interval of the gain (two independent proportions);
- per engine: the mean exact-success gain over seeds with its 95% Student-t interval (the run-to-run noise:
  with several runners each samples its own stream, so runs differ from the native trainer's);
- seconds per training iteration (median over iterations, validation excluded) and its split, side by side;
- the claims, paired by seed id and Holm-corrected together: each engine's gain is above 0, and the RLlib
  gain minus the native gain (same seeds: same tasks and env seeds, other sampling draws), each with its 95 %
  t-interval and, when not significant, the minimum detectable effect.

    python -m benchmarks.rllib_llm_learning --seeds 0 1 2 3 4 5 6 7 8 9 --iterations 10   # SmolLM2, both engines
    python -m benchmarks.rllib_llm_learning --seeds 5 6 --merge earlier.json   # pool with an earlier run's seeds
    python -m benchmarks.rllib_llm_learning --iterations 3 --model /path/to/tiny --skip-native
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks import RESULTS, ArgumentParser, require_model
from benchmarks.stats import apply_holm, keyed, mde_text, paired_diff, paired_values, wald_diff, wilson
from ecpo_train.policies.atomic import write_text

SPLIT = ("time/generation", "time/env", "time/update")


def t_interval(values: list[float]) -> tuple[float, float]:
    """95% Student-t interval of the mean (NaN bounds with fewer than two values)."""
    from scipy import stats

    if len(values) < 2:
        return (math.nan, math.nan)
    mean, sem = statistics.fmean(values), statistics.stdev(values) / math.sqrt(len(values))
    half = stats.t.ppf(0.975, len(values) - 1) * sem
    return (mean - half, mean + half)


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
        "val_gain_ci95": wald_diff(before, after, episodes),
        "seconds_per_iteration_median": statistics.median(per_iteration),
        "split_median": {k: statistics.median(m[k] for m in trained) for k in SPLIT},
        "iterations": len(trained), "wall_seconds": seconds,
        # runner actors lost and replaced during the run (Ray's memory monitor on a full machine): their groups
        # were re-played on healthy runners, and a replaced runner samples from a fresh stream
        "runner_failures": sum(m.get("sampling/num_runner_failures", 0.0) for m in trained),
        "groups_resampled": sum(m.get("sampling/num_groups_resampled", 0.0) for m in trained),
    }


def compare(runs: dict[str, list[dict[str, object]]]) -> list[dict[str, object]]:
    """The claims, paired by seed id and Holm-corrected together: each engine's exact-success gain (after -
    before, same seed) is above 0, and the RLlib engine's gain minus the native trainer's (same seeds: same
    tasks and env seeds, other sampling draws) is 0. Each gets its 95 % t-interval and the MDE."""
    gains = {engine: keyed([r["exact_success_after"] - r["exact_success_before"] for r in rs],
                           [r["seed"] for r in rs]) for engine, rs in runs.items()}
    parts = [paired_diff(list(g.values())) | {"claim": f"{engine} exact-success gain", "direction": 1}
             for engine, g in gains.items()]
    if len(gains) == 2:
        _, diffs = paired_values(gains["rllib"], gains["native"], label="rllib - native")
        parts.append(paired_diff(list(diffs)) | {"claim": "rllib gain - native gain", "direction": 1})
    return apply_holm(parts)


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = ArgumentParser(__spec__.name, description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="model folder (default: pulled SmolLM2, else fail)")
    parser.add_argument("--iterations", type=int, default=12)
    parser.add_argument("--env-runners", type=int, default=2)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--skip-native", action="store_true", help="only the RLlib engine")
    parser.add_argument("--out", default=str(RESULTS / "rllib_llm_learning.json"))
    parser.add_argument("--merge", default=None,
                        help="an earlier output of this script (same model, iterations, runners; other seeds) whose "
                             "runs are pooled with this run's before the statistics")
    args = parser.parse_args(argv)

    from ecpo_train.integrations.rllib.llm.engine import RLlibEngine
    from ecpo_train.runtime.config import load_config
    from ecpo_train.runtime.models import default_cache_dir
    from ecpo_train.runtime.run import train
    from ecpo_train.runtime.trainer import Trainer

    model = args.model or str(default_cache_dir() / "smollm2-135m-instruct")
    require_model(model)
    out: dict[str, object] = {"model": model, "preset": "corridor_llm", "seeds": args.seeds,
                              "iterations": args.iterations, "env_runners": args.env_runners,
                              "machine": platform.platform(), "cpus": os.cpu_count(),
                              "load_average_start": os.getloadavg()}
    engines = ["rllib"] + ([] if args.skip_native else ["native"])
    runs: dict[str, list[dict[str, object]]] = {engine: [] for engine in engines}
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as folder:
            overrides = [f"model={model}", f"iterations={args.iterations}", f"seed={seed}", "progress=false",
                         f"val_every={args.iterations}"]
            for engine in engines:
                config = load_config("corridor_llm", [*overrides, f"run_dir={folder}/{engine}"])
                episodes = config.val_num_tasks * config.val_episodes_per_task
                started = time.perf_counter()
                if engine == "rllib":  # both through the run shell: the same loop, records and cadence
                    history = train(RLlibEngine, config, num_env_runners=args.env_runners)
                else:
                    history = train(Trainer, config)
                runs[engine].append({"seed": seed} | summarize(history, episodes, time.perf_counter() - started))
    if args.merge:
        earlier = json.loads(Path(args.merge).read_text())
        for key in ("model", "iterations", "env_runners"):
            if earlier[key] != out[key]:
                raise SystemExit(f"--merge: {args.merge} has {key}={earlier[key]!r}, this run {out[key]!r}")
        if set(earlier["seeds"]) & set(args.seeds):
            raise SystemExit(f"--merge: seeds {sorted(set(earlier['seeds']) & set(args.seeds))} are in both runs")
        for engine in engines:
            runs[engine] = earlier[engine]["runs"] + runs[engine]
        out["seeds"] = earlier["seeds"] + args.seeds
        out["load_average_start"] = earlier["load_average_start"]
    for engine in engines:
        gains = [r["exact_success_after"] - r["exact_success_before"] for r in runs[engine]]
        out[engine] = {"runs": runs[engine], "exact_gain_mean": statistics.fmean(gains),
                       "exact_gain_ci95": t_interval(gains),
                       "seconds_per_iteration_median": statistics.median(
                           r["seconds_per_iteration_median"] for r in runs[engine])}
    out["comparisons"] = compare(runs)
    out["load_average_end"] = os.getloadavg()
    for engine in engines:
        for r in runs[engine]:
            print(f"{engine:6s} seed {r['seed']}: exact success {r['exact_success_before']:.3f} -> "
                  f"{r['exact_success_after']:.3f}; sampled {r['val_success_before']:.3f} -> "
                  f"{r['val_success_after']:.3f} (gain 95% CI {r['val_gain_ci95'][0]:+.3f}..{r['val_gain_ci95'][1]:+.3f}, "
                  f"n={r['val_episodes']}); {r['seconds_per_iteration_median']:.1f} s/iteration")
        low, high = out[engine]["exact_gain_ci95"]
        print(f"{engine:6s} mean exact gain {out[engine]['exact_gain_mean']:+.3f} (95% t-interval over "
              f"{len(out['seeds'])} seeds {low:+.3f}..{high:+.3f}); "
              f"{out[engine]['seconds_per_iteration_median']:.1f} s/iteration")
    for c in out["comparisons"]:
        found = "significant" if c["holm_significant"] else f"not significant ({mde_text(c) or 'no MDE'})"
        print(f"{c['claim']}: {c['diff']:+.3f} [{c['low']:+.3f}, {c['high']:+.3f}] over {c['n']} seeds, "
              f"Holm over {c['m']}: {found}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    write_text(Path(args.out), json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
