"""One iteration of the paper's Algorithm 1, as plain functions on the step-row table: the parts every engine runs.

Both engines drive these, in this order, and add only what is their own (the native ``Trainer``: envs in this
process, FSDP, checkpoints; the RLlib algorithm: runner actors, the learner group, weight sync, lost runners):

    draw_iteration     which tasks the iteration's groups play, and the env seed (one draw order, one stream)
    (A rollout)        ``core.rollout.collect_rollout``, wherever the engine runs it
    credit_step        steps B-D: the estimator's advantage of every step row (``credit.compute_advantages``)
    (E update)         ``runtime.builders.update_on_table``, wherever the engine runs it
    iteration_metrics  the one metrics dict of an iteration, under the native names
    finish_iteration   validation when the run's rule says so (``validates_after``), and the iteration's time

``config`` is any object with the run's fields (a ``runtime.config.TrainConfig``): ``n_groups``, ``task_draw``,
``algorithm``, ``credit``, ``estimator_options()``, ``validates_after(iteration)``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ecpo_train.core.batch import TrajectoryBatch
from ecpo_train.core.credit import compute_advantages
from ecpo_train.core.tasks import draw_tasks

ENV_SEED_BOUND = 2**31 - 1  # an iteration's env seed is drawn below this, after its tasks, from the run's generator


def draw_iteration(config: Any, pool: Sequence[str], rng: np.random.Generator, iteration: int) -> tuple[list[str], int]:
    """The task of each of the ``config.n_groups`` groups of iteration ``iteration`` (from 0) and the env seed
    their copies count from; both from ``rng``, tasks first (``tasks.draw_tasks``)."""
    task_ids = draw_tasks(pool, config.n_groups, rng, iteration, config.task_draw)
    return task_ids, int(rng.integers(ENV_SEED_BOUND))


def credit_step(config: Any, batch: TrajectoryBatch, values: Any = None, device: Any = None) -> tuple[Any, dict]:
    """Steps B-D: the estimator's (``config.algorithm``) advantage of every row of ``batch``, and its diagnostics.

    ``values``: the critic's, for an estimator that takes them (PPO). ``device``: a CUDA torch device computes on
    it (the rewards moved there) and returns the advantages as a numpy array, like the CPU path.
    """
    options = {"credit": config.credit, **config.estimator_options()}
    if device is not None and getattr(device, "type", "cpu") == "cuda":
        import torch

        arrays = batch.credit_arrays() | {"rewards": torch.as_tensor(batch.reward, device=device)}
        advantages, diagnostics = compute_advantages(config.algorithm, **arrays, values=values, **options)
        return advantages.cpu().numpy(), diagnostics
    return compute_advantages(config.algorithm, rows=batch, values=values, **options)


def iteration_metrics(iteration: int, num_steps: int, rollout: Mapping[str, float], credit: Mapping[str, Any],
                      update: Mapping[str, Any], times: Mapping[str, float],
                      extra: Mapping[str, float] | None = None) -> dict[str, float]:
    """The metrics of an iteration, under the native names: ``iteration``, ``num_steps``, the rollout's (success,
    returns, ...), ``credit/<diagnostic>``, ``update/<statistic>``, the engine's own ``extra`` keys, then
    ``time/<phase>`` for each of ``times`` (seconds)."""
    metrics: dict[str, float] = {"iteration": float(iteration), "num_steps": float(num_steps)}
    metrics |= dict(rollout)
    metrics |= {f"credit/{k}": float(v) for k, v in credit.items()}
    metrics |= {f"update/{k}": float(v) for k, v in update.items()}
    metrics |= dict(extra or {})
    metrics |= {f"time/{k}": float(v) for k, v in times.items()}
    return metrics


def finish_iteration(metrics: dict[str, float], config: Any, iteration: int, validate: Callable[[], dict],
                     started: float) -> dict[str, float]:
    """Validate when the run validates after ``iteration`` (``val/...`` and ``time/validation``), then
    ``time/iteration``: seconds since ``started`` (a ``time.perf_counter()`` reading)."""
    if config.validates_after(iteration):
        val_started = time.perf_counter()
        metrics |= validate()
        metrics["time/validation"] = time.perf_counter() - val_started
    metrics["time/iteration"] = time.perf_counter() - started
    return metrics
