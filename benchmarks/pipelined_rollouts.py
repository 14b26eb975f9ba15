"""Pipelined rollouts on the RLlib engine: wall time per iteration with ``max_policy_lag`` 0 (lock-step) and 1
(the env runners play the next groups while the learner updates), side by side in one run.

Two cases, each trained from the same seed once per lag on the same Ray session (lag 0, then lag 1):

- ``env``: ALFWorld households (``ecpo/ALFWorld-v0``, TextWorld games), played by the tiny random 2-layer Qwen2
  scoring the admissible actions: a policy whose forward costs little beside the game's steps (env-bound);
- ``smollm2``: SmolLM2-135M-Instruct scoring the corridors' doors (the ``corridor_llm`` preset), run only when
  ``MemAvailable`` is at least ``--min-free-gb`` (three model copies: two runners and the learner).

Per lag: the median seconds per iteration (the first iteration left out: it builds the envs, and a pipelined
run samples it synchronously), and the busy fraction of sampling (the runners' own seconds playing groups) and
of the update (the learner's), summed over the timed iterations and divided by their wall time. Under lag 0 the
fractions add up to about 1 (one waits for the other); under lag 1 they overlap. From lag 0's phase medians,
the projected speed-up on separate sampling and learning devices, ``(S + U + Y) / (max(S, U) + Y)`` (S sampling,
U update, Y weight sync): a projection, not a measurement.

On this machine every process shares two cores (with a training run beside it): runners and learner compete for
them, so overlap can only hide what one phase leaves of the cores, not run the phases in parallel.

    python -m benchmarks.pipelined_rollouts                       # both cases, 4 timed iterations per lag
    python -m benchmarks.pipelined_rollouts --cases env --iterations 6
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import RESULTS, ArgumentParser
from ecpo_train.policies.atomic import write_text

PHASES = ("sampling", "update", "sync")
SMOLLM2 = Path("~/.cache/ecpo/models/smollm2-135m-instruct").expanduser()
ALFWORLD_KWARGS = {"max_steps": 20}


def case_values(case: str, model: Path, run_dir: str) -> dict[str, Any]:
    """The run a case times (``TrainConfig`` values); no validation, no checkpoints."""
    common = {"run_dir": run_dir, "policy": "llm", "policy_mode": "score", "model": str(model), "device": "cpu",
              "val_every": 0, "val_before_training": False, "checkpoint_every": 0, "tensorboard": False,
              "progress": False, "seed": 0, "kl_coef": 0.0, "prompt_style": "compact", "history_length": 0}
    if case == "env":
        return common | {"env_id": "ecpo/ALFWorld-v0", "env_kwargs": dict(ALFWORLD_KWARGS), "n_groups": 4,
                         "group_size": 4, "credit": {"d_min": 2}, "lr": 1e-4, "mini_batch_size": 64,
                         "micro_batch_size": 16, "num_epochs": 1, "max_prompt_length": 512}
    from ecpo_train.runtime.config import config_dict, load_config

    preset = config_dict(load_config("corridor_llm", [f"model={model}", f"run_dir={run_dir}"]))
    return preset | common | {"credit": preset["credit"], "lr": preset["lr"], "n_groups": 4}


def time_lag(values: dict[str, Any], lag: int, runners: int, iterations: int) -> list[dict[str, float]]:
    """``iterations + 1`` iterations of the run with ``max_policy_lag=lag``; each iteration's ``result["ecpo"]``."""
    from ecpo_train.integrations.rllib import ECPOConfig
    from ecpo_train.runtime.config import make_config

    config = ECPOConfig.from_train_config(make_config(values)).env_runners(num_env_runners=runners).training(
        max_policy_lag=lag)
    algo = config.build_algo()
    try:
        return [dict(algo.train()["ecpo"]) for _ in range(iterations + 1)]
    finally:
        algo.stop()


def summarize(history: list[dict[str, float]]) -> dict[str, Any]:
    """Median seconds per iteration and per phase, and the busy fractions, over the timed iterations."""
    timed = history[1:]
    wall = sum(m["time/iteration"] for m in timed)
    return {"seconds_per_iteration": [m["time/iteration"] for m in timed],
            "median_seconds_per_iteration": statistics.median(m["time/iteration"] for m in timed),
            "median_phase_seconds": {p: statistics.median(m[f"time/{p}"] for m in timed) for p in PHASES},
            "median_sampling_wait_seconds": statistics.median(m.get("time/sampling_wait", m["time/sampling"])
                                                              for m in timed),
            "busy_fraction": {p: sum(m[f"time/{p}"] for m in timed) / wall for p in ("sampling", "update")},
            "policy_lag_max": max(m["sampling/policy_lag_max"] for m in timed),
            "stale_groups_resampled": sum(m["sampling/num_stale_groups_resampled"] for m in timed),
            "steps_per_iteration": statistics.median(m["num_steps"] for m in timed)}


def projection(lock_step: dict[str, Any]) -> dict[str, float]:
    """The speed-up separate sampling and learning devices would give, from lock-step's phase medians."""
    phase = lock_step["median_phase_seconds"]
    serial = phase["sampling"] + phase["update"] + phase["sync"]
    overlapped = max(phase["sampling"], phase["update"]) + phase["sync"]
    return {"lock_step_seconds": serial, "pipelined_seconds": overlapped, "speedup": serial / overlapped}


