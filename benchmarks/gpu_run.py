"""The GPU program, two stages (docs/gpu.md gives their parts, the data and the expected minutes).

``native`` (docs/gpu.md, "4. Run") and ``rllib`` (docs/gpu.md, "The RLlib engine on one GPU"); each part is written
to the JSON and its markdown (``benchmarks/gpu_run_report.py``) as it ends. Needs CUDA unless ``--device cpu`` (exit 2
with one line); where results go: :func:`default_out`. (The first run's credit and learning parts: docs/benchmarks.md,
at 1fdf708.)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import RESULTS, chosen_parts, refuse_without_cuda, refused, write_report
from benchmarks.gpu_learning import DEFAULT_MODEL, ROOT, iteration_figures, tokenizer_dir
from benchmarks.gpu_run_report import PART_NAMES, RLLIB_PARTS, render, render_rllib
from benchmarks.study import StudyCommand
from benchmarks.timing import timed

# the files holding CUDA-only tests (skipif(not cuda), named *cuda*)
CUDA_TESTS = ("tests/test_credit_api.py", "tests/test_static_decoding.py")
# Qwen2.5-1.5B's public config.json
QWEN25_1_5B = {"hidden_size": 1536, "num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2,
               "intermediate_size": 8960, "vocab_size": 151936, "tie_word_embeddings": True,
               "max_position_embeddings": 32768, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6}
QWEN25_SMOKE = QWEN25_1_5B | {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                              "intermediate_size": 128}
PAPER_STEPS = 50  # ALFWorld's horizon in the paper
# rllib --smoke: small corridors whose groups differ in return from the first iteration (an update to time)
SMOKE_RUN = {"env_id": "ecpo/DivergentAnchor-v0", "env_kwargs": {"num_tasks": 2, "depth": 4, "rare_prob": [0.4, 0.7]},
             "val_tasks": None, "n_groups": 2, "group_size": 4, "history_length": 0, "credit": {"d_min": 1},
             "lr": 1e-3, "lr_warmup_steps": 0, "kl_coef": 0.0, "mini_batch_size": 8, "micro_batch_size": 4,
             "num_epochs": 2, "mixed_precision": "none", "explore_epsilon": 0.0, "rollout_temperature": 1.0,
             "threads": 1, "seed": 5}
CPU_RUNNER_CORES = 2  # rllib part 5: cores (and torch threads) of one runner on the CPU


def reset_peak() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def process_memory() -> dict[str, Any]:
    """This process's peak GPU memory (torch's allocator; ``None`` without CUDA), in the driver or a runner actor."""
    import torch

    peak = torch.cuda.max_memory_allocated() / (1 << 30) if torch.cuda.is_available() else None
    return {"pid": os.getpid(), "peak_gib": peak}


def gpu_processes() -> list[dict[str, Any]] | None:
    """Every process on the GPU with the memory it holds (``nvidia-smi``: the CUDA context included)."""
    if shutil.which("nvidia-smi") is None:
        return None
    done = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                          capture_output=True, text=True, check=False)
    rows = [line.split(",") for line in done.stdout.strip().splitlines() if "," in line]
    return [{"pid": int(pid), "used_mib": float(mib)} for pid, mib in rows]


def loaded_distributions() -> dict[str, str]:
    """``{distribution: version}`` of every installed distribution this process has imported from."""
    from importlib.metadata import PackageNotFoundError, packages_distributions, version

    owners, found = packages_distributions(), {}
    for dist in {dist for module in list(sys.modules) for dist in owners.get(module.partition(".")[0], [])}:
        with contextlib.suppress(PackageNotFoundError):  # a distribution without metadata
            found[dist.lower().replace("_", "-")] = version(dist)
    return dict(sorted(found.items()))


def device_facts(device: str) -> dict[str, Any]:
    """The device and the versions this command runs with (every command records them)."""
    import torch
    import transformers

    return {"device": device, "gpu": torch.cuda.get_device_name() if device.startswith("cuda") else None,
            "torch": torch.__version__, "cuda": torch.version.cuda, "transformers": transformers.__version__,
            "python": platform.python_version(), "platform": platform.platform()}


def part_environment(device: str) -> dict[str, Any]:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "cuda", *CUDA_TESTS]
    done, seconds = timed(subprocess.run, command, cwd=ROOT, capture_output=True, text=True, check=False)
    tail = [line for line in done.stdout.strip().splitlines() if line.strip()]
    summary = tail[-1] if tail else (done.stderr.strip().splitlines() or [""])[-1]
    return device_facts(device) | {"cuda_tests": {
        "command": " ".join(["python", *command[1:]]), "exit_code": done.returncode, "summary": summary,
        "seconds": seconds}}


def write_random_model(out_dir: Path, architecture: dict[str, Any], tokenizer: Path) -> Path:
    """A randomly initialised Qwen2 of ``architecture`` with the Qwen2.5 tokenizer, as a transformers folder."""
    import torch
    from transformers import AutoTokenizer, GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tok = AutoTokenizer.from_pretrained(tokenizer)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    pad = tok.pad_token_id if tok.pad_token_id is not None else eos
    config = Qwen2Config(bos_token_id=pad, eos_token_id=eos, pad_token_id=pad, **architecture)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = Qwen2ForCausalLM(config).to(torch.bfloat16)  # written in bf16 (half the disk), loaded as float32
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=pad)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    return out_dir


def part_paper_iteration(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """One native-trainer iteration of the paper's shape (docs/gpu.md, "4. Run", part 2)."""
    from ecpo_train.runtime.config import make_config
    from ecpo_train.runtime.trainer import Trainer

    cuda = args.device.startswith("cuda")
    model_dir = write_random_model(work / "paper_model", QWEN25_SMOKE if args.smoke else QWEN25_1_5B, tokenizer_dir())
    shape = {"groups": 2, "group_size": 2, "response": 4, "steps": 1} if args.smoke else \
        {"groups": 16, "group_size": 8, "response": 512, "steps": args.paper_steps}
    reset_peak()
    config = make_config({
        "run_dir": str(work / "paper_run"), "model": str(model_dir), "device": args.device,
        "env_id": "ecpo/ALFWorldGen-v0", "env_kwargs": {"max_steps": shape["steps"]},
        "n_groups": shape["groups"], "group_size": shape["group_size"], "max_response_length": shape["response"],
        "iterations": 1, "val_every": 0, "checkpoint_every": 0, "tensorboard": False, "progress": False,
        "mixed_precision": "bf16" if cuda else "none", "gradient_checkpointing": True,
        "micro_batch_size": 8 if cuda else 2, "kl_coef": 0.01, "lr": 1e-6, "threads": 1 if args.smoke else 0,
        "decoding": getattr(args, "decoding", "auto"),  # generation_profile times it with each
    })
    trainer = Trainer(config)
    attention = trainer.policy.model.config._attn_implementation
    try:
        metrics = trainer.train_iteration()
    finally:
        trainer.close()
    figures = iteration_figures(metrics)
    responses = metrics["num_steps"] * shape["response"]  # random weights never stop a reply early
    per_row_update = (metrics["time/update"] + metrics["time/credit"]) / metrics["num_steps"]
    per_step_acting = (metrics["time/generation"] + metrics["time/env"]) / shape["steps"]
    rows_at_horizon = shape["groups"] * shape["group_size"] * PAPER_STEPS
    return figures | {
        "model": "Qwen2.5-1.5B architecture, random weights" if not args.smoke else "Qwen2.5 shrunk to 2 x 64 (smoke)",
        "env_id": config.env_id, "groups": shape["groups"], "group_size": shape["group_size"],
        "response": shape["response"], "steps": shape["steps"], "rows": int(metrics["num_steps"]),
        "paper_steps": PAPER_STEPS, "generation_tokens_per_s": responses / max(metrics["time/generation"], 1e-9),
        "projected_iteration_seconds": per_step_acting * PAPER_STEPS + per_row_update * rows_at_horizon,
        "mixed_precision": config.mixed_precision, "decoding": trainer.policy.decoding, "attention": attention,
        "peak_memory_gib": process_memory()["peak_gib"] if cuda else None,
    }


