"""TIGPO (arXiv 2609.03383): its credit against hand-worked examples of its equations, its state across updates
(the task graphs, the exploration-revisit schedule, the run folder), and the same run from the native trainer and
the RLlib algorithm."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ecpo_train.core.batch import TrajectoryBatch
from ecpo_train.core.credit import compute_advantages, estimator_spec
from ecpo_train.core.credit.equations import cross_temporal_advantage
from ecpo_train.core.credit.history import HISTORY_COLUMN, SUCCESS, TaskHistory
from ecpo_train.core.task_memory import EXPLORE, TaskGraphMemory

EPS = 1e-6
# one group of two trajectories: a -> b -> win, and a -> c -> lost (2 steps each)
GROUP = {"group_ids": [0, 0, 0, 0], "traj_ids": [0, 0, 1, 1], "steps": [1, 2, 1, 2],
         "anchor_keys": ["a", "b", "a", "c"], "action_keys": ["x", "y", "z", "w"]}
WON, LOST = [0.0, 10.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]


def tigpo(rewards, history, **columns):
    adv, diagnostics = compute_advantages("tigpo", GROUP | columns | {"rewards": rewards}, history=[history] * 4)
    return adv, diagnostics


def z_pair(low, high):
    """Two transitions leaving one state, z-scored (unbiased std of two values: |low - high| / sqrt 2)."""
    spread = abs(high - low) / np.sqrt(2)
    return (low - (low + high) / 2) / (spread + EPS), (high - (low + high) / 2) / (spread + EPS)


def test_the_cross_temporal_advantage_is_normalised_against_the_exploration_group():
    # Z_E = (10, 0, 0), Z_R = (10, 0): the joined five have mean 4 and unbiased std sqrt(30)
    got = cross_temporal_advantage(np.array([10.0, 0.0]), np.array([10.0, 0.0, 0.0]), EPS)
    np.testing.assert_allclose(got, [6 / (np.sqrt(30) + EPS), -4 / (np.sqrt(30) + EPS)], rtol=1e-12)
    assert np.array_equal(cross_temporal_advantage(np.array([1.0, 1.0]), np.array([1.0]), EPS), [0.0, 0.0])


def test_with_no_history_it_is_graphgpo():
    """An empty history: the temporal graph is this update's graph and the episode term GRPO's, so TIGPO's credit
    is GraphGPO's, on a hand-worked group and on random batches."""
    adv, _ = tigpo(WON, TaskHistory())
    # d(b) = 1, d(a) = 2; c and the dead end have no path: the group's largest distance + 1 = 3.
    # a's two transitions return 10 * 0.1^1 = 1 (to b) and 10 * 0.1^3 = 0.01 (to c); b and c leave alone: 0.
    low, high = z_pair(0.01, 1.0)
    episode = 10 / 2 / (10 / np.sqrt(2) + EPS)  # GRPO on returns (10, 0)
    np.testing.assert_allclose(adv, [episode + high, episode, -episode + low, -episode], rtol=1e-9)
    rng = np.random.default_rng(0)
    for _ in range(5):
        n_trajs, length = 6, 5
        rows = [(t // 3, t, s, f"k{rng.integers(4)}", f"a{rng.integers(3)}",
                 10.0 * (s == length and rng.random() < 0.4)) for t in range(n_trajs) for s in range(1, length + 1)]
        columns = dict(zip(("group_ids", "traj_ids", "steps", "anchor_keys", "action_keys", "rewards"), zip(*rows)))
        columns = {k: list(v) for k, v in columns.items()}
        ours, _ = compute_advantages("tigpo", columns, history=[TaskHistory()] * len(rows))
        theirs, _ = compute_advantages("graphgpo", columns)
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-15)


def test_a_success_an_earlier_policy_found_gives_credit_now():
    """No trajectory of this group wins, but an earlier update saw c -> success: d(c) = 1, d(a) = 2, and b (no
    path) 3. The step into c now beats the step into b; without the history every advantage is 0."""
    plain, _ = tigpo(LOST, TaskHistory())
    assert np.array_equal(plain, np.zeros(4))
    adv, diagnostics = tigpo(LOST, TaskHistory(frozenset({("c", SUCCESS)})))
    low, high = z_pair(10 * 0.1**3, 10 * 0.1**1)  # a -> b, a -> c
    np.testing.assert_allclose(adv, [low, 0.0, high, 0.0], rtol=1e-9)
    assert diagnostics["tigpo_success_from_history_fraction"] == 1.0 and diagnostics["tigpo_history_edges"] == 1


