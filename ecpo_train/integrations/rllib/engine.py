"""``ecpo train --config P --engine rllib``: a native preset run through the RLlib algorithm.

The run is the preset's (``ECPOConfig.from_train_config``); the run folder is the native one: ``config.yaml``,
``metrics.jsonl`` with the native metric names (one line per iteration, iteration 0 = the untrained policy when
``val_before_training``), ``history.jsonl``, ``curves.png``; the algorithm's checkpoint
(``Algorithm.save_to_path``) is ``rllib_checkpoint/``, and ``--resume`` continues from it
(``Algorithm.from_checkpoint``) exactly where the uninterrupted run would be. The same refusals as the native
path apply before anything is written (a folder holding a run, keys that define the run changed on resume).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

CHECKPOINT_DIR = "rllib_checkpoint"


def train_with_rllib(train: Any, *, resume: bool = False, overwrite: bool = False, num_env_runners: int = 2,
                     num_learners: int = 0, progress: bool = True) -> list[dict[str, float]]:
    """Train ``train`` (a ``TrainConfig``) with the ``ECPO`` algorithm; returns the metrics of every iteration."""
    import ray

    from ecpo_train.integrations.rllib.algorithm import ECPO
    from ecpo_train.integrations.rllib.config import ECPOConfig
    from ecpo_train.runtime.config import config_dict
    from ecpo_train.runtime.plotting import plot_run
    from ecpo_train.runtime.resume import append_history, plan_start, remove_run_files
    from ecpo_train.runtime.run_dir import MetricsLog

    run_dir = Path(train.run_dir)
    config = (ECPOConfig.from_train_config(train).env_runners(num_env_runners=num_env_runners)
              .learners(num_learners=num_learners))
    config.validate()  # every config error before an actor starts
    plan = plan_start(run_dir, config_dict(train), resume=resume, overwrite=overwrite)
    checkpoint = run_dir / CHECKPOINT_DIR
    started_ray = not ray.is_initialized()
    if started_ray:
        ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
    if plan.kind == "resume" and checkpoint.is_dir():
        algo = ECPO.from_checkpoint(str(checkpoint.resolve()))
    else:
        algo = config.build_algo()
    try:
        if plan.kind == "overwrite":
            remove_run_files(run_dir)
        log = MetricsLog(run_dir, tensorboard=train.tensorboard, config=config_dict(train) | {"engine": "rllib"})
        log.keep_through(algo.ecpo_iteration if plan.kind == "resume" else -1)
        append_history(run_dir, plan.kind, algo.ecpo_iteration, plan.changes or None)
        if algo.ecpo_iteration == 0 and train.val_every and train.val_before_training:
            log.append({"iteration": 0.0} | algo.validate(), 0)
            log.append_validation(0, algo.ecpo_validation_episodes)
        while algo.ecpo_iteration < train.iterations:
            metrics = {key: float(value) for key, value in algo.train()["ecpo"].items() if _is_number(value)}
            log.append(metrics, int(metrics["iteration"]))
            if "val/success" in metrics:  # this iteration validated: its episodes, as the native trainer keeps
                log.append_validation(int(metrics["iteration"]), algo.ecpo_validation_episodes)
            if progress:
                print(_progress_line(metrics, train.iterations), file=sys.stderr)
            every = train.checkpoint_every
            if every and algo.ecpo_iteration % every == 0:
                algo.save_to_path(str(checkpoint.resolve()))
        algo.save_to_path(str(checkpoint.resolve()))
        log.close()
        history = log.history
    finally:
        algo.stop()
        if started_ray:  # leave Ray as we found it (an in-process caller may start its own session next)
            ray.shutdown()
    plot_run(run_dir)
    return history


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
