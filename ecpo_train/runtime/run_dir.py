"""A training run's folder: ``config.yaml``, ``metrics.jsonl``, ``validation.jsonl``, TensorBoard events,
``checkpoint.pt``.

``MetricsLog`` keeps each iteration once (a resume drops lines logged after its checkpoint; a fresh run in a
used folder starts a fresh log) and writes ``config.yaml`` when it first writes: building a trainer writes
nothing, so a refused start leaves the folder as it was (``ecpo_train.runtime.resume``). A torn last line of
``metrics.jsonl`` (a crash mid-write) is dropped with a warning naming the file. ``validation.jsonl`` holds one
line per validation with every episode's outcome in validation order (task, copy, won, length): two
validations of the same tasks and seed pair episode by episode (``benchmarks/small_households_summary.py``).
``save_checkpoint`` writes atomically (a crash or a full disk mid-write leaves the previous checkpoint);
``load_checkpoint`` names a damaged file instead of failing inside torch's unpickler. ``Progress`` is the one
progress line every long loop shows.
"""

from __future__ import annotations

import json
import sys
import time
import typing
from pathlib import Path
from typing import Any

import torch
import yaml


def read_metrics_file(path: Path) -> tuple[list[dict[str, Any]], bool]:
    """The rows of a ``metrics.jsonl`` and whether its last line was torn (cut mid-write, so dropped).

    A damaged line before the last is a ``ValueError`` naming the file and line: that is not a crash mid-write,
    and dropping it would silently lose an iteration."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not UTF-8 text: is it a metrics.jsonl written by `ecpo train`?") from None
    numbered = [(number, line) for number, line in enumerate(lines, 1) if line.strip()]
    rows, torn = [], False
    for position, (number, line) in enumerate(numbered):
        try:
            row = json.loads(line)
            if not isinstance(row, dict):
                raise ValueError("not an object")  # noqa: TRY004 (handled below as a damaged line)
        except ValueError:
            if position == len(numbered) - 1:
                torn = True
                break
            raise ValueError(f"{path} line {number} is not a JSON object of metrics; repair or delete that line") \
                from None
        rows.append(row)
    return rows, torn


def check_metrics_file(path: Path) -> None:
    """Raise now what :meth:`MetricsLog.keep_through` would raise, so a refused resume writes nothing."""
    if path.exists():
        read_metrics_file(path)


def check_writable_folder(path: Path, label: str) -> None:
    """``ValueError`` unless ``path`` is, or can be made as, a folder this process may write; writes nothing
    (the nearest existing folder on the path must be writable). ``label`` names the path in the message."""
    import os

    if path.exists() and not path.is_dir():
        raise ValueError(f"{label} is a file, not a folder")
    probe = path.absolute()
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise ValueError(f"{label} cannot be made: {probe} is a file")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ValueError(f"{label} is not writable ({probe} is read-only for this user)")


def read_validation_file(path: Path) -> list[dict[str, Any]]:
    """The lines of a run's ``validation.jsonl`` (none if it does not exist; a torn last line is dropped)."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by a crash mid-write
        if isinstance(row, dict) and "iteration" in row and "won" in row:
            rows.append(row)
    return rows


class EpisodeOutcome(typing.NamedTuple):
    """What ``validation.jsonl`` keeps of one validation episode (small enough to cross a Ray actor boundary)."""

    task_id: str
    won: bool
    length: int


class MetricsLog:
    """``metrics.jsonl`` (one line per iteration) and, optionally, TensorBoard scalars.

    ``config`` (the run's config as plain data) is written to ``config.yaml`` when the log first writes."""

    def __init__(self, run_dir: Path, tensorboard: bool, config: dict[str, Any] | None = None) -> None:
        self.path = run_dir / "metrics.jsonl"
        self.validation_path = run_dir / "validation.jsonl"
        self.tensorboard_dir = run_dir / "tensorboard"
        self.tensorboard = tensorboard
        self.history: list[dict[str, float]] = []
        self._writer: Any = None
        self._config = config
        self._opened = False
        self.lock: Any = None  # the folder's RunLock (ecpo_train.runtime.run_lock), released by close()

    def open_folder(self) -> None:
        """Create the folder and write ``config.yaml``: the first write of this run (every check has passed)."""
        if self._opened:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self._config is not None:
                (self.path.parent / "config.yaml").write_text(yaml.safe_dump(self._config, sort_keys=False))
        except OSError as err:
            raise ValueError(f"run_dir={str(self.path.parent)!r} is not a writable folder ({err.strerror})") from None
        self._opened = True

    def keep_through(self, iteration: int) -> None:
        """Drop lines after ``iteration`` (logged after the checkpoint, or by an earlier run in this folder)."""
        rows: list[dict[str, Any]] = []
        if self.path.exists() and iteration >= 0:
            rows, torn = read_metrics_file(self.path)
            if torn:
                print(f"warning: {self.path}: the last line was cut mid-write (a crash); dropped it, the run "
                      "continues from its checkpoint", file=sys.stderr)
        self.open_folder()
        kept = [row for row in rows if row.get("iteration", 0) <= iteration]
        self.path.write_text("".join(json.dumps(row) + "\n" for row in kept))
        self.history = kept
        if self.validation_path.exists():  # (a run that never validated has none, and gets none)
            validations = read_validation_file(self.validation_path) if iteration >= 0 else []
            self.validation_path.write_text("".join(json.dumps(row) + "\n" for row in validations
                                                    if row["iteration"] <= iteration))

    def append_validation(self, iteration: int, episodes: typing.Sequence[Any]) -> None:
        """One line of ``validation.jsonl``: the outcome of every validation episode, in validation order
        (anything with ``task_id``, ``won`` and ``length``: a rollout's episodes or :class:`EpisodeOutcome`)."""
        self.open_folder()
        copies, seen = [], {}  # each episode's index among its task's copies
        for episode in episodes:
            seen[episode.task_id] = seen.get(episode.task_id, -1) + 1
            copies.append(seen[episode.task_id])
        record = {"iteration": iteration, "task_ids": [e.task_id for e in episodes],
                  "copies": copies, "won": [int(e.won) for e in episodes],
                  "lengths": [e.length for e in episodes]}
        with open(self.validation_path, "a") as fh:
            fh.write(json.dumps(record) + "\n")

    def append(self, metrics: dict[str, float], step: int) -> None:
        self.open_folder()
        self.history.append(metrics)
        with open(self.path, "a") as fh:
            fh.write(json.dumps(metrics) + "\n")
        if self.tensorboard:
            if self._writer is None:
                from torch.utils.tensorboard import SummaryWriter

                # purge events of this step and later: a resumed (or restarted) run replaces them
                self._writer = SummaryWriter(str(self.tensorboard_dir), purge_step=step)
            for key, value in metrics.items():
                if key != "iteration":
                    self._writer.add_scalar(key, value, step)

    def flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self.lock is not None:
            self.lock.release()
            self.lock = None


