"""What one CPU does with SmolLM2-135M: sampling and update tokens/s, and the peak RSS of an update.

Each variant runs in a fresh process: it loads the policy (and a frozen reference when ``--kl`` > 0), samples
once, and runs ``--updates`` calls of ``loss.policy_update`` (AdamW) over ``--rows`` rows; the first update is
reported as *cold* (allocations, page faults), the median of the others as the update's tokens/s, both in
wall-clock time and in the process's CPU time (which a shared machine disturbs far less). Variants:

- ``generate``: free generation (logits only at response positions, no KV cache in the learner);
- ``generate+ckpt``: the same with ``gradient_checkpointing``; ``+lora``: and a LoRA adapter (r=16);
- ``score``: ``policy_mode=score`` on the corridor preset's compact prompt (8 rows, 4 distinct contexts);
- ``score-alfworld``: ``policy_mode=score`` on real prompts of a small ALFWorld household (``alfworld_cpu``'s
  env, compact prompt, history 2, the admissible actions as candidates); ``score-alfworld+lora``: with LoRA.

Tokens are those a forward must compute: prompt + response per row (generate), the distinct contexts' prompt +
candidate tokens (score). ``--zero-frac`` gives that fraction of the rows a zero advantage (with ``--kl 0``
the current code leaves them out of the update).

``--before DIR`` measures another checkout (``git worktree add DIR <commit>``) side by side with this one, in
one run, interleaved (before, after, after, before, ...) so that a machine shared with other jobs disturbs both
alike; the ratio of each adjacent pair is reported with the load average at its start:

    python -m benchmarks.llm_cpu_profile --before /tmp/ecpo_before --variants score,score-alfworld --repeats 2

``--contention N`` instead times N iterations of the demo's training alone and beside one busy process, with
torch's default threads and with ``threads=auto`` (the slowdown ratio is the figure; it needs an idle machine to
mean "idle"). ``--code DIR --label NAME`` runs one checkout alone. Writes ``benchmarks/results/llm_cpu_profile.json`` (a rerun
replaces what it measured).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from benchmarks import RESULTS, ArgumentParser, require_model
from ecpo_train.files.atomic import write_text

VARIANTS = ("generate", "generate+ckpt", "generate+ckpt+lora", "score", "score-alfworld", "score-alfworld+lora")

CHILD = r"""
import inspect, json, os, resource, sys, time
import numpy as np, torch
args = json.loads(sys.argv[1])
torch.manual_seed(0)
from ecpo_train.core.loss import UpdateSettings, policy_update
from ecpo_train.policies.base import StepContext
from ecpo_train.policies.llm import TransformersPolicy
variant, model = args["variant"], args["model"]
load_start = os.getloadavg()[0]
lora = {"r": 16, "alpha": 32, "dropout": 0.0} if "+lora" in variant else None
extra = {"lora": lora} if lora else {}


def corridor(i):
    return StepContext(env_name="ecpo/DivergentAnchor-v0", task="walk through all 4 rooms", step_count=i % 4, history=[],
                       observation=f"room {i % 4 + 1}/4. doors: red, blue, green.",
                       admissible_actions=["open red door", "open blue door", "open green door"], state_key=str(i))


