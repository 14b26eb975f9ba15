"""The RLlib engine with its learner on a GPU, beside the native trainer on the same device and seed.

Five cases, each written to the JSON as soon as it is done (a command stopped early keeps what it did):

1. ``equality``: the first iteration with one env runner, the learner on the device (``num_gpus_per_learner``) and
   the runner on the same GPU by a fractional share: every non-timing number against the native trainer's first
   iteration (equal on the CPU, ``tests/test_rllib_llm_algorithm.py``);
2. ``split``: ``--iterations`` iterations of each engine, the time split (sampling: generation + env, credit,
   update, sync) side by side; the RLlib engine twice, its runner beside the learner on the GPU (half of it each)
   and on CPU cores (the learner takes the whole GPU); on a CPU the two placements are one run;
3. ``lag``: ``max_policy_lag=1`` against lag 0, seconds per iteration (the runner plays during the update);
4. ``checkpoint``: ``save_to_path`` from the device learner, ``from_checkpoint``, one more iteration against the
   uninterrupted run's (equal?);
5. ``memory``: peak memory of each process (the driver, which holds the learner, and each runner): CUDA's peak
   allocation on a GPU (the driver's counted from the RLlib engine's start), the peak resident set on the CPU.

    python -m benchmarks.rllib_gpu_run [--model DIR] [--preset alfworld_gpu] [--iterations 3] [--out FILE.json]
    python -m benchmarks.rllib_gpu_run --device cpu --smoke    # every case on the tiny model (a CPU check)

Needs CUDA unless ``--device cpu`` (exit 2 with one line). Results go to ``benchmarks/results/rllib_gpu_run.json``
on CUDA and to ``runs/rllib_gpu_run/rllib_gpu_run.json`` otherwise.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import RESULTS, ArgumentParser, refuse_without_cuda
from benchmarks.gpu_learning import DEFAULT_MODEL, ROOT, tokenizer_dir
from benchmarks.lag0_identity import compare
from benchmarks.lag0_identity import run_values as smoke_values

CASES = ("equality", "split", "lag", "checkpoint", "memory")
PHASES = ("generation", "env", "sampling", "credit", "update", "sync", "iteration")


def run_config(args: Any, work: Path, name: str) -> Any:
    """The run both engines train: the preset on ``--model`` and ``--device`` (smoke: the tiny corridor run)."""
    from ecpo_train.runtime.config import load_config, make_config

    if args.smoke:
        return make_config(smoke_values(args.model, work / name) | {"device": args.device, "iterations": 1})
    return load_config(args.preset, [f"model={args.model}", f"device={args.device}", f"run_dir={work / name}",
                                     "val_every=0", "checkpoint_every=0", "progress=false", "tensorboard=false"])


def shares(args: Any, runner_on_gpu: bool) -> dict[str, float]:
    """The learner's and the runner's GPU shares: the learner alone on the GPU takes it whole; beside a runner
    each takes half of it; none on the CPU."""
    if not args.device.startswith("cuda"):
        return {"num_gpus_per_learner": 0.0, "num_gpus_per_env_runner": 0.0}
    return {"num_gpus_per_learner": 0.5 if runner_on_gpu else 1.0,
            "num_gpus_per_env_runner": 0.5 if runner_on_gpu else 0.0}


def build(train: Any, placement: dict[str, float], **training: Any) -> Any:
    from ecpo_train.integrations.rllib import ECPOConfig

    config = (ECPOConfig.from_train_config(train).training(**training)
              .env_runners(num_env_runners=1, num_gpus_per_env_runner=placement["num_gpus_per_env_runner"])
              .learners(num_learners=0, num_gpus_per_learner=placement["num_gpus_per_learner"]))
    return config.build_algo()


def numbers(metrics: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def rllib_iterations(algo: Any, n: int) -> list[dict[str, float]]:
    return [numbers(algo.train()["ecpo"]) for _ in range(n)]


def equality(native: dict[str, float], rllib: dict[str, float]) -> dict[str, Any]:
    """The rows, outcomes and credit bit for bit (``lag0_identity.compare``); the update's statistics to 1e-5
    relative (float rounding differs between the two update loops' reductions)."""
    def part(row: dict[str, float], update: bool) -> dict[str, float]:
        return {k: v for k, v in row.items() if k.startswith("update/") == update}

    exact = compare([part(native, False)], [part(rllib, False)])
    gaps = {k: abs(rllib[k] - v) / max(abs(v), 1e-12) for k, v in part(native, True).items() if k in rllib}
    return exact | {"update_max_relative_gap": max(gaps.values(), default=0.0),
                    "update_within_1e-5": all(gap <= 1e-5 for gap in gaps.values())}


def time_split(rows: list[dict[str, float]]) -> dict[str, float]:
    """Mean seconds per phase over the iterations after the first (the first warms up), or over all of one."""
    rows = rows[1:] or rows
    return {phase: float(np.mean([r[f"time/{phase}"] for r in rows])) for phase in PHASES
            if all(f"time/{phase}" in r for r in rows)}


def peak_memory(device: str) -> float:
    """This process's peak: CUDA's allocation (GiB) on a GPU, else the peak resident set (GiB)."""
    if device.startswith("cuda"):
        import torch

        return torch.cuda.max_memory_allocated() / 2**30
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def run_cases(args: Any, work: Path, save: Any) -> None:
    from ecpo_train.integrations.rllib import ECPO
    from ecpo_train.runtime.trainer import Trainer

    trainer = Trainer(run_config(args, work, "native"))
    try:
        native = [numbers(trainer.train_iteration()) for _ in range(args.iterations)]
    finally:
        trainer.close()
    del trainer  # its weights leave the device before the RLlib engine's learner comes in
    if args.device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()  # the driver's peak below is its learner's, not the native run's
    algo = build(run_config(args, work, "rllib"), shares(args, runner_on_gpu=True))
    try:
        shared = rllib_iterations(algo, args.iterations)
        device = args.device
        save("equality", {"placement": shares(args, True)} | equality(native[0], shared[0]))
        save("memory", {"unit": "GiB, peak CUDA allocation" if device.startswith("cuda") else "GiB, peak RSS",
                        "driver (learner)": peak_memory(device),
                        "runners": algo.env_runner_group.foreach_env_runner(lambda r: peak_memory(device),
                                                                            local_env_runner=False)})
    finally:
        algo.stop()
    cpu_runner = shared  # on a CPU the two placements are one
    if args.device.startswith("cuda"):
        algo = build(run_config(args, work, "rllib_cpu_runner"), shares(args, runner_on_gpu=False))
        try:
            cpu_runner = rllib_iterations(algo, args.iterations)
        finally:
            algo.stop()
    save("split", {"placements": {"runner beside the learner": shares(args, True),
                                  "runner on CPU cores": shares(args, False)},
                   "native": time_split(native), "rllib, runner beside the learner": time_split(shared),
                   "rllib, runner on CPU cores": time_split(cpu_runner),
                   "rllib / native, seconds per iteration": time_split(shared)["iteration"]
                   / time_split(native)["iteration"]})
    algo = build(run_config(args, work, "rllib_lag1"), shares(args, runner_on_gpu=True), max_policy_lag=1)
    try:
        lagged = rllib_iterations(algo, args.iterations)
    finally:
        algo.stop()
    save("lag", {"lag 0": time_split(shared), "lag 1": time_split(lagged),
                 "lag 0 / lag 1, seconds per iteration": time_split(shared)["iteration"]
                 / time_split(lagged)["iteration"]})
    checkpoint = work / "rllib_checkpoint"
    algo = build(run_config(args, work, "rllib_saved"), shares(args, runner_on_gpu=True))
    try:
        rllib_iterations(algo, 1)
        algo.save_to_path(str(checkpoint))
        straight = rllib_iterations(algo, 1)
    finally:
        algo.stop()
    restored = ECPO.from_checkpoint(str(checkpoint))
    try:
        resumed = rllib_iterations(restored, 1)
    finally:
        restored.stop()
    save("checkpoint", compare(straight, resumed))


def default_out(device: str, smoke: bool) -> Path:
    if device.startswith("cuda") and not smoke:
        return RESULTS / "rllib_gpu_run.json"
    return ROOT / "runs" / "rllib_gpu_run" / "rllib_gpu_run.json"


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(__spec__.name, description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--smoke", action="store_true", help="every case on the tiny model (any device; for tests)")
    parser.add_argument("--model", default=str(DEFAULT_MODEL), help="the model folder (not used by --smoke)")
    parser.add_argument("--preset", default="alfworld_gpu")
    parser.add_argument("--iterations", type=int, default=3, help="iterations per engine in each case (>= 2)")
    parser.add_argument("--out", type=Path, default=None, help="JSON path")
    args = parser.parse_args(argv)
    if args.iterations < 2:
        parser.error(f"--iterations {args.iterations}: at least 2 (the first one warms up)")
    if refuse_without_cuda(args.device, "rllib_gpu_run"):
        return 2
    import ray

    out = args.out or default_out(args.device, args.smoke)
    report: dict[str, Any] = {"device": args.device, "smoke": args.smoke, "iterations": args.iterations, "cases": {}}
    started = time.monotonic()

    def save(name: str, case: dict[str, Any]) -> None:
        report["cases"][name] = case
        report["seconds"] = time.monotonic() - started
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=1) + "\n")
        print(f"[{report['seconds']:6.0f} s] {name}: {json.dumps(case)[:300]}", flush=True)

    with tempfile.TemporaryDirectory(prefix="rllib_gpu_run-") as tmp:
        work = Path(tmp)
        if args.smoke:
            from ecpo_train.runtime.models import write_tiny_model

            args.model = str(write_tiny_model(work / "tiny", tokenizer_path=tokenizer_dir(), seed=0))
        ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False,
                 **({"num_cpus": 2} if args.smoke else {}))
        try:
            run_cases(args, work, save)
        finally:
            ray.shutdown()
    unequal = [name for name in ("equality", "checkpoint") if report["cases"][name]["differences"]]
    print(f"wrote {out} ({time.monotonic() - started:.0f} s)" + (f"; not equal: {', '.join(unequal)}" if unequal else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
