"""One iteration of the paper's Algorithm 1, written once: ``run_iteration`` calls the steps in order, and each
engine hands it only a *sampler* and a *learner*.

    draw      ``draw_iteration``: which tasks the iteration's groups play, and the env seed (one order, one stream);
              for an estimator that keeps state (``tigpo``) its ``core.task_memory`` schedules revisits
    sample    ``sampler.sample``: step A, ``core.rollout.collect_rollout`` wherever the engine plays (the native
              trainer's env group and its FSDP share; the RLlib runner pool, topped up and pipelined)
    plan      ``update_plan``: step E's row shuffle and the rows it updates on (the equal-return filter), drawn
              once here from the run's generator, whatever the number of learners
    credit    ``learner.learn(plan, rng)``: steps B-D, ``credit_step`` (the estimator's advantage of every
    update    step row) where the learner's tensors are, then step E, ``runtime.builders.update_on_table``, on the
              plan's rows in the plan's order (the native update; RLlib's ``learner_group.update``)
    sync      ``sampler.sync``: the sampler's policy gets the new weights (vLLM engine, env runners)
    metrics   ``iteration_metrics``: the one metrics dict of an iteration, under the native names (an
              all-zero advantage vector is said once, ``warn_if_no_signal``)
    observe   ``observe(sampled, learned)``: a caller that measures the iteration itself (the credit study)
    finish    ``finish_iteration``: validation when the run's rule says so, and the iteration's time

The engine that calls ``run_iteration`` counts the iterations (``iteration`` is how many are done before it).

``config`` is any object with the run's fields (a ``runtime.config.TrainConfig``): ``n_groups``, ``task_draw``,
``estimator``, ``credit``, ``credit_hyperparameters()``, ``validates_after(iteration)``, ``num_epochs``,
``filter_equal_return_groups``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ecpo_train.core.batch import TrajectoryBatch
from ecpo_train.core.credit import compute_advantages
from ecpo_train.core.credit.diagnostics import credit_diagnostics
from ecpo_train.core.credit.history import HISTORY_COLUMN
from ecpo_train.core.task_memory import TaskGraphMemory
from ecpo_train.core.tasks import draw_tasks

ENV_SEED_BOUND = 2**31 - 1  # an iteration's env seed is drawn below this, after its tasks, from the run's generator
SHUFFLE_SEED_BOUND = 2**63 - 1  # several update shards: one seed drawn below this, shard k shuffles with seed + k

UPDATE_KEEP = "update_keep"  # the extra column of a table whose run filters rows: True where step E updates on the row

Draw = Callable[[int], tuple[list[str], int]]  # iteration (from 0) -> (its groups' tasks, its env seed)


@dataclass
class Sampled:
    """What a sampler played in one iteration: the rows the learner updates on (``tables``: whole groups, one or
    more ``TrajectoryBatch`` in group order), the episodes' metrics, the phases' seconds (``time/<phase>``), the
    sampling report (``sampling/<key>``), and the engine's own record of it (``played``: the native ``Rollout``,
    the RLlib episodes' outcomes)."""

    tables: list[TrajectoryBatch]
    metrics: dict[str, float]
    seconds: dict[str, float]
    report: dict[str, float] = field(default_factory=dict)
    played: Any = None

    @property
    def num_rows(self) -> int:
        return sum(len(table) for table in self.tables)


@dataclass
class UpdatePlan:
    """Step E's plan for one iteration, drawn once by :func:`run_iteration` (:func:`update_plan`): ``shuffle``, the
    row shuffle (:func:`shuffle_plan`; each shard's generator is :func:`shuffle_generator`), and ``tables``, the
    sampled tables, each with the :data:`UPDATE_KEEP` column where the run leaves rows out (it travels with the
    rows to whichever learner updates on them)."""

    shuffle: dict[str, Any]
    tables: list[TrajectoryBatch]


@dataclass
class Learned:
    """What a learner did with one iteration's rows: the credit diagnostics, the update statistics, the phases'
    seconds, how many step advantages were nonzero over every learner (0: the update could not move the
    policy), and the step advantages where the learner is in this process (``None`` on remote learners)."""

    credit: dict[str, Any]
    update: dict[str, Any]
    seconds: dict[str, float]
    nonzero_advantages: int
    advantages: Any = None


class Sampler(Protocol):
    def sample(self, draw: Draw, iteration: int) -> Sampled:
        """Play iteration ``iteration``'s groups (``draw(iteration)``; a pipelined sampler draws ahead)."""

    def sync(self) -> dict[str, float]:
        """Give the sampling policy the learner's new weights; the seconds it took (``{}``: nothing to time)."""

    def combined(self, metrics: dict[str, float]) -> dict[str, float]:
        """The iteration's metrics over every process that sampled a share (one process: ``metrics``)."""


