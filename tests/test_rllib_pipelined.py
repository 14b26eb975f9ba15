"""``max_policy_lag=1``: the env runners play the next iteration's groups while the learner updates.

Env runners are real Ray actors (``LLMEnvRunner``) playing the tiny random Qwen2 on the corridors, as in
``test_rllib_llm_algorithm.py``. A row's ``policy_version`` is the learner's update count when its weights were
synced to the runner that played it; the lag of a batch is the learner's version minus its rows' versions.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from conftest import run_values

from ecpo_train.integrations.rllib import ECPO, ECPOConfig
from ecpo_train.integrations.rllib.llm.pipeline import stale_groups
from ecpo_train.runtime.config import make_config


def pipelined(values, runners=1):
    return ECPOConfig.from_train_config(make_config(values)).env_runners(num_env_runners=runners).training(
        max_policy_lag=1)


def test_stale_groups_are_the_groups_with_a_row_older_than_the_bound():
    """Learner at version 5, bound 1: rows of version 4 and 5 pass, a group with one row of version 3 is stale."""
    group_ids = np.array([0, 0, 1, 1, 2, 2, 3])
    versions = np.array([4, 4, 5, 5, 4, 3, 2])
    assert stale_groups(group_ids, versions, learner_version=5, max_lag=1) == [2, 3]
    assert stale_groups(group_ids, versions, learner_version=5, max_lag=3) == []
    assert stale_groups(group_ids, versions, learner_version=4, max_lag=0) == [2, 3]


def test_max_policy_lag_other_than_0_or_1_is_one_line(tiny_model_dir, tmp_path):
    values = run_values(tiny_model_dir, tmp_path)
    with pytest.raises(ValueError, match=r"^max_policy_lag=2; valid: 0 \(lock-step\) or 1 \(the runners play the "
                                         r"next groups while the learner updates\)$"):
        pipelined(values).training(max_policy_lag=2).validate()
    with pytest.raises(ValueError, match=r"^max_policy_lag=True; valid"):
        pipelined(values).training(max_policy_lag=True).validate()
    with pytest.raises(ValueError, match=r"^max_policy_lag=1 plays the next groups on env-runner actors"):
        pipelined(values, runners=0).validate()
    pipelined(values).validate()
    assert ECPOConfig.from_train_config(make_config(values)).max_policy_lag == 0


@pytest.mark.slow
def test_lag_one_rows_are_within_the_bound_and_groups_whole(tiny_model_dir, tmp_path, ray_session):
    """Three iterations with two runners: the first plays its groups with the learner's weights (lag 0), each
    later one takes the groups played during the previous update (every row lag exactly 1: mean == max); every
    configured group arrives whole and none is stale. RLlib's result keys carry the same lag."""
    algo = pipelined(run_values(tiny_model_dir, tmp_path, n_groups=4), runners=2).build_algo()
    try:
        results = [algo.train() for _ in range(3)]
    finally:
        algo.stop()
    lags = [(r["ecpo"]["sampling/policy_lag_mean"], r["ecpo"]["sampling/policy_lag_max"]) for r in results]
    assert lags == [(0.0, 0.0), (1.0, 1.0), (1.0, 1.0)]
    for result in results:
        ecpo = result["ecpo"]
        assert ecpo["sampling/num_stale_groups_resampled"] == 0
        assert ecpo["sampling/num_groups_sampled"] == 4 and ecpo["credit/num_groups"] == 4
        assert ecpo["credit/num_trajectories"] == 16
        assert ecpo["time/sampling"] > 0 and ecpo["time/update"] > 0 and "time/sampling_wait" in ecpo
    assert results[2]["env_runners"]["policy_lag_max"] == 1.0
    assert [r["ecpo"]["iteration"] for r in results] == [1.0, 2.0, 3.0]


@pytest.mark.slow
def test_lag_zero_rows_record_the_learner_version(tiny_model_dir, tmp_path, ray_session):
    """Lock-step (the default): every batch is sampled by the learner's current weights (lag 0 every iteration)."""
    algo = ECPOConfig.from_train_config(make_config(run_values(tiny_model_dir, tmp_path))).env_runners(
        num_env_runners=1).build_algo()
    try:
        results = [algo.train()["ecpo"] for _ in range(2)]
    finally:
        algo.stop()
    assert [(r["sampling/policy_lag_mean"], r["sampling/policy_lag_max"]) for r in results] == [(0.0, 0.0)] * 2
    assert "time/sampling_wait" not in results[0]


