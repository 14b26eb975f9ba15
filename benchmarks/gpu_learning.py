"""The SmolLM2 learning runs of the GPU commands (``gpu_run`` part 4, ``gpu_comparison``) and the trainer figures
they report: the warm start's setup, validation with its outcomes and time, an iteration's time split and rates,
and part 4 itself (module docstring of ``benchmarks/gpu_run.py``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import RAW_RESULTS
from benchmarks.gpu_run_report import outcomes

ROOT = Path(__file__).resolve().parents[1]
# the CPU runs of the alfworld_cpu recipe (the update recipe alfworld_gpu keeps), for the rates beside the GPU's
CPU_REFERENCE = RAW_RESULTS / "small_households" / "alfworld_cpu_sft48_lr3e6_warmup9_metrics.jsonl"
DEFAULT_MODEL = ROOT / "device_bundle" / "models" / "smollm2-135m-instruct"


def tokenizer_dir() -> Path:
    """``$ECPO_TOKENIZER_DIR``, else the bundle's copy in the checkout (``scripts/device_bundle.py install``)."""
    for candidate in (os.environ.get("ECPO_TOKENIZER_DIR"), ROOT / "device_bundle" / "tokenizer"):
        if candidate and (Path(candidate) / "tokenizer.json").is_file():
            return Path(candidate)
    raise FileNotFoundError("no Qwen2.5 tokenizer: set ECPO_TOKENIZER_DIR or run scripts/device_bundle.py install")


# ---------------------------------------------------------------------------------------------- trainer helpers
# the credit regime of an iteration: the share of anchors ECPO's gate shut (absent for estimators without one),
# lucky singletons in the batch, the share of anchors whose visits diverge
REGIME_KEYS = ("credit/gated_fraction", "credit/num_lucky_singletons", "credit/divergent_anchor_fraction")


def iteration_figures(metrics: dict[str, float]) -> dict[str, float]:
    """The time split, rates and credit regime of one trainer iteration (the update's tokens:
    ``update/tokens_computed``, the sequences of the rows its forward and backward passes computed, every epoch)."""
    update_tokens = metrics.get("update/tokens_computed", 0.0)
    keep = {k: float(v) for k, v in metrics.items()
            if k.startswith("time/") or k in REGIME_KEYS
            or k in ("num_steps", "success", "update/rows_computed", "update/optimizer_steps")}
    acting = metrics["time/generation"] + metrics["time/env"]
    return keep | {"rows_per_iteration": float(metrics["num_steps"]),
                   "decisions_per_s": metrics["num_steps"] / max(acting, 1e-9), "update_tokens": float(update_tokens),
                   "update_tokens_per_s": update_tokens / metrics["time/update"] if update_tokens else 0.0}


def mean_figures(rows: list[dict[str, float]]) -> dict[str, float]:
    keys = set.intersection(*(set(r) for r in rows)) if rows else set()
    return {k: float(np.mean([r[k] for r in rows])) for k in sorted(keys)}


# ---------------------------------------------------------------------------------------------- part 4
def validate_on(run: Any, tasks: list[str] | None = None, label: str | None = None) -> tuple[dict, float]:
    """Validate a started run's policy (``runtime.run.Run.validate``: the configured validation tasks, or
    ``tasks`` recorded under ``label``) and return ``([[task, copy, won], ...], seconds)``."""
    from ecpo_train.runtime.run_dir import VALIDATION_TASKS, read_validation_file

    label = label or VALIDATION_TASKS
    started = time.perf_counter()
    run.validate(tasks, label)
    seconds = time.perf_counter() - started
    return outcomes(read_validation_file(run.run_dir / "validation.jsonl", tasks=label)[-1]), seconds


def cpu_reference() -> dict[str, Any] | None:
    """The mean iteration figures of the alfworld_cpu recipe's CPU run (its update tokens were not recorded)."""
    if not CPU_REFERENCE.is_file():
        return None
    rows = [json.loads(line) for line in CPU_REFERENCE.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if "time/update" in r]
    if not rows:
        return None
    figures = mean_figures([{k: v for k, v in r.items() if k.startswith("time/") or k == "num_steps"} for r in rows])
    figures["rows_per_iteration"] = figures["num_steps"]
    figures["decisions_per_s"] = figures["num_steps"] / (figures["time/generation"] + figures["time/env"])
    return figures | {"source": str(CPU_REFERENCE.relative_to(ROOT)), "iterations": len(rows),
                      "update_tokens_per_s": None}


