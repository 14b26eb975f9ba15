"""The run shell: everything around the iteration, written once for every engine.

A run is a folder and an engine. :func:`open_run` starts it (the folder's lock, the start plan -- fresh, ``--resume``
or ``--overwrite``, ``runtime.resume.plan_start`` -- the engine built, its checkpoint loaded, then the run's first
writes, ``run_dir.begin_run``); :class:`Run` then owns the loop (``train``, with ``stop(metrics)`` and
``observe(sampled, learned)`` hooks), the validation records (``validation.jsonl``, every validation, inside an
iteration or asked for), the checkpoint cadence, the progress line and the closing plot.

An engine is a small adapter (:class:`Engine`), declared with its spec (``runtime/engines.py``: its checkpoint's
name, how a resume reads its config): the native trainer (``runtime.trainer.Trainer``) and the RLlib algorithm
(``integrations.rllib.llm.engine.RLlibEngine``). It plays and learns (``train_iteration``: one
``core.iteration.run_iteration``), validates, saves and loads its own checkpoint, and closes; it writes nothing
else to the run folder.
"""

from __future__ import annotations

import sys
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from ecpo_gym.kwargs import shown
from ecpo_train.core.iteration import Observe
from ecpo_train.core.tasks import validation_label, validation_seed
from ecpo_train.runtime.progress import no_phase
from ecpo_train.runtime.resume import StartPlan, plan_start, warm_start
from ecpo_train.runtime.run_dir import (
    VALIDATION_TASKS,
    MetricsLog,
    RunFolder,
    begin_run,
    check_metrics_file,
    check_writable_folder,
)

VALIDATED = "val/success"  # the key every validation's metrics hold: the shell records its episodes


class Engine(Protocol):
    """What the run shell drives. ``name`` (a class attribute): whose checkpoint a run folder holds
    (``RunFolder.checkpoint(name)``) and which engine ``config.yaml`` names."""

    name: str
    config: Any  # the run's TrainConfig
    writes: bool  # this process writes the run folder (under FSDP only process 0 does)
    iteration: int  # iterations done
    val_tasks: list[str]  # the run's fixed validation tasks
    validation_episodes: list[Any]  # the last validation's episodes (task_id, won, length), in validation order
    on_phase: Callable[[str], None]  # what the engine is doing now, for the progress line (set by the shell)

    def load(self, checkpoint: Path | None) -> None:
        """Start afresh (``None``) or continue the run saved in ``checkpoint``; a checkpoint that cannot be
        continued is a ``ValueError`` (nothing has been written yet)."""

    def agree(self, refusal: ValueError | None) -> None:
        """Every process of the engine refuses the start together (FSDP), or none does; one process: a no-op."""

    def train_iteration(self, observe: Observe | None = None) -> dict[str, float]:
        """One iteration (``core.iteration.run_iteration``), its metrics; ``iteration`` counts it."""

    def validate(self, tasks: Sequence[str], seed: int) -> tuple[dict[str, float], list[Any]]:
        """Validation on ``tasks`` from env seed ``seed``: its metrics (``val/...``) and its episodes."""

    def save(self, checkpoint: Path) -> None:
        """The engine's state into ``checkpoint`` (every process calls it; the writing one writes)."""

    def close(self) -> None: ...


