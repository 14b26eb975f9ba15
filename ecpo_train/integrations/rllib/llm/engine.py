"""``ecpo train --config P --engine rllib``: a native preset run through the RLlib algorithm, as the run shell's
engine (``RLlibEngine``; ``runtime/run.py`` drives it as it drives the native trainer).

The run is the preset's (``ECPOConfig.from_train_config``); the run folder is the native one, written by the run
shell: ``config.yaml`` (``engine: rllib``), ``metrics.jsonl`` with the native metric names, ``validation.jsonl``,
``history.jsonl``, ``curves.png``; the algorithm's checkpoint (``Algorithm.save_to_path``) is ``rllib_checkpoint/``
(``ECPO.save_to_path``: msgpack and safetensors, no pickle), and ``--resume`` builds the algorithm from the run's
own config and gives it that state (``ECPO.restore_from_path``), exactly where the uninterrupted run would be:
nothing in the run folder is unpickled, so a file planted there runs no code. The same refusals as the native
path apply before anything is written or any actor starts (the shell's: a folder holding a run, keys that define
the run changed on resume, a native run's folder, a folder without ``rllib_checkpoint/``, a folder another run
holds the lock of; the engine's: the env kwargs, the model, the CPUs the actors need).
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import Any


class RLlibEngine:
    """The RLlib engine (``runtime.run.Engine``): the run's ``TrainConfig`` through the ``ECPO`` algorithm.

    Building it checks what the runner actors would otherwise fail on remotely (the env kwargs and the model,
    ``check_env_and_model``) and every config error, and starts nothing; :meth:`load` starts Ray (where it is not
    running: at most this machine's CPUs, checked against the actors' first) and builds the algorithm, or restores
    it from the run's checkpoint. ``actor_cpus``: the CPUs Ray reserves for each runner and each learner actor
    (fractions share a core)."""

    name = "rllib"
    writes = True

    def __init__(self, train: Any, *, num_env_runners: int = 2, num_learners: int = 0, actor_cpus: float = 1.0) -> None:
        from ecpo_train.integrations.rllib.llm.config import ECPOConfig
        from ecpo_train.runtime.builders import check_env_and_model
        from ecpo_train.runtime.progress import no_phase

        self.config = train
        check_env_and_model(train)
        # (RLlib's one-time note that the algorithm runs on its new API stack, ECPO's only stack, is not news: quiet)
        note = logging.getLogger("ray.rllib.algorithms.algorithm_config")
        level = note.level
        note.setLevel(logging.ERROR)
        try:
            self.rllib_config = (ECPOConfig.from_train_config(train)
                                 .env_runners(num_env_runners=num_env_runners, num_cpus_per_env_runner=actor_cpus)
                                 .learners(num_learners=num_learners, num_cpus_per_learner=actor_cpus))
            self.rllib_config.validate()
        finally:
            note.setLevel(level)
        self.algo: Any = None
        self._started_ray = False
        self.on_phase = no_phase

    @property
    def iteration(self) -> int:
        return int(self.algo.ecpo.iteration) if self.algo is not None else 0

    @property
    def val_tasks(self) -> list[str]:
        return list(self.algo.ecpo.val_tasks)

    @property
    def validation_episodes(self) -> list[Any]:
        return list(self.algo.ecpo.validation_episodes)

    def load(self, checkpoint: Path | None) -> None:
        import ray

        if checkpoint is not None:  # a checkpoint cut mid-write is named before Ray starts (Ray's own reading of
            check_rllib_checkpoint(checkpoint)  # it comes after its startup lines)
        self._started_ray = not ray.is_initialized()
        if self._started_ray:  # Ray will see at most this machine's CPUs: refuse an obvious excess before starting it
            check_runner_cpus(self.rllib_config, float(os.cpu_count() or 1))
            ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
        check_runner_cpus(self.rllib_config, float(ray.cluster_resources().get("CPU", 0.0)))
        self.algo = _restored(self.rllib_config, checkpoint) if checkpoint is not None else self.rllib_config.build_algo()

    def agree(self, refusal: ValueError | None) -> None:
        pass  # one driver

    def train_iteration(self, observe: Any = None) -> dict[str, float]:
        """One ``Algorithm.train()`` (``ECPO.training_step``: the native iteration); the native metrics."""
        self.algo.ecpo.observe = observe
        try:
            result = self.algo.train()
        except Exception as err:
            refusal = _refusal_inside(err)
            if refusal is None:
                raise
            raise ValueError(str(refusal)) from None  # (a learner actor's one line, not Ray's wrapper of it)
        finally:
            self.algo.ecpo.observe = None
        return {key: float(value) for key, value in result["ecpo"].items() if _is_number(value)}

    def validate(self, tasks: Any, seed: int) -> tuple[dict[str, float], list[Any]]:
        metrics = self.algo.validate(list(tasks), seed)
        return metrics, self.validation_episodes

    def save(self, checkpoint: Path) -> None:
        save_rllib_checkpoint(self.algo, checkpoint)

    def close(self) -> None:
        import ray

        try:
            if self.algo is not None:
                self.algo.stop()
        finally:
            self.algo = None
            if self._started_ray:  # leave Ray as we found it (an in-process caller may start its own session next)
                ray.shutdown()
                self._started_ray = False


def check_runner_cpus(config: Any, cpus: float) -> None:
    """``ValueError`` unless Ray's ``cpus`` hold every runner and learner actor (Ray would wait for them forever)."""
    per_runner = float(getattr(config, "num_cpus_per_env_runner", 1) or 0)
    per_learner = getattr(config, "num_cpus_per_learner", 1)
    if per_learner == "auto":  # RLlib: one CPU for a CPU learner, none beside a GPU
        per_learner = 0 if getattr(config, "num_gpus_per_learner", 0) else 1
    runners, learners = int(config.num_env_runners), int(config.num_learners)
    needed = runners * per_runner + learners * float(per_learner)
    if needed > cpus:
        raise ValueError(f"--env-runners {runners} and --learners {learners} need {needed:g} CPUs and Ray sees "
                         f"{cpus:g}: lower them (--env-runners 0 samples in the driver)")


