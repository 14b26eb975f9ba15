"""One GPU: where an ECPO iteration's time goes (the paper's table 5 layout), and what it costs at paper scale.

Three parts, printed as tables and written as JSON (``benchmarks/results/gpu_iteration.json``):

1. ``iterations``: a few native-trainer iterations (``ecpo_train.runtime.trainer.Trainer``, the one loop) of the real
   small model (SmolLM2-135M, ``ecpo models pull smollm2-135m-instruct``) on an embedded environment:
   generation tokens/s, update tokens/s, peak GPU memory and the time split generation / env / credit / update.
2. ``credit``: ``credit.compute_advantages("ecpo", ...)`` on a paper-shaped batch (16 groups x 8 rollouts x up
   to 50 steps, ``benchmarks/credit_overhead.build_batch``) with CUDA tensors against numpy on the CPU, and
   credit time as a fraction of one iteration of part 1.
3. ``paper_shape``: a model with Qwen2.5-1.5B's published architecture (random weights, config values below),
   the Qwen2.5 tokenizer, 16 groups x 8 rows sampling a fixed-length response (no early stop) and one update
   over those rows, with LoRA and with full fine-tuning (bf16 autocast, float32 master weights, gradient
   checkpointing).

Needs CUDA (exit 2 with one line otherwise). ``--device cpu --smoke`` runs every code path on a tiny model in
seconds, for tests.

    python benchmarks/gpu_iteration.py [--iterations 3] [--prompt 1024] [--response 256]
    python benchmarks/gpu_iteration.py --device cpu --smoke
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
# Qwen2.5-1.5B's public config.json
QWEN25_1_5B = {"hidden_size": 1536, "num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2,
               "intermediate_size": 8960, "vocab_size": 151936, "tie_word_embeddings": True,
               "max_position_embeddings": 32768, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6}
TOKENIZER_DIR = os.environ.get("ECPO_TOKENIZER_DIR", "/work/shared/models/qwen2.5-tokenizer")


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _peak_mb(device: str) -> float:
    import torch

    return torch.cuda.max_memory_allocated() / (1 << 20) if device.startswith("cuda") else float("nan")


# ---------------------------------------------------------------------------------------------- part 1
def trainer_iterations(model_dir: str, device: str, args: argparse.Namespace) -> dict[str, Any]:
    """Run ``args.iterations`` trainer iterations; token counts come from the rollouts the update receives."""
    import torch

    from ecpo_train.runtime.config import make_config
    from ecpo_train.runtime.trainer import Trainer

    with tempfile.TemporaryDirectory() as run_dir:
        config = make_config({
            "run_dir": run_dir, "model": model_dir, "device": device, "env_id": "ecpo/ALFWorldGen-v0",
            "env_kwargs": {"max_steps": args.max_steps}, "n_groups": args.groups, "group_size": args.group_size,
            "max_prompt_length": args.prompt, "max_response_length": args.response, "iterations": args.iterations,
            "micro_batch_size": args.micro_batch, "mini_batch_size": 256, "val_every": 0, "checkpoint_every": 0,
            "tensorboard": False, "progress": False, "kl_coef": 0.01, "lr": 1e-6,
        })
        trainer = Trainer(config)
        tokens: list[dict[str, int]] = []
        update_policy = trainer.update_policy

        def counted_update(rollout, step_advantages):
            table = rollout.batch
            response = sum(len(r) for r in table.response_ids)
            tokens.append({"response": response, "sequence": response + sum(len(p) for p in table.prompt_ids)})
            return update_policy(rollout, step_advantages)

        trainer.update_policy = counted_update
        if device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
        rows = []
        try:
            for _ in range(args.iterations):
                metrics = trainer.train_iteration()
                rows.append({key: metrics[key] for key in metrics if key.startswith("time/")} |
                            {"num_steps": metrics["num_steps"]})
        finally:
            trainer.close()
    for row, count in zip(rows, tokens):
        row["generation_tokens_per_s"] = count["response"] / max(row["time/generation"], 1e-9)
        row["update_tokens_per_s"] = count["sequence"] / max(row["time/update"], 1e-9)
    return {"per_iteration": rows, "peak_memory_mb": _peak_mb(device)}


# ---------------------------------------------------------------------------------------------- part 2
def credit_timing(device: str, reps: int, smoke: bool) -> dict[str, float]:
    """ECPO credit on a paper-shaped batch: numpy on the CPU vs torch tensors on ``device``."""
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from credit_overhead import build_batch

    from ecpo_train.core.credit import compute_advantages, factorize_keys

    cols = build_batch(0, groups=2 if smoke else 16, rollouts=8, max_steps=50)
    codes = {key: factorize_keys(cols[key], key)[0] for key in ("group_ids", "anchor_keys", "action_keys")}
    host = {"group_ids": codes["group_ids"], "traj_ids": np.asarray(cols["traj_ids"]),
            "steps": np.asarray(cols["steps"]), "anchor_keys": codes["anchor_keys"],
            "action_keys": codes["action_keys"], "rewards": np.asarray(cols["rewards"])}
    on_device = {k: torch.as_tensor(v, device=device) for k, v in host.items()}

    def timed(arrays: dict[str, Any]) -> float:
        compute_advantages("ecpo", **arrays)  # warm-up (CUDA context, kernels)
        times = []
        for _ in range(reps):
            _sync(device)
            started = time.perf_counter()
            _adv, _ = compute_advantages("ecpo", **arrays)
            _sync(device)
            times.append(time.perf_counter() - started)
        return float(np.median(times))

    cpu_adv = np.asarray(compute_advantages("ecpo", **host)[0])
    dev_adv = compute_advantages("ecpo", **on_device)[0]
    dev_adv = dev_adv.cpu().numpy() if hasattr(dev_adv, "cpu") else np.asarray(dev_adv)
    return {"rows": len(cols["rewards"]), "cpu_seconds": timed(host), "device_seconds": timed(on_device),
            "max_abs_difference": float(np.abs(cpu_adv - dev_adv).max())}


# ---------------------------------------------------------------------------------------------- part 3
def write_model(out_dir: Path, architecture: dict[str, Any], tokenizer_dir: str) -> Path:
    """A randomly initialised Qwen2 of ``architecture`` with the Qwen2.5 tokenizer, as a transformers folder."""
    import torch
    from transformers import AutoTokenizer, GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    config = Qwen2Config(bos_token_id=pad, eos_token_id=eos, pad_token_id=pad, **architecture)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = Qwen2ForCausalLM(config).to(torch.bfloat16)  # written in bf16 (half the disk), loaded as float32
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=pad)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def paper_shape_iteration(model_dir: str, device: str, args: argparse.Namespace, lora: dict | None) -> dict[str, Any]:
    """Sample ``groups x group_size`` fixed-length responses, then one update over those rows."""
    import torch

    from ecpo_train.core.loss import UpdateSettings, policy_update
    from ecpo_train.policies.llm import TransformersPolicy
    from ecpo_train.policies.scaling import enable_autocast, enable_gradient_checkpointing

    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    policy = TransformersPolicy(model_dir, env_name="ecpo/ALFWorldGen-v0", device=device,
                                max_prompt_length=args.prompt, max_response_length=args.response, lora=lora)
    reference = policy.frozen_copy()
    for model in {id(policy.model): policy.model, id(reference.model): reference.model}.values():
        enable_gradient_checkpointing(model)
        if device.startswith("cuda"):
            enable_autocast(model, "bf16")
    policy.eos_token_ids = torch.tensor([-1], device=policy.device)  # no early stop: fixed-length responses
    rows = args.groups * args.group_size
    rng = np.random.default_rng(0)
    vocab = policy.model.config.vocab_size
    prompts = [rng.integers(0, vocab, size=args.prompt).tolist() for _ in range(rows)]

    _sync(device)
    started = time.perf_counter()
    responses, logprobs = [], []
    for start in range(0, rows, args.generation_batch):
        r, lp = policy.sample(prompts[start : start + args.generation_batch], temperature=1.0)
        responses += r
        logprobs += lp
    _sync(device)
    generation = time.perf_counter() - started

    old_logp = torch.as_tensor(np.asarray(logprobs), dtype=torch.float32)
    old_mask = torch.ones_like(old_logp)
    advantages = torch.as_tensor(rng.normal(size=rows), dtype=torch.float32)
    params = [p for p in policy.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-6)

    def logprob_fn(idx):
        return policy.logprobs([prompts[i] for i in idx], [responses[i] for i in idx])

    def ref_fn(idx):
        with torch.no_grad():
            return reference.logprobs([prompts[i] for i in idx], [responses[i] for i in idx])[0]

    settings = UpdateSettings(mini_batch_size=rows, micro_batch_size=args.micro_batch, kl_coef=0.01)
    _sync(device)
    started = time.perf_counter()
    policy_update(logprob_fn, ref_fn, params, optimizer, old_logp, old_mask, advantages, settings,
                  np.random.default_rng(0))
    _sync(device)
    update = time.perf_counter() - started
    return {"setting": "lora" if lora else "full", "rows": rows, "prompt": args.prompt, "response": args.response,
            "generation_seconds": generation, "update_seconds": update,
            "generation_tokens_per_s": rows * args.response / generation,
            "update_tokens_per_s": rows * (args.prompt + args.response) / update,
            "trainable_params": float(sum(p.numel() for p in params)), "peak_memory_mb": _peak_mb(device)}


# ---------------------------------------------------------------------------------------------- main
def print_tables(report: dict[str, Any]) -> None:
    rows = report["iterations"]["per_iteration"]
    if rows:
        keys = ("time/generation", "time/env", "time/credit", "time/update")
        mean = {k: float(np.mean([r[k] for r in rows])) for k in keys}
        total = sum(mean.values())
        print(f"\ntrainer iterations ({report['model']}, {len(rows)} iterations, mean per iteration):")
        print(f"{'stage':12s} {'seconds':>9s} {'share':>7s}")
        for key in keys:
            print(f"{key[5:]:12s} {mean[key]:9.3f} {100 * mean[key] / total:6.1f}%")
        print(f"generation {np.mean([r['generation_tokens_per_s'] for r in rows]):.0f} tok/s | update "
              f"{np.mean([r['update_tokens_per_s'] for r in rows]):.0f} tok/s | peak "
              f"{report['iterations']['peak_memory_mb']:.0f} MB")
    credit = report["credit"]
    print(f"\ncredit (ecpo, {credit['rows']} rows): cpu {1e3 * credit['cpu_seconds']:.2f} ms | "
          f"{report['device']} {1e3 * credit['device_seconds']:.2f} ms | "
          f"{100 * credit['fraction_of_iteration']:.3f}% of an iteration | max |diff| {credit['max_abs_difference']:.1e}")
    print(f"\npaper-shaped iteration ({report['paper_model']}):")
    print(f"{'setting':8s} {'rows':>5s} {'gen s':>8s} {'gen tok/s':>10s} {'upd s':>8s} {'upd tok/s':>10s} {'peak MB':>9s}")
    for r in report["paper_shape"]:
        print(f"{r['setting']:8s} {r['rows']:5d} {r['generation_seconds']:8.2f} {r['generation_tokens_per_s']:10.0f} "
              f"{r['update_seconds']:8.2f} {r['update_tokens_per_s']:10.0f} {r['peak_memory_mb']:9.0f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--smoke", action="store_true", help="tiny model and shapes (any device; for tests)")
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--groups", type=int, default=16)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-steps", type=int, default=50)
    parser.add_argument("--prompt", type=int, default=1024)
    parser.add_argument("--response", type=int, default=256)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--generation-batch", type=int, default=128)
    parser.add_argument("--credit-reps", type=int, default=20)
    parser.add_argument("--model", default=None, help="part 1's model folder; default: pulled SmolLM2-135M")
    parser.add_argument("--out", default=str(RESULTS / "gpu_iteration.json"))
    args = parser.parse_args(argv)

    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"gpu_iteration needs a CUDA GPU (this torch {torch.__version__} sees none); "
              "for a CPU check of the code path: --device cpu --smoke", file=sys.stderr)
        return 2
    from ecpo_train.apps.models import default_cache_dir, write_tiny_model

    work = tempfile.TemporaryDirectory()
    architecture, paper_model = QWEN25_1_5B, "Qwen2.5-1.5B architecture, random weights"
    if args.smoke:
        args.iterations, args.groups, args.group_size, args.max_steps = 1, 2, 2, 3
        args.prompt, args.response, args.micro_batch, args.generation_batch, args.credit_reps = 32, 4, 2, 4, 2
        architecture = {**QWEN25_1_5B, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                        "intermediate_size": 128}
        paper_model = "Qwen2.5 architecture shrunk to 2 layers x 64 (smoke)"
    model_dir = args.model
    if model_dir is None:
        pulled = default_cache_dir() / "smollm2-135m-instruct"
        model_dir = str(pulled) if (pulled / "config.json").exists() and not args.smoke else str(
            write_tiny_model(Path(work.name) / "tiny", tokenizer_path=TOKENIZER_DIR if Path(TOKENIZER_DIR).is_dir()
                             else None))
    try:
        iterations = trainer_iterations(model_dir, args.device, args)
        credit = credit_timing(args.device, args.credit_reps, args.smoke)
        iteration_seconds = float(np.mean([r["time/iteration"] for r in iterations["per_iteration"]]))
        credit["fraction_of_iteration"] = credit["device_seconds"] / iteration_seconds
        paper_dir = write_model(Path(work.name) / "paper", architecture, TOKENIZER_DIR)
        paper = [paper_shape_iteration(str(paper_dir), args.device, args, lora)
                 for lora in ({"r": 16, "alpha": 32}, None)]
    finally:
        work.cleanup()
    report = {"device": args.device, "gpu": torch.cuda.get_device_name() if args.device.startswith("cuda") else None,
              "torch": torch.__version__, "platform": platform.platform(), "model": model_dir,
              "paper_model": paper_model, "smoke": args.smoke, "iterations": iterations, "credit": credit,
              "paper_shape": paper}
    print_tables(report)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
