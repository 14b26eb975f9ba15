"""The project's benchmarks, run from a source checkout (wheels ship ``ecpo_gym`` and ``ecpo_train`` only): a module
with ``main(argv=None)`` runs as ``python -m benchmarks.NAME [args]`` or ``ecpo bench NAME [args]``; studies run on
``study`` and ``study_keep``; results go to ``benchmarks/results/`` (docs/benchmarks.md). Here: what every benchmark
shares (its command line, its one-line refusals, its result files).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

ROOT = Path(__file__).resolve().parents[1]  # the checkout (its code, docs and benchmarks)
RESULTS = Path(__file__).resolve().parent / "results"  # committed data (*.json) and reports (*.md)


class ArgumentParser(argparse.ArgumentParser):
    """A benchmark's command line, named by its module (``__spec__.name``) so that ``--help`` shows the command that
    runs it; bad input is refused by the project's rule for every command: one ``error: ...`` line on stderr and
    exit status 2 (argparse's own prints the whole usage first)."""

    def __init__(self, module: str, **kwargs) -> None:
        super().__init__(prog=f"python -m {module}", **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {self.prog}: {message}\n")


def _number(kind: Callable[[str], Any], text: str, within: Callable[[Any], bool], wanted: str) -> Any:
    """``text`` as a ``kind`` (int or float) for which ``within`` holds, else argparse's refusal of the option
    (``argument --k: '0' is not a whole number >= 1``: one line, exit 2)."""
    import math

    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or not within(value):
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not {wanted}")
    return value


def count(text: str) -> int:
    """An option's type: a whole number >= 1 (jobs, iterations, episodes, batches); 0 is not read as "the default"."""
    return _number(int, text, lambda v: v >= 1, "a whole number >= 1")


def natural(text: str) -> int:
    """An option's type: a whole number >= 0 (a seed)."""
    return _number(int, text, lambda v: v >= 0, "a whole number >= 0")


def positive(text: str) -> float:
    """An option's type: a finite number > 0 (seconds, a learning rate)."""
    return _number(float, text, lambda v: v > 0, "a finite number > 0")


def fraction(text: str) -> float:
    """An option's type: a number in [0, 1] (a probability)."""
    return _number(float, text, lambda v: 0 <= v <= 1, "a number in [0, 1]")


def write_json(path: Path | str, payload: Any, indent: int | None = 2) -> Path:
    """``payload`` as JSON (and a newline), replacing ``path`` whole (``ecpo_train.files.atomic``: a command
    stopped mid-write leaves the previous file; the other side of a handshake never reads half of it)."""
    from ecpo_train.files.atomic import write_text

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return write_text(path, json.dumps(payload, indent=indent) + "\n")


def write_report(report: Any, out: Path, render: Callable[[Any], str]) -> None:
    """``out`` (the JSON of ``report``) and the markdown beside it (same name, ``.md``: ``render(report)``), each
    replaced whole (:func:`write_json`)."""
    from ecpo_train.files.atomic import write_text

    write_json(out, report, indent=1)
    write_text(out.with_suffix(".md"), render(report))


def write_json_gz(path: Path, payload: Any) -> Path:
    """``payload`` as compact JSON, gzipped (mtime 0: the same payload gives the same bytes), replacing ``path`` whole:
    for results of many MB (a report's raw records), which every checkout, and every command sent to an offline GPU
    machine, carries."""
    from ecpo_train.files.atomic import write_bytes

    return write_bytes(path, gzip.compress(json.dumps(payload, separators=(",", ":")).encode("utf-8"), mtime=0))


def read_json(path: Path) -> Any:
    """A JSON file, gzipped where its name ends in ``.gz`` (:func:`write_json_gz`)."""
    data = Path(path).read_bytes()
    return json.loads(gzip.decompress(data) if Path(path).suffix == ".gz" else data)


def refused(message: str) -> int:
    """A command's bad input: one ``error:`` line on stderr; returns exit status 2 (for ``return refused(...)``)."""
    print(f"error: {message}", file=sys.stderr)
    return 2


def fail(message: str) -> None:
    """A command's bad input: one ``error:`` line on stderr and exit status 2."""
    raise SystemExit(refused(message))


def chosen_parts(text: str, names: Sequence[str]) -> set[str] | None:
    """``--parts 1,3``: the parts of a GPU command, numbered from 1; anything else (0 and -4 would index from the end)
    prints the one-line refusal and gives None (exit 2 follows)."""
    try:
        numbers = [int(k) for k in text.split(",")]
    except ValueError:
        numbers = []
    if not numbers or any(not 1 <= k <= len(names) for k in numbers):
        refused(f"--parts {text!r}: give part numbers 1-{len(names)} separated by commas")
        return None
    return {names[k - 1] for k in numbers}


def rescore(path: Path, out: Path | None, needed: str | Callable[[dict], bool], why: str,
            score: Callable[[Any], Any], render: Callable[[Any], str]) -> None:
    """``report --from-json``: a report a GPU command returned (where scipy was missing) scored again here from its
    stored outcomes and written, with its markdown, to ``out`` (default: over itself); a file that cannot be read or holds
    no ``needed`` key (or fails the ``needed`` test) is the one-line exit 2 (``why`` says what is missing)."""
    try:
        report = read_json(path)
        if not isinstance(report, dict) or not (needed(report) if callable(needed) else needed in report):
            raise ValueError(why)
    except (OSError, ValueError) as error:
        fail(f"--from-json {path}: {' '.join(str(error).split())}")
    out = out or path
    write_report(score(report), out, render)
    print(f"wrote {out} and {out.with_suffix('.md')}")


def refuse_without_cuda(device: str, command: str) -> bool:
    """A GPU command asked for CUDA where torch sees none: print the one-line refusal and say so (exit 2 follows)."""
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        print(f"{command} needs a CUDA GPU (this torch {torch.__version__} sees none); for a CPU check of every "
              "part: --device cpu --smoke", file=sys.stderr)
        return True
    return False
