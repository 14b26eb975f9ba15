"""Peak resident memory of ``ecpo sft``'s step and of the scoring update against the number of candidates.

Rows are real ALFWorld steps (the expert's first steps of a ``valid_seen`` game under the ``alfworld_cpu``
preset with ``env_id=ecpo/ALFWorld-v0``: compact prompt, no history), each with its first ``K`` admissible
actions (topped up from the other steps' actions where a step lists fewer) packed after its prompt, the
row the scoring policy stores. Each figure is one fresh process (``PeakSampler``: RSS polled every 2 ms) that
loads SmolLM2-135M-Instruct and runs one step on ``--rows`` distinct rows:

- ``sft before``: one ``fine_tune`` optimizer step as it ran before the token bound, one forward of every row,
  no checkpointing; ``sft after``: the same step at ``ecpo sft``'s defaults (forwards of at most the preset's
  ``max_tokens_per_micro_batch`` tokens, checkpointed layers);
- ``update before``: one ``loss.policy_update`` (AdamW, the preset's micro-batch settings) as the preset ran it;
  ``update after``: the same with ``gradient_checkpointing`` (the preset's setting now).

Figures already in ``--out`` for the same rows, model and limit are kept (a run may be continued with other
``--candidates``). A process passing ``--limit-gb`` of RSS is stopped (the figure is then "over the limit"): on a shared machine
the unbounded path is only measured where it fits. ``peak_gb`` is the process's whole resident set (model,
AdamW state, rows); ``step_gb`` what the step added to it.

    python -m benchmarks.candidate_memory [--candidates 5,10,20,40,80] [--rows 2] [--limit-gb 6]
                                          [--out benchmarks/results/candidate_memory.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import RESULTS, ArgumentParser, fail, require_model
from benchmarks.memory import GB, PeakSampler

ROOT = Path(__file__).resolve().parents[1]
MODEL = "~/.cache/ecpo/models/smollm2-135m-instruct"
CASES = ("sft before", "sft after", "update before", "update after")
OVERRIDES = ["env_id=ecpo/ALFWorld-v0", "env_kwargs={split: valid_seen}"]
POOL_EPISODES = 4  # the rows are the first game's first steps; these games' actions top a step's list up


def real_rows(policy: Any, config: Any, rows: int, candidates: int) -> tuple[list[list[int]], list[list[int]]]:
    """``rows`` packed scoring rows of distinct real steps with ``candidates`` candidates each; the expert's
    action is candidate 0. The first game's first steps (the same rows at every ``candidates``), each with its
own admissible actions first, topped up from those of the first ``POOL_EPISODES`` games."""
    from ecpo_train.runtime.sft import expert_demonstrations
    from ecpo_train.policies.scoring import fill_placeholders, pack_candidates

    played = expert_demonstrations(config.env_id, episodes=POOL_EPISODES, env_kwargs=config.env_kwargs, seed=0,
                                   history_length=config.history_length)
    demos = played[:rows]
    if len(demos) < rows:
        raise ValueError(f"the expert's games have {len(played)} steps, fewer than --rows {rows}")
    pool = list(dict.fromkeys(a for d in played for a in d.context.admissible_actions))
    prompts = policy.encode_prompts([d.context for d in demos])
    packed = []
    for demo, prompt in zip(demos, prompts):
        actions = list(dict.fromkeys([demo.action, *demo.context.admissible_actions, *pool]))
        if len(actions) < candidates:
            raise ValueError(f"the games list {len(actions)} distinct actions, fewer than {candidates}")
        actions = [fill_placeholders(a, demo.context.task) for a in actions[:candidates]]
        packed.append(pack_candidates(prompt, policy.candidate_ids(actions)))
    return packed, [[0]] * rows


def measure(case: str, rows: int, candidates: int, model: str) -> dict[str, Any]:
    """One case in this process: build the policy, the rows, then the step's peak RSS."""
    import torch

    from ecpo_train.runtime.sft import SFT_MAX_TOKENS, fine_tune
    from ecpo_train.core.loss import UpdateSettings, policy_update
    from ecpo_train.runtime.builders import build_policy
    from ecpo_train.runtime.config import load_config

    torch.set_num_threads(1)
    config = load_config("alfworld_cpu", [f"model={model}", *OVERRIDES])
    checkpointing = case.endswith("after")
    config = dataclasses.replace(config, lora={}, explore_epsilon=0.0, gradient_checkpointing=checkpointing)
    policy = build_policy(config)
    packed, chosen = real_rows(policy, config, rows, candidates)
    sampler = PeakSampler()
    sampler.start()
    started = time.perf_counter()
    if case.startswith("sft"):
        max_tokens = (config.max_tokens_per_micro_batch or SFT_MAX_TOKENS) if checkpointing else 1 << 40
        fine_tune(policy, packed, chosen, epochs=1, lr=1e-6, batch_size=rows, max_tokens=max_tokens)
    else:
        params = [p for p in policy.model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=config.lr)
        settings = UpdateSettings(mini_batch_size=config.mini_batch_size, micro_batch_size=config.micro_batch_size,
                                  max_tokens_per_micro_batch=config.max_tokens_per_micro_batch,
                                  kl_coef=config.kl_coef)
        with torch.no_grad():
            old = policy.logprobs(packed, chosen)[0]
        row_keys = [tuple(p) for p in packed]
        policy_update(lambda idx: policy.logprobs([packed[i] for i in idx], [chosen[i] for i in idx]), None,
                      params, optimizer, old, torch.ones(rows, 1), torch.linspace(-1.0, 1.0, rows), settings,
                      np.random.default_rng(0), row_tokens=np.asarray([len(p) for p in packed]), row_keys=row_keys)
    seconds = time.perf_counter() - started
    peak = sampler.stop()
    tokens = sum(len(p) - candidates for p in packed)  # the separators are no tokens
    return {"peak_gb": peak / GB, "step_gb": (peak - sampler.baseline) / GB, "seconds": seconds,
            "tokens": int(tokens), "checkpointing": checkpointing}


