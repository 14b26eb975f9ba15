"""The RLlib engine on one GPU: ``alfworld_gpu`` through ``ECPOConfig`` with the learner on the GPU, beside the native
trainer on the same GPU and seed. About 5 minutes of one GPU with 16 CPU cores.

The learner is RLlib's local learner on the GPU (``learners(num_learners=0, num_gpus_per_learner=s)``, the driver),
the runners on the same GPU by fractional shares (``num_gpus_per_env_runner``), the shares adding up to the one GPU
(``gpu_shares``: the learner what the runners leave, the whole GPU beside CPU runners). Five parts, each written to the JSON
and its markdown as soon as it is done (a command stopped early still returns what it did), the device named:

1. ``environment``: the device, torch / CUDA / transformers / Ray versions;
2. ``first_iteration``: one runner on the same GPU (a ``--runner-gpu-share`` of it), iterations of both engines:
   the time split sampling / credit / update / sync side by side, and the peak GPU memory of every process; then
   ``save_to_path`` from the CUDA learner, ``from_checkpoint`` and one more iteration, timed. Whether the two
   engines' first iterations are equal, and a restored run's next iteration the uninterrupted one's, is not
   measured here but tested, on the CPU and on a GPU where there is one: ``tests/test_rllib_llm_algorithm.py``;
3. ``gpu_runners``: ``--runners`` runners sharing the GPU by fractional shares, ``max_policy_lag`` 0;
4. ``lag``: the same with ``max_policy_lag=1``: its iteration time against part 3's (the CPU measured 1.25x);
5. ``cpu_runners``: ``--cpu-runners`` runners on CPU cores (the learner still on the GPU).

    python -m benchmarks.rllib_gpu [--parts 1,2,3,4,5] [--model DIR] [--iterations 3] [--out FILE.json]
    python -m benchmarks.rllib_gpu --device cpu --smoke     # every part on tiny sizes, on the CPU

Needs CUDA unless ``--device cpu`` (exit 2 with one line). Results go to ``benchmarks/results/rllib_gpu.json`` on
CUDA and to ``runs/rllib_gpu/rllib_gpu.json`` otherwise; an existing file at ``--out`` keeps the parts this
command does not run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import ArgumentParser, chosen_parts, refuse_without_cuda, write_report
from benchmarks.gpu_learning import DEFAULT_MODEL
from benchmarks.gpu_run import default_out, device_facts, loaded_distributions
from benchmarks.rllib_gpu_report import render

PART_NAMES = ("environment", "first_iteration", "gpu_runners", "lag", "cpu_runners")
# --smoke: small corridors whose groups differ in return from the first iteration (an update to time)
SMOKE_RUN = {"env_id": "ecpo/DivergentAnchor-v0", "env_kwargs": {"num_tasks": 2, "depth": 4, "rare_prob": [0.4, 0.7]},
             "val_tasks": None, "n_groups": 2, "group_size": 4, "history_length": 0, "credit": {"d_min": 1},
             "lr": 1e-3, "lr_warmup_steps": 0, "kl_coef": 0.0, "mini_batch_size": 8, "micro_batch_size": 4,
             "num_epochs": 2, "mixed_precision": "none", "explore_epsilon": 0.0, "rollout_temperature": 1.0,
             "threads": 1, "seed": 5}
CPU_RUNNER_CORES = 2  # part 5: cores (and torch threads) of one runner on the CPU
CREDIT_TIMER = ("timers", "connectors", "step_table_credit")  # RLlib's own timer of the learner connector piece


def time_split(metrics: dict[str, float], rllib_credit: float | None = None) -> dict[str, float]:
    """An iteration's seconds by phase, one vocabulary for both engines: ``sampling`` (the native rollout:
    generation + env; RLlib: the runners' sampling as the driver waited for it), ``credit``, ``update`` (the update
    without the credit), ``sync`` (weights to the runners; none natively) and ``iteration``. RLlib computes the
    credit inside the learner's update: ``rllib_credit`` (``learner_credit_seconds``) splits it out."""
    if rllib_credit is None:  # the native trainer
        split = {"sampling": metrics["time/generation"] + metrics["time/env"], "credit": metrics["time/credit"],
                 "update": metrics["time/update"], "sync": 0.0}
    else:
        split = {"sampling": metrics.get("time/sampling_wait", metrics["time/sampling"]), "credit": rllib_credit,
                 "update": metrics["time/update"] - rllib_credit, "sync": metrics["time/sync"]}
    return split | {"iteration": metrics["time/iteration"]}


def learner_credit_seconds(learner: Any) -> float:
    """The last update's credit seconds: RLlib's own timer of the learner connector piece (``StepTableCredit``),
    read from the local learner and then cleared (RLlib keeps a moving average of it over the updates)."""
    try:
        seconds = float(learner.metrics.peek(CREDIT_TIMER))
    except KeyError:
        return 0.0
    learner.metrics.delete(*CREDIT_TIMER)
    return seconds


