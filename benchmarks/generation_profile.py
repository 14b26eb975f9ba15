"""Where the transformers sampler spends its time on a GPU, eager against static-cache CUDA-graph decoding.

The first GPU run's decoding step was host-bound (docs/gpu.md, "What the first run measured"); ``decoding=graph``
answers it. The parts (``decode``, ``paper``, ``scoring``), the shapes, the goals and the commands: docs/gpu.md ("Fast
sampling on one GPU"). Each part runs the policy ``build_policy`` makes (bf16 autocast on CUDA, as trained),
``decoding=eager`` beside the fast path. JSON naming the device goes where ``gpu_run.default_out`` says
(``benchmarks/results/decoding_profile.json`` on CUDA; ``generation_profile.json`` there is the first, eager-only
profile of 2026-11-26).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import ArgumentParser, fail, refuse_without_cuda, write_json
from benchmarks.gpu_learning import tokenizer_dir
from benchmarks.gpu_run import (
    PAPER_STEPS,
    QWEN25_1_5B,
    QWEN25_SMOKE,
    default_out,
    device_facts,
    part_paper_iteration,
    write_random_model,
)
from benchmarks.gpu_run_report import PAPER_ITERATION_SECONDS
from benchmarks.timing import seconds

PAPER_SECONDS = PAPER_ITERATION_SECONDS["ECPO paper, Qwen2.5-1.5B, 8x A100"]  # at 50 steps
# SmolLM2-135M's shape (hidden, layers, heads) as a Qwen2 with the Qwen2.5 vocabulary (the tokenizer at hand)
SMOLLM2_SHAPE = QWEN25_1_5B | {"hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9,
                               "num_key_value_heads": 3, "intermediate_size": 1536}
LAUNCH_EVENTS = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cudaGraphLaunch")


def sync_device(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def profiled(call: Any, device: str, top: int) -> dict[str, Any]:
    """One profiled ``call()``: wall time, the device's busy time (sum of kernel self times), host launches (kernels
    and graph replays) and the top operators."""
    from torch.profiler import ProfilerActivity, profile

    cuda = device.startswith("cuda")
    sync_device(device)
    started = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        call()
        sync_device(device)
    wall = time.perf_counter() - started
    events = prof.key_averages()
    device_key = "self_device_time_total" if hasattr(events[0], "self_device_time_total") else "self_cuda_time_total"

    def rows(key: str) -> list[dict[str, Any]]:
        ranked = sorted(events, key=lambda e: getattr(e, key, 0), reverse=True)[:top]
        return [{"name": e.key, "calls": e.count, "self_cpu_ms": e.self_cpu_time_total / 1e3,
                 "self_device_ms": getattr(e, device_key, 0) / 1e3} for e in ranked]

    busy = sum(getattr(e, device_key, 0) for e in events) / 1e6
    return {"wall_s": wall, "device_busy_s": busy, "device_busy_share": busy / wall if cuda else None,
            "host_launches": sum(e.count for e in events if e.key in LAUNCH_EVENTS),
            "top_by_device_time": rows(device_key) if cuda else [], "top_by_host_time": rows("self_cpu_time_total")}


def fast_decoding(device: str) -> str:
    return "graph" if device.startswith("cuda") else "static"


def busy_text(share: float | None) -> str:
    return "" if share is None else f", GPU busy {share:.0%}"


def llm_config(model_dir: Path, args: argparse.Namespace, preset: str | None = None, **values: Any) -> Any:
    from ecpo_train.runtime.config import load_config

    cuda = args.device.startswith("cuda")
    overrides = {"model": str(model_dir), "device": args.device, "mixed_precision": "bf16" if cuda else "none",
                 "progress": False, "tensorboard": False} | values
    return load_config(preset, [f"{key}={json.dumps(value)}" for key, value in overrides.items()])


def use_decoding(policy: Any, decoding: str, mixed_precision: str) -> None:
    """Switch a built policy between eager and fast decoding (as ``build_policy`` would have built it)."""
    import torch

    policy.decoding = decoding
    policy.set_sampling_dtype(torch.bfloat16 if mixed_precision == "bf16" else None)


def part_decode(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Part 1: eager and graphed decoding of the same policy at rows x tokens, side by side."""
    import torch

    from ecpo_train.runtime.builders import build_policy

    model_dir = write_random_model(work / "decode_model", QWEN25_SMOKE if args.smoke else QWEN25_1_5B,
                                   tokenizer_dir())
    config = llm_config(model_dir, args, env_id="ecpo/ALFWorldGen-v0", max_response_length=args.tokens,
                        gradient_checkpointing=True)
    policy = build_policy(config)
    policy.eos_token_ids = torch.as_tensor([-1], device=args.device)  # no reply stops early: a fixed step count
    generator = torch.Generator().manual_seed(0)
    vocab = min(policy.model.config.vocab_size, 150000)
    prompts = torch.randint(0, vocab, (args.rows, args.prompt), generator=generator).tolist()
    variants: dict[str, Any] = {}
    for decoding in ("eager", fast_decoding(args.device)):
        use_decoding(policy, decoding, config.mixed_precision)
        # warm-up: graphs are captured per shape, so at the timed shape; eager needs a few steps only
        policy.max_response_length = args.tokens if decoding != "eager" else min(args.tokens, 8)
        policy.sample(prompts, 1.0)
        policy.max_response_length = args.tokens
        took = seconds(lambda: policy.sample(prompts, 1.0), sync=lambda: sync_device(args.device))[0]
        profile_tokens = args.tokens if decoding != "eager" else min(args.tokens, args.profile_tokens)
        policy.max_response_length = profile_tokens  # eager: a short call (its trace is ~1,000 events per token)
        profile = profiled(lambda: policy.sample(prompts, 1.0), args.device, args.top)
        policy.max_response_length = args.tokens
        v = variants[decoding] = {
            "seconds": took, "ms_per_step": 1e3 * took / args.tokens,
            "tokens_per_s": args.rows * args.tokens / took, "profiled_tokens": profile_tokens,
            "host_launches_per_token": profile["host_launches"] / profile_tokens,
            "graphs_used": bool(policy.decoder and policy.decoder.graphs) if decoding == "graph" else False,
            "profile": profile}
        print(f"decode {decoding:6s}: {v['ms_per_step']:.2f} ms per step (prefill included), "
              f"{v['tokens_per_s']:,.0f} tok/s, {v['host_launches_per_token']:.0f} host launches per token"
              + busy_text(profile["device_busy_share"]), flush=True)
    eager, fast = variants["eager"], variants[fast_decoding(args.device)]
    return {"rows": args.rows, "prompt": args.prompt, "tokens": args.tokens, "variants": variants,
            "step_speedup": eager["ms_per_step"] / fast["ms_per_step"]}