def save_checkpoint(state: dict[str, Any], path: Path) -> Path:
    """Write ``state`` to ``path`` atomically (temp file, then rename); the run folder is created if a checkpoint
    comes before the first metrics line (``Trainer.save_checkpoint`` called directly)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    try:
        torch.save(state, tmp)
        tmp.replace(path)
    except (OSError, RuntimeError) as err:  # (torch reports a failed write, e.g. a full disk, as RuntimeError)
        tmp.unlink(missing_ok=True)
        cause = err.strerror if isinstance(err, OSError) and err.strerror else type(err).__name__
        raise ValueError(f"checkpoint {path} could not be written ({cause}); the previous checkpoint is kept: "
                         "free space, then --resume") from None
    return path


def load_checkpoint(path: Path) -> dict[str, Any]:
    """The state saved by :func:`save_checkpoint`; a missing or damaged file is one clear error."""
    if not path.exists():
        raise FileNotFoundError(f"checkpoint {path} not found (runs write it every checkpoint_every iterations)")
    if path.is_dir():
        raise ValueError(f"checkpoint {path} is a folder, not a checkpoint file")
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # noqa: BLE001 -- torch raises RuntimeError, EOFError, UnpicklingError, ... for a bad file
        raise ValueError(f"checkpoint {path} is damaged and cannot be read ({type(err).__name__}); delete it to "
                         "start over, or restore it from a copy") from None


def checkpoint_config(path: Path) -> dict[str, Any] | None:
    """The config a checkpoint was saved with, read without loading its tensors (memory-mapped), or ``None`` when
    it cannot be read that way (:func:`load_checkpoint` then names what is wrong)."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    except Exception:  # noqa: BLE001 -- a damaged file, or an old non-zip format: the full read decides
        return None
    config = state.get("config") if isinstance(state, dict) else None
    return dict(config) if isinstance(config, dict) else None


def checkpoint_size(path: Path) -> str:
    size = path.stat().st_size
    return f"{size / 2**20:.1f} MiB" if size < 2**30 else f"{size / 2**30:.2f} GiB"


class Progress:
    """One rich progress line: iterations done, then the latest phase (from the first step) or metrics."""

    def __init__(self, enabled: bool, total: int, done: int, label: str) -> None:
        self.enabled, self.total, self.done, self.label = enabled, total, done, label
        self._progress: Any = None
        self._started = time.perf_counter()
        self._last_status = ""

    def __enter__(self) -> typing.Self:
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), TextColumn("{task.fields[status]}"))
            self._progress.__enter__()
            self._task = self._progress.add_task(self.label, total=self.total, completed=self.done,
                                                 status="starting")
        return self

    def phase(self, text: str) -> None:
        """Within an iteration: what is running now (e.g. ``rollout step 3, 12 episodes live``)."""
        if self._progress is not None:
            status = f"{self._last_status} | {text}" if self._last_status else text
            self._progress.update(self._task, status=status)

    def update(self, metrics: dict[str, float]) -> None:
        if self._progress is None:
            return
        status = f"success {metrics.get('success', 0):.2f}"
        if "val/success" in metrics:
            status += f" | val {metrics['val/success']:.2f}"
        status += f" | kl {metrics.get('update/kl', 0):.4f} | {metrics.get('time/iteration', 0):.1f}s/it"
        self._last_status = status
        self._progress.update(self._task, advance=1, status=status)

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)
