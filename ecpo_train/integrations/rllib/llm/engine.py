"""``ecpo train --config P --engine rllib``: a native preset run through the RLlib algorithm.

The run is the preset's (``ECPOConfig.from_train_config``); the run folder is the native one, written through
the same functions (``ecpo_train.runtime.run_dir``): ``config.yaml``, ``metrics.jsonl`` with the native metric
names (one line per iteration, iteration 0 = the untrained policy when ``val_before_training``),
``validation.jsonl``, ``history.jsonl``, ``curves.png``; the algorithm's checkpoint (``Algorithm.save_to_path``)
is ``rllib_checkpoint/`` (``ECPO.save_to_path``: msgpack and safetensors, no pickle), and ``--resume`` builds the
algorithm from the run's own config and gives it that state (``ECPO.restore_from_path``), exactly where the
uninterrupted run would be: nothing in the run folder is unpickled, so a file planted there runs no code. The same refusals as the native
path apply before anything is written (a folder holding a run, keys that define the run changed on resume, a
native run's folder, a folder without ``rllib_checkpoint/``, a folder another run holds the lock of), and the
driver checks the env kwargs and the model (``check_env_and_model``) and the CPUs the runner actors need before
any actor starts.
"""

from __future__ import annotations

import logging
import math
import os
import sys
from pathlib import Path
from typing import Any


def train_with_rllib(train: Any, *, resume: bool = False, overwrite: bool = False, num_env_runners: int = 2,
                     num_learners: int = 0, actor_cpus: float = 1.0, progress: bool = True) -> list[dict[str, float]]:
    """Train ``train`` (a ``TrainConfig``) with the ``ECPO`` algorithm; returns the metrics of every iteration.
    ``actor_cpus``: the CPUs Ray reserves for each runner and each learner actor (fractions share a core)."""
    import ray

    from ecpo_train.integrations.rllib.llm.config import ECPOConfig
    from ecpo_train.policies.atomic import current_folder
    from ecpo_train.runtime.builders import check_env_and_model
    from ecpo_train.runtime.config import config_dict
    from ecpo_train.runtime.plotting import plot_run
    from ecpo_train.runtime.resume import plan_start, start_run
    from ecpo_train.runtime.run import run_iterations
    from ecpo_train.runtime.run_dir import MetricsLog, RunFolder

    run_dir = Path(train.run_dir)
    # the folder first (it writes nothing; checked again under the lock), then the env kwargs and the model, which
    # runner actors would otherwise fail on remotely, then every config error: all before an actor starts
    plan_start(run_dir, config_dict(train), resume=resume, overwrite=overwrite, engine="rllib")
    check_env_and_model(train)
    # (RLlib's one-time note that the algorithm runs on its new API stack, ECPO's only stack, is not news: quiet)
    note = logging.getLogger("ray.rllib.algorithms.algorithm_config")
    level = note.level
    note.setLevel(logging.ERROR)
    try:
        config = (ECPOConfig.from_train_config(train)
                  .env_runners(num_env_runners=num_env_runners, num_cpus_per_env_runner=actor_cpus)
                  .learners(num_learners=num_learners, num_cpus_per_learner=actor_cpus))
        config.validate()
    finally:
        note.setLevel(level)
    checkpoint = RunFolder(run_dir).checkpoint("rllib")
    started_ray, algo, log, lock = False, None, None, None

    def checked(plan: Any) -> None:
        if plan.kind == "resume":  # a checkpoint cut mid-write is named before Ray starts (Ray's own reading
            check_rllib_checkpoint(current_folder(checkpoint))  # of it comes after its startup lines)

    def load(plan: Any, _: None) -> int:
        nonlocal started_ray, algo
        started_ray = not ray.is_initialized()
        if started_ray:  # Ray will see at most this machine's CPUs: refuse an obvious excess before starting it
            check_runner_cpus(config, float(os.cpu_count() or 1))
            ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
        check_runner_cpus(config, float(ray.cluster_resources().get("CPU", 0.0)))
        algo = _restored(config, current_folder(checkpoint)) if plan.kind == "resume" else config.build_algo()
        return algo.ecpo_iteration

    def metrics_log(_: Any) -> MetricsLog:
        nonlocal log
        log = MetricsLog(run_dir, tensorboard=train.tensorboard, config=config_dict(train), engine="rllib")
        return log

    try:  # held until the run ends: the folder is checked under the lock
        _, lock = start_run(run_dir, config_dict(train), engine="rllib", resume=resume, overwrite=overwrite,
                            checked_checkpoint=checked, load=load, metrics_log=metrics_log)

        def logged(metrics: dict[str, float]) -> None:
            log.append(metrics, int(metrics["iteration"]))
            if "val/success" in metrics:  # a validation (iteration 0 included): its episodes, as the native trainer keeps
                log.append_validation(int(metrics["iteration"]), algo.ecpo_validation_episodes)

        run_iterations(
            train, position=lambda: algo.ecpo_iteration, target=train.iterations,
            iterate=lambda: {key: float(value) for key, value in algo.train()["ecpo"].items() if _is_number(value)},
            validate=algo.validate, log=logged, checkpoint=lambda: save_rllib_checkpoint(algo, checkpoint),
            on_iteration=(lambda metrics: print(_progress_line(metrics, train.iterations), file=sys.stderr))
            if progress else None)
        log.close()
        history = log.history
    finally:
        if algo is not None:
            algo.stop()
        if started_ray:  # leave Ray as we found it (an in-process caller may start its own session next)
            ray.shutdown()
        if lock is not None:
            lock.release()
    plot_run(run_dir)
    return history


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
    """``algo.save_to_path`` into a folder beside ``checkpoint``, swapped in once whole (``policies/atomic.py``): a
    crash or a full disk during the save leaves the previous checkpoint, which ``--resume`` continues."""
    from ecpo_train.policies.atomic import current_folder, replaced_folder
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


def _is_number(value: Any) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def _progress_line(metrics: dict[str, float], total: int) -> str:
    shown = [f"iteration {int(metrics['iteration'])}/{total}", f"success {metrics.get('success', 0.0):.3f}"]
    if "val/exact_success" in metrics:
        shown.append(f"val exact {metrics['val/exact_success']:.3f}")
    elif "val/success" in metrics:
        shown.append(f"val {metrics['val/success']:.3f}")
    shown.append(f"{metrics.get('time/iteration', 0.0):.1f} s")
    return "rllib: " + ", ".join(shown)