class Learner(Protocol):
    shards: int  # how many learners update a share of the rows each (FSDP processes, RLlib learners)

    def learn(self, plan: UpdatePlan, rng: np.random.Generator) -> Learned:
        """Steps B-E on ``plan.tables`` (the sampled rows): credit, then the update on the plan's rows, shuffled as
        ``plan.shuffle`` says. ``rng``: the run's generator, for a learner that draws more (PPO's critic fit)."""


Observe = Callable[[Sampled, Learned], None]


def run_iteration(config: Any, iteration: int, rng: np.random.Generator, pool: Sequence[str], sampler: Sampler,
                  learner: Learner, validate: Callable[[], dict], *, speaks: bool = True,
                  observe: Observe | None = None, memory: TaskGraphMemory | None = None) -> dict[str, float]:
    """Iteration ``iteration + 1`` of Algorithm 1 (``iteration`` done so far): draw, sample, plan, credit and update,
    sync, metrics, observe, finish (the module docstring). ``rng`` is the run's generator (tasks, env seeds, row
    shuffles), ``pool`` the training tasks; ``speaks``: this process says the no-signal warning (one process of
    several does). ``memory``: the run's state across updates for an estimator that keeps one (``tigpo``,
    ``core.task_memory``): it schedules the draw, gives each sampled row its task's history for credit and takes
    the iteration's transitions after the update (``task_memory/<size>`` in the metrics)."""
    started = time.perf_counter()
    sampled = sampler.sample(lambda k: draw_iteration(config, pool, rng, k, memory), iteration)
    tables = sampled.tables if memory is None else memory.annotate(sampled.tables, iteration)
    plan = update_plan(config, rng, tables, learner.shards)
    learned = learner.learn(plan, rng)
    remembered = {} if memory is None else memory.absorb(sampled.tables, iteration)
    sync_seconds = sampler.sync()
    if speaks and sampled.num_rows and not learned.nonzero_advantages:
        warn_if_no_signal(sampled.metrics, iteration + 1)
    metrics = iteration_metrics(iteration + 1, sampled.num_rows, sampled.metrics, learned.credit, learned.update,
                                sampled.seconds | learned.seconds | sync_seconds,
                                extra={f"sampling/{k}": v for k, v in sampled.report.items()}
                                | {f"task_memory/{k}": v for k, v in remembered.items()})
    if observe is not None:
        observe(sampled, learned)
    return finish_iteration(sampler.combined(metrics), config, iteration + 1, validate, started)


def draw_iteration(config: Any, pool: Sequence[str], rng: np.random.Generator, iteration: int,
                   memory: TaskGraphMemory | None = None) -> tuple[list[str], int]:
    """The task of each of the ``config.n_groups`` groups of iteration ``iteration`` (from 0) and the env seed
    their copies count from; both from ``rng``, tasks first (``tasks.draw_tasks``). With ``memory`` (an estimator
    that keeps state) its schedule picks the revisits and the run's draw only the explorations."""
    def explore(n: int) -> list[str]:
        return draw_tasks(pool, n, rng, iteration, config.task_draw)

    task_ids = explore(config.n_groups) if memory is None else memory.draw(iteration, config.n_groups, explore)
    return task_ids, int(rng.integers(ENV_SEED_BOUND))


def first_copy_seed(env_seed: int, first_group: int, group_size: int) -> int:
    """The env seed the copies of group ``first_group`` count from: copy ``n`` of group ``g`` of an iteration is
    reset with ``env_seed + g * group_size + n`` whichever process or runner plays it, so a share of whole groups
    starting at group ``first_group`` keeps the full batch's seeds (the one layout of every engine)."""
    return int(env_seed) + int(first_group) * int(group_size)


def seed_streams(seed: int) -> np.random.Generator:
    """Seed this process's global streams (``random``, numpy's, torch's) with ``seed`` and return the run's own
    generator (tasks, env seeds, row shuffles): the native trainer and each RLlib runner start the same way, so one
    runner samples exactly what the native trainer samples for the same seed."""
    import random

    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return np.random.default_rng(seed)