def mean_split(splits: list[dict[str, float]]) -> dict[str, float]:
    """The mean time split of the iterations after the first (the first pays for warm-up), or the first alone."""
    kept = splits[1:] or splits
    return {key: float(np.mean([s[key] for s in kept])) for key in kept[0]}


# ---------------------------------------------------------------------------------------------- memory
def process_memory() -> dict[str, Any]:
    """This process's peak GPU memory (torch's allocator), run in the driver or in a runner actor."""
    import torch

    peak = torch.cuda.max_memory_allocated() / (1 << 30) if torch.cuda.is_available() else None
    return {"pid": os.getpid(), "peak_gib": peak}


def reset_peak() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def gpu_processes() -> list[dict[str, Any]] | None:
    """Every process on the GPU with the memory it holds (``nvidia-smi``: the CUDA context included)."""
    if shutil.which("nvidia-smi") is None:
        return None
    done = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                          capture_output=True, text=True, check=False)
    rows = [line.split(",") for line in done.stdout.strip().splitlines() if "," in line]
    return [{"pid": int(pid), "used_mib": float(mib)} for pid, mib in rows]


def runners_memory(algo: Any) -> list[dict[str, Any]]:
    group = algo.env_runner_group
    if group.num_remote_env_runners() == 0:
        return []
    return group.foreach_env_runner(lambda runner: process_memory(), local_env_runner=False)


# ---------------------------------------------------------------------------------------------- the runs
def run_values(args: argparse.Namespace, work: Path, name: str) -> dict[str, Any]:
    """The ``alfworld_gpu`` preset on ``args.device`` (tiny sizes under ``--smoke``), as native config values."""
    from ecpo_train.runtime.config import config_dict, load_config

    values = config_dict(load_config(args.preset)) | {
        "run_dir": str(work / name), "model": str(args.model), "device": args.device, "val_every": 0,
        "val_before_training": False, "checkpoint_every": 0, "tensorboard": False, "progress": False,
        "iterations": args.iterations, "seed": args.seed}
    return values | SMOKE_RUN if args.smoke else values