def time_split(metrics: dict[str, float]) -> dict[str, float]:
    """An iteration's seconds by phase, one vocabulary for both engines: ``sampling`` (the native rollout:
    generation + env; RLlib: the runners' sampling as the driver waited for it), ``credit``, ``update`` (without
    the credit), ``sync`` (weights to the runners; none natively) and ``iteration``."""
    sampling = (metrics.get("time/sampling_wait", metrics["time/sampling"]) if "time/sampling" in metrics  # RLlib
                else metrics["time/generation"] + metrics["time/env"])
    return {"sampling": sampling, "credit": metrics["time/credit"], "update": metrics["time/update"],
            "sync": metrics.get("time/sync", 0.0), "iteration": metrics["time/iteration"]}


def mean_split(splits: list[dict[str, float]]) -> dict[str, float]:
    """The mean time split of the iterations after the first (the first pays for warm-up), or the first alone."""
    kept = splits[1:] or splits
    return {key: float(np.mean([s[key] for s in kept])) for key in kept[0]}


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


def build_rllib(args: argparse.Namespace, values: dict[str, Any], runners: int, lag: int = 0,
                runner_cpu: bool = False) -> tuple[Any, dict[str, float]]:
    """The algorithm of ``values`` (the local learner on the GPU when there is one, ``runners`` runners on it by
    fractional shares or on CPU cores: ``runner_cpu``, their policy built on the CPU) and the shares it asked for."""
    from ecpo_train.rllib import ECPOConfig
    from ecpo_train.runtime.config import make_config

    cuda = values["device"].startswith("cuda")
    learner_gpu, runner_gpu = gpu_shares(0 if runner_cpu else runners, args.runner_gpu_share) if cuda else (0, 0)
    train = make_config(values | {"device": "cpu", "threads": CPU_RUNNER_CORES} if runner_cpu else values)
    config = (ECPOConfig.from_train_config(train)
              .learners(num_learners=0, num_gpus_per_learner=learner_gpu)
              .env_runners(num_env_runners=runners, num_cpus_per_env_runner=CPU_RUNNER_CORES if runner_cpu else 1,
                           num_gpus_per_env_runner=runner_gpu)
              .training(max_policy_lag=lag))
    return config.build_algo(), {"num_gpus_per_learner": learner_gpu, "num_gpus_per_env_runner": runner_gpu}


