"""What one CPU does with SmolLM2-135M: sampling and training tokens/s, and the peak RSS of one update.

Each variant runs in a fresh process and reports its peak resident memory (``ru_maxrss``) after loading the
policy and a frozen reference and running one ``loss.policy_update`` (AdamW, k3 KL) over ``--rows`` rows of
``--prompt`` + ``--response`` tokens in one micro-batch, plus the tokens/s of free-generation sampling (batched,
KV cache) and of that update. Variants:

- ``generate``: free generation as the trainer runs it today (logits only at response positions, no KV cache
  in the learner, reference scored without a graph);
- ``generate+ckpt``: the same with ``gradient_checkpointing``;
- ``generate+ckpt+lora``: and a LoRA adapter (r=16): the reference is the adapter switched off, no weight copy;
- ``score``: ``policy_mode=score`` on the corridor preset's compact prompt (one distinct prompt per state).

``--code DIR`` runs the variants against another checkout of the project (``git worktree add DIR <commit>``),
so "before" and "after" are measured side by side on one machine:

    python benchmarks/llm_cpu_profile.py                        # this checkout
    python benchmarks/llm_cpu_profile.py --code /tmp/before --label before --variants generate

Writes ``benchmarks/results/llm_cpu_profile.json`` (runs are appended under their label).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
VARIANTS = ("generate", "generate+ckpt", "generate+ckpt+lora", "score")

CHILD = r"""
import json, resource, sys, time
import numpy as np, torch
args = json.loads(sys.argv[1])
torch.manual_seed(0)
from ecpo_train.core.loss import UpdateSettings, policy_update
from ecpo_train.policies.base import StepContext
from ecpo_train.policies.llm import TransformersPolicy
variant, model = args["variant"], args["model"]
kwargs = dict(env_name="ecpo/DivergentAnchor-v0", max_response_length=args["response"])
if variant == "score":
    from ecpo_train.policies.scoring import ScoringPolicy
    policy = ScoringPolicy(model, history_length=0, prompt_style="compact", **kwargs)
else:
    lora = {"r": 16, "alpha": 32, "dropout": 0.0} if "+lora" in variant else None
    policy = TransformersPolicy(model, **kwargs, **({"lora": lora} if lora else {}))
if "+ckpt" in variant:
    from ecpo_train.policies.scaling import apply_memory_settings
    apply_memory_settings(policy.model, gradient_checkpointing=True, mixed_precision="none")
reference = policy.frozen_copy()
rows = args["rows"]
ctx = lambda i: StepContext(env_name="ecpo/DivergentAnchor-v0", task="walk through all 4 rooms", step_count=i % 4,
                            history=[], observation=f"room {i % 4 + 1}/4. doors: red, blue, green.",
                            admissible_actions=["open red door", "open blue door", "open green door"], state_key=str(i))
out = {"variant": variant}
if variant == "score":
    started = time.perf_counter()
    sampled = policy.act([ctx(i) for i in range(rows)], temperature=1.0)
    seconds = time.perf_counter() - started
    prompts, responses = sampled.prompt_ids, sampled.response_ids
    out["sampling_decisions_per_s"] = rows / seconds
    tokens = sum(len(p) for p in set(map(tuple, prompts)))
else:
    base = torch.randint(100, 20000, (args["prompt"],)).tolist()
    prompts = [base[: args["prompt"] - i] for i in range(rows)]
    started = time.perf_counter()
    responses, _ = policy.sample(prompts, temperature=1.0)
    seconds = time.perf_counter() - started
    out["sampling_tokens_per_s"] = sum(len(r) for r in responses) / seconds
    responses = [torch.randint(100, 20000, (args["response"],)).tolist() for _ in range(rows)]
    tokens = sum(len(p) + len(r) for p, r in zip(prompts, responses))
with torch.no_grad():
    old, old_mask, _ = policy.logprobs(prompts, responses)
optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=1e-6)
settings = UpdateSettings(clip_eps=0.2, kl_coef=0.01, entropy_coef=0.0, mini_batch_size=rows, micro_batch_size=rows,
                          epochs=1, max_grad_norm=1.0)
def logprob_fn(idx):
    return policy.logprobs([prompts[i] for i in idx], [responses[i] for i in idx])
def ref_fn(idx):
    with torch.no_grad():
        return reference.logprobs([prompts[i] for i in idx], [responses[i] for i in idx])[0]
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
policy_update(logprob_fn, ref_fn, [p for p in policy.parameters() if p.requires_grad], optimizer, old.detach(), old_mask,
              torch.randn(rows), settings, np.random.default_rng(0))
seconds = time.perf_counter() - started
out["train_tokens_per_s"] = tokens / seconds
out["update_seconds"] = seconds
out["update_tokens"] = tokens
out["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
out["rss_before_update_gb"] = before / 2**20
print("RESULT " + json.dumps(out))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, help="default: the pulled smollm2-135m-instruct")
    parser.add_argument("--code", default=str(Path(__file__).resolve().parent.parent), help="project checkout to run")
    parser.add_argument("--label", default="after")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=240)
    parser.add_argument("--response", type=int, default=60)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    parser.add_argument("--out", default=str(RESULTS / "llm_cpu_profile.json"))
    args = parser.parse_args(argv)
    model = args.model
    if model is None:
        from ecpo_train.apps.models import default_cache_dir

        model = str(default_cache_dir() / "smollm2-135m-instruct")
        if not (Path(model) / "config.json").exists():
            print(f"error: {model} not found: run `ecpo models pull smollm2-135m-instruct` first", file=sys.stderr)
            return 2
    env = dict(os.environ, PYTHONPATH=args.code)
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    results = []
    for variant in args.variants.split(","):
        payload = json.dumps({"variant": variant, "model": model, "rows": args.rows, "prompt": args.prompt,
                              "response": args.response})
        proc = subprocess.run([sys.executable, "-c", CHILD, payload], capture_output=True, text=True, env=env, check=False,
                              cwd=args.code)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if line is None:
            print(f"{variant}: failed\n{proc.stderr[-2000:]}", file=sys.stderr)
            continue
        result = json.loads(line[7:]) | {"label": args.label, "rows": args.rows, "prompt": args.prompt,
                                         "response": args.response}
        results.append(result)
        rate = result.get("sampling_tokens_per_s") or result.get("sampling_decisions_per_s")
        unit = "tok/s" if "sampling_tokens_per_s" in result else "decisions/s"
        print(f"{args.label:>7} {variant:<14} peak RSS {result['peak_rss_gb']:.2f} GB | sampling {rate:.1f} {unit} | "
              f"update {result['train_tokens_per_s']:.1f} tok/s ({result['update_seconds']:.1f} s)", flush=True)
    out = Path(args.out)
    previous = json.loads(out.read_text()) if out.exists() else {}
    kept = [r for r in previous.get(args.label, []) if r["variant"] not in {r2["variant"] for r2 in results}]
    previous[args.label] = kept + results  # a rerun replaces the variants it measured
    out.write_text(json.dumps(previous, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