def test_a_path_through_states_only_the_history_holds_counts():
    """c -> d -> success seen earlier (d not visited now): d(c) = 2, so a -> c returns 10 * 0.1^2 and a -> b (no
    path: the largest distance 3, + 1) 10 * 0.1^4."""
    history = TaskHistory(frozenset({("c", "d"), ("d", SUCCESS)}))
    adv, _ = tigpo(LOST, history)
    low, high = z_pair(10 * 0.1**4, 10 * 0.1**2)
    np.testing.assert_allclose(adv, [low, 0.0, high, 0.0], rtol=1e-9)


def test_a_revisit_group_is_scored_against_its_exploration_groups_scores():
    adv, diagnostics = tigpo(WON, TaskHistory(reference=(10.0, 0.0, 0.0)))
    low, high = z_pair(0.01, 1.0)
    win, loss = 6 / (np.sqrt(30) + EPS), -4 / (np.sqrt(30) + EPS)  # Z = (10, 0) against (10, 0, 0, 10, 0)
    np.testing.assert_allclose(adv, [win + high, win, loss + low, loss], rtol=1e-9)
    assert diagnostics["tigpo_revisit_group_fraction"] == 1.0


def test_the_registry_and_the_entry_point_refuse_what_tigpo_cannot_use():
    spec = estimator_spec("tigpo")
    assert spec.keeps_state and not spec.needs_values and spec.group_relative and spec.hidden_states == "none"
    with pytest.raises(ValueError, match="needs history="):
        compute_advantages("tigpo", GROUP | {"rewards": WON})
    with pytest.raises(ValueError, match="keeps no state"):
        compute_advantages("graphgpo", GROUP | {"rewards": WON}, history=[TaskHistory()] * 4)
    with pytest.raises(ValueError, match="one TaskHistory per step row"):
        compute_advantages("tigpo", GROUP | {"rewards": WON}, history=[TaskHistory()] * 3)
    with pytest.raises(ValueError, match="different histories"):
        compute_advantages("tigpo", GROUP | {"rewards": WON},
                           history=[TaskHistory()] * 3 + [TaskHistory(reference=(1.0,))])
    for bad, says in (({"edges": [("a", "b", "c")]}, "pairs"), ({"reference": ("ten",)}, "numbers"),
                      ({"reference": ()}, "at least one"), ({"reference": (float("nan"),)}, "finite")):
        with pytest.raises(ValueError, match=says):
            TaskHistory(**bad)
    from ecpo_train.core.rows import prepare_rows

    coded = prepare_rows(GROUP["group_ids"], GROUP["traj_ids"], GROUP["steps"], GROUP["anchor_keys"],
                         GROUP["action_keys"], WON)
    with pytest.raises(ValueError, match="state keys"):
        compute_advantages("tigpo", coded, history=[TaskHistory()] * 4)


# ---------------------------------------------------------------------------------------------- the memory
def table(group_tasks_rows):
    """A step-row table: per group, its trajectories as (state keys, won)."""
    batch = TrajectoryBatch.from_trajectories([
        {"group_id": g, "traj_id": 10 * g + t, "anchor_keys": keys, "action_keys": ["act"] * len(keys),
         "rewards": [0.0] * (len(keys) - 1) + [10.0 if won else 0.0]}
        for g, trajectories in enumerate(group_tasks_rows) for t, (keys, won) in enumerate(trajectories)])
    return batch


def test_the_schedule_revisits_explorations_after_the_delay_oldest_first_and_fills_with_exploration():
    memory = TaskGraphMemory(revisit_fraction=0.5, revisit_delay=2)
    fresh = iter(f"t{k}" for k in range(100))
    explore = lambda n: [next(fresh) for _ in range(n)]
    played = []
    for iteration in range(4):
        tasks = memory.draw(iteration, 4, explore)
        played.append(tasks)
        memory.absorb([table([[(["s0", "s1"], g == 0), (["s0"], False)] for g in range(4)])], iteration)
    assert played[0] == ["t0", "t1", "t2", "t3"] and played[1] == ["t4", "t5", "t6", "t7"]
    # iteration 2: two revisits of iteration 0's oldest explorations; iteration 3: the next two of iteration 0
    assert played[2] == ["t8", "t9", "t0", "t1"] and played[3] == ["t10", "t11", "t2", "t3"]
    assert [entry[:2] for entry in memory.waiting[:2]] == [("t4", 1), ("t5", 1)]
    # too few revisits due: the places go to exploration
    early = TaskGraphMemory(revisit_fraction=0.5, revisit_delay=5)
    assert early.draw(0, 4, explore) == ["t12", "t13", "t14", "t15"]
    assert [kind for _, kind, _ in early.plans[0]] == [EXPLORE] * 4