def gpu_shares(runners: int, runner_share: float) -> tuple[float, float]:
    """(the learner's share, each runner's) of one GPU: the runners ``runner_share`` each (at most an equal split
    with the learner), the learner what they leave; the whole GPU for the learner beside CPU runners (0 runners
    on the GPU). Shares that add up to one GPU are what ``validate()`` accepts on a one-GPU machine."""
    if runners == 0:
        return 1.0, 0.0
    share = min(runner_share, (1000 // (runners + 1)) / 1000)  # whole thousandths, never above the learner's
    return round(1.0 - runners * share, 3), share


def build_rllib(values: dict[str, Any], runners: int, runner_share: float, lag: int = 0, runner_cpu: bool = False):
    """``ECPOConfig`` of ``values``: the local learner on the GPU when there is one (RLlib's ``num_learners=0``:
    the driver), ``runners`` runners on it by fractional shares (``gpu_shares``) or on CPU cores (``runner_cpu``:
    their policy built on the CPU, the learner's module moved to its GPU by RLlib)."""
    from ecpo_train.rllib import ECPOConfig
    from ecpo_train.runtime.config import make_config

    cuda = values["device"].startswith("cuda")
    learner_gpu, runner_gpu = gpu_shares(0 if runner_cpu else runners, runner_share) if cuda else (0.0, 0.0)
    train = make_config(values | {"device": "cpu", "threads": CPU_RUNNER_CORES} if runner_cpu else values)
    config = (ECPOConfig.from_train_config(train)
              .learners(num_learners=0, num_gpus_per_learner=learner_gpu)
              .env_runners(num_env_runners=runners, num_cpus_per_env_runner=CPU_RUNNER_CORES if runner_cpu else 1,
                           num_gpus_per_env_runner=runner_gpu)
              .training(max_policy_lag=lag))
    return config.build_algo()


def native_iterations(values: dict[str, Any], iterations: int) -> dict[str, Any]:
    """The native trainer's first iteration's metrics and ``iterations`` iterations' time splits, with the
    driver's peak GPU memory."""
    from ecpo_train.runtime.config import make_config
    from ecpo_train.runtime.run import open_run
    from ecpo_train.runtime.trainer import Trainer

    reset_peak()
    out: dict[str, Any] = {"splits": []}

    def kept(metrics: dict[str, float]) -> bool:  # the run shell's stop hook, after each iteration
        out.setdefault("first", metrics)
        out["splits"].append(time_split(metrics))
        return False

    with open_run(Trainer, make_config(values), overwrite=True) as run:
        run.train(iterations, stop=kept)
    out["memory"] = process_memory()
    return out


def rllib_iterations(algo: Any, iterations: int, checkpoint: Path | None = None) -> dict[str, Any]:
    """``iterations`` iterations of a built algorithm: the first's metrics, every time split, the
    peak GPU memory of the driver (the learner) and of each runner; with ``checkpoint``, ``save_to_path`` after the
    first iteration (the next iteration's metrics are then kept as ``after_checkpoint``)."""
    learner = algo.learner_group._learner  # the local learner: credit and weights are read where they live
    out: dict[str, Any] = {"splits": []}
    for k in range(iterations):
        result = algo.train()
        metrics = {key: float(v) for key, v in result["ecpo"].items() if isinstance(v, (int, float))}
        out["splits"].append(time_split(metrics, learner_credit_seconds(learner)))
        out["policy_lag_max"] = max(out.get("policy_lag_max", 0.0), metrics.get("sampling/policy_lag_max", 0.0))
        if k == 0:
            out["first"] = metrics
            if checkpoint is not None:
                started = time.perf_counter()
                algo.save_to_path(str(checkpoint))
                out["save_seconds"] = time.perf_counter() - started
    out["memory"] = {"driver (learner)": process_memory(), "runners": runners_memory(algo),
                     "nvidia_smi": gpu_processes()}
    return out


def side_by_side(native: list[dict[str, float]], rllib: list[dict[str, float]]) -> dict[str, Any]:
    """Both engines' mean time split and the RLlib engine's iteration time over the native one (goal: <= 1.2)."""
    native_mean, rllib_mean = mean_split(native), mean_split(rllib)
    return {"native": native_mean, "rllib": rllib_mean,
            "rllib_over_native": rllib_mean["iteration"] / max(native_mean["iteration"], 1e-9)}


def shares_of(args: argparse.Namespace, runners_on_gpu: int) -> dict[str, float]:
    """The GPU shares a part asked for (none on the CPU)."""
    learner, runner = gpu_shares(runners_on_gpu, args.runner_gpu_share) if args.device.startswith("cuda") else (0, 0)
    return {"num_gpus_per_learner": learner, "num_gpus_per_env_runner": runner}


def part_first_iteration(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Part 2 (module docstring): time split, checkpoint round trip, memory; one runner on the GPU."""
    from ecpo_train.rllib import ECPO

    values = run_values(args, work, "first_iteration")
    native = native_iterations(values, args.iterations)
    reset_peak()
    checkpoint = work / "checkpoint"
    algo = build_rllib(values, runners=1, runner_share=args.runner_gpu_share)
    try:
        rllib = rllib_iterations(algo, max(args.iterations, 2), checkpoint=checkpoint)
    finally:
        algo.stop()
    started = time.perf_counter()
    restored = ECPO.from_checkpoint(str(checkpoint))
    try:
        restore_seconds = time.perf_counter() - started
        resumed = {k: float(v) for k, v in restored.train()["ecpo"].items() if isinstance(v, (int, float))}
    finally:
        restored.stop()
    return {"runners": 1, "gpu_shares": shares_of(args, 1),
            "checkpoint": {"save_seconds": rllib["save_seconds"], "restore_seconds": restore_seconds,
                           "resumed_iteration": resumed["iteration"]},
            "time_split": side_by_side(native["splits"], rllib["splits"]),
            "memory": {"native driver": native["memory"]} | rllib["memory"],
            "rows_per_iteration": native["first"]["num_steps"]}


def part_runners(args: argparse.Namespace, work: Path, name: str, runners: int, lag: int = 0,
                 runner_cpu: bool = False) -> dict[str, Any]:
    """Parts 3-5: ``runners`` runners (GPU shares, or CPU cores), ``lag``; the time split of ``--iterations``
    (``--cpu-iterations`` on CPU runners: SmolLM2 scores about 2.4 decisions/s on 2 cores, a GPU 350)."""
    values = run_values(args, work, name)
    reset_peak()
    algo = build_rllib(values, runners, args.runner_gpu_share, lag=lag, runner_cpu=runner_cpu)
    try:
        rllib = rllib_iterations(algo, args.cpu_iterations if runner_cpu else args.iterations)
    finally:
        algo.stop()
    return {"runners": runners, "gpu_shares": shares_of(args, 0 if runner_cpu else runners),
            "runners_on": "cpu" if runner_cpu else args.device,
            "max_policy_lag": lag, "time_split": mean_split(rllib["splits"]), "iterations": rllib["splits"],
            "memory": rllib["memory"], "rows_per_iteration": rllib["first"]["num_steps"],
            "policy_lag_max": rllib["policy_lag_max"]}


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(__spec__.name, description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="1,2,3,4,5", help="which parts to run, e.g. 1,2 or 3,4")
    parser.add_argument("--model", default=str(DEFAULT_MODEL), help="the SmolLM2 folder (device_bundle.py model)")
    parser.add_argument("--preset", default="alfworld_gpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, any device (for tests)")
    parser.add_argument("--out", type=Path, default=None, help="JSON path (the markdown goes beside it)")
    parser.add_argument("--iterations", type=int, default=3, help="per engine and part (the first is warm-up)")
    parser.add_argument("--runners", type=int, default=4, help="parts 3-4: runners sharing the GPU")
    parser.add_argument("--runner-gpu-share", type=float, default=0.2, help="GPU share of one runner")
    parser.add_argument("--cpu-runners", type=int, default=7, help="part 5: runners on CPU cores (2 each)")
    parser.add_argument("--cpu-iterations", type=int, default=2, help="part 5: iterations (about 1 min each)")
    args = parser.parse_args(argv)
    chosen = chosen_parts(args.parts, PART_NAMES)
    if chosen is None:
        return 2
    counts = {"--iterations": args.iterations, "--runners": args.runners, "--cpu-runners": args.cpu_runners,
              "--cpu-iterations": args.cpu_iterations}
    bad = next((name for name, value in counts.items() if value < 1), None)
    if bad or not 0 < args.runner_gpu_share <= 1:
        print(f"error: {bad} {counts[bad]}: give a count >= 1" if bad else
              f"error: --runner-gpu-share {args.runner_gpu_share}: give a share in (0, 1]", file=sys.stderr)
        return 2
    if refuse_without_cuda(args.device, "rllib_gpu"):
        return 2
    if args.smoke:
        args.iterations, args.cpu_iterations, args.runners, args.cpu_runners = 2, 2, 1, 1
    if not Path(args.model).expanduser().is_dir():
        print(f"error: no model folder at {args.model}: run `python3 scripts/device_bundle.py model` (docs/gpu.md) "
              "or pass --model", file=sys.stderr)
        return 2
    import ray

    started = time.monotonic()
    out = args.out or default_out(args.device, args.smoke, "rllib_gpu")
    report: dict[str, Any] = {"smoke": args.smoke, "parts": {}}
    if out.is_file():  # the parts an earlier command measured are kept; a file that is not such a report is refused
        try:
            kept = json.loads(out.read_text())
            if not isinstance(kept, dict) or not isinstance(kept.get("parts", {}), dict):
                raise ValueError("not a report")  # noqa: TRY004 (one refusal below)
        except (ValueError, UnicodeDecodeError):
            print(f"error: --out {out} holds something other than this program's report: give another --out, or "
                  "delete it", file=sys.stderr)
            return 2
        report["parts"] = {k: v for k, v in kept.get("parts", {}).items() if k not in chosen}
    facts = device_facts(args.device) | {"ray": ray.__version__, "cpus": os.cpu_count()}

    def save(name: str, part: dict[str, Any]) -> None:
        report["parts"][name] = part
        environment = report["parts"].setdefault("environment", {})
        environment.update(facts)
        environment["distributions"] = loaded_distributions()  # what the RLlib engine imported (device_bundle.py)
        report["seconds"] = time.monotonic() - started
        write_report(report, out, render)

    import torch

    gpus = torch.cuda.device_count() if args.device.startswith("cuda") else 0  # said, not left to Ray's detection
    ray.init(num_cpus=max(os.cpu_count() or 1, CPU_RUNNER_CORES * args.cpu_runners), num_gpus=gpus,
             include_dashboard=False, log_to_driver=False, configure_logging=False)
    failed: list[str] = []
    try:
        with tempfile.TemporaryDirectory(prefix="rllib_gpu-") as tmp:
            work = Path(tmp)
            runs = {"environment": lambda: {"learner": f"local (num_learners=0), on {args.device}"},
                    "first_iteration": lambda: part_first_iteration(args, work),
                    "gpu_runners": lambda: part_runners(args, work, "gpu_runners", args.runners),
                    "lag": lambda: part_runners(args, work, "lag", args.runners, lag=1),
                    "cpu_runners": lambda: part_runners(args, work, "cpu_runners", args.cpu_runners, runner_cpu=True)}
            for number, name in ((k + 1, n) for k, n in enumerate(PART_NAMES) if n in chosen):
                part_started = time.monotonic()
                print(f"[{part_started - started:6.0f} s] part {number}: {name}", flush=True)
                try:
                    part = runs[name]()
                except Exception as err:  # noqa: BLE001 -- one failed part must not cost the others the lease
                    traceback.print_exc()
                    failed.append(name)
                    part = {"error": f"{type(err).__name__}: {err}"}
                save(name, part | {"seconds": time.monotonic() - part_started})
    finally:
        ray.shutdown()
    print(f"wrote {out} and {out.with_suffix('.md')} ({time.monotonic() - started:.0f} s)")
    if failed:
        print(f"error: part(s) {', '.join(failed)} failed; the JSON records each error", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