def open_run(engine_class: Callable[..., Engine], config: Any, *, resume: bool | str = False, overwrite: bool = False,
             **options: Any) -> Run:
    """Start the run ``config`` describes with ``engine_class(config, **options)`` (see the module docstring).

    Every check passes before the folder is touched: a refused start (a folder holding a run without ``--resume``
    or ``--overwrite``, keys that define the run changed on ``--resume``, a damaged checkpoint, ...) is a
    ``ValueError`` and changes no byte. One process: the lock and the plan come before the engine is built, so a
    refusal costs no model load. FSDP (``config.fsdp``, K processes): every process builds its engine first (the
    refusal is collective), process 0 takes the lock and plans."""
    from ecpo_train.files.atomic import current_folder
    from ecpo_train.runtime.config import config_dict
    from ecpo_train.runtime.run_lock import acquire_run_lock

    if not str(config.run_dir).strip():  # (Path('') is the current folder)
        raise ValueError("run_dir='' is empty, which would mean the current folder: give the run's folder "
                         "(run_dir=. for the current one)")
    name, run_dir = engine_class.name, Path(config.run_dir)
    values, checkpoint = config_dict(config), RunFolder(run_dir).checkpoint(engine_class.name)
    engine: Engine | None = None
    lock, refusal, log = None, None, None
    collective = bool(getattr(config, "fsdp", False))
    try:
        check_writable_folder(run_dir, f"run_dir={shown(str(run_dir))}")  # (a file, a read-only parent: before any work)
        if collective:
            engine = engine_class(config, **options)
        writes = engine.writes if engine is not None else True
        try:
            if writes:  # first the lock: what is checked below cannot change under us
                lock = acquire_run_lock(run_dir, name)
                plan = plan_start(run_dir, values, resume=resume, overwrite=overwrite, engine=name,
                                  made=lock.made_folder)
                if plan.kind == "resume":
                    check_metrics_file(RunFolder(run_dir).metrics)
            else:  # the other processes take the writer's reading of the folder
                plan = StartPlan(run_dir, "resume" if resume and current_folder(checkpoint).exists() else "start")
            if engine is None:
                engine = engine_class(config, **options)
            engine.load(current_folder(checkpoint) if plan.kind == "resume" else None)
            if engine.iteration > config.iterations:
                raise ValueError(f"iterations={config.iterations} is below the checkpoint's iteration "
                                 f"{engine.iteration}: set iterations >= {engine.iteration} to continue")
        except ValueError as err:
            refusal = err
        if engine is not None:
            engine.agree(refusal)
        if refusal is not None:
            raise refusal
        if engine.writes:
            log = MetricsLog(run_dir, tensorboard=config.tensorboard, config=values, engine=name)
            begin_run(log, plan.kind, engine.iteration, plan.changes, warm_start=warm_start(values))
            log.lock, lock = lock, None  # the log's until it closes
        return Run(engine, log, checkpoint)
    except BaseException:
        if log is not None:
            log.close()
        if lock is not None:
            lock.release()
        if engine is not None:
            engine.close()
        raise


def train(engine_class: Callable[..., Engine], config: Any, *, resume: bool | str = False, overwrite: bool = False,
          **options: Any) -> list[dict[str, float]]:
    """Start the run (:func:`open_run`), train it to ``config.iterations``, close it (the curves plotted); returns
    the metrics of every iteration."""
    with open_run(engine_class, config, resume=resume, overwrite=overwrite, **options) as run:
        return run.train()


