"""Arms run side by side from one warm start, the one way both comparison programs (``gpu_comparison``,
``paper_benchmarks``) plan, run and size them, each arm in a process of its own on the one device; and what those
programs share about their arms (their options, presets, the arms given, the time left).

An arm is a program's module-level function ``runner(spec, plan) -> result`` (the arm process, ``python -m
benchmarks.arms SPEC``, imports it by name; ``spec``: a JSON dict holding at least ``arm``, ``deadline``
(``time.time()``) and ``reserve``, the seconds of its closing validation). It runs its first iteration, then calls
``plan(first_wall)`` for N (:func:`train_planned`): its process writes that time to ``ARM.first`` and waits for
``ARM.plan``, which the launcher (:func:`run_side_by_side`) writes once every arm still running has reported; the
program's ``decide(first_walls)`` sees them all (the slowest sizes N), so every arm runs the same N and the arms
pair. An arm that fails stops the others, and the failure names the arm with its log's last line (a library's
``ValueError``/``OSError`` is one ``error: ...`` line, exit 2); arms still running 60 s past their deadline are
stopped too. Each arm's output goes to ``LOGS-ARM.log`` (appended: a resumed program keeps the earlier commands').
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from benchmarks import ArgumentParser, count, fail, positive, refused, write_json
from benchmarks.gpu_learning import DEFAULT_MODEL, ROOT, iteration_figures

POLL_SECONDS = 0.2
CLOSING_MARGIN = 1.15  # a closing validation's time, as a multiple of the one before training (plus 10 s)
HEADER = "\n== "  # opens each command's lines in an arm's log
Plan = Callable[[float], int]  # an arm's first iteration's wall seconds -> N
Runner = Callable[[dict[str, Any], Plan], dict[str, Any]]
Decide = Callable[[list[float]], int]  # every arm's first iteration's wall seconds -> N
Keep = Callable[[str, dict[str, Any]], None]


class Failure(NamedTuple):
    """An arm that failed: its name, its process's exit status, its log's last line."""

    arm: str
    code: int
    line: str

    def __str__(self) -> str:
        return f"{self.arm}: its process exited {self.code} ({self.line})"


# The options both programs' ``run`` reads the same way, and their defaults.
DEFAULTS = {"device": "cuda", "smoke": False, "arms": ["ecpo", "gigpo_std"], "max_iterations": 200,
            "model": str(DEFAULT_MODEL), "sft_epochs": 2, "sft_lr": 1e-5, "score_batch": 64}


def add_options(command: Any) -> None:
    """``command`` (a ``study.StudyCommand``) takes the options of :data:`DEFAULTS`."""
    command.add("--device", help="run: default cuda")
    command.add("--smoke", action="store_const", const=True, help="run: tiny sizes on any device (for tests)")
    command.add("--arms", nargs="+", help="run: credit estimators, first = ECPO (default ecpo gigpo_std)")
    command.add("--max-iterations", type=count, help="run: default 200")
    command.add("--model", help="run: SmolLM2 folder")
    command.add("--sft-epochs", type=count, help="run: default 2")
    command.add("--sft-lr", type=positive, help="run: default 1e-5")
    command.add("--score-batch", type=count, help="run, on CUDA: items per scoring forward (default 64)")


def check_arms(arms: list[str], fewest: int = 1) -> None:
    """``--arms``: ``fewest`` or more different registered estimators, else the one-line exit 2."""
    from ecpo_train.core.credit.registry import available_estimators

    if len(arms) < fewest or len(set(arms)) != len(arms):
        fail(f"--arms {' '.join(arms)}: give {'two or more ' if fewest > 1 else ''}different estimators, the first "
             "the one the others are compared with")
    unknown = [a for a in arms if a not in available_estimators()]
    if unknown:
        fail(f"--arms: unknown estimator {unknown[0]!r}; valid: {', '.join(available_estimators())}")


def run_overrides(args: Any, work: Path) -> list[str]:
    """The preset overrides of a learning run: SmolLM2's folder (under ``--smoke`` the tiny random model's, which
    ``gpu_learning.write_smoke_model`` writes), the device, no progress line, no periodic validation, and the smoke
    sizes. A missing model is the one-line exit 2 naming the command that converts it. Nothing is written, so a
    command checks its configs before it builds anything."""
    base = str(work / "tiny") if args.smoke else args.model
    if not args.smoke and not (Path(base) / "config.json").is_file():
        fail(f"--model: no model at {base}: run `python scripts/device_bundle.py model` (docs/gpu.md) or pass --model")
    overrides = [f"model={base}", f"device={args.device}", "progress=false", "val_every=0"]
    if args.smoke:
        overrides += ["n_groups=2", "group_size=2", "val_tasks=[gen/Look/10000,gen/Pick/10000]", "mixed_precision=none",
                      "micro_batch_size=4", "mini_batch_size=8", "threads=1",
                      "env_kwargs={task_types: [Look, Pick], num_receptacles: [4, 5], max_steps: 4, num_tasks: 8}"]
    return overrides


def load_preset(flag: str, preset: str, overrides: list[str]) -> Any:
    """``preset`` with ``overrides``; a preset not found or an override it refuses is the one-line exit 2 under
    ``flag``, before any model loads."""
    from ecpo_train.runtime.config import load_config

    try:
        return load_config(preset, overrides)
    except (FileNotFoundError, ValueError) as error:
        fail(f"{flag}: {' '.join(str(error).split())}")


def closing_seconds(validation: float) -> float:
    """What to keep for a closing validation that took ``validation`` seconds before training (and the writes)."""
    return CLOSING_MARGIN * validation + 10.0


def iterations_that_fit(left: float, first_wall: float, validation: float) -> int:
    """N, the iterations every arm can run: each has run 1 of them; what is ``left`` must hold the other N - 1 of
    the slowest (its first one took ``first_wall``) and the closing validation (one took ``validation`` seconds)."""
    return max(1, int((left - closing_seconds(validation) + first_wall) / first_wall))


def open_arm(spec: dict[str, Any], *, resume: bool | str = False, overwrite: bool = False,
             **fields: Any) -> tuple[Any, float]:
    """The run a spec names (``preset`` and ``overrides``, then ``fields`` replaced on the config), started
    through the run shell (``runtime.run.open_run``: its folder's lock, ``resume`` / ``overwrite``), with the GPU's
    scoring batch (``score_batch``), and its build seconds."""
    from ecpo_train.runtime.config import load_config
    from ecpo_train.runtime.run import open_run
    from ecpo_train.runtime.trainer import Trainer

    started = time.monotonic()
    run = open_run(Trainer, dataclasses.replace(load_config(spec["preset"], spec["overrides"]), **fields),
                   resume=resume, overwrite=overwrite)
    if spec["device"].startswith("cuda"):  # distinct (prompt, candidates) items per scoring forward
        run.engine.policy.score_batch_size = spec["score_batch"]
    return run, time.monotonic() - started


def arm_row(metrics: dict[str, float]) -> dict[str, float]:
    """An iteration's figures and its wall seconds (the run's ``time/iteration``: the same whether the row was
    measured now or read back from a resumed arm's ``metrics.jsonl``)."""
    return iteration_figures(metrics) | {"wall": float(metrics["time/iteration"])}


def train_planned(run: Any, rows: list[dict[str, float]], spec: dict[str, Any], plan: Plan) -> tuple[int, str | None]:
    """An arm's first iteration (where ``rows`` holds none), its plan N, then iterations of the started run
    (``run.train``, the run shell's loop: each logged, checkpointed on the run's cadence) until ``rows`` (each
    iteration's :func:`arm_row`, appended in place; a resumed arm's earlier ones too) holds N, stopping early where
    the next one (at the mean wall so far) and the ``reserve`` would pass the ``deadline`` (``time.time()``):
    ``(N, why it stopped early, if it did)``."""
    why: list[str] = []

    def train(iterations: int) -> None:
        def too_late() -> bool:
            if rows and time.time() + float(np.mean([r["wall"] for r in rows])) + spec["reserve"] > spec["deadline"]:
                why.append(f"time limit after {len(rows)} of {iterations} iterations")
            return bool(why)

        def stop(metrics: dict[str, float]) -> bool:
            rows.append(arm_row(metrics))
            return len(rows) >= iterations or too_late()

        if len(rows) < iterations and not too_late():
            run.train(iterations - len(rows), stop=stop)

    train(1)
    iterations = plan(rows[0]["wall"])
    train(iterations)
    return iterations, why[0] if why else None


def run_side_by_side(specs: list[dict[str, Any]], runner: Runner, work: Path, decide: Decide, logs: Path,
                     keep: Keep) -> Failure | None:
    """Each spec's arm in a process of its own (module docstring; the handshake files in ``work``): ``keep(arm,
    result)`` for each arm that finished; returns the first failure, if one (the others are then stopped)."""
    procs: dict[str, subprocess.Popen] = {}
    work.mkdir(parents=True, exist_ok=True)
    for spec in specs:
        arm = spec["arm"]
        for suffix in ("first", "plan", "result"):  # a folder a previous command used
            (work / f"{arm}.{suffix}").unlink(missing_ok=True)
        write_json(work / f"{arm}.spec", spec | {"runner": _name_of(runner)})
        with open(f"{logs}-{arm}.log", "a") as log:
            log.write(f"{HEADER}{time.strftime('%Y-%m-%d %H:%M:%S')}: arm {arm}\n")
            log.flush()
            procs[arm] = subprocess.Popen([sys.executable, "-m", __spec__.name, str(work / f"{arm}.spec")],
                                          cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    planned, failed, last_call = False, None, max(s["deadline"] for s in specs) + 60
    while failed is None and not all(p.poll() == 0 for p in procs.values()):
        failed = next((Failure(arm, p.returncode, _last_line(logs, arm))
                       for arm, p in procs.items() if p.poll() not in (None, 0)), None)
        if failed is None and time.time() > last_call:
            failed = Failure("all", -1, "the arms ran past the time limit")
        reported = [work / f"{arm}.first" for arm, p in procs.items() if p.poll() is None or
                    (work / f"{arm}.first").exists()]  # an arm a resumed program had finished reports nothing
        if failed is None and not planned and reported and all(f.exists() for f in reported):
            n = decide([json.loads(f.read_text()) for f in reported])
            for arm in procs:
                write_json(work / f"{arm}.plan", n)
            planned = True
        time.sleep(POLL_SECONDS)
    for p in procs.values():
        if p.poll() is None:
            p.terminate()
            p.wait()
    for arm in procs:
        if (work / f"{arm}.result").exists():
            keep(arm, json.loads((work / f"{arm}.result").read_text()))
    return failed


def _name_of(runner: Runner) -> str:
    """``module:function``, the module by the name it is imported under (a program run as ``__main__`` too)."""
    return f"{sys.modules[runner.__module__].__spec__.name}:{runner.__qualname__}"


def _last_line(logs: Path, arm: str) -> str:
    """The last line this command's arm process wrote (after its header; earlier commands' lines come before)."""
    lines = Path(f"{logs}-{arm}.log").read_text().split(HEADER)[-1].strip().splitlines()[1:]
    return lines[-1] if lines else "no output"


def main(argv: list[str] | None = None) -> int:
    """One arm process: its spec's runner, with its plan from the launcher; its result beside the spec."""
    parser = ArgumentParser(__spec__.name if __spec__ else "benchmarks.arms",
                            description="one arm of a comparison, as its launcher (gpu_comparison, paper_benchmarks) "
                                        "starts it")
    parser.add_argument("spec", type=Path, help="the arm's spec (JSON) the launcher wrote")
    spec_path = parser.parse_args(argv).spec
    try:
        spec = json.loads(spec_path.read_text())
        work, arm = spec_path.parent, spec["arm"]
        module, name = spec["runner"].split(":")
        runner = getattr(importlib.import_module(module), name)
    except (OSError, ValueError, TypeError, KeyError, ImportError, AttributeError) as error:  # (no launcher's spec)
        return refused(f"spec {str(spec_path)[:200]}: not an arm's spec ({type(error).__name__}: "
                       f"{' '.join(str(error).split())[:200]})")

    def plan(first_wall: float) -> int:
        write_json(work / f"{arm}.first", first_wall)
        while not (work / f"{arm}.plan").exists():
            if time.time() > spec["deadline"]:
                raise TimeoutError(f"no {arm}.plan by the deadline")
            time.sleep(POLL_SECONDS)
        return int(json.loads((work / f"{arm}.plan").read_text()))

    try:
        result = runner(spec, plan)
    except (ValueError, OSError) as error:  # the library's refusal (a damaged checkpoint, a preset not found)
        print(f"error: {' '.join(str(error).split())}", flush=True)
        return 2
    write_json(work / f"{arm}.result", result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
