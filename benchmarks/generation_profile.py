"""Where a decoding step of the transformers sampler spends its time (the GPU run's bottleneck).

The first GPU run (one H100, ``benchmarks/results/gpu_run.md``) generated at 1,446 tokens/s: 88 ms per decoding
step for 128 rows of Qwen2.5-1.5B, 78 % of the paper-shaped iteration. Two floors for one step at that shape
(bf16 weights read once, 128 rows x 2 x 1.5e9 FLOP): about 1 ms of memory traffic and 0.5 ms of matrix work, so
the step is far from both. This script times ``TransformersPolicy.sample`` on the paper-shaped policy
(``build_policy``, as part 3 of ``gpu_run`` builds it: float32 master weights under bf16 autocast) and on the
same weights cast to bf16, and profiles one call (``torch.profiler``): how much of the wall time the device is
busy, and which operators cost the most host and device time::

    python -m benchmarks.generation_profile [--rows 128 --prompt 300 --tokens 48] [--out FILE.json]
    python -m benchmarks.generation_profile --device cpu --smoke       # tiny sizes, any machine

It prints a table and writes JSON (on CUDA to ``benchmarks/results/generation_profile.json``).
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import ArgumentParser, refuse_without_cuda
from benchmarks.gpu_learning import ROOT, tokenizer_dir
from benchmarks.gpu_run import QWEN25_1_5B, QWEN25_SMOKE, device_facts, sync_device, write_random_model
from ecpo_train.policies.atomic import write_text


def timed_sample(policy: Any, prompts: list[list[int]], device: str, repeats: int) -> list[float]:
    """Seconds of each of ``repeats`` calls of ``policy.sample`` (after one warm-up call)."""
    policy.sample(prompts, 1.0)
    seconds = []
    for _ in range(repeats):
        sync_device(device)
        started = time.perf_counter()
        policy.sample(prompts, 1.0)
        sync_device(device)
        seconds.append(time.perf_counter() - started)
    return seconds


def profile_sample(policy: Any, prompts: list[list[int]], device: str, top: int) -> dict[str, Any]:
    """One profiled call: wall time, the device's busy time (sum of kernel self times) and the top operators."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    sync_device(device)
    started = time.perf_counter()
    with profile(activities=activities) as prof:
        policy.sample(prompts, 1.0)
        sync_device(device)
    wall = time.perf_counter() - started
    events = prof.key_averages()
    device_key = "self_device_time_total" if hasattr(events[0], "self_device_time_total") else "self_cuda_time_total"

    def rows(key: str) -> list[dict[str, Any]]:
        ranked = sorted(events, key=lambda e: getattr(e, key, 0), reverse=True)[:top]
        return [{"name": e.key, "calls": e.count, "self_cpu_ms": e.self_cpu_time_total / 1e3,
                 "self_device_ms": getattr(e, device_key, 0) / 1e3} for e in ranked]

    busy = sum(getattr(e, device_key, 0) for e in events) / 1e6
    launches = sum(e.count for e in events if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC"))
    return {"wall_s": wall, "device_busy_s": busy, "kernel_launches": launches,
            "top_by_device_time": rows(device_key) if device.startswith("cuda") else [],
            "top_by_host_time": rows("self_cpu_time_total")}


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(__spec__.name, description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--smoke", action="store_true", help="a 2-layer model and tiny sizes (any device)")
    parser.add_argument("--rows", type=int, default=128)
    parser.add_argument("--prompt", type=int, default=300, help="prompt tokens per row")
    parser.add_argument("--tokens", type=int, default=48, help="decoding steps per call")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if refuse_without_cuda(args.device, "generation_profile"):
        return 2
    import torch
    if args.smoke:
        args.rows, args.prompt, args.tokens, args.repeats = 4, 16, 4, 1
    from ecpo_train.runtime.builders import build_policy
    from ecpo_train.runtime.config import make_config

    out = args.out or (ROOT / "benchmarks" / "results" / "generation_profile.json" if args.device.startswith("cuda")
                       and not args.smoke else ROOT / "runs" / "generation_profile.json")
    report: dict[str, Any] = {"environment": device_facts(args.device), "smoke": args.smoke,
                              "shape": {"rows": args.rows, "prompt": args.prompt, "tokens": args.tokens}}
    with tempfile.TemporaryDirectory(prefix="generation_profile-") as tmp:
        model_dir = write_random_model(Path(tmp) / "model", QWEN25_SMOKE if args.smoke else QWEN25_1_5B,
                                       tokenizer_dir())
        config = make_config({"model": str(model_dir), "device": args.device, "env_id": "ecpo/ALFWorldGen-v0",
                              "max_response_length": args.tokens, "gradient_checkpointing": True,
                              "mixed_precision": "bf16" if args.device.startswith("cuda") else "none",
                              "progress": False, "tensorboard": False})
        policy = build_policy(config)
        policy.eos_token_ids = torch.as_tensor([-1], device=args.device)  # no reply stops early: fixed step count
        generator = torch.Generator().manual_seed(0)
        vocab = min(policy.model.config.vocab_size, 150000)
        prompts = torch.randint(0, vocab, (args.rows, args.prompt), generator=generator).tolist()
        variants = {}
        for name in ("float32 weights, bf16 autocast (as trained)", "bf16 weights"):
            if name == "bf16 weights":
                policy.model.to(torch.bfloat16)
            seconds = timed_sample(policy, prompts, args.device, args.repeats)
            step_ms = 1e3 * min(seconds) / args.tokens
            variants[name] = {"seconds": seconds, "ms_per_step": step_ms,
                              "tokens_per_s": args.rows * args.tokens / min(seconds),
                              "profile": profile_sample(policy, prompts, args.device, args.top)}
            report["variants"] = variants
            out.parent.mkdir(parents=True, exist_ok=True)
            write_text(out, json.dumps(report, indent=1) + "\n")
            p = variants[name]["profile"]
            print(f"{name}: {step_ms:.1f} ms per step (prefill included), {variants[name]['tokens_per_s']:,.0f} tok/s; "
                  f"profiled call {p['wall_s']:.2f} s, device busy {p['device_busy_s']:.2f} s, "
                  f"{p['kernel_launches']} launches", flush=True)
            for row in (p["top_by_device_time"] or p["top_by_host_time"])[: args.top]:
                print(f"    {row['name'][:60]:60s} {row['calls']:6d} calls  host {row['self_cpu_ms']:9.1f} ms  "
                      f"device {row['self_device_ms']:9.1f} ms")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
