"""``ECPO.training_step`` for an LLM: the native trainer's iteration (``core.iteration``), with RLlib's actors
doing the work.

    A  rollout   the driver draws the groups' tasks and the env seed (the native trainer's generator and
                 order), assigns whole groups to the healthy ``LLMEnvRunner`` actors, and gets back step-row
                 tables (``TrajectoryBatch``) with the episodes' outcomes
    B-D credit   in the learners' connector (``StepTableCredit``): whole groups per learner
    E  update    ``ECPOLLMLearner.update`` on the ``LearnerGroup`` (``core.loss.policy_update``)
    then         weight sync to the runners (adapter only under LoRA), validation on a runner every
                 ``val_every`` iterations (plus the first and last), metrics under the native names.

A runner lost mid-iteration (its actor died) loses only the groups it was playing: with
``lost_groups="top_up"`` (default) they are played again on the healthy runners, so the update sees every
configured group, each whole; with ``"refuse"`` the iteration raises. Either way the result says how many
groups were configured, sampled, and re-sampled, and how many runner calls failed.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import ray

from ecpo_train.core.batch import TrajectoryBatch
from ecpo_train.core.iteration import draw_iteration, finish_iteration, iteration_metrics
from ecpo_train.core.rollout import episode_metrics
from ecpo_train.core.tasks import validation_seed
from ecpo_train.integrations.rllib.llm.results import log_iteration

LOST_GROUP_POLICIES = ("top_up", "refuse")
MAX_SAMPLING_ROUNDS = 8  # rounds of re-sampling lost groups before an iteration gives up


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


def sample_groups(algo: Any, task_ids: list[str], env_seed: int, played: list[dict[str, Any]] | None = None,
                  failures: int = 0) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Play every group of ``task_ids`` on the env runners; whole groups only, lost ones topped up (or refused).

    Group ``g`` always gets copy seeds ``env_seed + g*N + n`` and global ids, whichever runner plays it.
    ``played``: runner answers already in hand (a dispatched call's, ``pipeline.collect_groups``) and
    ``failures`` the runners that gave none; only the groups they lack are played, counted as re-sampled.
    """
    config, group = algo.config, algo.env_runner_group
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
            outs = [group.local_env_runner.sample_groups(task_ids[first:first + len(pending)], env_seed + first * n,
                                                         first)]
            expected = 1
        else:
            healthy = healthy_runner_ids(algo)
            if not healthy:
                raise RuntimeError(f"no healthy env runner left to play {len(pending)} lost group(s)")
            jobs: dict[int, list[tuple]] = {}
            for first, count in _contiguous_runs(pending):  # contiguous runs keep a runner's seeds and ids contiguous
                for runner_id, (offset, size) in share_groups(count, healthy).items():
                    start = first + offset
                    jobs.setdefault(runner_id, []).append((task_ids[start:start + size], env_seed + start * n, start))
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


def healthy_runner_ids(algo: Any, wait_seconds: float = 180.0) -> list[int]:
    """The healthy remote runners; when none is left, wait for RLlib to bring restarted ones back (it probes
    them and syncs the learner's weights into them) rather than fail the iteration at once."""
    group = algo.env_runner_group
    deadline = time.monotonic() + wait_seconds
    while True:
        healthy = sorted(group.healthy_worker_ids())
        if healthy or time.monotonic() > deadline or not algo.config.restart_failed_env_runners:
            return healthy
        time.sleep(2.0)
        algo.restore_env_runners(group)


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


