"""Starting a run in its folder without losing what is there: fresh start, ``--resume`` or ``--overwrite``.

A run folder holds a run when it has any file a run writes (``run_dir.run_files()``: ``config.yaml``,
``metrics.jsonl``, ``validation.jsonl``, ``history.jsonl``, a checkpoint, ...; what a run folder holds, and every
writer of it, is ``ecpo_train.runtime.run_dir``). Then a plain start is refused (one line naming ``--resume`` and
``--overwrite``), so a start never erases an earlier run's files; ``--resume`` continues the checkpoint, and ``--overwrite`` deletes the run's own files (``run_dir.run_files()``; anything else in the folder
stays) and starts over. ``--resume`` of a folder without a checkpoint is refused (naming ``--overwrite``) rather
than cutting its history, and so is ``--resume`` of a folder another engine wrote (its checkpoint, or
``engine: NAME`` in ``config.yaml``: ``runtime/engines.py``): no engine reads another's state. ``--resume`` where there is no run (a missing folder, an empty one, one of unrelated files: a
typo in a path) is refused too; ``--resume-or-start`` (``resume="auto"``) is the spelling for "resume the run if
there is one, else start"; where the run stopped before its first checkpoint, it starts the run again there (kind
``restart``: its metrics are dropped, ``history.jsonl`` keeps the killed start, the config must be the run's as on
``--resume``). ``--overwrite`` and ``--resume-or-start`` touch only a folder a run wrote (one of ``run_dir.own_markers()``:
``history.jsonl``, ``metrics.jsonl``, a checkpoint), never a folder whose ``config.yaml`` or ``eval/`` is the user's;
``run_dir=''`` (the current folder, by accident) is refused. Every check happens before the folder is touched: a refused start changes no byte. The run
shell (``runtime/run.py``) plans the start under the folder's lock (``ecpo_train.runtime.run_lock``), held while the
run writes.

A resume may not change what the run is: any key outside ``RESUMABLE_KEYS`` (estimator, env, model, group
size, credit hyperparameters, ...) that differs from the checkpoint's config is refused, naming the key; inside
``env_kwargs``, ``lora`` and ``vllm_kwargs`` a key added or dropped is a change too, and a field one config
lacks (written by another version) is compared with its default. The keys that may change are recorded in
``history.jsonl``, one JSON line per start, resume or overwrite, and the new values in ``config.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ecpo_gym.kwargs import shown
from ecpo_train.files.atomic import current_folder
from ecpo_train.runtime.engines import DEFAULT_ENGINE, ENGINE_KEY, engine_spec
from ecpo_train.runtime.run_dir import (
    RunFolder,
    check_path_length,
    folder_engine,
    holds_run,
    linked_run_files,
    own_markers,
    read_saved_config,
    run_files,
    written_by_run,
)

# bookkeeping: changing these on --resume continues the same run (where it lives, how long, what is logged,
# how the copies are spread over processes and waves: the rows are the same)
RESUMABLE_KEYS = frozenset({"run_dir", "iterations", "checkpoint_every", "save_optimizer", "tensorboard",
                            "progress", "val_every", "val_after_first", "env_workers", "rollout_waves"})


RESUME_OR_START = "auto"  # resume=: continue the run in run_dir if it holds one, else start (--resume-or-start)


@dataclass
class StartPlan:
    """What starting a run in ``run_dir`` does: ``start`` (no run there), ``resume``, ``overwrite`` or ``restart``