def native_iterations(values: dict[str, Any]) -> dict[str, Any]:
    """The native trainer's first iteration's metrics, every iteration's time split, the driver's peak memory."""
    from ecpo_train.runtime.config import make_config
    from ecpo_train.runtime.run import train
    from ecpo_train.runtime.trainer import Trainer

    reset_peak()
    history = train(Trainer, make_config(values), overwrite=True)
    return {"first": history[0], "splits": [time_split(m) for m in history], "memory": process_memory()}


def rllib_iterations(args: argparse.Namespace, values: dict[str, Any], iterations: int, runners: int, lag: int = 0,
                     runner_cpu: bool = False, checkpoint: Path | None = None) -> dict[str, Any]:
    """``iterations`` iterations of ``build_rllib``'s algorithm: the GPU shares, the first's metrics, every time
    split, the peak GPU memory of the driver (the learner) and of each runner; with ``checkpoint``, ``save_to_path``
    after the first."""
    reset_peak()
    algo, shares = build_rllib(args, values, runners, lag=lag, runner_cpu=runner_cpu)
    out: dict[str, Any] = {"gpu_shares": shares, "splits": [], "policy_lag_max": 0.0}
    try:
        for k in range(iterations):
            metrics = {key: float(v) for key, v in algo.train()["ecpo"].items() if isinstance(v, (int, float))}
            out["splits"].append(time_split(metrics))
            out["policy_lag_max"] = max(out["policy_lag_max"], metrics.get("sampling/policy_lag_max", 0.0))
            if k == 0:
                out["first"] = metrics
                if checkpoint is not None:
                    out["save_seconds"] = timed(algo.save_to_path, str(checkpoint))[1]
        group = algo.env_runner_group
        runners_memory = group.foreach_env_runner(lambda runner: process_memory(), local_env_runner=False) \
            if group.num_remote_env_runners() else []
        out["memory"] = {"driver (learner)": process_memory(), "runners": runners_memory,
                         "nvidia_smi": gpu_processes()}
    finally:
        algo.stop()
    return out


