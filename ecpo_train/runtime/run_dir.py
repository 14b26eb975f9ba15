"""A training run's folder: the one module that knows what it holds, and the one that writes and reads it.

``RunFolder(path)`` names every file of a run (each name is defined here once; ``ecpo_train.runtime.resume``,
``plotting``, ``run_lock`` and the engines ask it for paths):

    config.yaml        the run's config (and ``engine: NAME``: ``runtime/engines.py``)  ``MetricsLog``
    metrics.jsonl      one JSON line per iteration                                      ``MetricsLog``
    validation.jsonl   one line per validation, every episode's outcome in order        ``MetricsLog``
    history.jsonl      one line per start, resume or overwrite                          ``append_history``
    tensorboard/       TensorBoard scalars (``tensorboard: true``)                      ``tensorboard_scalars``
    <checkpoint>       the engine's checkpoint, a file or a folder, named by its spec    ``runtime/engines.py``
    adapter/, merged/  a LoRA run's adapter and merged model (``policies/lora.py``)
    curves.png         the training curves (``runtime/plotting.py``)
    eval/              ``ecpo eval``'s results
    run.lock           the folder's owner while a run writes it (``runtime/run_lock.py``)

``MetricsLog`` keeps each iteration once (a resume drops lines logged after its checkpoint; a fresh run in a
used folder starts a fresh log) and writes ``config.yaml`` when it first writes: building a trainer writes
nothing, so a refused start leaves the folder as it was (``ecpo_train.runtime.resume``); ``begin_run`` is the
first write of every engine. Every file rewritten here (``config.yaml``, and the logs cut back on resume) is
replaced whole (``ecpo_train.files.atomic``): a crash or a full disk mid-write leaves the previous version,
and the next ``--resume`` starts from it; ``NAME.partial-<token>`` (and, of a checkpoint folder,
``NAME.previous-<token>``) are what an interrupted write may leave, deleted with the run's files. Nothing is written through a link (a log, the
folder's ``eval/``: ``atomic.refuse_links``). A failed write names its file. A torn last line of
``metrics.jsonl`` (a crash mid-write) is dropped with a warning naming the file. ``validation.jsonl`` holds one line per validation with every episode's outcome in validation
order (task, copy, won, length): two validations of the same tasks and seed pair episode by episode
(``benchmarks.stats.paired_outcomes``). Reading and writing a checkpoint itself is its engine's job
(``ecpo_train.runtime.checkpoint_io`` for the trainer's file).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import sys
import time
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ecpo_gym.kwargs import shown
from ecpo_train.files.atomic import append_bytes, current_folder, is_leftover, leftovers, write_text
from ecpo_train.runtime.engines import DEFAULT_ENGINE, ENGINE_KEY, ENGINES, checkpoint_names, engine_spec
from ecpo_train.runtime.tensorboard_scalars import TensorBoardScalars

CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.jsonl"
VALIDATION_FILE = "validation.jsonl"
HISTORY_FILE = "history.jsonl"
TENSORBOARD_DIR = "tensorboard"
ADAPTER_DIR = "adapter"
MERGED_DIR = "merged"
CURVES_FILE = "curves.png"
EVAL_DIR = "eval"
LOCK_FILE = "run.lock"


def run_files() -> tuple[str, ...]:
    """What a run writes into its folder, every declared engine's checkpoint included (``--overwrite`` deletes
    these, and what their interrupted writes left: ``atomic.leftovers``; anything else in the folder stays). A
    folder holds a run when it has any of them (a folder holding only a lock, or nothing, holds none): a start
    there is refused, so it never erases an earlier run's files (a validation.jsonl kept without its checkpoint)."""
    return (CONFIG_FILE, METRICS_FILE, VALIDATION_FILE, *checkpoint_names(), CURVES_FILE, HISTORY_FILE,
            TENSORBOARD_DIR, ADAPTER_DIR, MERGED_DIR, EVAL_DIR)


def _named(name: str) -> Any:
    return property(lambda self: self.root / name, doc=f"the run's ``{name}``")


@dataclass(frozen=True)
class RunFolder:
    """The path of each file of the run in ``root``."""

    root: Path

    def __init__(self, root: str | Path) -> None:
        object.__setattr__(self, "root", Path(root))

    config = _named(CONFIG_FILE)
    metrics = _named(METRICS_FILE)
    validation = _named(VALIDATION_FILE)
    history = _named(HISTORY_FILE)
    tensorboard = _named(TENSORBOARD_DIR)
    adapter = _named(ADAPTER_DIR)
    merged = _named(MERGED_DIR)
    curves = _named(CURVES_FILE)
    eval = _named(EVAL_DIR)
    lock = _named(LOCK_FILE)

    def checkpoint(self, engine: str = DEFAULT_ENGINE) -> Path:
        """``engine``'s checkpoint (its spec's name: ``runtime/engines.py``), a file or a folder."""
        return self.root / engine_spec(engine).checkpoint