def alfworld_contexts(rows):
    # a small household's real prompts: 2 tasks x rows/4 copies, 2 steps each of random admissible actions
    import gymnasium as gym
    import ecpo_gym  # noqa: F401
    env = gym.make("ecpo/ALFWorldGen-v0", task_types=["Pick", "Look"], num_receptacles=(4, 5), max_steps=12)
    rng, out = np.random.default_rng(0), []
    for k in range(rows // 2):
        obs, info = env.reset(seed=k, options={"task_id": env.unwrapped.task_ids[k % 2]})
        history = []
        for step in range(2):
            out.append(StepContext(env_name="ecpo/ALFWorldGen-v0", task=str(info.get("task", "")), step_count=step,
                                   history=list(history[-2:]), observation=obs,
                                   admissible_actions=list(info["admissible_actions"]), state_key=str(info["state_key"])))
            action = info["admissible_actions"][int(rng.integers(len(info["admissible_actions"])))]
            history.append((obs, action))
            obs, _, _, _, info = env.step(action)
    return out[:rows]


rows = args["rows"]
if variant.startswith("score"):
    from ecpo_train.policies.scoring import ScoringPolicy
    alf = "alfworld" in variant
    policy = ScoringPolicy(model, env_name="ecpo/ALFWorldGen-v0" if alf else "ecpo/DivergentAnchor-v0",
                           history_length=2 if alf else 0, prompt_style="compact", **extra)
    contexts = alfworld_contexts(rows) if alf else [corridor(i) for i in range(rows)]
    started = time.perf_counter()
    sampled = policy.act(contexts, temperature=1.0)
    out = {"sampling_decisions_per_s": rows / (time.perf_counter() - started)}
    prompts, responses = sampled.prompt_ids, sampled.response_ids
    tokens = sum(len(p) for p in set(map(tuple, prompts)))  # distinct contexts: what a forward must compute
    keys = [tuple(p) for p in prompts]
else:
    policy = TransformersPolicy(model, env_name="ecpo/DivergentAnchor-v0", max_response_length=args["response"], **extra)
    base = torch.randint(100, 20000, (args["prompt"],)).tolist()
    prompts = [base[: args["prompt"] - i] for i in range(rows)]
    started = time.perf_counter()
    responses, _ = policy.sample(prompts, temperature=1.0)
    out = {"sampling_tokens_per_s": sum(len(r) for r in responses) / (time.perf_counter() - started)}
    responses = [torch.randint(100, 20000, (args["response"],)).tolist() for _ in range(rows)]
    tokens = sum(len(p) + len(r) for p, r in zip(prompts, responses))
    keys = None
if "+ckpt" in variant:
    from ecpo_train.policies.scaling import apply_memory_settings
    apply_memory_settings(policy.model, gradient_checkpointing=True, mixed_precision="none")
kl = args["kl"]
reference = policy.frozen_copy() if kl > 0 else None
with torch.no_grad():
    old, old_mask, _ = policy.logprobs(prompts, responses)
optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=1e-6)
settings = UpdateSettings(clip_eps=0.2, kl_coef=kl, entropy_coef=0.0, mini_batch_size=rows,
                          micro_batch_size=args["micro"], num_epochs=1, max_grad_norm=1.0)
advantages = torch.randn(rows, generator=torch.Generator().manual_seed(1))
advantages[torch.arange(rows) % 4 < round(4 * args["zero_frac"])] = 0.0
new_api = "row_keys" in inspect.signature(policy_update).parameters
extra_args = {"row_keys": keys, "row_tokens": np.asarray([len(p) + len(r) for p, r in zip(prompts, responses)])} \
    if new_api else {}
logprob_fn = lambda idx: policy.logprobs([prompts[i] for i in idx], [responses[i] for i in idx])  # noqa: E731


def ref_fn(idx):
    with torch.no_grad():
        return reference.logprobs([prompts[i] for i in idx], [responses[i] for i in idx])[0]


before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
walls, cpus = [], []
for _ in range(args["updates"]):
    wall, cpu = time.perf_counter(), time.process_time()
    policy_update(logprob_fn, ref_fn if reference is not None else None,
                  [p for p in policy.parameters() if p.requires_grad], optimizer, old.detach(), old_mask,
                  advantages, settings, np.random.default_rng(0), **extra_args)
    walls.append(time.perf_counter() - wall)
    cpus.append(time.process_time() - cpu)
warm = walls[1:] or walls
warm_cpu = cpus[1:] or cpus
out |= {"variant": variant, "update_tokens": tokens, "threads": torch.get_num_threads(),
        "cold_tokens_per_s": tokens / walls[0], "train_tokens_per_s": tokens / float(np.median(warm)),
        "cpu_tokens_per_s": tokens / float(np.median(warm_cpu)), "update_seconds": float(np.median(warm)),
        "update_seconds_all": walls, "cpu_seconds_all": cpus,
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, "rss_before_update_gb": before / 2**20,
        "load_start": load_start, "load_end": os.getloadavg()[0]}
