"""Whole groups on the LLM path's env-runner pool: which runner plays which groups, the top-up of a lost
runner's groups, the healthy runners, and validation on one of them.

Group ``g`` of an iteration gets copy seeds ``env_seed + g*N + n`` and global ids whichever runner plays it
(``share_groups``: contiguous shares). A runner lost mid-iteration (its actor died) loses only the groups it was
playing: with ``lost_groups="top_up"`` (default) they are played again on the healthy runners, so the update sees
every configured group, each whole; with ``"refuse"`` the iteration raises. Either way the report says how many
groups were configured, sampled, and re-sampled, and how many runner calls failed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ecpo_train.core.iteration import first_copy_seed

LOST_GROUP_POLICIES = ("top_up", "refuse")
MAX_SAMPLING_ROUNDS = 8  # rounds of re-sampling lost groups before an iteration gives up


@dataclass(frozen=True)
class RunnerPool:
    """What playing groups on the env runners needs of the algorithm (``ECPO.runner_pool()``), handed to the
    sampler, the pipeline and validation instead of the algorithm: its env-runner ``group``, its ``config``
    (``group_size``, ``lost_groups``, ``group_sample_timeout_s``, ``restart_failed_env_runners``,
    ``max_policy_lag``), its ``learner_group`` (the weights the runners get) and ``restore_runners(group)``, which
    brings restarted runners back (``Algorithm.restore_env_runners``)."""

    group: Any
    config: Any
    learner_group: Any
    restore_runners: Callable[[Any], Any]


def share_groups(num_groups: int, runner_ids: list[int]) -> dict[int, tuple[int, int]]:
    """Contiguous shares of ``num_groups`` groups: runner id -> (first group, number of groups); no runner gets
    an empty share and every group is assigned once."""
    runners = runner_ids[: max(1, num_groups)]
    shares, start = {}, 0
    for k, runner in enumerate(runners):
        stop = num_groups * (k + 1) // len(runners)
        if stop > start:
            shares[runner] = (start, stop - start)
        start = stop
    return shares


def sample_groups(pool: RunnerPool, task_ids: list[str], env_seed: int, played: list[dict[str, Any]] | None = None,
                  failures: int = 0) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Play every group of ``task_ids`` on the env runners; whole groups only, lost ones topped up (or refused).

    Group ``g`` always gets copy seeds ``env_seed + g*N + n`` and global ids, whichever runner plays it.
    ``played``: runner answers already in hand (a dispatched call's, ``pipeline.collect_groups``) and
    ``failures`` the runners that gave none; only the groups they lack are played, counted as re-sampled.
    """
    config, group = pool.config, pool.group
    n = int(config.group_size)
    results: list[dict[str, Any]] = list(played or [])
    done = {int(e.group_id) for o in results for e in o["episodes"]}
    pending = [g for g in range(len(task_ids)) if g not in done]
    rounds = 0 if played is None else 1
    resampled = 0
    if pending and failures and config.lost_groups == "refuse":
        refuse_lost(pending, task_ids)
    while pending:
        rounds += 1
        if rounds > MAX_SAMPLING_ROUNDS:
            raise RuntimeError(f"{len(pending)} group(s) still unplayed after {MAX_SAMPLING_ROUNDS} rounds of "
                               "env-runner failures")
        if group.num_remote_env_runners() == 0:
            first = pending[0]
            outs = [group.local_env_runner.sample_groups(task_ids[first:first + len(pending)],
                                                         first_copy_seed(env_seed, first, n), first)]
            expected = 1
        else:
            healthy = healthy_runner_ids(pool)
            if not healthy:
                raise RuntimeError(f"no healthy env runner left to play {len(pending)} lost group(s)")
            jobs: dict[int, list[tuple]] = {}
            for first, count in _contiguous_runs(pending):  # contiguous runs keep a runner's seeds and ids contiguous
                for runner_id, (offset, size) in share_groups(count, healthy).items():
                    start = first + offset
                    jobs.setdefault(runner_id, []).append((task_ids[start:start + size], first_copy_seed(env_seed, start, n),
                                                            start))
            expected = sum(len(j) for j in jobs.values())
            outs = _sample_on_runners(group, jobs, config.group_sample_timeout_s)
            silent = [runner_id for runner_id in jobs if not any(o["runner"] == runner_id for o in outs)]
            failures += len(silent)
            check_not_timed_out(silent, group, config.group_sample_timeout_s)
        if rounds > 1:
            resampled += sum(len(o["episodes"]) // n for o in outs)
        results += outs
        done = {int(e.group_id) for o in outs for e in o["episodes"]}
        lost = [g for g in pending if g not in done]
        if lost and len(outs) >= expected:
            raise RuntimeError(f"groups {lost} came back from no runner")
        if lost and config.lost_groups == "refuse":
            refuse_lost(lost, task_ids)
        pending = lost
    report = {"num_groups_configured": float(len(task_ids)),
              "num_groups_sampled": float(sum(len(o["episodes"]) for o in results) // n),
              "num_groups_resampled": float(resampled), "num_runner_failures": float(failures)}
    return results, report


def refuse_lost(lost: list[int], task_ids: list[str]) -> None:
    raise RuntimeError(f"{len(lost)} of {len(task_ids)} groups were lost with their env runner(s); "
                       "lost_groups='refuse' (set lost_groups='top_up' to re-sample them on healthy runners)")


def check_not_timed_out(silent: list[int], group: Any, timeout: float | None) -> None:
    """A runner that returned nothing but is still healthy ran out of time (it is still playing): say so, rather
    than re-dispatch its groups behind the call it is still busy with."""
    slow = sorted(set(silent) & set(group.healthy_worker_ids()))
    if slow:
        raise TimeoutError(f"env runner(s) {slow} did not return their groups within sample_timeout_s={timeout:g} s "
                           "(no runner failed): raise env_runners(sample_timeout_s=...), or None for the default "
                           "derived from the env's step limit")


def healthy_runner_ids(pool: RunnerPool, wait_seconds: float = 180.0) -> list[int]:
    """The healthy remote runners; when none is left, wait for RLlib to bring restarted ones back (it probes
    them and syncs the learner's weights into them) rather than fail the iteration at once."""
    group = pool.group
    deadline = time.monotonic() + wait_seconds
    while True:
        healthy = sorted(group.healthy_worker_ids())
        if healthy or time.monotonic() > deadline or not pool.config.restart_failed_env_runners:
            return healthy
        time.sleep(2.0)
        pool.restore_runners(group)


def _sample_on_runners(group: Any, jobs: dict[int, list[tuple]], timeout: float | None) -> list[dict[str, Any]]:
    """Every runner plays its jobs (``sample_groups`` arguments); a runner that fails returns nothing."""
    results = group.foreach_env_runner(lambda r: [r.sample_groups(*job) for job in jobs[r.worker_index]],
                                       local_env_runner=False, remote_worker_ids=list(jobs), timeout_seconds=timeout)
    return [out for sampled in results for out in sampled]


def _contiguous_runs(groups: list[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for g in groups:
        if runs and runs[-1][0] + runs[-1][1] == g:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((g, 1))
    return runs


def validate_on_runner(pool: RunnerPool, tasks: list[str], seed: int,
                       wait_seconds: float = 180.0) -> tuple[dict[str, float], list[Any]]:
    """The native validation of ``tasks`` from env seed ``seed`` on a healthy env runner, at the validation
    temperature: its metrics (``val/...``) and its episodes' outcomes. A runner lost during the call is replaced by
    the next healthy one (or a restarted one, within ``wait_seconds``)."""
    group = pool.group
    if group.num_remote_env_runners() == 0:
        return group.local_env_runner.validate(tasks, seed)
    deadline = time.monotonic() + wait_seconds
    while time.monotonic() < deadline:
        for runner_id in healthy_runner_ids(pool, max(0.0, deadline - time.monotonic())):
            results = group.foreach_env_runner(lambda r: r.validate(tasks, seed), local_env_runner=False,
                                               remote_worker_ids=[runner_id])
            if results:
                return results[0]
        time.sleep(2.0)
    raise RuntimeError(f"no healthy env runner to validate on within {wait_seconds:.0f} s")