def part_first_iteration(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Part 2 (docs/gpu.md, "The RLlib engine on one GPU"): time split, checkpoint round trip, memory; one runner on the GPU."""
    from ecpo_train.rllib import ECPO

    values = run_values(args, work, "first_iteration")
    native = native_iterations(values)
    rllib = rllib_iterations(args, values, max(args.iterations, 2), 1, checkpoint=work / "checkpoint")
    restored, restore_seconds = timed(ECPO.from_checkpoint, str(work / "checkpoint"))
    try:
        resumed = restored.train()["ecpo"]["iteration"]
    finally:
        restored.stop()
    native_mean, rllib_mean = mean_split(native["splits"]), mean_split(rllib["splits"])
    return {"runners": 1, "gpu_shares": rllib["gpu_shares"],
            "checkpoint": {"save_seconds": rllib["save_seconds"], "restore_seconds": restore_seconds,
                           "resumed_iteration": float(resumed)},
            "time_split": {"native": native_mean, "rllib": rllib_mean,  # the goal: RLlib / native <= 1.2
                           "rllib_over_native": rllib_mean["iteration"] / max(native_mean["iteration"], 1e-9)},
            "memory": {"native driver": native["memory"]} | rllib["memory"],
            "rows_per_iteration": native["first"]["num_steps"]}


def part_runners(args: argparse.Namespace, work: Path, name: str, runners: int, lag: int = 0,
                 runner_cpu: bool = False) -> dict[str, Any]:
    """Parts 3-5: ``runners`` runners (GPU shares, or CPU cores), ``lag``; the time split of ``--iterations``
    (``--cpu-iterations`` on CPU runners: SmolLM2 scores about 2.4 decisions/s on 2 cores, a GPU 350)."""
    rllib = rllib_iterations(args, run_values(args, work, name), args.cpu_iterations if runner_cpu else args.iterations,
                             runners, lag, runner_cpu)
    return {"runners": runners, "gpu_shares": rllib["gpu_shares"], "runners_on": "cpu" if runner_cpu else args.device,
            "max_policy_lag": lag, "time_split": mean_split(rllib["splits"]), "iterations": rllib["splits"],
            "memory": rllib["memory"], "rows_per_iteration": rllib["first"]["num_steps"],
            "policy_lag_max": rllib["policy_lag_max"]}


WORK_PREFIX = "gpu_run-"  # the work folders (models of 30-78 MB) in the temp folder: gpu_run-<pid>-<random>


def remove_abandoned_work(temp: Path | None = None) -> list[Path]:
    """Delete the work folders of gpu_run commands that were killed (``kill -9`` leaves them): those whose pid
    no longer runs."""
    import psutil  # (peft requires it: the GPU machine has it)

    pid = lambda folder: folder.name.removeprefix(WORK_PREFIX).split("-", 1)[0]
    removed = [folder for folder in Path(temp or tempfile.gettempdir()).glob(f"{WORK_PREFIX}*-*")
               if pid(folder).isdigit() and folder.is_dir() and not psutil.pid_exists(int(pid(folder)))]
    for folder in removed:
        shutil.rmtree(folder, ignore_errors=True)
    return removed


def default_out(device: str, smoke: bool, name: str) -> Path:
    """Where a GPU command writes: ``benchmarks/results/<name>.json`` on CUDA, ``runs/<name>/`` otherwise."""
    if device.startswith("cuda") and not smoke:
        return RESULTS / f"{name}.json"
    return ROOT / "runs" / name / f"{name}.json"


def kept_report(out: Path, chosen: set[str], smoke: bool) -> dict[str, Any] | None:
    """The report a command starts from: the parts an earlier command wrote at ``out`` that this one does not run
    (a file holding a smoke part stays marked smoke); ``None``, after one error line, where ``out`` holds something
    other than such a report."""
    report: dict[str, Any] = {"smoke": smoke, "parts": {}}
    if out.is_file():
        try:
            kept = json.loads(out.read_text())
            if not isinstance(kept, dict) or not isinstance(kept.get("parts", {}), dict):
                raise ValueError("not a report")  # noqa: TRY004 (one refusal below)
        except (ValueError, UnicodeDecodeError):
            refused(f"--out {out} holds something other than this program's report: give another --out, or delete it")
            return None
        report["parts"] = {k: v for k, v in kept.get("parts", {}).items() if k not in chosen}
        report["smoke"] = smoke or bool(report["parts"] and kept.get("smoke"))
    return report


def run_parts(report: dict[str, Any], out: Path, parts: dict[str, Callable[[Path], dict[str, Any]]],
              chosen: set[str], facts: dict[str, Any], render_report: Callable[[Any], str]) -> int:
    """Run the ``chosen`` of ``parts`` in order (``parts[name](work)``, in a work folder removed at the end, even on
    SIGTERM), writing the report after each; a part that raises records its error and the others still run
    (one failed part must not cost the others a lease). Exit status 1 where any part failed."""
    started = time.monotonic()
    remove_abandoned_work()
    failed: list[str] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, _: sys.exit(128 + signum))
    try:
        with tempfile.TemporaryDirectory(prefix=f"{WORK_PREFIX}{os.getpid()}-") as tmp:
            for number, name in ((k + 1, n) for k, n in enumerate(parts) if n in chosen):
                part_started = time.monotonic()
                print(f"[{part_started - started:6.0f} s] part {number}: {name}", flush=True)
                try:
                    part = parts[name](Path(tmp))
                except Exception as err:  # noqa: BLE001 -- recorded, and said at the end
                    traceback.print_exc()
                    failed.append(name)
                    part = {"error": f"{type(err).__name__}: {err}"}
                report["parts"][name] = part | {"seconds": time.monotonic() - part_started}
                environment = report["parts"].setdefault("environment", {})
                environment.update(facts | {"distributions": loaded_distributions()})  # what device_bundle ships
                report["seconds"] = time.monotonic() - started
                write_report(report, out, render_report)
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(f"wrote {out} and {out.with_suffix('.md')} ({time.monotonic() - started:.0f} s)")
    if failed:
        refused(f"part(s) {', '.join(failed)} failed; the JSON records each error, the others are complete")
        return 1
    return 0


def native(args: argparse.Namespace) -> int:
    chosen = chosen_parts(args.parts or "1,2", PART_NAMES)
    if chosen is None or refuse_without_cuda(args.device, "gpu_run"):
        return 2
    out = args.out or default_out(args.device, args.smoke, "gpu_native")  # results/gpu_run.*: the first run's
    report = kept_report(out, chosen, args.smoke)
    if report is None:
        return 2
    parts = {"environment": lambda work: part_environment(args.device),
             "paper_iteration": lambda work: part_paper_iteration(args, work)}  # (PART_NAMES, in order)
    return run_parts(report, out, parts, chosen, device_facts(args.device), render)


def rllib(args: argparse.Namespace) -> int:
    chosen = chosen_parts(args.parts or "1,2,3,4,5", RLLIB_PARTS)
    if chosen is None:
        return 2
    counts = {"--iterations": args.iterations, "--runners": args.runners, "--cpu-runners": args.cpu_runners,
              "--cpu-iterations": args.cpu_iterations}
    bad = next((name for name, value in counts.items() if value < 1), None)
    if bad:
        return refused(f"{bad} {counts[bad]}: give a count >= 1")
    if not 0 < args.runner_gpu_share <= 1:
        return refused(f"--runner-gpu-share {args.runner_gpu_share}: give a share in (0, 1]")
    if refuse_without_cuda(args.device, "gpu_run rllib"):
        return 2
    if args.smoke:
        args.iterations, args.cpu_iterations, args.runners, args.cpu_runners = 2, 2, 1, 1
    if not Path(args.model).expanduser().is_dir():
        return refused(f"no model folder at {args.model}: run `python3 scripts/device_bundle.py model` (docs/gpu.md) "
                       "or pass --model")
    out = args.out or default_out(args.device, args.smoke, "rllib_gpu")
    report = kept_report(out, chosen, args.smoke)
    if report is None:
        return 2
    import ray
    import torch

    runs = {"environment": lambda work: {"learner": f"local (num_learners=0), on {args.device}"},
            "first_iteration": lambda work: part_first_iteration(args, work),
            "gpu_runners": lambda work: part_runners(args, work, "gpu_runners", args.runners),
            "lag": lambda work: part_runners(args, work, "lag", args.runners, lag=1),
            "cpu_runners": lambda work: part_runners(args, work, "cpu_runners", args.cpu_runners, runner_cpu=True)}
    gpus = torch.cuda.device_count() if args.device.startswith("cuda") else 0  # said, not left to Ray's detection
    ray.init(num_cpus=max(os.cpu_count() or 1, CPU_RUNNER_CORES * args.cpu_runners), num_gpus=gpus,
             include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        facts = device_facts(args.device) | {"ray": ray.__version__, "cpus": os.cpu_count()}
        return run_parts(report, out, runs, chosen, facts, render_rllib)
    finally:
        ray.shutdown()


def main(argv: list[str] | None = None) -> int:
    command = StudyCommand(__spec__.name, __doc__.split("\n\n")[0], {
        "native": ("device", "smoke", "parts", "paper_steps"),
        "rllib": ("device", "smoke", "parts", "model", "preset", "seed", "iterations", "runners", "runner_gpu_share",
                  "cpu_runners", "cpu_iterations")},
        defaults={"device": "cuda", "smoke": False, "paper_steps": 2, "model": str(DEFAULT_MODEL),
                  "preset": "alfworld_gpu", "seed": 0, "iterations": 3, "runners": 4, "runner_gpu_share": 0.2,
                  "cpu_runners": 7, "cpu_iterations": 2})
    command.add("--device", help="cuda (default), or cpu with --smoke")
    command.add("--smoke", action="store_const", const=True, help="every part on tiny sizes (any device; for tests)")
    command.add("--parts", help="which parts to run, e.g. 1,2 (default: all of the stage's)")
    command.add("--out", type=Path, common=True, default=None, help="JSON path (the markdown goes beside it)")
    command.add("--paper-steps", type=int, help="native part 2: environment steps per episode (2)")
    command.add("--model", help="rllib: the SmolLM2 folder (scripts/device_bundle.py model)")
    command.add("--preset", help="rllib: the preset run (alfworld_gpu)")
    command.add("--seed", type=int, help="rllib: the runs' seed (0)")
    command.add("--iterations", type=int, help="rllib: per engine and part, the first is warm-up (3)")
    command.add("--runners", type=int, help="rllib parts 3-4: runners sharing the GPU (4)")
    command.add("--runner-gpu-share", type=float, help="rllib: GPU share of one runner (0.2)")
    command.add("--cpu-runners", type=int, help="rllib part 5: runners on CPU cores, 2 each (7)")
    command.add("--cpu-iterations", type=int, help="rllib part 5: iterations, about 1 min each (2)")
    args = command.parse(argv)
    return {"native": native, "rllib": rllib}[args.stage](args)


if __name__ == "__main__":
    raise SystemExit(main())
