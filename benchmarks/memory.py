"""Peak memory of one policy update: measured for small models, computed for the paper's Qwen2.5 models.

Measured (docs/scaling.md): one ``loss.policy_update`` (AdamW, k3 KL to the reference, one mini-batch of every row)
of the tiny random Qwen2 and, when pulled (``ecpo models pull smollm2-135m-instruct``), SmolLM2-135M, in each of
``VARIANTS``, each in a fresh process; on a GPU the figure is ``torch.cuda.max_memory_allocated``. Computed: what
Qwen2.5-1.5B and 7B need per GPU for the paper's shapes, in docs/scaling.md's table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import RESULTS, ArgumentParser, count, write_json
from benchmarks.study import run_stage
from benchmarks.timing import GB, MB, PeakSampler, call_in_child, machine, timed

VARIANTS = ("plain", "lora", "checkpointing", "fsdp2x2")
LORA = {"r": 16, "alpha": 32, "dropout": 0.0}

# public config.json values of the two paper models
QWEN25 = {
    "Qwen2.5-1.5B": {"hidden": 1536, "layers": 28, "heads": 12, "kv_heads": 2, "intermediate": 8960, "vocab": 151936, "tied": True},
    "Qwen2.5-7B": {"hidden": 3584, "layers": 28, "heads": 28, "kv_heads": 4, "intermediate": 18944, "vocab": 152064, "tied": False},
}


def parameter_count(arch: dict[str, Any]) -> int:
    h, inter, vocab = arch["hidden"], arch["intermediate"], arch["vocab"]
    kv = h // arch["heads"] * arch["kv_heads"]
    attention = (h * h + h) + 2 * (h * kv + kv) + h * h  # q, k, v with biases; o without
    layer = attention + 3 * h * inter + 2 * h
    return vocab * h * (1 if arch["tied"] else 2) + arch["layers"] * layer + h


def lora_parameter_count(arch: dict[str, Any], r: int = 16) -> int:
    h, inter = arch["hidden"], arch["intermediate"]
    kv = h // arch["heads"] * arch["kv_heads"]
    shapes = {"q": (h, h), "k": (h, kv), "v": (h, kv), "o": (h, h), "gate": (h, inter), "up": (h, inter),
              "down": (inter, h)}  # the adapted projections
    return arch["layers"] * sum(r * (a + b) for a, b in shapes.values())


def activation_bytes(arch: dict[str, Any], tokens: int, checkpointing: bool, response_tokens: int) -> float:
    """bf16 activations kept for backward; flash/SDPA attention (no s^2 score matrix).

    Per token and layer the saved tensors are ~ 8h + 3 kv_dim + 4 intermediate values (norm inputs/outputs,
    q/k/v and their rotary forms, attention output, the SwiGLU branches). With checkpointing only each
    layer's input (h values) is kept, plus one layer's full set during its recomputation (LM head: docs/scaling.md).
    """
    h, inter = arch["hidden"], arch["intermediate"]
    kv = h // arch["heads"] * arch["kv_heads"]
    per_layer = (8 * h + 3 * kv + 4 * inter) * 2
    body = tokens * (arch["layers"] * h * 2 + per_layer if checkpointing else arch["layers"] * per_layer)
    head = response_tokens * arch["vocab"] * 4 * 2
    return float(body + head)


def computed_table(prompt: int = 2048, response: int = 512, micro_batch: int = 8, gpus: int = 8) -> list[dict]:
    """Per-GPU bytes of each setting (bf16 compute, float32 master weights and AdamW states)."""
    tokens, response_tokens = micro_batch * (prompt + response), micro_batch * response
    rows = []
    for name, arch in QWEN25.items():
        n = parameter_count(arch)
        n_lora = lora_parameter_count(arch)
        layer_params = (n - arch["vocab"] * arch["hidden"] * (1 if arch["tied"] else 2)) / arch["layers"]
        full = {"weights": 4 * n, "grads": 4 * n, "adam": 8 * n, "reference": 2 * n}
        settings = {
            # fp32 master + fp32 grads + AdamW m, v (16 B/param); bf16 reference copy (2 B/param)
            "full FT, 1 GPU": full | {"ckpt": False},
            "full FT + checkpointing, 1 GPU": full | {"ckpt": True},
            # frozen base in bf16; fp32 adapter + its grads + AdamW; the reference is the base (no copy)
            "LoRA r=16 + checkpointing, 1 GPU": {"weights": 2 * n + 4 * n_lora, "grads": 4 * n_lora, "adam": 8 * n_lora,
                                                     "reference": 0, "ckpt": True},
            # everything sharded 8 ways; one layer's bf16 params (policy or reference) unsharded at a time,
            # x2 for the prefetch of the next layer
            f"FSDP2 full FT x{gpus} + checkpointing": {"weights": 4 * n / gpus + 2 * 2 * layer_params,
                                                           "grads": 4 * n / gpus, "adam": 8 * n / gpus,
                                                           "reference": 2 * n / gpus, "ckpt": True},
        }
        for label, s in settings.items():
            act = activation_bytes(arch, tokens, s["ckpt"], response_tokens)
            total = s["weights"] + s["grads"] + s["adam"] + s["reference"] + act
            rows.append({"model": name, "setting": label, "params": n, "lora_params": n_lora,
                         **{k: s[k] / GB for k in ("weights", "grads", "adam", "reference")},
                         "activations": act / GB, "total_gb": total / GB})
    return rows


def one_update(variant: str, model_dir: str, args: argparse.Namespace, dp: Any = None) -> dict[str, float]:
    """Build the policy in ``variant``'s setting, then measure one update's peak memory."""
    import torch

    from ecpo_train.core.loss import UpdateSettings, policy_update
    from ecpo_train.policies.llm import TransformersPolicy
    from ecpo_train.policies.scaling import enable_gradient_checkpointing

    device = "cuda" if torch.cuda.is_available() else "cpu"
    sampler = PeakSampler()
    before_model = sampler.rss()
    policy = TransformersPolicy(model_dir, env_name="ecpo/DivergentAnchor-v0", device=device,
                                max_prompt_length=args.prompt, max_response_length=args.response,
                                lora=LORA if variant == "lora" else None)
    reference = policy.frozen_copy()
    if variant == "checkpointing":
        enable_gradient_checkpointing(policy.model)
    rng, vocab, groups = np.random.default_rng(0), policy.model.config.vocab_size, np.arange(args.rows) // 4
    prompts = [rng.integers(0, vocab, size=args.prompt).tolist() for _ in range(args.rows)]  # a random batch
    responses = [rng.integers(0, vocab, size=args.response).tolist() for _ in range(args.rows)]
    advantages = torch.as_tensor(rng.normal(size=args.rows), dtype=torch.float32)
    rows = np.arange(args.rows)
    if dp is not None:
        rows = np.flatnonzero(np.isin(groups, dp.local_share(sorted(set(groups.tolist())))))
        dp.shard(policy.model)
        dp.shard(reference.model)
    prompts, responses = [prompts[i] for i in rows], [responses[i] for i in rows]
    with torch.no_grad():
        old = policy.logprobs(prompts, responses)[0]
    params = [p for p in policy.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-6)
    settings = UpdateSettings(mini_batch_size=10_000, micro_batch_size=args.micro_batch, kl_coef=0.01)

    def ref_fn(idx):
        with torch.no_grad():
            return reference.logprobs([prompts[i] for i in idx], [responses[i] for i in idx])[0]

    def logprob_fn(idx):
        return policy.logprobs([prompts[i] for i in idx], [responses[i] for i in idx])

    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start_bytes = torch.cuda.memory_allocated()
    sampler.start()
    _, seconds = timed(policy_update, logprob_fn, ref_fn, params, optimizer, old, torch.ones(len(rows), args.response),
                       advantages[rows], settings, np.random.default_rng(0), reducer=dp)
    peak = sampler.stop()
    model, update = ((start_bytes, torch.cuda.max_memory_allocated() - start_bytes) if device == "cuda" else
                     (sampler.baseline - before_model, peak - sampler.baseline))  # CPU: resident, the batch's too
    return {"seconds": seconds, "trainable_params": float(sum(p.numel() for p in params)), "model_mb": model / MB,
            "peak_update_mb": update / MB}


def _fsdp_worker(rank: int, port: int, model_dir: str, args: argparse.Namespace, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2",
                      LOCAL_RANK=str(rank))
    import torch

    from ecpo_train.runtime.distributed import DataParallel

    dp = DataParallel("cuda" if torch.cuda.is_available() else "cpu")
    try:
        result = one_update("fsdp2x2", model_dir, args, dp)
        write_json(Path(out, f"rank{rank}.json"), result)
    finally:
        dp.close()


def child(variant: str, model_dir: str, **shape: int) -> dict[str, float]:
    """One variant's update (``fsdp2x2``: two processes, the larger one's figures), run in a fresh process."""
    args = argparse.Namespace(**shape)
    if variant != "fsdp2x2":
        return one_update(variant, model_dir, args)
    import torch.multiprocessing as mp

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with tempfile.TemporaryDirectory() as out:
        mp.spawn(_fsdp_worker, args=(port, model_dir, args, out), nprocs=2, join=True)
        ranks = [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(2)]
    return {key: max(r[key] for r in ranks) for key in ranks[0]}  # the larger process


def model_dirs(names: list[str]) -> dict[str, str]:
    from ecpo_train.runtime.models import MARKER_FILE, default_cache_dir, write_tiny_model

    found = {}
    for name in names:
        if name == "tiny":
            folder = Path(tempfile.gettempdir()) / "ecpo-memory-tiny"
            if not (folder / "config.json").exists():  # (the tokenizer: $ECPO_TOKENIZER_DIR, else a small one)
                write_tiny_model(folder)
            found["tiny"] = str(folder)
        elif name == "smollm2":
            folder = default_cache_dir() / "smollm2-135m-instruct"
            if (folder / MARKER_FILE).exists():
                found["smollm2-135m"] = str(folder)
            else:
                print(f"skipping smollm2: {folder} not found (ecpo models pull smollm2-135m-instruct)")
    return found


def update(args: Any) -> dict[str, Any]:
    """Every model x variant measured in a fresh process, then the computed table."""
    measured, shape = [], {key: getattr(args, key) for key in ("rows", "prompt", "response", "micro_batch")}
    for label, folder in model_dirs(args.models.split(",")).items():
        for variant in args.variants.split(","):
            try:
                row = call_in_child("benchmarks.memory:child", variant=variant, model_dir=folder, **shape)
            except RuntimeError as err:
                print(f"{label} {variant} failed:\n{err}")
                continue
            measured.append({"model": label, "variant": variant} | row)
    import torch

    return {"device": "cuda" if torch.cuda.is_available() else "cpu", "platform": platform.platform(),
            "torch": torch.__version__, "machine": machine(), "shape": shape, "measured": measured,
            "computed": computed_table()}


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(__spec__.name if __spec__ else "benchmarks.memory", description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="tiny,smollm2")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--rows", type=count, default=16)
    parser.add_argument("--prompt", type=count, default=192)
    parser.add_argument("--response", type=count, default=64)
    parser.add_argument("--micro-batch", type=count, default=4)
    parser.add_argument("--out", default=str(RESULTS / "memory.json"))
    args = parser.parse_args(argv)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    return run_stage(lambda: update(args), args.out)


if __name__ == "__main__":
    sys.exit(main())