def test_annotate_and_absorb_carry_the_graph_and_the_scores_across_updates():
    memory = TaskGraphMemory(revisit_fraction=0.5, revisit_delay=1)
    assert memory.draw(0, 2, lambda n: ["kitchen", "garden"][:n]) == ["kitchen", "garden"]
    first = table([[(["s0", "s1"], True), (["s0", "s2"], False)], [(["g0"], False), (["g0"], False)]])
    annotated = memory.annotate([first], 0)[0]
    assert all(h == TaskHistory() for h in annotated.extras[HISTORY_COLUMN])  # nothing known yet
    memory.absorb([first], 0)
    assert memory.graphs["kitchen"] == {("s0", "s1"), ("s1", SUCCESS), ("s0", "s2")}
    assert memory.graphs["garden"] == set()  # one-step failures: no transition between two states, no success
    assert memory.scores == {(0, 0): [10.0, 0.0], (0, 1): [0.0, 0.0]}
    assert memory.draw(1, 2, lambda n: ["hall"][:n]) == ["hall", "kitchen"]  # kitchen explored 1 update ago
    second = table([[(["h0"], False), (["h0"], True)], [(["s0", "s2"], False), (["s0", "s2"], False)]])
    histories = memory.annotate([second], 1)[0].extras[HISTORY_COLUMN]
    kitchen = histories[-1]
    assert kitchen.edges == frozenset(memory.graphs["kitchen"]) and kitchen.reference == (10.0, 0.0)
    assert histories[0] == TaskHistory()  # hall: new
    # the revisit's credit: s0 -> s2 never won now, but s0 -> s1 -> success is in the kitchen's graph
    revisited = memory.annotate([second], 1)[0]
    _, diagnostics = compute_advantages("tigpo", revisited, history=revisited.extras[HISTORY_COLUMN])
    assert diagnostics["tigpo_success_from_history_fraction"] == 0.5
    memory.absorb([second], 1)
    assert (0, 0) not in memory.scores and (1, 0) in memory.scores  # a revisit uses its reference once


def test_the_memory_round_trips_through_plain_json():
    memory = TaskGraphMemory(revisit_fraction=0.25, revisit_delay=3)
    memory.draw(0, 4, lambda n: [f"t{k}" for k in range(n)])
    memory.absorb([table([[(["a", "b"], True)], [(["c", "d"], False)], [(["e"], False)], [(["a"], True)]])], 0)
    memory.draw(1, 4, lambda n: [f"u{k}" for k in range(n)])  # drawn, not yet absorbed (a pipelined draw)
    state = json.loads(json.dumps(memory.state_dict()))
    assert TaskGraphMemory.from_state(state) == memory
    with pytest.raises(ValueError, match="revisit_fraction"):
        TaskGraphMemory(revisit_fraction=1.0)
    with pytest.raises(ValueError, match="revisit_delay"):
        TaskGraphMemory(revisit_delay=0)


# ---------------------------------------------------------------------------------------------- the engines
FAST = ["progress=false", "tensorboard=false", "val_every=0", "checkpoint_every=0"]


def quick(tmp_path, *extra):
    from ecpo_train.runtime.config import load_config

    return load_config("quickstart", [f"run_dir={tmp_path}", *FAST, "estimator=tigpo", "revisit_delay=1", *extra])


def test_the_native_trainer_revisits_and_a_resumed_run_continues_its_memory(tmp_path):
    from ecpo_train.runtime.run import open_run, train
    from ecpo_train.runtime.trainer import Trainer

    history = train(Trainer, quick(tmp_path / "whole", "iterations=4"))
    assert history[0]["credit/tigpo_revisit_group_fraction"] == 0.0
    assert all(m["credit/tigpo_revisit_group_fraction"] > 0 for m in history[1:])
    assert history[-1]["task_memory/task_graph_edges"] > 0
    with open_run(Trainer, quick(tmp_path / "split", "iterations=4")) as first:
        first.train(2)  # ends with its checkpoint, which keeps the memory
    with open_run(Trainer, quick(tmp_path / "split", "iterations=4"), resume=True) as second:
        assert second.engine.memory.graphs and second.engine.iteration == 2
        rest = [second.engine.train_iteration() for _ in range(2)]
    timeless = lambda m: {k: v for k, v in m.items() if not k.startswith("time/")}
    assert [timeless(m) for m in rest] == [timeless(m) for m in history[2:]]


