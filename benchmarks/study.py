"""The study runner every registered study shares: its jobs (arms x seeds, from each of its starting points), run a
few at a time and skipped where finished (resume), and one command line of subcommands (stages): a protocol (a YAML
file committed before its runs, or the constants of its module's docstring), its jobs and its stages,
``python -m benchmarks.NAME STAGE --out DIR [options]``. The rules a stage keeps (the options it reads, bad input as
one ``error:`` line and exit 2, its result printed and written to ``--json``): docs/benchmarks.md. A study that
outlives a session keeps its finished jobs in git (``benchmarks.study_keep``).
"""

from __future__ import annotations

import json
import multiprocessing
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import ArgumentParser, fail, refused


@dataclass(frozen=True)
class Job:
    """One job of a study: one arm trained from one seed (from one starting point, ``start``, where the study has
    several), under its ``name`` (its run folder and its evaluation's name)."""

    name: str
    arm: str
    seed: int
    start: Any = None


def read_protocol(path: Path, keys: Sequence[str] = ()) -> dict[str, Any]:
    """A study's YAML protocol (committed with the repository), refused where it lacks one of ``keys``."""
    from ecpo_train.runtime.config_values import read_yaml

    if not path.exists():
        raise FileNotFoundError(f"study protocol not found at {path}; it ships with the repository")
    protocol = read_yaml(path.read_text(encoding="utf-8"))
    if missing := [key for key in keys if key not in protocol]:
        raise ValueError(f"{path}: protocol is missing the key {missing[0]!r}")
    return protocol


def arms_by_seeds(arms: Sequence[str], seeds: Sequence[int], starts: Sequence[Any] = (None,),
                  name: Callable[[Any, str, int], str] = lambda start, arm, seed: f"{arm}-s{seed}") -> list[Job]:
    """Every (start, arm, seed), seed-major: every arm of a seed (on each start) before the next seed, so that a study
    stopped early holds whole seeds; ``name(start, arm, seed)`` names each job (default ``ARM-sSEED``)."""
    return [Job(name(start, arm, seed), arm, seed, start) for seed in seeds for start in starts for arm in arms]


def run_jobs(tasks: Iterable[Callable[[], None]], parallel: int) -> None:
    """``tasks`` (each finished is skipped by the task itself: resume), ``parallel`` at a time, in order of submission;
    the first failure is raised once every started task has ended."""
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        for future in [pool.submit(task) for task in tasks]:
            future.result()


def finished(lines: Sequence[Mapping[str, Any]], iterations: int) -> bool:
    """Whether a training run whose metrics lines are ``lines`` has finished: its last line reaches
    ``iterations`` (a run's lines are in order: resuming cuts them back to its checkpoint first)."""
    return bool(lines) and int(lines[-1]["iteration"]) >= iterations


def trained(lines: Sequence[Mapping[str, Any]], checkpoint: Path, iterations: int) -> bool:
    """Whether a run is ready for its final evaluation: ``finished(lines, iterations)``, and ``checkpoint``, where
    there is one, holds that last iteration. A run stopped between its last metrics line and its last checkpoint is
    not (its ``--resume`` cuts the metrics back to the checkpoint and plays the rest again), so a schedule never
    evaluates an earlier iteration's policy as the final one."""
    from ecpo_train.runtime.checkpoint_io import checkpoint_iteration

    return finished(lines, iterations) and (not checkpoint.is_file() or checkpoint_iteration(checkpoint) >= iterations)


def in_processes(function: Callable[[Any], Any], jobs: Iterable[Any], workers: int, ordered: bool = True,
                 spawn: bool = False) -> Iterator[Any]:
    """``function(job)`` of every job, ``workers`` spawned processes at a time (one OpenMP thread each unless the
    environment says otherwise), each result as it comes (in job order where ``ordered``); in this process where
    ``workers`` <= 1 unless ``spawn`` (then in one spawned process, away from this one)."""
    jobs = list(jobs)
    if (workers <= 1 and not spawn) or not jobs:
        yield from map(function, jobs)
        return
    if workers > 1:
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    with multiprocessing.get_context("spawn").Pool(max(1, min(workers, len(jobs)))) as pool:
        yield from (pool.imap if ordered else pool.imap_unordered)(function, jobs)


def flags(options: Iterable[str]) -> str:
    return ", ".join("--" + option.replace("_", "-") for option in options)


class StudyCommand:
    """A study's command line: ``STAGE`` then options; ``stages`` maps each stage to the options it reads (besides the
    ones every stage reads, added with ``common=True``), or to ``{option: its default in this stage}``. Options of the
    stages default to ``None`` so that one given to a stage that does not read it is seen and refused; ``defaults``
    (then the stage's own) fills them in afterwards."""

    def __init__(self, module: str, description: str, stages: Mapping[str, Sequence[str] | Mapping[str, Any]],
                 stage_help: str = "", defaults: Mapping[str, Any] | None = None) -> None:
        self.parser = ArgumentParser(module, description=description)
        self.parser.add_argument("stage", choices=list(stages), help=stage_help or None)
        self.stages = {stage: tuple(options) for stage, options in stages.items()}
        self.options = tuple(dict.fromkeys(option for options in self.stages.values() for option in options))
        self.defaults = {stage: dict(defaults or {}) | (dict(options) if isinstance(options, Mapping) else {})
                         for stage, options in stages.items()}

    def add(self, *names: str, **kwargs: Any) -> None:
        """An option: one of the stages' (its default is ``None`` unless ``common`` is given: read by every stage)."""
        if not kwargs.pop("common", False):
            kwargs["default"] = None
        self.parser.add_argument(*names, **kwargs)

    def parse(self, argv: Sequence[str] | None) -> Any:
        """The parsed arguments, with the defaults of the options the stage reads; an option given that the stage does
        not read is refused as argparse refuses bad input: one error line and exit status 2 (``SystemExit``)."""
        args = self.parser.parse_args(argv)
        unused = [option for option in self.options
                  if getattr(args, option) is not None and option not in self.stages[args.stage]]
        if unused:
            fail(f"{args.stage} does not take {flags(unused)} (it takes {flags(self.stages[args.stage])})")
        for option, default in self.defaults[args.stage].items():
            if getattr(args, option) is None:
                setattr(args, option, default)
        return args


def run_stage(stage: Callable[[], Any], json_path: str | Path | None = None, default: Callable[[Any], Any] = float
              ) -> int:
    """Run one stage: its result (a JSON-ready dict, or ``None`` for a stage that only prints) printed and, with
    ``json_path``, written there whole; bad input one ``error:`` line and exit status 2."""
    from ecpo_train.files.atomic import write_text

    try:
        result = stage()
        if result is None:
            return 0
        text = json.dumps(result, indent=1, default=default)
        if json_path:
            write_text(Path(json_path), text + "\n")
    except (RuntimeError, ValueError, OSError) as err:
        from ecpo_train.evaluation.options import error_line

        return refused(error_line(err))
    print(text)
    return 0