def available_gb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 2**20
    return float("nan")


def report(out: dict[str, Any]) -> str:
    """The markdown section: one table per case, then the projection."""
    header = (f"{out['machine']}, {out['cpus']} CPUs (load average at the start "
              f"{out['load_average_start'][0]:.1f}); {out['iterations']} timed iterations per lag, "
              f"{out['runners']} env runners, one local learner. `python -m benchmarks.pipelined_rollouts`.")
    lines = ["## Pipelined rollouts (`max_policy_lag`): wall time per iteration", "", header, ""]
    columns = ("max_policy_lag", "s / iteration (median)", "sampling busy", "update busy",
               "driver waits for sampling (s, median)", "max lag", "stale groups")
    for case, result in out["cases"].items():
        if "skipped" in result:
            lines += [f"**{case}**: not run ({result['skipped']}).", ""]
            continue
        rows = result["lags"]["0"]["steps_per_iteration"]
        lines += [f"**{case}** ({result['what']}; {rows:.0f} step rows per iteration)", "",
                  "| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
        for lag, s in result["lags"].items():
            cells = (lag, f"{s['median_seconds_per_iteration']:.2f}", f"{s['busy_fraction']['sampling']:.0%}",
                     f"{s['busy_fraction']['update']:.0%}", f"{s['median_sampling_wait_seconds']:.2f}",
                     f"{s['policy_lag_max']:.0f}", f"{s['stale_groups_resampled']:.0f}")
            lines.append("| " + " | ".join(cells) + " |")
        proj = result["projection"]
        lines += ["", (f"Measured speed-up of lag 1 here: {result['measured_speedup']:.2f}x. Projection (not "
                       "measured) for separate sampling and learning devices from lag 0's phase medians: "
                       f"{proj['lock_step_seconds']:.2f} s -> {proj['pipelined_seconds']:.2f} s per iteration, "
                       f"{proj['speedup']:.2f}x."), ""]
    lines += [LIMITS, ""]
    return "\n".join(lines)


LIMITS = ("Two cores bound what overlap can show here: while the runners "
          "play, the learner's update competes with them for the same cores, so lag 1 can hide only the idle "
          "share of a phase (a runner waiting on the game, the driver waiting on Ray), never run the two phases at "
          "full speed side by side. The projection assumes each phase keeps its measured time on its own device.")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = ArgumentParser(__spec__.name, description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", choices=("env", "smollm2"), default=["env", "smollm2"])
    parser.add_argument("--iterations", type=int, default=4, help="timed iterations per lag (after one warm-up)")
    parser.add_argument("--runners", type=int, default=2)
    parser.add_argument("--smollm2", default=str(SMOLLM2), help="SmolLM2 folder (the smollm2 case)")
    parser.add_argument("--min-free-gb", type=float, default=12.0, help="run smollm2 only with this much available")
    parser.add_argument("--out", default=str(RESULTS / "pipelined_rollouts.json"))
    args = parser.parse_args(argv)
    if args.iterations < 1 or args.runners < 1:
        parser.error("--iterations and --runners must be >= 1")

    import ray

    from ecpo_train.runtime.models import write_tiny_model

    out: dict[str, Any] = {"machine": platform.platform(), "cpus": os.cpu_count(), "iterations": args.iterations,
                           "runners": args.runners, "load_average_start": os.getloadavg(), "cases": {}}
    ray.init(num_cpus=args.runners + 1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        with tempfile.TemporaryDirectory() as folder:
            for case in args.cases:
                if case == "smollm2" and available_gb() < args.min_free_gb:
                    out["cases"][case] = {"skipped": f"{available_gb():.1f} GB available < {args.min_free_gb:g} GB"}
                    continue
                model = Path(args.smollm2) if case == "smollm2" else write_tiny_model(Path(folder) / "tiny")
                values = case_values(case, model, f"{folder}/{case}")
                lags = {}
                for lag in (0, 1):
                    started = time.perf_counter()
                    lags[str(lag)] = summarize(time_lag(values, lag, args.runners, args.iterations))
                    lags[str(lag)]["wall_seconds"] = time.perf_counter() - started
                    print(f"{case} lag {lag}: {lags[str(lag)]['median_seconds_per_iteration']:.2f} s/iteration, "
                          f"busy {lags[str(lag)]['busy_fraction']}", flush=True)
                what = ("ALFWorld households (TextWorld), the tiny random Qwen2 scoring" if case == "env"
                        else "SmolLM2-135M scoring the corridor_llm doors")
                out["cases"][case] = {"what": what, "env_id": values["env_id"], "model": str(model), "lags": lags,
                                      "measured_speedup": lags["0"]["median_seconds_per_iteration"]
                                      / lags["1"]["median_seconds_per_iteration"],
                                      "projection": projection(lags["0"])}
    finally:
        ray.shutdown()
    out["load_average_end"] = os.getloadavg()
    path = Path(args.out)
    write_text(path, json.dumps(out, indent=1) + "\n")
    markdown = report(out)
    write_text(path.with_suffix(".md"), markdown)
    print(markdown)
    return out


if __name__ == "__main__":
    main()