def save_rllib_checkpoint(algo: Any, checkpoint: Path) -> None:
    """``algo.save_to_path`` into a folder beside ``checkpoint``, swapped in once whole (``files/atomic.py``): a
    crash or a full disk during the save leaves the previous checkpoint, which ``--resume`` continues."""
    from ecpo_train.files.atomic import current_folder, replaced_folder
    from ecpo_train.runtime.checkpoint_io import write_failed

    had_one = current_folder(checkpoint).is_dir()
    try:
        with replaced_folder(checkpoint) as partial:
            try:
                algo.save_to_path(str(partial.resolve()))
            except OSError:
                raise
            except Exception as err:  # noqa: BLE001 -- pyarrow and msgpack report a failed write in their own types
                cause = OSError(0, f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
                raise cause from None
    except OSError as err:
        raise write_failed(checkpoint, err, had_one) from None


def check_rllib_checkpoint(checkpoint: Path) -> None:
    """``ValueError`` when ``checkpoint`` is not an ECPO checkpoint whose state can be read
    (``state_files.read_state``: nothing in it is unpickled, so a planted file runs no code), before Ray starts."""
    from ecpo_train.integrations.rllib.llm.config import _ecpo_checkpoint
    from ecpo_train.integrations.rllib.state_files import read_state

    read_state(_ecpo_checkpoint(checkpoint))


def _restored(config: Any, checkpoint: Path) -> Any:
    """The algorithm built from this run's config (checked against the run's ``config.yaml`` by ``plan_start``)
    with the state saved in ``checkpoint``; a damaged checkpoint is one ``ValueError`` naming it."""
    algo = config.build_algo()
    try:
        algo.restore_from_path(checkpoint)
    except BaseException:
        algo.stop()
        raise
    return algo


def _refusal_inside(err: BaseException) -> ValueError | None:
    """The ``ValueError`` a learner or runner actor raised (a non-finite update: ``builders.check_finite_update``),
    found through Ray's wrappers (``RayTaskError.cause``, ``__cause__``), or None."""
    seen = 0
    while err is not None and seen < 10:
        cause = getattr(err, "cause", None)
        if isinstance(cause, ValueError) and not isinstance(cause, type(err)):
            return cause
        err, seen = cause if isinstance(cause, BaseException) else err.__cause__, seen + 1
    return None


def _is_number(value: Any) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False