def test_the_schedule_options_belong_to_an_estimator_that_keeps_state(tmp_path):
    from ecpo_train.runtime.config import load_config
    from ecpo_train.runtime.distributed import check_fsdp_run

    with pytest.raises(ValueError, match="revisit_fraction=0.25 is not read by estimator=ecpo .*keeps state"):
        load_config("quickstart", [f"run_dir={tmp_path}", "estimator=ecpo", "revisit_fraction=0.25"])
    with pytest.raises(ValueError, match="revisit_fraction"):
        quick(tmp_path, "revisit_fraction=1.0")
    with pytest.raises(ValueError, match="keeps every task's graph in one"):
        check_fsdp_run("tigpo", "llm")


@pytest.mark.slow
def test_the_rllib_algorithm_plays_and_credits_what_the_native_trainer_does(tmp_path, ray_session):
    """The small text policy, tigpo with revisits from iteration 2, lr ~0 (both engines keep the same weights, so
    they play the same groups): the RLlib algorithm (one runner actor, a local learner; its driver holds the
    memory) gives every iteration's advantages and memory figures exactly as the native trainer, and its state
    keeps the memory."""
    from conftest import run_values

    from ecpo_train.integrations.rllib import ECPOConfig
    from ecpo_train.policies.text import TextPolicy
    from ecpo_train.runtime.config import make_config
    from ecpo_train.runtime.trainer import Trainer

    folder = tmp_path / "text-policy"
    folder.mkdir()
    TextPolicy(seed=3).save_pretrained(folder)
    values = run_values(folder, tmp_path, policy="text", policy_mode="generate", lr=1e-12) | {
        "estimator": "tigpo", "revisit_delay": 1, "n_groups": 2, "iterations": 3}
    trainer = Trainer(make_config(values))
    native_adv = []
    native = [trainer.train_iteration(observe=lambda s, learned: native_adv.append(learned.advantages))
              for _ in range(3)]
    trainer.close()
    algo = ECPOConfig.from_train_config(make_config(values)).env_runners(num_env_runners=1).build_algo()
    try:
        for k in range(3):
            result = algo.train()["ecpo"]
            np.testing.assert_array_equal(algo.learner_group._learner.last_advantages, native_adv[k])
            for key in [key for key in native[k] if key.startswith(("task_memory/", "credit/tigpo"))]:
                assert result[key] == native[k][key], key
        assert native[-1]["credit/tigpo_revisit_group_fraction"] == 0.5
        assert any(np.any(np.asarray(adv) != 0) for adv in native_adv)  # credit that moves something
        state = algo.get_state(components="ecpo")["ecpo"]["task_memory"]
        assert TaskGraphMemory.from_state(state) == algo.ecpo.memory == trainer.memory
    finally:
        algo.stop()


@pytest.mark.slow
def test_a_pipelined_rllib_run_keeps_the_drawn_ahead_plan_across_a_checkpoint(tmp_path, ray_session):
    """``max_policy_lag=1``: the driver draws iteration k+1 (through the memory's schedule) before iteration k is
    learned. A checkpoint taken then keeps that plan with the memory, so the restored run credits the groups in
    flight as revisits or explorations exactly as the uninterrupted run does."""
    from conftest import next_iteration_twice, run_values

    from ecpo_train.integrations.rllib import ECPOConfig
    from ecpo_train.policies.text import TextPolicy
    from ecpo_train.runtime.config import make_config

    folder = tmp_path / "text-policy"
    folder.mkdir()
    TextPolicy(seed=3).save_pretrained(folder)
    values = run_values(folder, tmp_path, policy="text", policy_mode="generate", lr=3e-3) | {
        "estimator": "tigpo", "revisit_delay": 1, "n_groups": 2}
    config = ECPOConfig.from_train_config(make_config(values)).env_runners(num_env_runners=1)
    algo = config.training(max_policy_lag=1).build_algo()
    algo.train()
    assert sorted(algo.ecpo.memory.plans) == [1]  # iteration 2's groups drawn and in flight
    uninterrupted, restored = next_iteration_twice(algo, tmp_path / "ckpt")
    try:
        assert sorted(restored.ecpo.memory.plans) == [1]
        resumed = restored.train()["ecpo"]
    finally:
        restored.stop()
    for key in ("credit/tigpo_revisit_group_fraction", "task_memory/task_graphs", "task_memory/revisits_waiting"):
        assert resumed[key] == uninterrupted[key], key
    assert resumed["credit/tigpo_revisit_group_fraction"] == 0.5