def run_child(case: str, rows: int, candidates: int, model: str, limit_gb: float) -> dict[str, Any]:
    """``measure`` in a fresh process, stopped once its RSS passes ``limit_gb``."""
    import psutil

    command = [sys.executable, "-m", "benchmarks.candidate_memory", "--child", case, "--rows", str(rows),
               "--candidates", str(candidates), "--model", model]
    child = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak, over = 0, False

    def watch() -> None:
        nonlocal peak, over
        process = psutil.Process(child.pid)
        while child.poll() is None:
            try:
                peak = max(peak, process.memory_info().rss)
            except psutil.NoSuchProcess:
                return
            if peak > limit_gb * GB:
                over = True
                child.kill()
                return
            time.sleep(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    out, err = child.communicate()
    watcher.join()
    if over:
        return {"over_limit_gb": limit_gb}
    if child.returncode != 0:
        raise RuntimeError(f"{case} K={candidates} failed (exit {child.returncode}): {err.strip()[-600:]}")
    return json.loads(out.strip().splitlines()[-1])


def render(report: dict[str, Any]) -> str:
    lines = [(f"rows per step: {report['rows']}; model {report['model']}; machine {report['machine']}, "
              f"load {report['load_average_start']:.1f} -> {report['load_average_end']:.1f}"),
             "candidates | " + " | ".join(f"{case} peak GB" for case in CASES)]
    for k, cases in report["figures"].items():
        cells = [f"> {c['over_limit_gb']:.0f}" if "over_limit_gb" in c else f"{c['peak_gb']:.2f}"
                 for c in (cases[case] for case in CASES if case in cases)]
        lines.append(f"{k} | " + " | ".join(cells))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(__spec__.name if __spec__ else "benchmarks.candidate_memory", description=__doc__)
    parser.add_argument("--candidates", default="5,10,20,40,80")
    parser.add_argument("--rows", type=int, default=2)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--limit-gb", type=float, default=6.0)
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--out", default=str(RESULTS / "candidate_memory.json"))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child, args.rows, int(args.candidates), os.path.expanduser(args.model))))
        return
    try:
        ks = [int(k) for k in args.candidates.split(",")]
    except ValueError:
        fail(f"--candidates {args.candidates!r}: give integers separated by commas")
    cases = [c.strip() for c in args.cases.split(",")]
    if any(c not in CASES for c in cases) or args.rows < 1 or min(ks) < 1:
        fail(f"--cases are among {', '.join(CASES)}; --rows and --candidates are >= 1")
    require_model(args.model)
    report: dict[str, Any] = {"model": args.model, "rows": args.rows, "preset": "alfworld_cpu",
                              "overrides": OVERRIDES, "limit_gb": args.limit_gb,
                              "machine": f"{platform.machine()}, {os.cpu_count()} cores, 1 torch thread",
                              "load_average_start": os.getloadavg()[0], "figures": {}}
    out = Path(args.out)
    if out.is_file():  # the same measurement, continued: its other figures are kept
        earlier = json.loads(out.read_text())
        if all(earlier.get(key) == report[key] for key in ("model", "rows", "overrides", "limit_gb")):
            report["figures"] = earlier["figures"]
    for k in ks:
        for case in cases:
            figure = run_child(case, args.rows, k, args.model, args.limit_gb)
            figure["load_average"] = os.getloadavg()[0]
            report["figures"].setdefault(str(k), {})[case] = figure
            print(f"K={k} {case}: {json.dumps(figure)}", flush=True)
            report["load_average_end"] = os.getloadavg()[0]
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(report, indent=1) + "\n")
    print(render(report), end="")


if __name__ == "__main__":
    main()