(``--resume-or-start`` of a run stopped before its first checkpoint)."""

    run_dir: Path
    kind: str
    changes: dict[str, list[Any]] = field(default_factory=dict)


def plan_start(run_dir: Path, new_config: dict[str, Any], resume: bool | str = False, overwrite: bool = False,
               engine: str = DEFAULT_ENGINE, made: bool = False) -> StartPlan:
    """The start ``resume``/``overwrite`` ask for in ``run_dir`` with ``engine``, or a ``ValueError`` (nothing is
    written).

    ``resume=True`` (``--resume``) where the folder holds no run (missing, empty, unrelated files) is refused:
    nothing to resume. ``resume="auto"`` (``--resume-or-start``) starts there instead, and elsewhere is
    ``--resume``. On a resume the folder must hold ``engine``'s checkpoint, and the new config is compared with the
    config its spec reads (``EngineSpec.read_config``: the checkpoint's own, or the run's ``config.yaml``).
    ``made``: the folder did not exist before the run shell took its lock (which made it)."""
    if resume not in (False, True, RESUME_OR_START):
        raise ValueError(f"resume={shown(resume)}: give True, False or {RESUME_OR_START!r}")
    if resume and overwrite:
        raise ValueError("--resume continues the run in run_dir and --overwrite replaces it: choose one")
    check_path_length(run_dir, f"run_dir={shown(str(run_dir))}")
    if run_dir.exists() and not run_dir.is_dir():
        raise ValueError(f"run_dir={shown(str(run_dir))} is a file, not a folder")
    linked = linked_run_files(run_dir) if run_dir.is_dir() else []
    if linked and not (overwrite and set(linked) <= set(run_files())):  # (--overwrite deletes the links themselves)
        raise ValueError(f"run_dir={shown(str(run_dir))}: {', '.join(linked)} is a link (a symlink, or a hard link to a "
                         "file elsewhere), which a run would write through: delete it (or --overwrite)")
    if not holds_run(run_dir):  # (a folder holding only a lock, or nothing)
        if resume is True:  # a typo in a path must not silently start training afresh
            raise ValueError(f"--resume: run_dir={shown(str(run_dir))} {_nothing_there(run_dir, made)}, so there is nothing to "
                             "resume: check the path, or pass --resume-or-start to start a run where there is none")
        return StartPlan(run_dir, "start")
    if (overwrite or resume == RESUME_OR_START) and not written_by_run(run_dir):
        found = ", ".join(sorted(name for name in run_files() if (run_dir / name).exists())[:4])
        raise ValueError(f"run_dir={shown(str(run_dir))} holds {found}, but no run wrote them (no {', '.join(own_markers())}): "
                         "they are not deleted or continued; choose another run_dir=")
    if overwrite:
        return StartPlan(run_dir, "overwrite")
    if not resume:
        raise ValueError(f"run_dir={shown(str(run_dir))} already holds a run: pass --resume to continue it, "
                         "--overwrite to replace it, or choose another run_dir=")
    written_by = folder_engine(run_dir)
    if written_by != engine:
        raise ValueError(f"run_dir={shown(str(run_dir))} holds a run of the {written_by} engine, which --engine {engine} "
                         f"cannot continue: resume it with --engine {written_by}, or --overwrite to replace it")
    folder = RunFolder(run_dir)
    checkpoint = current_folder(folder.checkpoint(engine))  # (a folder's: the whole one, if a swap was cut)
    if not checkpoint.exists() and resume == RESUME_OR_START:
        saved = read_saved_config(folder.config)
        if saved is not None and stopped_before_first_checkpoint(folder, saved):  # start it again
            return StartPlan(run_dir, "restart", resume_changes(saved, new_config))
    if not checkpoint.exists():
        raise ValueError(f"run_dir={shown(str(run_dir))} holds a run but no {checkpoint.name} to resume from (it stopped "
                         "before its first checkpoint): --overwrite to start it over (its metrics are deleted), "
                         "or choose another run_dir=")
    saved = engine_spec(engine).read_config(folder, checkpoint)  # (read without the state: refused before a model loads)
    plan = StartPlan(run_dir, "resume", resume_changes(saved, new_config) if saved is not None else {})
    check_same_weights(run_dir, new_config)
    return plan


def stopped_before_first_checkpoint(folder: RunFolder, saved: dict[str, Any]) -> bool:
    """Whether the run in ``folder`` (its ``config.yaml``: ``saved``) stopped before its first checkpoint was
    written: no iteration its logs hold comes after the one that checkpoint follows (a run whose checkpoint went
    missing later is not restarted: its logs are all that is left of it)."""
    from ecpo_train.runtime.run_dir import read_metrics_file, read_validation_file

    every = [value for value in (saved.get("checkpoint_every"), saved.get("iterations"))  # (0: only at the end)
             if isinstance(value, int) and not isinstance(value, bool) and value >= 1]
    if not every:
        return False
    every = min(every)
    logged = [row.get("iteration", 0) for row in (read_metrics_file(folder.metrics)[0] if folder.metrics.exists()
                                                  else [])]
    logged += [row["iteration"] for row in read_validation_file(folder.validation, tasks=None)]
    return all(isinstance(i, (int, float)) and i <= every for i in logged)


def _nothing_there(run_dir: Path, made: bool = False) -> str:
    if made or not run_dir.exists():
        return "does not exist"
    others = [p.name for p in run_dir.iterdir() if p.name != RunFolder(run_dir).lock.name]
    return "is empty" if not others else f"holds no run (none of its files: {', '.join(sorted(others)[:3])}...)"


# mappings whose keys the user writes (any key added or dropped changes the run) and those a dataclass fixes
FREE_MAPS = ("env_kwargs", "lora", "vllm_kwargs")
NESTED_MAPS = ("credit", *FREE_MAPS)
NOT_CONFIG_KEYS = frozenset({ENGINE_KEY})  # what config.yaml records beside the config (``engine: NAME``)


def _flatten(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict) and key in NESTED_MAPS and not prefix:
            flat |= _flatten(value, f"{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _field_defaults() -> dict[str, Any]:
    """``TrainConfig``'s and ``CreditConfig``'s defaults, flattened as :func:`_flatten` names them."""
    import dataclasses

    from ecpo_train.core.credit import CreditConfig
    from ecpo_train.runtime.config import TrainConfig

    defaults: dict[str, Any] = {}
    for prefix, cls in (("", TrainConfig), ("credit.", CreditConfig)):
        for item in dataclasses.fields(cls):
            if item.default is not dataclasses.MISSING:
                defaults[prefix + item.name] = item.default
            elif item.default_factory is not dataclasses.MISSING:
                defaults[prefix + item.name] = item.default_factory()
    return defaults


_ABSENT = object()


def _same(old: Any, new: Any) -> bool:
    # YAML and the checkpoint may hold a tuple where the config holds a list (and an int for a float)
    if isinstance(old, (list, tuple)) and isinstance(new, (list, tuple)):
        return len(old) == len(new) and all(_same(a, b) for a, b in zip(old, new))
    return old == new


def resume_changes(saved: dict[str, Any], new: dict[str, Any]) -> dict[str, list[Any]]:
    """``{key: [old, new]}`` of the resumable keys that change; a change of any other key is a ``ValueError``.

    Nested keys count one by one (``env_kwargs.depth``), added and dropped ones included (``[old, new]`` holds
    ``None`` for the missing side of a resumable key). A field of ``TrainConfig`` or ``CreditConfig`` that one
    side lacks (a config written by another version) is compared with its default; a key renamed since is compared
    under its new name."""
    from ecpo_train.runtime.config import upgraded

    old_flat, new_flat = _flatten(upgraded(saved)), _flatten(new)
    defaults = _field_defaults()
    changes: dict[str, list[Any]] = {}
    for key in sorted((set(old_flat) | set(new_flat)) - NOT_CONFIG_KEYS):
        old, value = old_flat.get(key, _ABSENT), new_flat.get(key, _ABSENT)
        if key.split(".")[0] not in FREE_MAPS or "." not in key:  # a dataclass field: missing = its default
            old = defaults.get(key, _ABSENT) if old is _ABSENT else old
            value = defaults.get(key, _ABSENT) if value is _ABSENT else value
            if _ABSENT in (old, value):
                continue  # a key this version does not know: nothing to compare it with
        if old is not _ABSENT and value is not _ABSENT and _same(old, value):
            continue
        if key.split(".")[0] not in RESUMABLE_KEYS:
            was = "the run does not have it" if old is _ABSENT else f"the run has {shown(old)}"
            now = "now it is dropped" if value is _ABSENT else f"now {shown(value)}"
            raise ValueError(f"--resume cannot change {key} ({was}, {now}): it changes what the run is; keep it, "
                             "or start a new run_dir (or --overwrite)")
        changes[key] = [None if old is _ABSENT else old, None if value is _ABSENT else value]
    return changes


def recorded_warm_start(run_dir: Path) -> dict[str, Any] | None:
    """The ``warm_start`` the run's last start or overwrite recorded in ``history.jsonl`` (:func:`warm_start`), or
    None (a run without a model, or a folder written before it was recorded)."""
    import json

    found = None
    path = RunFolder(run_dir).history
    if not path.is_file():
        return None
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            try:
                record = json.loads(line)
            except ValueError:
                continue  # (a line cut by a crash: the lines before it still count)
            if isinstance(record, dict) and record.get("event") in ("start", "overwrite"):
                found = record.get("warm_start") if isinstance(record.get("warm_start"), dict) else None
    return found


def check_same_weights(run_dir: Path, new_config: dict[str, Any]) -> None:
    """``ValueError`` when the weights in the ``model`` folder differ from those the run started from (their sha256
    in ``history.jsonl``): a resume rebuilds the KL reference (and a runner's or a learner's starting weights) from
    that folder, so a folder replaced since (``ecpo sft --out`` the same folder) would silently change the run."""
    recorded = recorded_warm_start(run_dir)
    if not recorded or not recorded.get("weights_sha256") or recorded.get("model") != new_config.get("model"):
        return
    from ecpo_train.runtime.models import weights_sha256

    now = weights_sha256(new_config["model"])
    if now != recorded["weights_sha256"]:
        found = f"now {now[:12]}..." if now else "now it holds no weights"
        raise ValueError(f"--resume: the weights in model={str(new_config['model'])[:200]} changed since the run "
                         f"started (sha256 {str(recorded['weights_sha256'])[:12]}..., {found}), and the KL reference is "
                         "rebuilt from them: restore the folder the run started from, or start a new run_dir")


def warm_start(config: dict[str, Any]) -> dict[str, Any] | None:
    """What a start records of the weights it starts from (``model`` and their sha256; paired endpoints compare
    them), or None for a run without a model (a tabular policy)."""
    from ecpo_train.runtime.models import weights_sha256

    model = config.get("model")
    return {"model": model, "weights_sha256": weights_sha256(model)} if model else None