def checkpoint_file(path: str | Path) -> Path:
    """A checkpoint of the default engine given as itself or as the run folder holding it."""
    path = Path(path)
    return RunFolder(path).checkpoint() if path.is_dir() else path


def holds_run(run_dir: Path) -> bool:
    return any((run_dir / name).exists() or (run_dir / name).is_symlink() or leftovers(run_dir / name)
               for name in run_files())


def own_markers() -> tuple[str, ...]:
    """The names only a run writes: its logs and every declared engine's checkpoint."""
    return (HISTORY_FILE, METRICS_FILE, VALIDATION_FILE, *checkpoint_names())


def written_by_run(run_dir: Path) -> bool:
    """Whether a run wrote ``run_dir``: it holds one of :func:`own_markers` (``config.yaml`` or ``eval/`` alone may
    be the user's own files, which ``--overwrite`` must not delete)."""
    return any((run_dir / name).exists() or leftovers(run_dir / name) for name in own_markers())


def is_run_file(entry: str) -> bool:
    """Whether ``entry`` (a name in a run folder) is one a run writes, or what an interrupted write of one left."""
    names = run_files()
    return entry in names or any(is_leftover(name, entry) for name in names)


def folder_engine(run_dir: Path) -> str:
    """Which engine wrote the run in ``run_dir``: the one whose checkpoint it holds (the whole one, where a swap
    of a checkpoint folder was cut), else the one its ``config.yaml`` names (``engine: NAME``), else the default."""
    folder = RunFolder(run_dir)
    for spec in sorted(ENGINES.values(), key=lambda spec: spec.name == DEFAULT_ENGINE):  # (the default's last)
        if current_folder(folder.root / spec.checkpoint).exists():
            return spec.name
    with contextlib.suppress(ValueError):
        saved = read_saved_config(folder.config)
        recorded = saved.get(ENGINE_KEY) if saved is not None else None
        if isinstance(recorded, str) and recorded in ENGINES:  # (a damaged value: not an engine's)
            return recorded
    return DEFAULT_ENGINE


