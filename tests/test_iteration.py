"""The iteration both engines run (``core/iteration.py``), the run loop (``runtime/run.py``), and the one home of
step E's defaults: the numbers and names a run's metrics and its config rely on."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from ecpo_train.core.batch import TrajectoryBatch
from ecpo_train.core.iteration import (
    credit_step,
    draw_iteration,
    iteration_metrics,
    shuffle_generator,
    shuffle_plan,
    update_keep,
    update_plan,
)
from ecpo_train.core.loss import UpdateSettings
from ecpo_train.core.tasks import draw_tasks
from ecpo_train.runtime.builders import update_settings
from ecpo_train.runtime.config import TrainConfig


def test_update_defaults_have_one_home():
    # a config that sets none of step E's knobs updates with UpdateSettings' defaults (no drift: micro-batch 8 both)
    assert update_settings(TrainConfig(policy="tabular")) == UpdateSettings()
    assert TrainConfig(policy="tabular").micro_batch_size == UpdateSettings().micro_batch_size == 8


def test_draw_iteration_is_the_task_draw_then_the_env_seed():
    config = TrainConfig(policy="tabular", n_groups=3)
    pool = ["a", "b", "c", "d"]
    mine, reference = np.random.default_rng(11), np.random.default_rng(11)
    tasks, seed = draw_iteration(config, pool, mine, 0)
    assert tasks == draw_tasks(pool, 3, reference, 0, "random")
    assert seed == int(reference.integers(2**31 - 1))
    assert mine.bit_generator.state == reference.bit_generator.state


def test_credit_step_is_the_configs_estimator_on_the_table():
    # two trajectories of one group through the same anchor: the winner's step gets the positive advantage
    table = TrajectoryBatch.from_trajectories([
        {"group_id": "g", "traj_id": 0, "anchor_keys": ["s"], "action_keys": ["left"], "rewards": [1.0]},
        {"group_id": "g", "traj_id": 1, "anchor_keys": ["s"], "action_keys": ["right"], "rewards": [0.0]},
    ])
    advantages, diagnostics = credit_step(TrainConfig(policy="tabular", estimator="grpo"), table)
    assert np.asarray(advantages).tolist() == pytest.approx([0.7071067, -0.7071067], abs=1e-6)
    assert isinstance(diagnostics, dict)


def test_one_shards_shuffle_is_the_runs_own_stream_and_several_get_a_seed_each():
    # one process or learner: the update draws exactly the permutations the run's generator itself would draw,
    # and the generator continues past them (the native trainer's stream, wherever the update runs)
    mine, reference = np.random.default_rng(3), np.random.default_rng(3)
    generator = shuffle_generator(shuffle_plan(mine, rows=7, epochs=2, shards=1))
    expected = [reference.permutation(7) for _ in range(2)]
    assert [generator.permutation(7).tolist() for _ in range(2)] == [e.tolist() for e in expected]
    assert mine.bit_generator.state == reference.bit_generator.state
    # several shards: one seed from the run's generator, shard k shuffles with seed + k
    plan = shuffle_plan(mine, rows=7, epochs=2, shards=3)
    assert plan == {"seed": int(reference.integers(2**63 - 1))}
    assert shuffle_generator(plan, 2).permutation(7).tolist() == \
        np.random.default_rng(plan["seed"] + 2).permutation(7).tolist()


def test_the_update_plan_leaves_out_equal_return_groups_only_when_the_run_does():
    """One plan per iteration: the kept rows travel with the table (and with each group of it, to whichever
    learner updates on it), and the shuffle is drawn for the kept rows only."""
    table = TrajectoryBatch.from_trajectories([  # group a: returns 1 and 0; group b: 1 and 1 (equal)
        {"group_id": g, "traj_id": t, "anchor_keys": ["s"], "action_keys": [f"x{t}"], "rewards": [r]}
        for g, t, r in (("a", 0, 1.0), ("a", 1, 0.0), ("b", 2, 1.0), ("b", 3, 1.0))])
    mine, reference = np.random.default_rng(5), np.random.default_rng(5)
    plan = update_plan(TrainConfig(policy="tabular"), mine, [table], shards=1)
    assert update_keep(plan.tables[0]) is None and plan.tables[0] is table  # every row
    filtered = TrainConfig(policy="tabular", filter_equal_return_groups=True, num_epochs=2)
    plan = update_plan(filtered, mine, [table], shards=1)
    assert update_keep(plan.tables[0]).tolist() == [True, True, False, False]
    assert [update_keep(g).tolist() for g in plan.tables[0].by_group()] == [[True, True], [False, False]]
    reference.permutation(4)  # (the first plan's one epoch over 4 rows)
    generator = shuffle_generator(plan.shuffle)
    assert [generator.permutation(2).tolist() for _ in range(2)] == [reference.permutation(2).tolist()
                                                                      for _ in range(2)]


def test_iteration_metrics_names_and_order():
    metrics = iteration_metrics(2, 10, {"success": 0.5}, {"advantage_std": 1}, {"pg_loss": -0.25},
                                {"generation": 1.5, "update": 0.5}, extra={"sampling/num_groups_sampled": 4.0})
    assert metrics == {"iteration": 2.0, "num_steps": 10.0, "success": 0.5, "credit/advantage_std": 1.0,
                       "update/pg_loss": -0.25, "sampling/num_groups_sampled": 4.0, "time/generation": 1.5,
                       "time/update": 0.5}
    assert list(metrics)[:2] == ["iteration", "num_steps"] and list(metrics)[-1] == "time/update"


def test_the_run_shell_validates_first_logs_every_iteration_and_checkpoints_on_cadence(tmp_path):
    """The native engine through the run shell: the untrained validation as iteration 0, every iteration logged,
    validations where the rule says (after 1, 2, 4 and the last), a checkpoint every 2 iterations and at the end,
    and ``stop(metrics)`` ends the run early with its checkpoint."""
    from ecpo_train.runtime.config import load_config
    from ecpo_train.runtime.run import open_run
    from ecpo_train.runtime.trainer import Trainer

    config = load_config("quickstart", [f"run_dir={tmp_path / 'run'}", "iterations=5", "val_every=2",
                                        "val_before_training=true", "checkpoint_every=2", "progress=false",
                                        "tensorboard=false", "n_groups=2", "val_episodes_per_task=2"])
    events: list[str] = []
    with open_run(Trainer, config) as run:
        save, append = run.engine.save, run.log.append
        run.engine.save = lambda path: events.append(f"ckpt {run.engine.iteration}") or save(path)
        run.log.append = lambda m, step: events.append(f"log {int(m['iteration'])}" + (" val" if "val/success" in m
                                                                                         else "")) or append(m, step)
        run.train(stop=lambda metrics: metrics["iteration"] == 4)
        assert events == ["log 0 val", "log 1 val", "log 2 val", "ckpt 2", "log 3", "log 4 val", "ckpt 4", "ckpt 4"]
        events.clear()
        run.train()
    assert events == ["log 5 val", "ckpt 5"]
    lines = [json.loads(line) for line in (tmp_path / "run" / "validation.jsonl").read_text().splitlines()]
    assert [line["iteration"] for line in lines] == [0, 1, 2, 4, 5]  # every validation's episodes, once


def test_the_rllib_config_holds_the_runs_train_config_built_once(tiny_model_dir, tmp_path):
    """``from_train_config(train)`` holds ``train`` itself; a builder call that changes the run makes a new one
    (``train`` untouched); ``validate()`` keeps it and the frozen config hands out that object, which travels to
    the actors with the config (pickled: an equal copy)."""
    pytest.importorskip("ray")
    import pickle

    from ecpo_train.integrations.rllib import ECPOConfig
    from ecpo_train.runtime.config import make_config

    native = make_config({"run_dir": str(tmp_path / "run"), "policy": "llm", "policy_mode": "score",
                          "model": str(tiny_model_dir), "device": "cpu", "env_id": "ecpo/DivergentAnchor-v0",
                          "n_groups": 2, "group_size": 4, "tensorboard": False, "progress": False})
    config = ECPOConfig.from_train_config(native)
    assert config.to_train_config() is native
    config.env_runners(num_env_runners=0).validate()  # actor layout: not what the run is
    assert config.to_train_config() is native
    config.training(lr=0.5)
    changed = config.to_train_config()
    assert changed.lr == 0.5 and native.lr != 0.5 and config.to_train_config() is changed
    config.run_settings["val_every"] = 3  # changed in place: seen too
    assert config.to_train_config().val_every == 3
    config.validate()
    config.freeze()
    once = config.to_train_config()
    assert config.to_train_config() is once
    assert dataclasses.replace(once, lr=native.lr, val_every=native.val_every) == native
    shipped = pickle.loads(pickle.dumps(config))  # what RLlib hands a runner or learner actor
    assert shipped.to_train_config() == once


def test_every_copy_of_every_group_has_its_own_env_seed_whoever_plays_its_share():
    from ecpo_train.core.iteration import first_copy_seed

    n, groups, env_seed = 4, 6, 1000
    seeds = [first_copy_seed(env_seed, g, n) + copy for g in range(groups) for copy in range(n)]
    assert seeds == list(range(env_seed, env_seed + groups * n))
    # a share of whole groups from group 3 on (an FSDP process, an env runner) counts from the same seed
    assert first_copy_seed(env_seed, 3, n) == seeds[3 * n]