def credit_step(config: Any, batch: TrajectoryBatch, values: Any = None, device: Any = None) -> tuple[Any, dict]:
    """Steps B-D: the estimator's (``config.estimator``) advantage of every row of ``batch``, and its diagnostics
    with, beside them, where credit engages on this batch (``core.credit.diagnostics``: ECPO's gate, the step
    credit, the distance to GiGPO w/std's and GRPO's advantages), for every run on either engine.

    ``values``: the critic's, for an estimator that takes them (PPO). ``device``: a CUDA torch device computes on
    it (the rewards moved there) and returns the advantages as a numpy array, like the CPU path.
    """
    credit = config.credit_hyperparameters()  # the CreditConfig's fields and the estimator's options
    history = batch.extras.get(HISTORY_COLUMN)  # the rows' task histories (an estimator that keeps state)
    if device is not None and getattr(device, "type", "cpu") == "cuda":
        import torch

        arrays = batch.credit_arrays() | {"rewards": torch.as_tensor(batch.reward, device=device)}
        advantages, diagnostics = compute_advantages(config.estimator, arrays, credit, values=values, history=history)
        advantages = advantages.cpu().numpy()
    else:
        advantages, diagnostics = compute_advantages(config.estimator, batch, credit, values=values, history=history)
    extra = credit_diagnostics(config.estimator, batch.credit_rows(), config.credit, advantages)
    return advantages, diagnostics | extra


def update_plan(config: Any, rng: np.random.Generator, tables: Sequence[TrajectoryBatch], shards: int) -> UpdatePlan:
    """Step E's plan (:class:`UpdatePlan`), the one place its rules are applied: which rows it updates on (all, or
    where the run leaves them out -- ``filter_equal_return_groups`` -- those of groups with unequal returns,
    ``core.loss.equal_return_rows``), and their shuffle over ``config.num_epochs`` epochs and ``shards`` learners,
    drawn from ``rng`` (:func:`shuffle_plan`)."""
    tables = list(tables)
    if getattr(config, "filter_equal_return_groups", False):
        from ecpo_train.core.loss import equal_return_rows

        tables = [t.with_columns(**{UPDATE_KEEP: ~equal_return_rows(t.group_id, t.traj_id, t.reward)})
                  for t in tables]
    rows = sum(int(np.count_nonzero(update_keep(t))) if UPDATE_KEEP in t.extras else len(t) for t in tables)
    return UpdatePlan(shuffle_plan(rng, rows, int(config.num_epochs), shards), tables)


def update_keep(table: TrajectoryBatch) -> np.ndarray | None:
    """The rows of ``table`` step E updates on (:func:`update_plan`'s column), or ``None``: every row."""
    keep = table.extras.get(UPDATE_KEEP)
    return None if keep is None else np.asarray(keep, dtype=bool)


def shuffle_plan(rng: np.random.Generator, rows: int, epochs: int, shards: int) -> dict[str, Any]:
    """Step E's row shuffle, drawn from the run's generator ``rng`` (which continues past it).

    One shard (one process, one learner): ``{"state": ...}``, ``rng``'s state, for a generator that draws the
    update's ``epochs`` permutations of its ``rows`` rows exactly as ``rng`` itself would (``rng`` is advanced past
    them), wherever the update runs. Several shards (FSDP processes, RLlib learners): ``{"seed": s}``, shard ``k``
    shuffling its own rows with the generator ``s + k``."""
    if shards <= 1:
        plan = {"state": rng.bit_generator.state}
        for _ in range(int(epochs)):
            rng.permutation(int(rows))
        return plan
    return {"seed": int(rng.integers(SHUFFLE_SEED_BOUND))}


def shuffle_generator(plan: Mapping[str, Any], rank: int = 0) -> np.random.Generator:
    """The generator that shard ``rank`` shuffles step E's rows with, from a :func:`shuffle_plan`."""
    if "state" in plan:
        generator = np.random.default_rng()
        generator.bit_generator.state = plan["state"]
        return generator
    return np.random.default_rng(int(plan["seed"]) + int(rank))


def warn_if_no_signal(rollout_metrics: Mapping[str, float], iteration: int) -> None:
    """Say loudly that iteration ``iteration``'s advantages are all zero (the update cannot move the policy), and
    why, from the rollout's metrics (its invalid-action rate)."""
    invalid = rollout_metrics.get("invalid_action_rate", 0.0)
    if invalid >= 1.0:
        why = "every action was invalid (the model never produced a well-formed action: try policy_mode=score or `ecpo sft`)"
    else:
        why = f"every rollout of every group got the same return (invalid-action rate {invalid:.2f})"
    print(f"warning: iteration {iteration}: every advantage is 0, so this update changes nothing: {why}",
          file=sys.stderr)


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