def part_paper(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Part 2: the paper-shaped iteration with fast decoding (``gpu_run``'s part 3), generation carried to 50 steps."""
    figures = part_paper_iteration(argparse.Namespace(**vars(args), decoding=fast_decoding(args.device)), work)
    generation_at_50 = figures["time/generation"] / figures["steps"] * PAPER_STEPS
    print(f"paper iteration ({figures['decoding']}): generation {figures['time/generation']:.1f} s for "
          f"{figures['steps']} steps, {figures['generation_tokens_per_s']:,.0f} tok/s; at {PAPER_STEPS} steps: "
          f"generation {generation_at_50:.0f} s, iteration {figures['projected_iteration_seconds']:.0f} s "
          f"(paper: {PAPER_SECONDS} s on 8 A100s)", flush=True)
    return figures | {"generation_seconds_at_paper_steps": generation_at_50, "paper_iteration_seconds": PAPER_SECONDS}


def alfworld_contexts(env_id: str, env_kwargs: dict, groups: int, copies: int) -> list[Any]:
    """A training rollout's scoring contexts: ``groups`` tasks x ``copies``, each copy after 0-3 random actions of
    its own (so copies share some contexts, as a group's do)."""
    import gymnasium as gym
    import numpy as np

    import ecpo_gym  # noqa: F401  (registers the environments)
    from ecpo_train.policies.base import StepContext

    env = gym.make(env_id, **env_kwargs)
    rng = np.random.default_rng(0)
    contexts = []
    for group in range(groups):
        for _ in range(copies):
            obs, info = env.reset(seed=group, options={"task_id": env.unwrapped.task_ids[group]})
            history: list[tuple[str, str]] = []
            for _ in range(int(rng.integers(0, 4))):
                action = str(rng.choice(info["admissible_actions"]))
                history.append((obs, action))
                obs, _, _, _, info = env.step(action)
            contexts.append(StepContext(env_name=env_id, task=str(info.get("task", "")), step_count=len(history),
                                        history=history, observation=obs,
                                        admissible_actions=list(info["admissible_actions"]),
                                        state_key=str(info["state_key"])))
    return contexts


def part_scoring(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Part 3: ``ScoringPolicy.act`` on a rollout's contexts, eager beside the fast path."""
    from ecpo_train.runtime.builders import build_policy

    model_dir = Path(args.scoring_model) if args.scoring_model else write_random_model(
        work / "scoring_model", QWEN25_SMOKE if args.smoke else SMOLLM2_SHAPE, tokenizer_dir())
    config = llm_config(model_dir, args, "alfworld_gpu")
    policy = build_policy(config)
    groups, copies = (2, 4) if args.smoke else (config.n_groups, config.group_size)
    contexts = alfworld_contexts(config.env_id, config.env_kwargs, groups, copies)
    policy.score_batch_size = 64 if args.device.startswith("cuda") else policy.score_batch_size  # as gpu_learning
    variants: dict[str, Any] = {}
    for decoding in ("eager", fast_decoding(args.device)):
        use_decoding(policy, decoding, config.mixed_precision)
        policy.act(contexts, temperature=1.0)  # warm-up (and the sampling copy)
        took = min(seconds(lambda: policy.act(contexts, temperature=1.0), args.repeats,
                           sync=lambda: sync_device(args.device)))
        profile = profiled(lambda: policy.act(contexts, temperature=1.0), args.device, args.top)
        v = variants[decoding] = {"decisions_per_s": len(contexts) / took, "seconds": took,
                                  "host_launches_per_decision": profile["host_launches"] / len(contexts),
                                  "device_busy_share": profile["device_busy_share"], "profile": profile}
        print(f"scoring {decoding:6s}: {v['decisions_per_s']:,.0f} decisions/s, "
              f"{v['host_launches_per_decision']:.1f} host launches per decision"
              + busy_text(v["device_busy_share"]), flush=True)
    return {"model": str(args.scoring_model or "SmolLM2-135M's shape, random weights"), "contexts": len(contexts),
            "distinct_contexts": len({(c.observation, tuple(c.history)) for c in contexts}), "variants": variants}


PARTS = {"decode": part_decode, "paper": part_paper, "scoring": part_scoring}


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(__spec__.name, description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--smoke", action="store_true", help="tiny models and sizes (any device; for the tests)")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"which parts, e.g. decode,scoring ({', '.join(PARTS)})")
    parser.add_argument("--rows", type=int, default=128)
    parser.add_argument("--prompt", type=int, default=300, help="prompt tokens per row")
    parser.add_argument("--tokens", type=int, default=512, help="decoding steps per call")
    parser.add_argument("--profile-tokens", type=int, default=32, help="decoding steps of the profiled eager call")
    parser.add_argument("--paper-steps", type=int, default=2, help="part paper: environment steps per episode")
    parser.add_argument("--scoring-model", default=None, help="part scoring: a model folder (SmolLM2-135M)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    chosen = [part.strip() for part in args.parts.split(",") if part.strip()]
    if not chosen or set(chosen) - set(PARTS):
        fail(f"--parts {args.parts!r}: choose from {', '.join(PARTS)}")
    for name in ("rows", "prompt", "tokens", "profile_tokens", "paper_steps", "repeats", "top"):
        if getattr(args, name) < 1:  # (refused here, not in a traceback after the first part's minute)
            fail(f"--{name.replace('_', '-')} {getattr(args, name)}: give a count >= 1")
    if refuse_without_cuda(args.device, "generation_profile"):
        return 2
    if args.smoke:
        args.rows, args.prompt, args.tokens, args.profile_tokens, args.repeats = 4, 16, 4, 4, 1
    out = args.out or default_out(args.device, args.smoke, "decoding_profile")
    started = time.monotonic()
    report: dict[str, Any] = {"environment": device_facts(args.device), "smoke": args.smoke, "parts": {}}
    with tempfile.TemporaryDirectory(prefix="generation_profile-") as tmp:
        for name in chosen:
            report["parts"][name] = PARTS[name](args, Path(tmp))
            report["seconds"] = time.monotonic() - started
            write_json(out, report, indent=1)
    print(f"wrote {out} ({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
