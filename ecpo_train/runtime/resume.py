"""Starting a run in its folder without losing what is there: fresh start, ``--resume`` or ``--overwrite``.

A run folder holds a run when it has ``config.yaml``, ``metrics.jsonl`` or ``checkpoint.pt``. Then a plain start
is refused (one line naming ``--resume`` and ``--overwrite``), ``--resume`` continues the checkpoint, and
``--overwrite`` deletes the run's own files (those listed in ``RUN_FILES``; anything else in the folder stays)
and starts over. Every check happens before the folder is touched: a refused start changes no byte.

A resume may not change what the run is: any key outside ``RESUMABLE_KEYS`` (algorithm, env, model, group
size, credit hyperparameters, ...) that differs from the checkpoint's config is refused, naming the key. The
keys that may change are recorded in ``history.jsonl``, one JSON line per start, resume or overwrite.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ecpo_train.runtime.run_dir import check_metrics_file, load_checkpoint

RUN_MARKERS = ("config.yaml", "metrics.jsonl", "checkpoint.pt", "rllib_checkpoint")
# what a trainer writes into its folder (LoRA runs add adapter/ and merged/, `ecpo eval` adds eval/)
RUN_FILES = ("config.yaml", "metrics.jsonl", "validation.jsonl", "checkpoint.pt", "checkpoint.tmp", "curves.png",
             "history.jsonl", "tensorboard", "adapter", "merged", "eval", "rllib_checkpoint")  # the last: `--engine rllib`
# bookkeeping: changing these on --resume continues the same run (where it lives, how long, what is logged)
RESUMABLE_KEYS = frozenset({"run_dir", "iterations", "checkpoint_every", "save_optimizer", "tensorboard",
                            "progress", "val_every", "val_after_first", "env_workers"})
HISTORY_FILE = "history.jsonl"


@dataclass
class StartPlan:
    """What starting a run in ``run_dir`` does: ``start`` (no run there), ``resume`` or ``overwrite``."""

    run_dir: Path
    kind: str
    changes: dict[str, list[Any]] = field(default_factory=dict)


def holds_run(run_dir: Path) -> bool:
    return any((run_dir / name).exists() for name in RUN_MARKERS)


def plan_start(run_dir: Path, new_config: dict[str, Any], resume: bool = False, overwrite: bool = False) -> StartPlan:
    """The start ``resume``/``overwrite`` ask for in ``run_dir``, or a ``ValueError`` (nothing is written).

    On ``--resume`` of a folder without a checkpoint the new config is compared with its ``config.yaml``; with a
    checkpoint, :func:`open_run` compares it with the checkpoint's own config, which is authoritative (a
    ``config.yaml`` may have been edited, or damaged by an older version)."""
    if resume and overwrite:
        raise ValueError("--resume continues the run in run_dir and --overwrite replaces it: choose one")
    if run_dir.exists() and not run_dir.is_dir():
        raise ValueError(f"run_dir={str(run_dir)!r} is a file, not a folder")
    if not holds_run(run_dir):
        return StartPlan(run_dir, "start")
    if overwrite:
        return StartPlan(run_dir, "overwrite")
    if not resume:
        raise ValueError(f"run_dir={str(run_dir)!r} already holds a run: pass --resume to continue it, "
                         "--overwrite to replace it, or choose another run_dir=")
    if (run_dir / "checkpoint.pt").exists():
        return StartPlan(run_dir, "resume")
    saved = read_saved_config(run_dir / "config.yaml")
    return StartPlan(run_dir, "resume", resume_changes(saved, new_config) if saved is not None else {})


def read_saved_config(path: Path) -> dict[str, Any] | None:
    """The config a run recorded, or ``None`` when there is none (a damaged file is an error naming it)."""
    if not path.is_file():
        return None
    try:
        values = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is not valid YAML ({type(err).__name__}); restore it, or --overwrite the run") \
            from None
    if not isinstance(values, dict):
        raise ValueError(f"{path} is not a mapping of config keys; restore it, or --overwrite the run")  # noqa: TRY004
    return values


def _flatten(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict) and key in ("credit", "env_kwargs", "lora", "vllm_kwargs"):
            flat |= _flatten(value, f"{prefix}{key}.")
            if not value:
                flat[f"{prefix}{key}"] = {}
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _same(old: Any, new: Any) -> bool:
    # YAML and the checkpoint may hold a tuple where the config holds a list (and an int for a float)
    if isinstance(old, (list, tuple)) and isinstance(new, (list, tuple)):
        return len(old) == len(new) and all(_same(a, b) for a, b in zip(old, new))
    return old == new


def resume_changes(saved: dict[str, Any], new: dict[str, Any]) -> dict[str, list[Any]]:
    """``{key: [old, new]}`` of the resumable keys that change; a change of any other key is a ``ValueError``.

    Keys only one side has (a config written by another version) are not compared."""
    old_flat, new_flat = _flatten(saved), _flatten(new)
    changes: dict[str, list[Any]] = {}
    for key in sorted(set(old_flat) & set(new_flat)):
        old, value = old_flat[key], new_flat[key]
        if _same(old, value):
            continue
        if key.split(".")[0] not in RESUMABLE_KEYS:
            raise ValueError(f"--resume cannot change {key} (the run has {old!r}, now {value!r}): it changes what "
                             "the run is; keep it, or start a new run_dir (or --overwrite)")
        changes[key] = [old, value]
    return changes


def check_writable_folder(run_dir: Path) -> None:
    """``ValueError`` unless ``run_dir`` is, or can be made as, a writable folder; writes nothing."""
    from ecpo_train.runtime.run_dir import check_writable_folder as check

    check(run_dir, f"run_dir={str(run_dir)!r}")


def append_history(run_dir: Path, event: str, iteration: int, changes: dict[str, list[Any]] | None = None) -> None:
    """One line of ``history.jsonl``: what happened to the run, when, at which iteration, with which changes."""
    record = {"event": event, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "iteration": iteration,
              "changes": changes or {}, "argv": sys.argv[1:]}
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / HISTORY_FILE, "a") as fh:
        fh.write(json.dumps(record, default=str) + "\n")


def remove_run_files(run_dir: Path) -> None:
    """Delete the files a run wrote (``RUN_FILES``) from ``run_dir``; other files stay."""
    for name in RUN_FILES:
        path = run_dir / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


def open_run(trainer: Any, resume: bool = False, overwrite: bool = False) -> StartPlan:
    """Check everything a start needs, then prepare ``trainer``'s folder for ``trainer.train()``.

    ``trainer`` is built (env and model checked) but has written nothing. On ``--resume`` the checkpoint is read
    and checked against the config, and ``metrics.jsonl`` is checked, before the first byte is written. Under
    FSDP process 0 checks the folder and writes; every process reads the checkpoint, and all refuse together."""
    from ecpo_train.runtime.config import config_dict

    run_dir, config = trainer.run_dir, config_dict(trainer.config)
    refusal: ValueError | None = None
    plan, state = StartPlan(run_dir, "start"), None
    try:
        # the other processes take process 0's reading of the folder (it may already be writing it)
        plan = plan_start(run_dir, config, resume=resume, overwrite=overwrite) if trainer.is_main else \
            StartPlan(run_dir, "resume" if resume else "start")
        if plan.kind == "resume" and (run_dir / "checkpoint.pt").exists():
            state = _checked_checkpoint(run_dir, trainer.config.iterations)
            plan.changes = resume_changes(dict(state.get("config") or {}), config)
            if trainer.is_main:
                check_metrics_file(run_dir / "metrics.jsonl")
    except ValueError as err:
        refusal = err
    if trainer.dp is not None and trainer.dp.max(float(refusal is not None)):
        raise refusal or ValueError("process 0 refused the start (its error is above)")
    if refusal is not None:
        raise refusal
    if not trainer.is_main:
        if state is not None:
            trainer.load_checkpoint(state=state)
        return plan
    if plan.kind == "overwrite":
        remove_run_files(run_dir)
    if state is not None:
        trainer.load_checkpoint(state=state)  # drops metrics lines after the checkpoint; writes config.yaml
        append_history(run_dir, "resume", trainer.iteration, plan.changes)
    elif plan.kind == "resume":
        print(f"warning: {run_dir / 'checkpoint.pt'} not found: the run starts over from iteration 0",
              file=sys.stderr)
        append_history(run_dir, "restart", 0, plan.changes)
    else:
        append_history(run_dir, plan.kind, 0)
    return plan


def _checked_checkpoint(run_dir: Path, iterations: int) -> dict[str, Any]:
    """The run's checkpoint, read once; a damaged file, or one the config cannot continue, is a ``ValueError``."""
    state = load_checkpoint(run_dir / "checkpoint.pt")
    if not isinstance(state, dict) or "iteration" not in state or "policy" not in state:
        raise ValueError(f"{run_dir / 'checkpoint.pt'} is not an ECPO trainer checkpoint")
    if iterations < int(state["iteration"]):
        raise ValueError(f"iterations={iterations} is below the checkpoint's iteration {int(state['iteration'])}: "
                         f"set iterations >= {int(state['iteration'])} to continue")
    return state
