"""One command for the GPU run: the device, credit on it, the paper-shaped iteration, and SmolLM2 learning.

Four parts, each written to the JSON and its markdown (``benchmarks/gpu_run_report.py``) as soon as it is done,
so a command stopped early still returns what it did:

1. ``environment``: the device, torch / CUDA / transformers versions, the distributions the run imported, and the
   suite's CUDA tests (``pytest -k cuda`` on the test files that hold them, ``CUDA_TESTS``);
2. ``credit``: ``compute_advantages("ecpo", ...)`` on a paper-shaped batch (16 groups x 8 rollouts x up to 50
   steps, ``benchmarks/credit_overhead.build_batch``) with device tensors against numpy on the CPU;
3. ``paper_iteration``: one native-trainer iteration of a model with Qwen2.5-1.5B's architecture (random weights,
   the Qwen2.5 tokenizer), 16 groups x 8 on ``ecpo/ALFWorldGen-v0`` (native engine), 512-token responses, bf16
   autocast and gradient checkpointing on CUDA: the time split generation / env / credit / update, peak memory,
   tokens/s, and the same rates carried to the paper's 50-step horizon beside the paper's 302.8 s (8x A100)
   and GiGPO's 362.8 s (2x H100);
4. ``learning``: SmolLM2-135M-Instruct (``--model``, converted by ``scripts/device_bundle.py model``) on the
   ``alfworld_gpu`` preset: ``ecpo sft``'s expert warm start on training tasks, validation on the preset's
   unseen tasks and on training tasks, ECPO iterations for as long as the time limit allows (sized from the
   first iteration), validation again; paired before/after statistics, decisions/s, update tokens/s, rows
   per iteration and the time split beside the CPU runs of the same recipe.

    python -m benchmarks.gpu_run [--parts 1,2,3,4] [--time-limit 480] [--model DIR] [--out FILE.json]
    python -m benchmarks.gpu_run --device cpu --smoke        # every part on tiny sizes (about 2 minutes here)

Needs CUDA unless ``--device cpu`` (exit 2 with one line). Results go to ``benchmarks/results/gpu_run.json`` on
CUDA and to ``runs/gpu_run/gpu_run.json`` otherwise; an existing file at ``--out`` keeps the parts this command
does not run (the second command of docs/gpu.md adds part 4 to the first one's file).
"""

from __future__ import annotations

import argparse
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
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import RESULTS, ArgumentParser, chosen_parts, refuse_without_cuda
from benchmarks.gpu_learning import DEFAULT_MODEL, ROOT, iteration_figures, part_learning, tokenizer_dir
from benchmarks.gpu_run_report import PART_NAMES, fill_tests, write

# the files holding CUDA-only tests (skipif(not cuda), named *cuda*)
CUDA_TESTS = ("tests/test_credit_api.py", "tests/test_static_decoding.py")
# Qwen2.5-1.5B's public config.json
QWEN25_1_5B = {"hidden_size": 1536, "num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2,
               "intermediate_size": 8960, "vocab_size": 151936, "tie_word_embeddings": True,
               "max_position_embeddings": 32768, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6}
QWEN25_SMOKE = QWEN25_1_5B | {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                              "intermediate_size": 128}
PAPER_STEPS = 50  # ALFWorld's horizon in the paper


