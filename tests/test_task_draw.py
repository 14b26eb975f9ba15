"""Which tasks an iteration plays: ``task_draw`` random (the historical stream) and cycle (a fixed pool in order)."""

import numpy as np
import pytest

from ecpo_train.core.tasks import draw_tasks
from ecpo_train.runtime.config import load_config
from ecpo_train.runtime.trainer import Trainer

POOL = [f"t{i}" for i in range(16)]


def test_cycle_visits_a_pool_of_16_with_4_groups_every_4_iterations():
    seen = [draw_tasks(POOL, 4, np.random.default_rng(0), k, "cycle") for k in range(8)]
    assert seen[0] == ["t0", "t1", "t2", "t3"] and seen[3] == ["t12", "t13", "t14", "t15"]
    assert seen[4] == seen[0] and seen[7] == seen[3]  # every task again 4 iterations later
    assert sorted(t for s in seen[:4] for t in s) == sorted(POOL)


def test_cycle_with_as_many_groups_as_tasks_plays_every_task_every_iteration():
    pool = POOL[:4]
    assert all(draw_tasks(pool, 4, np.random.default_rng(k), k, "cycle") == pool for k in range(5))
    # a pool smaller than the groups wraps within the iteration
    assert draw_tasks(pool, 6, np.random.default_rng(0), 1, "cycle") == ["t2", "t3", "t0", "t1", "t2", "t3"]


def test_random_is_the_historical_draw_and_cycle_leaves_the_stream_alone():
    a, b = np.random.default_rng(7), np.random.default_rng(7)
    assert draw_tasks(POOL, 5, a, 3) == [POOL[int(k)] for k in b.integers(len(POOL), size=5)]
    c, d = np.random.default_rng(7), np.random.default_rng(7)
    draw_tasks(POOL, 5, c, 3, "cycle")
    assert c.integers(2**31 - 1) == d.integers(2**31 - 1)  # the env seed that follows is unchanged


def test_bad_draw_is_one_config_error(tmp_path):
    with pytest.raises(ValueError, match="task_draw='shuffle'; valid: random, cycle"):
        load_config("quickstart", [f"run_dir={tmp_path}", "task_draw=shuffle"])
    with pytest.raises(ValueError, match="no training tasks"):
        draw_tasks([], 2, np.random.default_rng(0), 0, "cycle")


def test_the_trainer_plays_the_cycled_tasks_in_order(tmp_path):
    cfg = load_config("quickstart", [f"run_dir={tmp_path}", "progress=false", "tensorboard=false", "val_every=0",
                                     "checkpoint_every=0", "n_groups=2", "task_draw=cycle", "iterations=3"])
    trainer = Trainer(cfg)
    try:
        played = []
        for _ in range(3):
            trainer.train_iteration(observe=lambda sampled, _: played.append(sorted({e.task_id for e in
                                                                                  sampled.played.episodes})))
    finally:
        trainer.close()
    pool = trainer.train_tasks
    assert played == [sorted(pool[(2 * k + j) % len(pool)] for j in range(2)) for k in range(3)]


def test_a_stratified_validation_set_takes_evenly_spaced_tasks_of_every_type():
    from ecpo_train.core.tasks import stratified_tasks

    tasks = [f"a-{i:02d}" for i in range(10)] + [f"b-{i}" for i in range(3)] + ["c-0"]
    got = stratified_tasks(tasks, lambda t: t.split("-")[0], 4)
    # a: indices floor((j + 1/2) * 10 / 4) = 1, 3, 6, 8; b: fewer than 4, all; c: its one; types interleaved
    assert got == ["a-01", "b-0", "c-0", "a-03", "b-1", "a-06", "b-2", "a-08"]
    assert stratified_tasks(list(reversed(tasks)), lambda t: t.split("-")[0], 4) == got  # the order given is irrelevant


def test_the_alfworld_text_presets_validate_on_eight_train_games_of_every_task_type():
    import os

    import gymnasium as gym

    from ecpo_train.core.tasks import stratified_tasks
    from ecpo_train.runtime.config import load_config

    if not os.environ.get("ECPO_DATA_DIR"):
        pytest.skip("reads ALFWorld's train split: set ECPO_DATA_DIR")
    train = gym.make("ecpo/ALFWorld-v0", split="train").unwrapped.task_ids
    for preset in ("alfworld_text", "alfworld_text_paper"):
        listed = load_config(preset).val_tasks
        assert listed == stratified_tasks(train, lambda t: t.split("-")[0], 8)
        assert sorted({t.split("-")[0] for t in listed}) == sorted({t.split("-")[0] for t in train})  # all 6 types
