"""The SmolLM2 learning runs of the GPU commands (``gpu_comparison``, ``paper_benchmarks``) and the trainer figures
they report: the warm start's setup, validation with its outcomes and time, an iteration's time split and rates.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import ROOT
from benchmarks.timing import timed

DEFAULT_MODEL = ROOT / "device_bundle" / "models" / "smollm2-135m-instruct"


def tokenizer_dir() -> Path:
    """``$ECPO_TOKENIZER_DIR``, else the bundle's copy in the checkout (``scripts/device_bundle.py install``)."""
    for candidate in (os.environ.get("ECPO_TOKENIZER_DIR"), ROOT / "device_bundle" / "tokenizer"):
        if candidate and (Path(candidate) / "tokenizer.json").is_file():
            return Path(candidate)
    raise FileNotFoundError("no Qwen2.5 tokenizer: set ECPO_TOKENIZER_DIR or run scripts/device_bundle.py install")


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


def validate_on(run: Any, tasks: list[str] | None = None, label: str | None = None) -> tuple[dict, float]:
    """Validate a started run's policy (``runtime.run.Run.validate``: the configured validation tasks, or
    ``tasks`` recorded under ``label``) and return ``([[task, copy, won], ...], seconds)``."""
    from ecpo_train.runtime.run_dir import VALIDATION_TASKS, read_validation_file

    label = label or VALIDATION_TASKS
    seconds = timed(run.validate, tasks, label)[1]
    line = read_validation_file(run.run_dir / "validation.jsonl", tasks=label)[-1]  # JSON-friendly, by task and copy
    return [[t, c, int(w)] for t, c, w in zip(line["task_ids"], line["copies"], line["won"])], seconds


def write_smoke_model(args: argparse.Namespace, work: Path) -> None:
    """Under ``--smoke``, write the tiny random model ``arms.run_overrides`` names (otherwise nothing)."""
    if args.smoke:
        from ecpo_train.runtime.models import write_tiny_model

        write_tiny_model(work / "tiny", tokenizer_path=tokenizer_dir())
