"""collect_rollout in waves of whole groups (``rollout_waves``): the same step rows as the lock-step rollout for
equal seeds, with one wave's policy call running while another wave's environment steps."""

from __future__ import annotations

import threading
from typing import ClassVar

import numpy as np
import pytest
import torch

from ecpo_gym import TaskStart, TextAgentEnv, Transition
from ecpo_gym.group import GroupVectorEnv
from ecpo_train.core.rollout import collect_rollout
from ecpo_train.policies.tabular import TabularSoftmaxPolicy

ENV_ID = "ecpo/DivergentAnchor-v0"
ENV_KWARGS = {"depth": 6, "num_tasks": 4, "max_steps": 8}
TASKS = ["corridor0", "corridor1", "corridor2", "corridor3", "corridor0"]


def _policy() -> TabularSoftmaxPolicy:
    """A tabular policy with random logits on every (state, action) the corridors offer: its slots are made
    by one lock-step pass first (they are numbered in order of first sight, which the waves would change)."""
    policy = TabularSoftmaxPolicy(seed=0)
    with GroupVectorEnv(ENV_ID, num_groups=len(TASKS), group_size=3, env_kwargs=ENV_KWARGS) as envs:
        for seed in range(4):
            collect_rollout(envs, policy, TASKS, env_name=ENV_ID, temperature=1.0, seed=seed, draws_seed=seed)
    with torch.no_grad():
        policy.logits.copy_(torch.randn(policy.logits.shape, generator=torch.Generator().manual_seed(1)) * 1.5)
    return policy


def _table(rollout) -> dict:
    batch = rollout.batch
    columns = {name: getattr(batch, name).tolist() for name in batch.column_names()}
    columns |= {name: [list(map(int, ids)) for ids in getattr(batch, name)] for name in ("prompt_ids", "response_ids")}
    columns |= {"old_logprobs": batch.old_logprobs.tolist(), "old_logprob_mask": batch.old_logprob_mask.tolist(),
                "policy_version": batch.policy_version.tolist(), "extras": batch.extras}
    columns["episodes"] = [(e.traj_id, e.won, e.length, e.total_reward, e.transcript) for e in rollout.episodes]
    return columns


@pytest.mark.parametrize("num_workers", [0, 2])
def test_waves_give_the_lock_step_rows_for_equal_seeds(num_workers):
    policy = _policy()
    tables = {}
    with GroupVectorEnv(ENV_ID, num_groups=len(TASKS), group_size=3, num_workers=num_workers,
                        env_kwargs=ENV_KWARGS) as envs:
        for waves in (1, 2, 3, 9):
            rollout = collect_rollout(envs, policy, TASKS, env_name=ENV_ID, temperature=1.0, seed=11, draws_seed=5,
                                      waves=waves, policy_version=7)
            tables[waves] = _table(rollout)
    lock_step = tables[1]
    assert len(set(lock_step["action_key"])) > 2 and len(set(lock_step["step"])) > 3  # real, uneven episodes
    assert len({length for _, _, length, _, _ in lock_step["episodes"]}) > 1
    assert set(lock_step["policy_version"]) == {7}
    for waves in (2, 3, 9):  # 9 > 5 groups: one wave per group
        assert tables[waves] == lock_step, waves


class HandshakeEnv(TextAgentEnv):
    """One step. The first step of the process says it is stepping and waits (up to 3 s) for a policy call to
    answer; a policy call answers only when it sees a step running (it waits up to 2 s for one)."""

    stepping = threading.Event()
    policy_called = threading.Event()
    overlapped: ClassVar[list[bool]] = []

    @property
    def task_ids(self):
        return ["t"]

    def _load_task(self, task_id):
        return TaskStart(observation="start", task="wait", task_type="Handshake")

    def _admissible_actions(self):
        return ["go"]

    def _state_key(self):
        return "s"

    def _execute(self, command):
        if not type(self).overlapped:
            type(self).stepping.set()
            type(self).overlapped.append(type(self).policy_called.wait(timeout=3))
        return Transition("end", won=True)


def make_handshake(**kwargs):
    return HandshakeEnv(max_steps=3, **kwargs)


class SignallingPolicy(TabularSoftmaxPolicy):
    def act(self, contexts, temperature=1.0):
        if HandshakeEnv.stepping.wait(timeout=2):
            HandshakeEnv.policy_called.set()
        return super().act(contexts, temperature)


@pytest.mark.parametrize("waves", [1, 2])
def test_a_wave_policy_call_runs_while_the_other_wave_steps(waves):
    """Two groups, in-process: in two waves, wave 0's step (a background thread) sees wave 1's policy call
    happen meanwhile; lock-step, the one policy call ends before any env step starts."""
    HandshakeEnv.overlapped.clear()
    HandshakeEnv.stepping.clear()
    HandshakeEnv.policy_called.clear()
    with GroupVectorEnv(make_handshake, num_groups=2, group_size=1) as envs:
        rollout = collect_rollout(envs, SignallingPolicy(), ["t", "t"], env_name="handshake", temperature=1.0,
                                  seed=0, waves=waves)
    assert HandshakeEnv.overlapped[0] is (waves == 2)
    assert [e.won for e in rollout.episodes] == [True, True]


def test_rollout_waves_settings_are_checked():
    from ecpo_train.runtime.config import TrainConfig

    assert TrainConfig(policy="tabular").rollout_waves == 1
    assert TrainConfig(policy="tabular", rollout_waves=2).rollout_waves == 2
    with pytest.raises(ValueError, match=r"^rollout_waves=0 is invalid: it must be an integer >= 1 \(1 = lock-step\)$"):
        TrainConfig(policy="tabular", rollout_waves=0)
    with GroupVectorEnv(ENV_ID, num_groups=1, group_size=1, env_kwargs=ENV_KWARGS) as envs:
        for bad in (0, 1.5, True):
            with pytest.raises(ValueError, match="must be an integer >= 1"):
                collect_rollout(envs, TabularSoftmaxPolicy(), ["corridor0"], env_name=ENV_ID, temperature=1.0,
                                waves=bad)


def test_steps_in_flight_are_read_when_the_policy_raises():
    """A policy that fails in wave 1 leaves wave 0's started step read, so the env's next reset works."""

    class FailingSecondCall(TabularSoftmaxPolicy):
        calls = 0

        def act(self, contexts, temperature=1.0):
            type(self).calls += 1
            if type(self).calls == 2:
                raise RuntimeError("policy failed")
            return super().act(contexts, temperature)

    with GroupVectorEnv(ENV_ID, num_groups=2, group_size=2, num_workers=1, env_kwargs=ENV_KWARGS) as envs:
        with pytest.raises(RuntimeError, match="policy failed"):
            collect_rollout(envs, FailingSecondCall(), ["corridor0", "corridor1"], env_name=ENV_ID,
                            temperature=1.0, seed=0, waves=2)
        rollout = collect_rollout(envs, TabularSoftmaxPolicy(), ["corridor0", "corridor1"], env_name=ENV_ID,
                                  temperature=1.0, seed=0)
    assert len(rollout.episodes) == 4 and np.all(rollout.batch.step >= 1)