class Run:
    """A started run (:func:`open_run`): ``engine`` plays and learns, this writes the folder (``log``: ``None`` on
    a process that does not write)."""

    def __init__(self, engine: Engine, log: MetricsLog | None, checkpoint: Path) -> None:
        self.engine, self.log, self.checkpoint = engine, log, checkpoint
        self.config = engine.config
        self._history: list[dict[str, float]] = []  # a process that does not write keeps its metrics here
        self._trained = False

    @property
    def history(self) -> list[dict[str, float]]:
        """The metrics of every iteration logged (a resumed run's earlier ones included)."""
        return self.log.history if self.log is not None else self._history

    @property
    def run_dir(self) -> Path:
        return Path(self.config.run_dir)

    def train(self, iterations: int | None = None, *, stop: Callable[[dict[str, float]], bool] | None = None,
              observe: Observe | None = None) -> list[dict[str, float]]:
        """Train to ``config.iterations`` (or ``iterations`` more), or until ``stop(metrics)`` says so.

        A run at iteration 0 that validates before training (``val_every`` and ``val_before_training``) logs the
        untrained policy's validation as iteration 0. Every iteration's metrics are logged (``observe(sampled,
        learned)`` sees its rollout and credit first); a checkpoint is written every ``checkpoint_every``
        iterations and once at the end. Returns :attr:`history`."""
        from ecpo_train.runtime.progress import Progress

        cfg, engine = self.config, self.engine
        target = cfg.iterations if iterations is None else engine.iteration + int(iterations)
        with Progress(enabled=cfg.progress and engine.writes, total=target, done=engine.iteration,
                      label=cfg.estimator, val_label=validation_label(cfg, engine.val_tasks)) as progress:
            engine.on_phase = progress.phase
            try:
                if engine.iteration == 0 and cfg.val_every and cfg.val_before_training and not self.history:
                    self._record({"iteration": 0.0} | self.validate())
                while engine.iteration < target:
                    metrics = engine.train_iteration(observe)
                    self._trained = True
                    self._record(metrics)
                    progress.update(metrics)
                    if cfg.checkpoint_every and engine.iteration % cfg.checkpoint_every == 0:
                        self.save()
                    if stop is not None and stop(metrics):
                        break
                self.save()
            finally:
                engine.on_phase = no_phase
        if self.log is not None:
            self.log.flush()
        return self.history

    def validate(self, tasks: Sequence[str] | None = None, label: str = VALIDATION_TASKS) -> dict[str, float]:
        """Success on the run's validation tasks at the validation temperature (``val_episodes_per_task`` each),
        from the run's validation seed; its episodes are recorded in ``validation.jsonl`` at the current
        iteration (a validation is a measurement worth keeping, whoever asks for it).

        ``tasks``: another task set (e.g. the training tasks), validated the same way and recorded under
        ``label``, so that the configured set's lines still pair by iteration."""
        if (tasks is None) != (label == VALIDATION_TASKS):
            raise ValueError(f"validate: give another task set a label of its own (not {VALIDATION_TASKS!r}), "
                             "and the configured one (tasks=None) none")
        engine = self.engine
        chosen = list(engine.val_tasks) if tasks is None else [str(t) for t in tasks]
        engine.on_phase(f"iteration {engine.iteration}: validation on {len(chosen)} tasks")
        metrics, episodes = engine.validate(chosen, validation_seed(self.config.seed))
        if self.log is not None:
            self.log.append_validation(engine.iteration, episodes, tasks=label)
        return metrics

    def save(self, path: str | Path | None = None) -> Path:
        """The engine's checkpoint: the run folder's (``config.yaml`` comes with a run's first write), or ``path``."""
        target = Path(path) if path is not None else self.checkpoint
        if self.log is not None and path is None:
            self.log.open_folder()
        self.engine.save(target)
        return target

    def _record(self, metrics: dict[str, float]) -> None:
        """One iteration's metrics (and, where it validated, its validation's episodes) into the run folder."""
        iteration = int(metrics["iteration"])
        if self.log is None:
            self._history.append(metrics)
            return
        self.log.append(metrics, step=iteration)
        if VALIDATED in metrics and iteration > 0:  # (iteration 0's were recorded by validate())
            self.log.append_validation(iteration, self.engine.validation_episodes)

    def close(self) -> None:
        """Close the engine and the log (the folder's lock is given back), then plot the curves of a run that
        trained."""
        try:
            self.engine.close()
        finally:
            if self.log is not None:
                self.log.close()
        if self.log is None or not self._trained:
            return
        import importlib.util

        from ecpo_train.runtime.checkpoint_io import checkpoint_size

        if importlib.util.find_spec("matplotlib") is None:  # (a GPU machine may carry only what training needs)
            print(f"note: matplotlib is not installed, so no curves.png: `ecpo plot {self.run_dir}` draws them "
                  "where it is", file=sys.stderr)
        else:
            from ecpo_train.runtime.plotting import plot_run

            plot_run(self.run_dir)
        if self.checkpoint.exists() and self.config.progress:
            print(f"checkpoint: {self.checkpoint} ({checkpoint_size(self.checkpoint)})", file=sys.stderr)

    def __enter__(self) -> typing.Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