print("RESULT " + json.dumps(out))
"""

DEMO_CHILD = r"""
import json, sys, tempfile
from ecpo_train.runtime.config import load_config
from ecpo_train.runtime.run import train
from ecpo_train.runtime.trainer import Trainer
args = json.loads(sys.argv[1])
with tempfile.TemporaryDirectory() as run_dir:
    config = load_config("corridor_llm", [f"model={args['model']}", f"run_dir={run_dir}", f"threads={args['threads']}",
                                          f"iterations={args['iterations']}", "val_every=0", "progress=false"])
    history = train(Trainer, config)
print("RESULT " + json.dumps([m["time/iteration"] for m in history if "time/iteration" in m]))
"""
BUSY = "import torch\na = torch.randn(768, 768)\nwhile True:\n    a = torch.tanh(a @ a)"


def contention(model: str, iterations: int, code: str) -> dict:
    """The demo's training (``corridor_llm``) per-iteration time alone and beside one busy process (a torch
    matmul loop with torch's default threads, like another training job), with torch's default threads and with
    ``threads=auto``; the busy/alone ratio is the slowdown a shared machine causes."""
    out: dict = {}
    for threads in ("0", "auto"):
        for busy in (False, True):
            competitor = subprocess.Popen([sys.executable, "-c", BUSY]) if busy else None
            load = os.getloadavg()[0]
            try:
                proc = subprocess.run([sys.executable, "-c", DEMO_CHILD, json.dumps(
                    {"model": model, "threads": threads, "iterations": iterations})], capture_output=True, text=True,
                    env=dict(os.environ, PYTHONPATH=code), cwd=code, check=False)
            finally:
                if competitor is not None:
                    competitor.kill()
                    competitor.wait()
            line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
            if line is None:
                print(f"threads={threads} busy={busy}: failed\n{proc.stderr[-2000:]}", file=sys.stderr)
                continue
            times = json.loads(line[7:])
            name = f"threads={'default' if threads == '0' else threads}, {'one busy process' if busy else 'alone'}"
            out[name] = {"seconds_per_iteration": float(np.median(times)), "all": times, "load_at_start": load}
            print(f"{name:<40} {np.median(times):6.1f} s per iteration (load {load:.1f})", flush=True)
    for threads in ("default", "auto"):
        alone, busy = out.get(f"threads={threads}, alone"), out.get(f"threads={threads}, one busy process")
        if alone and busy:
            out[f"slowdown threads={threads}"] = busy["seconds_per_iteration"] / alone["seconds_per_iteration"]
            print(f"threads={threads}: one busy process slows an iteration x{out[f'slowdown threads={threads}']:.2f}")
    return out


def run_child(code: str, payload: dict, threads: int) -> dict | None:
    env = dict(os.environ, PYTHONPATH=code)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(payload)], capture_output=True, text=True,
                          env=env, check=False, cwd=code)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        print(f"{payload['variant']} ({code}): failed\n{proc.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(line[7:])


def show(label: str, r: dict) -> None:
    rate = r.get("sampling_tokens_per_s") or r.get("sampling_decisions_per_s")
    unit = "tok/s" if "sampling_tokens_per_s" in r else "decisions/s"
    print(f"{label:>7} {r['variant']:<20} update {r['train_tokens_per_s']:6.1f} tok/s wall ({r['update_seconds']:.1f} s, "
          f"cold {r['cold_tokens_per_s']:.1f}), {r['cpu_tokens_per_s']:6.1f} tok/s of CPU time | sampling {rate:.1f} "
          f"{unit} | peak RSS {r['peak_rss_gb']:.2f} GB | load {r['load_start']:.1f}", flush=True)


def side_by_side(args, payloads: list[dict]) -> dict:
    """Interleaved before/after pairs and, per variant, the median of the pairs' ratios."""
    pairs: list[dict] = []
    for rep in range(args.repeats):
        for payload in payloads:
            sides = [("before", args.before), ("after", args.code)]
            got = {}
            for label, code in sides if rep % 2 == 0 else sides[::-1]:  # ABBA: a drifting load hits both
                result = run_child(code, payload, args.threads)
                if result is not None:
                    show(label, result)
                    got[label] = result
            if len(got) == 2:
                pairs.append({"variant": payload["variant"], "repeat": rep, **got,
                              "ratio_wall": got["after"]["train_tokens_per_s"] / got["before"]["train_tokens_per_s"],
                              "ratio_cpu": got["after"]["cpu_tokens_per_s"] / got["before"]["cpu_tokens_per_s"]})
    summary = {}
    for variant in dict.fromkeys(p["variant"] for p in pairs):
        mine = [p for p in pairs if p["variant"] == variant]
        summary[variant] = {key: float(np.median([p[side][field] for p in mine])) for key, side, field in (
            ("before_tokens_per_s", "before", "train_tokens_per_s"), ("after_tokens_per_s", "after", "train_tokens_per_s"),
            ("before_cpu_tokens_per_s", "before", "cpu_tokens_per_s"),
            ("after_cpu_tokens_per_s", "after", "cpu_tokens_per_s"), ("load", "before", "load_start"))}
        summary[variant] |= {"ratio_wall": float(np.median([p["ratio_wall"] for p in mine])),
                             "ratio_cpu": float(np.median([p["ratio_cpu"] for p in mine])), "pairs": len(mine)}
        s = summary[variant]
        print(f"{variant:<20} before {s['before_tokens_per_s']:6.1f} -> after {s['after_tokens_per_s']:6.1f} tok/s "
              f"(x{s['ratio_wall']:.2f} wall, x{s['ratio_cpu']:.2f} CPU time; {len(mine)} pairs, load {s['load']:.1f})")
    return {"pairs": pairs, "summary": summary}


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(__spec__.name, description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, help="default: the pulled smollm2-135m-instruct")
    parser.add_argument("--code", default=str(Path(__file__).resolve().parent.parent), help="project checkout to run")
    parser.add_argument("--before", default=None, help="an older checkout measured side by side, interleaved")
    parser.add_argument("--repeats", type=int, default=2, help="interleaved before/after pairs per variant")
    parser.add_argument("--label", default="after")
    parser.add_argument("--variants", default="score,score-alfworld")
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--micro", type=int, default=8, help="micro_batch_size")
    parser.add_argument("--prompt", type=int, default=240)
    parser.add_argument("--response", type=int, default=60)
    parser.add_argument("--updates", type=int, default=3, help="updates per process: one cold, the rest warm")
    parser.add_argument("--kl", type=float, default=0.01)
    parser.add_argument("--zero-frac", type=float, default=0.0, help="fraction of rows with advantage 0")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    parser.add_argument("--contention", type=int, default=0, metavar="ITERATIONS",
                        help="instead: the demo's iteration time alone vs beside one busy process (default vs auto threads)")
    parser.add_argument("--out", default=str(RESULTS / "llm_cpu_profile.json"))
    args = parser.parse_args(argv)
    model = args.model
    if model is None:
        from ecpo_train.runtime.models import default_cache_dir

        model = str(default_cache_dir() / "smollm2-135m-instruct")
        require_model(model)
    unknown = set(args.variants.split(",")) - set(VARIANTS)
    if unknown:
        print(f"error: unknown variants {sorted(unknown)}; valid: {', '.join(VARIANTS)}", file=sys.stderr)
        return 2
    settings = {"rows": args.rows, "micro": args.micro, "prompt": args.prompt, "response": args.response,
                "updates": args.updates, "kl": args.kl, "zero_frac": args.zero_frac}
    payloads = [{"variant": v, "model": model, **settings} for v in args.variants.split(",")]
    out = Path(args.out)
    previous = json.loads(out.read_text()) if out.exists() else {}
    if args.contention:
        previous["demo_contention"] = contention(model, args.contention, args.code)
        write_text(out, json.dumps(previous, indent=1))
        return 0
    if args.before:
        result = side_by_side(args, payloads) | {"settings": settings | {"threads": args.threads or "default"}}
        name = f"side_by_side_{args.variants}_kl{args.kl}_zero{args.zero_frac}_threads{args.threads}"
        previous[name] = result
    else:
        results = []
        for payload in payloads:
            result = run_child(args.code, payload, args.threads)
            if result is not None:
                show(args.label, result)
                results.append(result | {"label": args.label} | settings)
        kept = [r for r in previous.get(args.label, []) if r["variant"] not in {r2["variant"] for r2 in results}]
        previous[args.label] = kept + results  # a rerun replaces the variants it measured
    write_text(out, json.dumps(previous, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