def read_saved_config(path: Path) -> dict[str, Any] | None:
    """The config a run recorded, or ``None`` when there is none (a damaged file is an error naming it)."""
    from ecpo_train.runtime.config_values import read_yaml  # (aliases refused: a planted file cannot expand)

    if not path.is_file():
        return None
    try:
        values = read_yaml(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is not valid YAML ({type(err).__name__}); restore it, or --overwrite the run") \
            from None
    if not isinstance(values, dict):
        raise ValueError(f"{path} is not a mapping of config keys; restore it, or --overwrite the run")  # noqa: TRY004
    return values


def saved_config(config: dict[str, Any], engine: str) -> dict[str, Any]:
    """What ``config.yaml`` holds for a run of ``engine``: the config, and ``engine: NAME`` where its spec records
    its name."""
    return config | {ENGINE_KEY: engine} if engine_spec(engine).records_name else config


def append_history(run_dir: Path, event: str, iteration: int, changes: dict[str, list[Any]] | None = None,
                   warm_start: dict[str, Any] | None = None) -> None:
    """One line of ``history.jsonl``: what happened to the run, when, at which iteration, with which changes;
    a start records its warm start (``model`` and its weights' sha256), which paired endpoints compare."""
    record = {"event": event, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "iteration": iteration,
              "changes": changes or {}, "argv": sys.argv[1:]}
    if warm_start is not None:
        record["warm_start"] = warm_start
    run_dir.mkdir(parents=True, exist_ok=True)
    append_line(RunFolder(run_dir).history, json.dumps(record, default=str))


def append_line(path: Path, line: str) -> None:
    """Append one line to a log of the run; a failed write (a full disk) is an ``OSError`` naming the file, and so
    is a log that is a link (symbolic, or a hard link to a file elsewhere): a run never writes through a link out
    of its folder (``atomic.append_bytes``)."""
    append_bytes(path, (line + "\n").encode("utf-8"))


def linked_run_files(run_dir: Path) -> list[str]:
    """The run's files in ``run_dir`` (:func:`run_files` and ``run.lock``) that are links: a symlink, or a file with
    another name elsewhere (a hard link). A run writes none of them (a start refuses them, naming each)."""
    linked = []
    for name in (*run_files(), LOCK_FILE):
        path = run_dir / name
        with contextlib.suppress(OSError):
            info = path.lstat()
            if path.is_symlink() or (not path.is_dir() and info.st_nlink > 1):
                linked.append(name)
    return linked


def remove_run_files(run_dir: Path, keep: tuple[str, ...] = ()) -> None:
    """Delete the files a run wrote (:func:`run_files`, and what their interrupted writes left) from ``run_dir``,
    but ``keep``; other files stay."""
    names = [name for name in run_files() if name not in keep]
    for path in [run_dir / name for name in names] + [left for name in names for left in leftovers(run_dir / name)]:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


def begin_run(log: MetricsLog, kind: str, iteration: int, changes: dict[str, list[Any]] | None = None,
              warm_start: dict[str, Any] | None = None) -> None:
    """The first writes of a run that passed every check, the same on every engine: ``overwrite`` deletes the
    old run's files (``restart`` all but its history), the metrics and validation logs keep the iterations through ``iteration`` (a resume's
    checkpoint; none for a fresh start), ``config.yaml`` is written, and ``history.jsonl`` records ``kind`` (a
    start or an overwrite with its ``warm_start``: ``model`` and the sha256 of its weights)."""
    if kind == "overwrite":
        remove_run_files(log.folder.root)
    elif kind == "restart":  # stopped before its first checkpoint: its files go, its history records the restart
        remove_run_files(log.folder.root, keep=(HISTORY_FILE,))
    log.keep_through(iteration if kind == "resume" else -1)
    append_history(log.folder.root, kind, iteration, changes, warm_start=warm_start if kind != "resume" else None)


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


def read_metrics(run_dir: str | Path) -> list[dict[str, float]]:
    """The rows of a run's ``metrics.jsonl``; a torn last line (a run writing, or a crash) is skipped with a
    warning, any other damaged line, or one without a numeric ``iteration``, is a ``ValueError`` naming the
    file (and line)."""
    path = RunFolder(run_dir).metrics
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: is {run_dir} a run directory written by `ecpo train`?")
    rows, torn = read_metrics_file(path)
    if torn:
        print(f"warning: {path}: skipped its last line, cut mid-write", file=sys.stderr)
    bad = next((row for row in rows if not isinstance(row.get("iteration"), (int, float))), None)
    if bad is not None:
        raise ValueError(f"{path} has a line without a numeric 'iteration': {json.dumps(bad)[:80]}")
    return rows


def check_path_length(path: Path, label: str) -> None:
    """``ValueError`` naming ``label`` when ``path`` is too long for the OS (``OSError``, whose message would quote
    the path whole: a 10 MB ``run_dir`` a 10 MB error line) or holds a NUL character (no path can: Python's own
    ``ValueError`` says only 'embedded null byte')."""
    try:
        path.lstat()
    except OSError as err:
        if err.errno == errno.ENAMETOOLONG:
            raise ValueError(f"{label} cannot be a folder ({err.strerror})") from None
    except ValueError:
        raise ValueError(f"{label} cannot be a folder (it holds a NUL character)") from None


def check_writable_folder(path: str | Path, label: str) -> None:
    """``ValueError`` unless ``path`` is, or can be made as, a folder this process may write; writes nothing
    (the nearest existing folder on the path must be writable). ``label`` names the path in the message. An empty
    path is refused (pass it as given: ``Path('')`` is already the current folder)."""
    if not str(path).strip():
        raise ValueError(f"{label} is empty, which would mean the current folder: give the folder (. for the "
                         "current one)")
    path = Path(path)
    check_path_length(path, label)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{label} is a file, not a folder")
    probe = path.absolute()
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise ValueError(f"{label} cannot be made: {probe} is a file")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ValueError(f"{label} is not writable ({probe} is read-only for this user)")


VALIDATION_TASKS = "validation"  # the task set of a validation.jsonl line that names none: the configured one


def read_validation_file(path: Path, tasks: str | None = VALIDATION_TASKS) -> list[dict[str, Any]]:
    """The lines of a run's ``validation.jsonl`` (none if it does not exist; a torn last line is dropped) that
    validated the task set ``tasks``: by default the configured validation tasks, whose lines pair by iteration;
    another set's lines carry its label (``Trainer.validate(tasks, label)``); ``None``: every line."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by a crash mid-write
        if not (isinstance(row, dict) and "iteration" in row and "won" in row):
            continue
        if tasks is None or row.get("tasks", VALIDATION_TASKS) == tasks:
            rows.append(row)
    return rows


class EpisodeOutcome(typing.NamedTuple):
    """What ``validation.jsonl`` keeps of one validation episode (small enough to cross a Ray actor boundary)."""

    task_id: str
    won: bool
    length: int


class MetricsLog:
    """``metrics.jsonl`` (one line per iteration), ``validation.jsonl`` and, optionally, TensorBoard scalars.

    ``config`` (the run's config as plain data) is written to ``config.yaml`` when the log first writes, with
    the ``engine`` that writes the run (:func:`saved_config`)."""

    def __init__(self, run_dir: Path, tensorboard: bool, config: dict[str, Any] | None = None,
                 engine: str = DEFAULT_ENGINE) -> None:
        self.folder = RunFolder(run_dir)
        self.history: list[dict[str, float]] = []
        self._scalars = TensorBoardScalars(self.folder.tensorboard) if tensorboard else None
        self._config = None if config is None else saved_config(config, engine)
        self._opened = False
        self._kept_through: int | None = None  # the files are as keep_through(this) left them (nothing written since)
        self.lock: Any = None  # the folder's RunLock (ecpo_train.runtime.run_lock), released by close()

    def open_folder(self) -> None:
        """Create the folder and write ``config.yaml``: the first write of this run (every check has passed)."""
        if self._opened:
            return
        try:
            self.folder.root.mkdir(parents=True, exist_ok=True)
            if self._config is not None:
                write_text(self.folder.config, yaml.safe_dump(self._config, sort_keys=False))
        except OSError as err:
            raise ValueError(f"run_dir={shown(str(self.folder.root))}: {err.filename or self.folder.root} could not be "
                             f"written ({err.strerror})") from None
        self._opened = True

    def keep_through(self, iteration: int) -> None:
        """Drop lines after ``iteration`` (logged after the checkpoint, or by an earlier run in this folder).
        Once per state of the files (asked again with nothing written since, it does nothing)."""
        if self._kept_through == iteration:
            return
        rows: list[dict[str, Any]] = []
        metrics, validation = self.folder.metrics, self.folder.validation
        if metrics.exists() and iteration >= 0:
            rows, torn = read_metrics_file(metrics)
            if torn:
                print(f"warning: {metrics}: the last line was cut mid-write (a crash); dropped it, the run "
                      "continues from its checkpoint", file=sys.stderr)
        self.open_folder()
        kept = [row for row in rows if row.get("iteration", 0) <= iteration]
        # each file replaced whole, never cut in place: a crash or a full disk here leaves the old lines, which the
        # next --resume cuts back again
        write_text(metrics, "".join(json.dumps(row) + "\n" for row in kept))
        self.history = kept
        if validation.exists():  # (a run that never validated has none, and gets none)
            validations = read_validation_file(validation, tasks=None) if iteration >= 0 else []
            write_text(validation, "".join(json.dumps(row) + "\n" for row in validations
                                           if row["iteration"] <= iteration))
        self._kept_through = iteration

    def append_validation(self, iteration: int, episodes: typing.Sequence[Any], tasks: str = VALIDATION_TASKS) -> None:
        """One line of ``validation.jsonl``: the outcome of every validation episode, in validation order
        (anything with ``task_id``, ``won`` and ``length``: a rollout's episodes or :class:`EpisodeOutcome`);
        a task set other than the configured one is named in the line (``"tasks": label``)."""
        self.open_folder()
        self._kept_through = None
        copies, seen = [], {}  # each episode's index among its task's copies
        for episode in episodes:
            seen[episode.task_id] = seen.get(episode.task_id, -1) + 1
            copies.append(seen[episode.task_id])
        record = {"iteration": iteration, "task_ids": [e.task_id for e in episodes],
                  "copies": copies, "won": [int(e.won) for e in episodes],
                  "lengths": [e.length for e in episodes]}
        if tasks != VALIDATION_TASKS:
            record["tasks"] = tasks
        append_line(self.folder.validation, json.dumps(record))

    def append(self, metrics: dict[str, float], step: int) -> None:
        self.open_folder()
        self._kept_through = None
        self.history.append(metrics)
        append_line(self.folder.metrics, json.dumps(metrics))
        if self._scalars is not None:
            self._scalars.add(metrics, step)

    def flush(self) -> None:
        if self._scalars is not None:
            self._scalars.flush()

    def close(self) -> None:
        """Close TensorBoard's writer and release the folder's lock, the lock even when closing the writer fails
        (a full disk): a run never leaves ``run.lock`` behind."""
        try:
            if self._scalars is not None:
                self._scalars.close()
        finally:
            if self.lock is not None:
                self.lock.release()
                self.lock = None