def llm_training_step(algo: Any) -> dict[str, float]:
    """One native-trainer iteration through RLlib (see the module docstring); returns the native metrics.

    ``max_policy_lag=0`` samples, updates, then syncs (lock-step); ``1`` takes the groups the runners played
    during the previous update and dispatches the next ones before this update (``pipeline.take_and_dispatch``).
    """
    config, train = algo.config, algo.ecpo_train_config
    rng: np.random.Generator = algo.ecpo_rng
    started = time.perf_counter()
    learner_version = int(algo.ecpo_iteration)  # the learner's updates so far: the version of its weights
    if int(config.max_policy_lag) == 0:
        task_ids, env_seed = draw_iteration(train, algo.ecpo_train_tasks, rng, algo.ecpo_iteration)
        outs, report = sample_groups(algo, task_ids, env_seed)
        versions = np.concatenate([o["batch"].policy_version for o in outs])
        report |= {"policy_lag_mean": float(np.mean(learner_version - versions)),
                   "policy_lag_max": float(np.max(learner_version - versions)), "num_stale_groups_resampled": 0.0}
        pipelined: dict[str, float] = {}
    else:
        from ecpo_train.integrations.rllib.llm.pipeline import take_and_dispatch

        outs, report, pipelined = take_and_dispatch(algo)
    sampled_at = time.perf_counter()
    tables: list[TrajectoryBatch] = [o["batch"] for o in outs]
    episodes = sorted((e for o in outs for e in o["episodes"]), key=lambda e: e.traj_id)
    n_rows = sum(len(t) for t in tables)

    # Step E's shuffle: one learner continues the driver's generator exactly as the native trainer's update
    # does (one permutation per epoch); several learners get a seed each, as the native FSDP path does.
    if int(config.num_learners) <= 1:
        shuffle = {"state": rng.bit_generator.state}
        for _ in range(train.num_epochs):
            rng.permutation(n_rows)
    else:
        shuffle = {"seed": int(rng.integers(2**63 - 1))}
    per_group = [g for table in tables for g in table.by_group()]
    if algo.learner_group.is_local:
        learner_results = algo.learner_group.update(episodes=per_group, shuffle=shuffle)
    else:
        if len(per_group) < int(config.num_learners):
            raise ValueError(f"{len(per_group)} groups cannot feed {config.num_learners} learners")
        learner_results = algo.learner_group.update(episodes_refs=[ray.put(g) for g in per_group], shuffle=shuffle)
    updated_at = time.perf_counter()
    if not pipelined:  # lock-step: the runners get the new weights now; pipelined, before the next dispatch
        algo.env_runner_group.sync_weights(from_worker_or_learner_group=algo.learner_group, inference_only=True)
    synced_at = time.perf_counter()
    algo.ecpo_iteration += 1

    if pipelined:  # sampling: the runners' busy seconds (they played during the previous update); sampling_wait:
        seconds = {"sampling": runner_busy_seconds(outs), "sampling_wait": pipelined["sampling_wait"],  # the driver's
                   "update": updated_at - sampled_at, "sync": pipelined["sync"]}
    else:
        seconds = {"sampling": sampled_at - started, "update": updated_at - sampled_at, "sync": synced_at - updated_at}
    credit_diag, update_stats = learner_metrics(learner_results)
    metrics = iteration_metrics(algo.ecpo_iteration, n_rows, episode_metrics(episodes), credit_diag, update_stats,
                                {"generation": max(o["generation_seconds"] for o in outs),
                                 "env": max(o["env_seconds"] for o in outs)} | seconds,
                                extra={f"sampling/{k}": v for k, v in report.items()})
    finish_iteration(metrics, train, algo.ecpo_iteration, algo.validate, started)
    log_iteration(algo.metrics, episodes, n_rows, learner_results, seconds, report)  # RLlib's result keys
    return metrics


def runner_busy_seconds(outs: list[dict[str, Any]]) -> float:
    """The longest time one runner spent playing its share of the groups (its calls' seconds, summed)."""
    busy: dict[int, float] = {}
    for out in outs:
        busy[out["runner"]] = busy.get(out["runner"], 0.0) + float(out["seconds"])
    return max(busy.values())


def learner_metrics(results: list[Any]) -> tuple[dict[str, float], dict[str, float]]:
    """The learners' credit diagnostics and update statistics (logged as ``credit/...``, ``update/...``) as two
    dicts of floats under their own names."""
    from ray.rllib.core import DEFAULT_MODULE_ID
    parts: dict[str, dict[str, float]] = {"credit/": {}, "update/": {}}
    module = results[0].get(DEFAULT_MODULE_ID, {}) if results else {}
    for key, value in module.items():
        for prefix, part in parts.items():
            if key.startswith(prefix):  # a Stats object, or its value
                part[key[len(prefix):]] = float(value.peek() if hasattr(value, "peek") else value)
    return parts["credit/"], parts["update/"]


def validate_on_runner(algo: Any, wait_seconds: float = 180.0) -> tuple[dict[str, float], list[Any]]:
    """The native validation on a healthy env runner, at the validation temperature: its metrics (``val/...``)
    and its episodes' outcomes. A runner lost during the call is replaced by the next healthy one (or a
    restarted one, within ``wait_seconds``)."""
    train, group = algo.ecpo_train_config, algo.env_runner_group
    tasks, seed = list(algo.ecpo_val_tasks), validation_seed(train.seed)
    if group.num_remote_env_runners() == 0:
        return group.local_env_runner.validate(tasks, seed)
    deadline = time.monotonic() + wait_seconds
    while time.monotonic() < deadline:
        for runner_id in healthy_runner_ids(algo, max(0.0, deadline - time.monotonic())):
            results = group.foreach_env_runner(lambda r: r.validate(tasks, seed), local_env_runner=False,
                                               remote_worker_ids=[runner_id])
            if results:
                return results[0]
        time.sleep(2.0)
    raise RuntimeError(f"no healthy env runner to validate on within {wait_seconds:.0f} s")