def sync_device(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _reset_peak(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _peak_gib(device: str) -> float | None:
    import torch

    return torch.cuda.max_memory_allocated() / (1 << 30) if device.startswith("cuda") else None


# ---------------------------------------------------------------------------------------------- part 1
def loaded_distributions() -> dict[str, str]:
    """``{distribution: version}`` of every installed distribution this process has imported from."""
    from importlib.metadata import PackageNotFoundError, packages_distributions, version

    owners = packages_distributions()
    found = {}
    for module in list(sys.modules):
        for dist in owners.get(module.partition(".")[0], []):
            try:
                found[dist.lower().replace("_", "-")] = version(dist)
            except PackageNotFoundError:  # a distribution without metadata
                continue
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
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    tail = [line for line in done.stdout.strip().splitlines() if line.strip()]
    summary = tail[-1] if tail else (done.stderr.strip().splitlines() or [""])[-1]
    return device_facts(device) | {"cuda_tests": {
        "command": " ".join(["python", *command[1:]]), "exit_code": done.returncode, "summary": summary,
        "seconds": time.perf_counter() - started}}


# ---------------------------------------------------------------------------------------------- part 2
def part_credit(device: str, reps: int, smoke: bool) -> dict[str, Any]:
    """ECPO credit on a paper-shaped batch: numpy on the CPU vs torch tensors on ``device``."""
    import torch

    from benchmarks.credit_overhead import build_batch
    from ecpo_train.core.credit import compute_advantages, factorize_keys

    cols = build_batch(0, groups=2 if smoke else 16, rollouts=8, max_steps=50)
    codes = {key: factorize_keys(cols[key], key)[0] for key in ("group_ids", "anchor_keys", "action_keys")}
    host = {"group_ids": codes["group_ids"], "traj_ids": np.asarray(cols["traj_ids"]),
            "steps": np.asarray(cols["steps"]), "anchor_keys": codes["anchor_keys"],
            "action_keys": codes["action_keys"], "rewards": np.asarray(cols["rewards"])}
    on_device = {k: torch.as_tensor(v, device=device) for k, v in host.items()}

    def timed(arrays: dict[str, Any]) -> float:
        compute_advantages("ecpo", arrays)  # warm-up (CUDA context, kernels)
        times = []
        for _ in range(reps):
            sync_device(device)
            started = time.perf_counter()
            compute_advantages("ecpo", arrays)
            sync_device(device)
            times.append(time.perf_counter() - started)
        return float(np.median(times))

    cpu_adv = np.asarray(compute_advantages("ecpo", host)[0])
    dev_adv = compute_advantages("ecpo", on_device)[0]
    dev_adv = dev_adv.cpu().numpy() if hasattr(dev_adv, "cpu") else np.asarray(dev_adv)
    return {"device": device, "rows": len(cols["rewards"]), "cpu_seconds": timed(host),
            "device_seconds": timed(on_device), "max_abs_difference": float(np.abs(cpu_adv - dev_adv).max())}


# ---------------------------------------------------------------------------------------------- part 3
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
    del model
    return out_dir


def part_paper_iteration(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """One native-trainer iteration of the paper's shape (module docstring, part 3)."""
    from ecpo_train.runtime.config import make_config
    from ecpo_train.runtime.trainer import Trainer

    cuda = args.device.startswith("cuda")
    model_dir = write_random_model(work / "paper_model", QWEN25_SMOKE if args.smoke else QWEN25_1_5B, tokenizer_dir())
    shape = {"groups": 2, "group_size": 2, "response": 4, "steps": 1} if args.smoke else \
        {"groups": 16, "group_size": 8, "response": 512, "steps": args.paper_steps}
    _reset_peak(args.device)
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
        "peak_memory_gib": _peak_gib(args.device),
    }


# ---------------------------------------------------------------------------------------------- main
WORK_PREFIX = "gpu_run-"  # the work folders (models of 30-78 MB) in the temp folder: gpu_run-<pid>-<random>


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def remove_abandoned_work(temp: Path | None = None) -> list[Path]:
    """Delete the work folders of gpu_run commands that were killed (``kill -9`` leaves them): those whose pid
    no longer runs."""
    removed = []
    for folder in Path(temp or tempfile.gettempdir()).glob(f"{WORK_PREFIX}*-*"):
        pid = folder.name.removeprefix(WORK_PREFIX).split("-", 1)[0]
        if not pid.isdigit() or not folder.is_dir() or _running(int(pid)):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def default_out(device: str, smoke: bool, name: str = "gpu_run") -> Path:
    """Where a GPU command writes: ``benchmarks/results/<name>.json`` on CUDA, ``runs/<name>/`` otherwise."""
    if device.startswith("cuda") and not smoke:
        return RESULTS / f"{name}.json"
    return ROOT / "runs" / name / f"{name}.json"


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(__spec__.name, description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--smoke", action="store_true", help="every part on tiny sizes (any device; for tests)")
    parser.add_argument("--parts", default="1,2,3,4", help="which parts to run, e.g. 1,2,3 or 4")
    parser.add_argument("--time-limit", type=float, default=480.0, help="seconds for the whole command")
    parser.add_argument("--out", type=Path, default=None, help="JSON path (the markdown goes beside it)")
    parser.add_argument("--model", default=str(DEFAULT_MODEL), help="part 4's SmolLM2 folder")
    parser.add_argument("--preset", default="alfworld_gpu")
    parser.add_argument("--paper-steps", type=int, default=2, help="part 3: environment steps per episode")
    parser.add_argument("--credit-reps", type=int, default=20)
    parser.add_argument("--sft-episodes", type=int, default=96)
    parser.add_argument("--sft-epochs", type=int, default=2)
    parser.add_argument("--sft-lr", type=float, default=1e-5)
    parser.add_argument("--train-val-tasks", type=int, default=100, help="part 4: training tasks validated x 2")
    parser.add_argument("--max-iterations", type=int, default=200)
    parser.add_argument("--score-batch", type=int, default=64, help="part 4 on CUDA: items per scoring forward")
    args = parser.parse_args(argv)
    started = time.monotonic()
    deadline = started + args.time_limit
    chosen = chosen_parts(args.parts, PART_NAMES)
    if chosen is None:
        return 2
    if refuse_without_cuda(args.device, "gpu_run"):
        return 2
    if args.smoke:
        args.credit_reps, args.sft_episodes, args.sft_epochs, args.train_val_tasks = 2, 2, 1, 2
        args.max_iterations = 2
    out = args.out or default_out(args.device, args.smoke)
    report: dict[str, Any] = {"smoke": args.smoke, "time_limit": args.time_limit, "parts": {}}
    if out.is_file():  # the parts an earlier command wrote here (docs/gpu.md: the second command adds part 4)
        try:
            earlier = json.loads(out.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError):
            earlier = {}  # a file cut by a crash: rewritten
        if not isinstance(earlier, dict) or not isinstance(earlier.get("parts", {}), dict):
            print(f"error: --out {out} holds JSON that is not a gpu_run report: choose another --out", file=sys.stderr)
            return 2
        report["parts"] = {k: v for k, v in earlier.get("parts", {}).items() if k not in chosen}
        # a file holding any smoke part stays marked smoke (its banner says: not a measurement)
        report["smoke"] = args.smoke or bool(report["parts"] and earlier.get("smoke"))
    remove_abandoned_work()

    facts = device_facts(args.device)

    def save(name: str, part: dict[str, Any], running: bool = True) -> None:
        report["parts"][name] = part
        report["running"] = name if running else None
        environment = report["parts"].setdefault("environment", {})
        environment.update(facts)
        if not running or "distributions" not in environment:  # ~2-4 s a call: not after every iteration
            environment["distributions"] = loaded_distributions()
        report["seconds"] = time.monotonic() - started
        write(fill_tests(report), out)

    failed: list[str] = []
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)  # a stopped command still removes its work folder
    try:
        with tempfile.TemporaryDirectory(prefix=f"{WORK_PREFIX}{os.getpid()}-") as tmp:
            work = Path(tmp)
            for name in PART_NAMES:
                if name not in chosen:
                    continue
                print(f"[{time.monotonic() - started:6.0f} s] part {PART_NAMES.index(name) + 1}: {name}", flush=True)
                try:
                    if name == "environment":
                        part = part_environment(args.device)
                    elif name == "credit":
                        part = part_credit(args.device, args.credit_reps, args.smoke)
                    elif name == "paper_iteration":
                        part = part_paper_iteration(args, work)
                    else:
                        part = part_learning(args, work, deadline, lambda p: save("learning", p))
                except Exception as err:  # noqa: BLE001 -- one failed part must not cost the others a lease: record it
                    traceback.print_exc()
                    failed.append(name)
                    part = dict(report["parts"].get(name) or {}) | {"error": f"{type(err).__name__}: {err}"}
                save(name, part, running=False)
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(f"wrote {out} and {out.with_suffix('.md')} ({time.monotonic() - started:.0f} s)")
    if failed:
        print(f"error: part(s) {', '.join(failed)} failed; the JSON records each error, the others are complete",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
