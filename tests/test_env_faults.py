"""Environment faults are visible, never the agent's invalid actions (issue 39): an env worker SIGKILLed in the
middle of a native-trainer rollout ends its copies as faults, their rows stay out of the step table and its
credit, the iteration's metrics count it, and one warning line names it."""

from __future__ import annotations

import os
import signal
import time

from ecpo_gym.canonical import INVALID_ACTION
from ecpo_train.runtime.config import load_config
from ecpo_train.runtime.trainer import Trainer


def test_a_worker_killed_mid_rollout_is_a_counted_fault_not_invalid_actions(tmp_path, capsys):
    config = load_config("quickstart", [f"run_dir={tmp_path}", "n_groups=2", "group_size=2", "env_workers=2",
                                        "val_every=0", "progress=false", "tensorboard=false",
                                        "env_kwargs={num_tasks: 2, depth: 8, good_prob: 1.0, rare_prob: [1.0, 1.0]}"])
    trainer = Trainer(config)
    act, calls = trainer.policy.act, []
    victim = trainer.envs.worker_pids[0]  # holds copies 0 and 1 (group 0)

    def act_then_kill_a_worker(contexts, temperature=1.0):  # an injected fault: the worker dies after step 1
        calls.append(len(contexts))
        if len(calls) == 2:
            os.kill(victim, signal.SIGKILL)
            while True:
                try:
                    os.kill(victim, 0)
                except ProcessLookupError:
                    break
                if os.waitpid(victim, os.WNOHANG) != (0, 0):
                    break
                time.sleep(0.01)
        return act(contexts, temperature=temperature)

    trainer.policy.act = act_then_kill_a_worker
    try:
        seen = []  # each iteration's (sampled, learned)
        metrics = trainer.train_iteration(observe=lambda sampled, learned: seen.append((sampled, learned)))
        rollout = seen[-1][0].played
        faulted = [e for e in rollout.episodes if e.fault]
        assert calls[0] == 4 and len(calls) >= 2
        assert {e.traj_id for e in faulted} == {0, 1} and all(f"pid {victim}" in e.fault for e in faulted)
        # every door leads on (good_prob = rare_prob = 1): all four copies were live, each took one step first
        assert [e.length for e in faulted] == [1, 1]
        assert metrics["env/worker_failures"] == 1.0
        assert metrics["env/faulted_episodes"] == 2.0
        assert metrics["env/dropped_rows"] == 2.0
        # the table (and so the credit and the update) holds only the live worker's copies, with no <invalid> row
        assert set(rollout.batch.traj_id.tolist()) == {2, 3}
        assert INVALID_ACTION not in rollout.batch.action_key.tolist()
        assert metrics["invalid_action_rate"] == 0.0
        assert metrics["num_steps"] == float(len(rollout.batch)) == float(sum(e.length for e in rollout.episodes
                                                                                 if not e.fault))
        assert len(seen[-1][1].advantages) == len(rollout.batch)
        warnings = [line for line in capsys.readouterr().err.splitlines() if "environment fault" in line]
        assert len(warnings) == 1 and "2 of 4 episodes lost" in warnings[0] and "2 step rows" in warnings[0]
        # the worker was restarted: the next iteration plays all four copies
        trainer.policy.act = act
        metrics = trainer.train_iteration(observe=lambda sampled, learned: seen.append((sampled, learned)))
        assert metrics["env/worker_failures"] == 0.0 and metrics["env/dropped_rows"] == 0.0
        assert set(seen[-1][0].played.batch.traj_id.tolist()) == {0, 1, 2, 3}
    finally:
        trainer.close()
