"""``max_policy_lag=1``: the env runners play the next iteration's groups while the learner updates on this one's.

One pipelined iteration (``sampler.RunnerPoolSampler`` calls :func:`take_and_dispatch`, then the learner updates):

    take      the groups dispatched in the previous iteration (the first iteration, and the first after a
              restore, play them here, synchronously); a runner lost meanwhile loses only its groups, played
              again on the healthy runners (``groups.sample_groups``' top-up rule)
    check     a group whose rows' ``policy_version`` is older than the learner's version - ``max_policy_lag``
              is refused and played again after a weight sync (counted)
    sync      the learner's current weights to the runners: they are idle now
    dispatch  the next iteration's groups (its tasks and env seed drawn now, from the run's generator), one
              asynchronous ``sample_groups`` call per healthy runner, played with the weights just synced
    (update)  credit and the learner update on the taken groups while the runners play

A runner is a Ray actor that runs one call at a time, and one ``sample_groups`` call plays its groups to the end:
a weight sync sent while it plays waits behind the call, so it reaches the runner between groups, never inside
one, and every group is played by one weight version (each row records it: ``TrajectoryBatch.policy_version``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ecpo_train.core.iteration import Draw, first_copy_seed
from ecpo_train.integrations.rllib.llm.groups import (
    RunnerPool,
    healthy_runner_ids,
    sample_groups,
    share_groups,
)
from ecpo_train.integrations.rllib.llm.run_state import ECPOState

PIPELINE_LAGS = (0, 1)  # max_policy_lag's values: 0 lock-step, 1 pipelined
SAMPLE_TAG = "ecpo_sample_groups"  # the actor manager's tag of a dispatched sample_groups call
MAX_STALE_ROUNDS = 4  # rounds of re-sampling stale groups before an iteration gives up


@dataclass
class Dispatched:
    """The next iteration's groups: their tasks, env seed, and (``in_flight``) whether runner calls play them now;
    restored from a checkpoint, nothing plays them and the next iteration samples them itself."""

    task_ids: list[str]
    env_seed: int
    runners: list[int] = field(default_factory=list)  # the runners sent a call (empty: nothing in flight)
    sent_at: float = field(default_factory=time.perf_counter)

    @property
    def in_flight(self) -> bool:
        return bool(self.runners)


def sync_runner_weights(pool: RunnerPool) -> None:
    """The learner's weights to every healthy runner. The previous sync's calls are waited for first (an unanswered
    one would make the actor manager skip this one), then this one is sent: each runner runs it before any call
    sent after it."""
    pool.group.sync_weights(from_worker_or_learner_group=pool.learner_group, inference_only=True,
                            timeout_seconds=float(pool.config.group_sample_timeout_s))


def dispatch_groups(pool: RunnerPool, task_ids: list[str], env_seed: int) -> Dispatched:
    """Send every healthy runner its contiguous share of the groups of ``task_ids`` (copy seeds and global ids as
    ``groups.sample_groups`` gives them); returns at once."""
    n = int(pool.config.group_size)
    jobs = {runner: (task_ids[start:start + size], first_copy_seed(env_seed, start, n), start)
            for runner, (start, size) in share_groups(len(task_ids), healthy_runner_ids(pool)).items()}
    pool.group.foreach_env_runner_async(lambda r: r.sample_groups(*jobs[r.worker_index]), tag=SAMPLE_TAG,
                                                   remote_worker_ids=list(jobs))
    return Dispatched(list(task_ids), int(env_seed), runners=sorted(jobs))


def collect_groups(pool: RunnerPool, dispatched: Dispatched) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """The dispatched groups' rows: the runner calls' answers, waited for up to the sampling timeout, and the
    groups of a runner that answered nothing (lost with its actor) played again on the healthy runners."""
    if not dispatched.in_flight:
        return sample_groups(pool, dispatched.task_ids, dispatched.env_seed)
    group, timeout = pool.group, float(pool.config.group_sample_timeout_s)
    deadline = dispatched.sent_at + timeout
    answers: list[dict[str, Any]] = []
    while True:  # answers already in are read even when the update outlasted the timeout
        wait = min(5.0, max(0.0, deadline - time.perf_counter()))
        answers += [out for _, out in group.fetch_ready_async_reqs(tags=SAMPLE_TAG, timeout_seconds=wait)]
        if group.num_in_flight_async_reqs(SAMPLE_TAG) == 0 or time.perf_counter() >= deadline:
            break
    if group.num_in_flight_async_reqs(SAMPLE_TAG) > 0:
        raise TimeoutError(f"env runner(s) did not return their dispatched groups within sample_timeout_s={timeout:g}"
                           " s (no runner failed): raise env_runners(sample_timeout_s=...), or None for the default "
                           "derived from the env's step limit")
    silent = set(dispatched.runners) - {out["runner"] for out in answers}
    return sample_groups(pool, dispatched.task_ids, dispatched.env_seed, played=answers, failures=len(silent))


def drain_dispatched(pool: RunnerPool) -> None:
    """Wait for and drop the answers of dispatched calls (a state loaded into a running algorithm replaces them)."""
    group = pool.group
    deadline = time.perf_counter() + float(pool.config.group_sample_timeout_s)
    while group.num_in_flight_async_reqs(SAMPLE_TAG) > 0 and time.perf_counter() < deadline:
        group.fetch_ready_async_reqs(tags=SAMPLE_TAG, timeout_seconds=5.0)


def stale_groups(group_ids: np.ndarray, versions: np.ndarray, learner_version: int, max_lag: int) -> list[int]:
    """The groups (sorted ids) with a row sampled by weights older than ``learner_version - max_lag``."""
    old = versions < int(learner_version) - int(max_lag)
    return sorted({int(g) for g in np.asarray(group_ids)[old]})


def without_groups(outs: list[dict[str, Any]], groups: list[int]) -> list[dict[str, Any]]:
    """The runner answers with the rows and episodes of ``groups`` taken out (whole groups: by group id)."""
    kept = []
    for out in outs:
        rows = np.flatnonzero(~np.isin(out["batch"].group_id, groups))
        if rows.size:
            kept.append(out | {"batch": out["batch"].select(rows),
                               "episodes": [e for e in out["episodes"] if int(e.group_id) not in groups]})
    return kept


def take_and_dispatch(pool: RunnerPool, state: ECPOState, draw: Draw,
                      iteration: int) -> tuple[list[dict[str, Any]], dict[str, float], dict[str, float]]:
    """Iteration ``iteration``'s sampling, pipelined (see the module docstring): the runner answers of its groups,
    the sampling report (``groups.sample_groups``' plus the policy lag and the stale groups re-sampled), and the
    seconds the driver waited for them and spent syncing. ``draw(k)``: iteration ``k``'s tasks and env seed;
    ``state``: the run's (its iteration is the learner's version; the next groups dispatched are kept there)."""
    config, learner_version = pool.config, int(state.iteration)
    started = time.perf_counter()
    dispatched = state.dispatched
    if dispatched is None:  # the first iteration: its groups are drawn and played now
        dispatched = Dispatched(*draw(iteration))
    synced = not dispatched.in_flight  # played here: with the weights synced now
    if synced:
        sync_runner_weights(pool)
    outs, report = collect_groups(pool, dispatched)
    stale_total, rounds = 0, 0
    while stale := stale_groups(*_group_versions(outs), learner_version, int(config.max_policy_lag)):
        rounds += 1
        if rounds > MAX_STALE_ROUNDS:
            raise RuntimeError(f"groups {stale} still older than the policy-lag bound after {MAX_STALE_ROUNDS} "
                               "weight syncs")
        stale_total += len(stale)
        sync_runner_weights(pool)
        synced = True
        outs, _ = sample_groups(pool, dispatched.task_ids, dispatched.env_seed, played=without_groups(outs, stale))
    waited_at = time.perf_counter()
    if not synced:  # the runners played the taken groups with the previous weights
        sync_runner_weights(pool)
    synced_at = time.perf_counter()
    state.dispatched = dispatch_groups(pool, *draw(iteration + 1))
    lags = learner_version - _group_versions(outs)[1]
    report |= {"policy_lag_mean": float(lags.mean()), "policy_lag_max": float(lags.max()),
               "num_stale_groups_resampled": float(stale_total)}
    return outs, report, {"sampling_wait": waited_at - started, "sync": synced_at - waited_at}


def _group_versions(outs: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """Every row's group id and policy version, over the runner answers."""
    return (np.concatenate([out["batch"].group_id for out in outs]),
            np.concatenate([out["batch"].policy_version for out in outs]))
