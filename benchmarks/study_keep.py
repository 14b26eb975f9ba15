"""A study longer than a session keeps what it has finished in a folder committed to git (``--keep``).

A session's machine, and the run folder on it, may be new the next time; git is what outlives it. For every policy
whose evaluation covers every game of the endpoint's manifest, the kept folder holds its episode log and its training
run's curve and config (gzipped: a study's 189 jobs would otherwise add some 14 MB to a checkout that every device
command copies) and the CPU it ran on; and, once, the warm start's model that every arm of the study starts from.
``restore_kept`` puts them back into a run folder (the episode logs as the leaderboard writes them), where the schedule
skips every job whose evaluation is complete: the one rule for "finished". Checkpoints are not kept: a job not
finished is played again from its seed.

Layout of a kept folder, for a testbed ``bed`` (its ``folder`` and ``manifest``)::

    warm/sft.json, text_policy.json, text_policy.safetensors
    <bed.folder>/<policy>/<manifest>.jsonl.gz, machine.json
    runs/<policy>/metrics.jsonl.gz, config.yaml.gz
    runs/<policy>/policy/text_policy.json, text_policy.safetensors   (where the schedule kept the final policy)

A testbed with several warm starts (``bed.warm_folders``) keeps each of their folders instead of ``warm/``.
"""

from __future__ import annotations

import functools
import gzip
import json
import os
import shutil
from pathlib import Path
from typing import Protocol

WARM_FILES = ("sft.json", "text_policy.json", "text_policy.safetensors")
POLICY, POLICY_FILES = "policy", ("text_policy.json", "text_policy.safetensors")  # a job's kept final policy
RUN_FILES = ("metrics.jsonl", "config.yaml")  # kept gzipped
MACHINE = "machine.json"


class Played(Protocol):
    folder: str  # the run folder's subfolder of the endpoint's episode logs
    manifest: str  # the endpoint's leaderboard manifest


def manifest_games(bed: Played) -> int:
    return _games_in(bed.manifest)


@functools.cache
def _games_in(manifest: str) -> int:
    from ecpo_train.evaluation.manifests import load_manifest

    return sum(len(group.task_ids or ()) for group in load_manifest(manifest).groups)


def _job(root: Path, name: str, bed: Played) -> Path:
    """The folder of ``name``'s evaluation under ``root``: its episode log and, where kept, its machine."""
    from ecpo_train.evaluation.runner import safe_name

    return root / bed.folder / safe_name(name)


def _log(root: Path, name: str, bed: Played, kept: bool) -> Path:
    from ecpo_train.evaluation.runner import safe_name

    path = _job(root, name, bed) / f"{safe_name(bed.manifest)}.jsonl"
    return path.with_name(path.name + ".gz") if kept else path


def evaluation_complete(root: Path, name: str, bed: Played, kept: bool = False) -> bool:
    """Whether ``name``'s episode log under the run folder ``root`` has a complete record (seed 0) for every game of
    the endpoint's manifest; with ``kept``, whether the kept folder ``root`` holds it (a kept log is written whole,
    from a complete one, and last: its presence is the mark)."""
    from ecpo_train.evaluation.results import load_records

    log = _log(root, name, bed, kept)
    if kept:
        return log.is_file()
    games = {(r["group"], r["task_id"]) for r in load_records(log, repair=False) if int(r["seed"]) == 0}
    return len(games) == manifest_games(bed)


def machine() -> dict[str, str]:
    """The CPU a kept job ran on: float results differ between CPUs (a study's warm start, made again on another
    machine from the same command and seed, won 29 of 120 households where the pilot's had won 45), so a job's record
    names it."""
    import platform

    import torch

    info = Path("/proc/cpuinfo")
    name = next((line.split(":", 1)[1].strip() for line in info.read_text().splitlines()
                 if line.startswith("model name")), "") if info.is_file() else ""
    return {"cpu": name or platform.processor() or platform.machine(), "cores": str(os.cpu_count()),
            "torch": torch.__version__, "torch_cpu_capability": torch.backends.cpu.get_cpu_capability()}


def _gzip(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    with open(source, "rb") as plain, open(partial, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as out:
        shutil.copyfileobj(plain, out)  # mtime 0: the same log gives the same bytes
    partial.replace(target)


def _gunzip(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    with gzip.open(source, "rb") as packed, open(partial, "wb") as out:
        shutil.copyfileobj(packed, out)
    partial.replace(target)


def _warm_folders(bed: Played) -> tuple[str, ...]:
    return tuple(getattr(bed, "warm_folders", ("warm",)))


def _warm(source: Path, target: Path, folders: tuple[str, ...] = ("warm",)) -> None:
    for warm in folders:
        if (source / warm / "sft.json").is_file() and not (target / warm / "sft.json").is_file():
            (target / warm).mkdir(parents=True, exist_ok=True)
            for name in WARM_FILES:
                if (source / warm / name).is_file():
                    shutil.copy2(source / warm / name, target / warm / name)


def _policies(root: Path, bed: Played) -> list[str]:
    folder = root / bed.folder
    return sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []


def machine_of(root: Path, name: str, bed: Played) -> str | None:
    """The CPU that played ``name``'s job, as kept beside its episode log (``None`` for a job not kept, or kept
    before machines were recorded)."""
    path = _job(root, name, bed) / MACHINE
    return str(json.loads(path.read_text(encoding="utf-8"))["cpu"]) if path.is_file() else None


def keep_finished(out: Path, keep: Path, bed: Played) -> list[str]:
    """Copy into ``keep`` the warm start's model (once) and every policy evaluated on every game in ``out`` that
    ``keep`` does not hold complete yet, with its curve and the machine it ran on; returns the policies copied."""
    _warm(out, keep, _warm_folders(bed))
    copied = []
    for name in _policies(out, bed):
        if not evaluation_complete(keep, name, bed, kept=True) and evaluation_complete(out, name, bed):
            for plain in (out / "runs" / name / f for f in RUN_FILES):
                if plain.is_file():
                    _gzip(plain, keep / "runs" / name / f"{plain.name}.gz")
            policy = out / "runs" / name / POLICY
            for file in POLICY_FILES if (policy / POLICY_FILES[0]).is_file() else ():
                (keep / "runs" / name / POLICY).mkdir(parents=True, exist_ok=True)
                shutil.copy2(policy / file, keep / "runs" / name / POLICY / file)
            _job(keep, name, bed).mkdir(parents=True, exist_ok=True)
            (_job(keep, name, bed) / MACHINE).write_text(json.dumps(machine(), indent=1) + "\n", encoding="utf-8")
            _gzip(_log(out, name, bed, kept=False), _log(keep, name, bed, kept=True))  # last: it marks the job kept
            copied.append(name)
    return copied


def restore_kept(keep: Path, out: Path, bed: Played) -> list[str]:
    """Put ``keep``'s warm start and complete evaluations back into ``out`` where ``out`` lacks them (each episode log
    as the leaderboard writes it); returns the policies restored."""
    _warm(keep, out, _warm_folders(bed))
    restored = []
    for name in _policies(keep, bed):
        if evaluation_complete(keep, name, bed, kept=True) and not evaluation_complete(out, name, bed):
            _gunzip(_log(keep, name, bed, kept=True), _log(out, name, bed, kept=False))
            if (_job(keep, name, bed) / MACHINE).is_file():
                shutil.copy2(_job(keep, name, bed) / MACHINE, _job(out, name, bed) / MACHINE)
            restored.append(name)
    return restored