def learning_overrides(args: argparse.Namespace, work: Path) -> tuple[str, list[str]]:
    """SmolLM2's folder (under ``--smoke`` the tiny random model's, which :func:`write_smoke_model` writes) and the
    preset overrides of a learning run: the model, the device, no progress line, no periodic validation, and the
    smoke sizes. A missing model is a ``FileNotFoundError`` naming the command that converts it. Nothing is
    written, so a command checks its configs before it builds anything."""
    base = str(work / "tiny") if args.smoke else args.model
    if not args.smoke and not (Path(base) / "config.json").is_file():
        raise FileNotFoundError(f"no model at {base}: run `python scripts/device_bundle.py model` (docs/gpu.md) or "
                                "pass --model")
    overrides = [f"model={base}", f"device={args.device}", "progress=false", "val_every=0"]
    if args.smoke:
        overrides += ["n_groups=2", "group_size=2", "val_tasks=[gen/Look/10000,gen/Pick/10000]", "mixed_precision=none",
                      "micro_batch_size=4", "mini_batch_size=8", "threads=1",
                      "env_kwargs={task_types: [Look, Pick], num_receptacles: [4, 5], max_steps: 4, num_tasks: 8}"]
    return base, overrides


def write_smoke_model(args: argparse.Namespace, work: Path) -> None:
    """Under ``--smoke``, write the tiny random model :func:`learning_overrides` names (otherwise nothing)."""
    if args.smoke:
        from ecpo_train.runtime.models import write_tiny_model

        write_tiny_model(work / "tiny", tokenizer_path=tokenizer_dir())


def part_learning(args: argparse.Namespace, work: Path, deadline: float, save: Any) -> dict[str, Any]:
    """SFT warm start, validation, ECPO for the time left, validation (module docstring, part 4).

    ``save(part)`` is called after each stage with the part so far."""
    from ecpo_train.runtime.config import load_config
    from ecpo_train.runtime.run import open_run
    from ecpo_train.runtime.sft import run_sft
    from ecpo_train.runtime.trainer import Trainer

    base, overrides = learning_overrides(args, work)
    overrides = [f"run_dir={work / 'learning_run'}", *overrides]
    config = load_config(args.preset, overrides)
    write_smoke_model(args, work)
    part: dict[str, Any] = {"preset": args.preset, "overrides": overrides, "model": str(base)}
    started = time.perf_counter()
    sft_dir = work / "sft_model"
    part["sft"] = run_sft(config, episodes=args.sft_episodes, epochs=args.sft_epochs, lr=args.sft_lr, out=sft_dir)
    part["sft"]["seconds"] = time.perf_counter() - started
    save(part)

    run = open_run(Trainer, dataclasses.replace(config, model=str(sft_dir)), overwrite=True)
    trainer = run.engine
    if args.device.startswith("cuda"):  # distinct (prompt, candidates) items per scoring forward (8 by default)
        trainer.policy.score_batch_size = args.score_batch
    train_tasks = trainer.train_tasks[: args.train_val_tasks]
    part |= {"attention": trainer.policy.model.config._attn_implementation,
             "score_batch_size": trainer.policy.score_batch_size}
    with run:
        before_val, val_seconds = validate_on(run)
        before_train, train_seconds = validate_on(run, train_tasks, "training_tasks")
        part["outcomes"] = {"validation": {"before": before_val}, "training_tasks": {"before": before_train}}
        part |= {"validation_seconds": val_seconds, "training_task_validation_seconds": train_seconds,
                 "validation_tasks": len(trainer.val_tasks), "training_tasks_validated": len(train_tasks)}
        save(part)
        reserve = 1.15 * (val_seconds + train_seconds) + 10.0  # the closing validations and the last writes
        rows: list[dict[str, float]] = []
        if time.monotonic() + reserve > deadline:  # not even the closing validation fits: keep what was measured
            part["stopped"] = "the time limit left no room for an iteration and the closing validation"
            return part | {"iterations_planned": 0, "iterations_done": 0, "seconds": time.perf_counter() - started}
        walls: list[float] = []  # an iteration's wall time here: the run's iteration, its log line and the save
        last = [time.monotonic()]

        def stop(metrics: dict[str, float]) -> bool:  # the run shell asks after each iteration
            rows.append(iteration_figures(metrics))
            part.update({"iterations_done": len(rows), "per_iteration": rows, "rates": mean_figures(rows)})
            save(part)
            walls.append(time.monotonic() - last[0])
            last[0] = time.monotonic()
            if len(rows) == 1:
                left = deadline - time.monotonic() - reserve
                part["iterations_planned"] = 1 + max(0, int(left // walls[0]))
            if len(rows) >= min(part["iterations_planned"], args.max_iterations):
                return True
            if time.monotonic() + float(np.mean(walls)) + reserve > deadline:
                part["stopped"] = f"time limit after {len(rows)} iterations"
                return True
            return False

        run.train(args.max_iterations, stop=stop)
        after_val, _ = validate_on(run)
        after_train, _ = validate_on(run, train_tasks, "training_tasks")
    part["outcomes"]["validation"]["after"] = after_val
    part["outcomes"]["training_tasks"]["after"] = after_train
    return part | {"cpu_reference": cpu_reference(), "seconds": time.perf_counter() - started}