@pytest.mark.slow
def test_lag_one_checkpoint_restore_replays_the_groups_in_flight(tiny_model_dir, tmp_path, ray_session):
    """save_to_path with groups in flight -> from_checkpoint: the restored run plays those groups (same tasks and
    env seeds) again with the restored weights, so its next batch has lag 0, then the pipeline goes on (lag 1)."""
    algo = pipelined(run_values(tiny_model_dir, tmp_path)).build_algo()
    try:
        algo.train()
        pending = (list(algo.ecpo.dispatched.task_ids), algo.ecpo.dispatched.env_seed)
        algo.save_to_path(str(tmp_path / "ckpt"))
        uninterrupted = algo.train()["ecpo"]
    finally:
        algo.stop()
    restored = ECPO.from_checkpoint(str(tmp_path / "ckpt"))
    try:
        assert restored.ecpo.iteration == 1 and restored.config.max_policy_lag == 1
        assert (restored.ecpo.dispatched.task_ids, restored.ecpo.dispatched.env_seed) == pending
        assert not restored.ecpo.dispatched.in_flight
        resumed = restored.train()["ecpo"]
        after = restored.train()["ecpo"]
    finally:
        restored.stop()
    assert uninterrupted["sampling/policy_lag_max"] == 1.0
    assert resumed["iteration"] == uninterrupted["iteration"] == 2.0
    assert (resumed["sampling/policy_lag_mean"], resumed["sampling/policy_lag_max"]) == (0.0, 0.0)
    assert resumed["credit/num_groups"] == 2 and resumed["credit/num_trajectories"] == 8
    assert (after["iteration"], after["sampling/policy_lag_max"]) == (3.0, 1.0)


@pytest.mark.slow
def test_lag_one_runner_lost_with_groups_in_flight(tiny_model_dir, tmp_path, ray_session):
    """A runner killed while it plays dispatched groups loses only them: the next iteration plays them again on
    the healthy runner (whole, with weights within the bound), says so, and later runs on a replaced actor."""
    from ecpo_train.integrations.rllib.llm.pipeline import dispatch_groups

    config = pipelined(run_values(tiny_model_dir, tmp_path, n_groups=4), runners=2).fault_tolerance(
        restart_failed_env_runners=True)
    algo = config.build_algo()
    try:
        tasks = [algo.ecpo.train_tasks[k % len(algo.ecpo.train_tasks)] for k in range(4)]
        algo.ecpo.dispatched = dispatch_groups(algo.runner_pool(), tasks, 1234)  # the groups runner 2 is now playing: 2 and 3
        ray.kill(algo.env_runner_group._worker_manager._actors[2], no_restart=False)
        first = algo.train()["ecpo"]
        assert first["sampling/num_runner_failures"] == 1
        assert first["sampling/num_groups_resampled"] == 2
        assert first["sampling/num_groups_sampled"] == 4
        assert first["credit/num_groups"] == 4 and first["credit/num_trajectories"] == 16
        assert first["sampling/policy_lag_max"] == 0.0
        deadline = time.monotonic() + 180  # Ray restarts the actor; RLlib probes it at the start of an iteration
        while time.monotonic() < deadline:
            later = algo.train()["ecpo"]
            assert later["sampling/num_groups_sampled"] == 4 and later["sampling/policy_lag_max"] <= 1.0
            if sorted(algo.env_runner_group.healthy_worker_ids()) == [1, 2]:
                break
        assert sorted(algo.env_runner_group.healthy_worker_ids()) == [1, 2]
        last = algo.train()["ecpo"]
        assert last["credit/num_groups"] == 4 and last["sampling/policy_lag_max"] <= 1.0
    finally:
        algo.stop()


@pytest.mark.slow
def test_lag_one_runs_under_tune(tiny_model_dir, tmp_path, ray_session):
    from ray import tune

    config = pipelined(run_values(tiny_model_dir, tmp_path))
    results = tune.Tuner(ECPO, param_space=config, run_config=tune.RunConfig(
        stop={"training_iteration": 2}, storage_path=str(tmp_path / "tune"), verbose=0)).fit()
    assert len(results) == 1 and not results.errors
    assert results[0].config["max_policy_lag"] == 1
    assert results[0].metrics["ecpo"]["sampling/policy_lag_max"] == 1.0
    assert results[0].metrics["ecpo"]["iteration"] == 2.0
