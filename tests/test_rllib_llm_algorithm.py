"""The RLlib ECPO algorithm trains an LLM: ``ECPOConfig().rl_module(model_config={"model": ...}).build_algo()``.

Env runners are real Ray actors (``LLMEnvRunner``), the learner is RLlib's ``LearnerGroup`` (``ECPOLLMLearner``),
the policy is the tiny random Qwen2 scoring the corridors' doors (the native trainer's ``ScoringPolicy``).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import torch
from conftest import run_values

from ecpo_train.integrations.rllib import ECPO, ECPOConfig
from ecpo_train.runtime.config import make_config

# the engines' equality (one runner, a local learner, the same seed), on the CPU and on a GPU where there is one
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA"))]
EXACT_KEYS = ("success", "num_steps", "invalid_action_rate", "credit/advantage_std", "credit/divergent_anchor_fraction",
              "credit/ecpo_strict_valid_fraction", "credit/num_anchors_below_d_min", "credit/corr_grpo")
CLOSE_KEYS = ("update/pg_loss", "update/grad_norm", "update/ratio_mean", "update/ratio_max_dev")
CLOSE_REL = 1e-5
WEIGHT_GAP = 0.1  # of the update's own size: AdamW divides by each component's scale, float32 rounding shows there
RESUMED_KEYS = ("iteration", "success", "num_steps", "credit/advantage_std", "credit/advantage_max",
                "update/pg_loss", "update/grad_norm")


def compare_first_iterations(native, native_advantages, native_step, rllib, rllib_advantages, rllib_weights,
                             initial) -> dict:
    """The first iteration of the two engines side by side: the advantages (equal exactly: the same rows, the same
    credit), ``EXACT_KEYS`` equal, ``CLOSE_KEYS`` within ``CLOSE_REL``, and the updated weights within
    ``WEIGHT_GAP`` of the native update's largest step. ``native_step`` and ``rllib_weights``: the weights after
    the update, ``initial`` before it (name -> tensor, on any device)."""
    native_advantages, rllib_advantages = np.asarray(native_advantages), np.asarray(rllib_advantages)
    same_rows = native_advantages.shape == rllib_advantages.shape
    exact = {key: (native[key], rllib[key]) for key in EXACT_KEYS if key in native}
    relative = {key: abs(native[key] - rllib[key]) / max(abs(native[key]), 1e-12) for key in CLOSE_KEYS
                if key in native}
    step = max(float((native_step[k].float().cpu() - initial[k].float().cpu()).abs().max()) for k in initial)
    gap = max(float((rllib_weights[k].detach().float().cpu() - native_step[k].float().cpu()).abs().max())
              for k in initial)
    checks = {"advantages": bool(same_rows and np.array_equal(native_advantages, rllib_advantages)),
              "nonzero_advantages": bool(np.any(native_advantages != 0)),
              "exact_keys": all(a == b for a, b in exact.values()),
              "close_keys": all(r <= CLOSE_REL for r in relative.values()),
              "weights": step > 0 and gap <= WEIGHT_GAP * step}
    return {"equal": all(checks.values()), "checks": checks, "exact": exact, "relative_difference": relative,
            "weight_step": step, "weight_gap": gap}


def compare_resumed(uninterrupted, resumed) -> dict:
    """The iteration after ``from_checkpoint`` against the uninterrupted run's (``RESUMED_KEYS``, 1e-6 relative)."""
    gaps = {key: abs(resumed[key] - uninterrupted[key]) / max(abs(uninterrupted[key]), 1e-9) for key in RESUMED_KEYS}
    return {"equal": all(g <= 1e-6 for g in gaps.values()), "relative_difference": gaps}


def algo_for(values, **runners):
    """The run ``values`` through RLlib: on CUDA the learner and the runners share the one GPU, half each."""
    config = ECPOConfig.from_train_config(make_config(values))
    if values.get("device", "cpu").startswith("cuda"):
        config.learners(num_learners=0, num_gpus_per_learner=0.5).env_runners(num_gpus_per_env_runner=0.5)
    return config.env_runners(**runners).build_algo()


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_first_iteration_equals_the_native_trainer(tiny_model_dir, tmp_path, ray_session, device):
    """One env-runner actor and a local learner, same seed and device: the same rows, advantages and loss as the
    native trainer's first iteration. Advantages are equal exactly (same rows, same credit); the update's
    statistics agree to 1e-5 relative and the updated weights to a tenth of the update's size: AdamW divides every
    gradient component by its own scale, so float32 rounding on near-zero components moves weights by a
    small fraction of a step."""
    same = first_iterations_side_by_side(run_values(tiny_model_dir, tmp_path, device=device))
    assert same["equal"], same


def first_iterations_side_by_side(values) -> dict:
    """The native trainer's first iteration and the RLlib algorithm's (one runner actor, a local learner) on the
    same run values: ``compare_first_iterations`` of the two."""
    from ecpo_train.runtime.trainer import Trainer

    trainer = Trainer(make_config(values))
    initial = {k: v.detach().clone() for k, v in trainer.policy.named_parameters()}
    seen = []
    native = trainer.train_iteration(observe=lambda sampled, learned: seen.append(learned.advantages))
    native_adv = seen[0]
    native_weights = {k: v.detach().clone() for k, v in trainer.policy.named_parameters()}
    trainer.close()

    algo = algo_for(values, num_env_runners=1)
    try:
        result = algo.train()["ecpo"]
        learner = algo.learner_group._learner
        weights = dict(learner.policy_module.policy.named_parameters())
        return compare_first_iterations(native, native_adv, native_weights, result, learner.last_advantages, weights,
                                        initial)
    finally:
        algo.stop()


@pytest.mark.slow
def test_two_runners_are_the_native_update_on_their_own_sampling_streams(tiny_model_dir, tmp_path, ray_session):
    """Two env-runner actors: runner k plays group k-1 with its own sampling stream (seed + RUNNER_SEED_STRIDE *
    (k-1)), the driver's tasks and env seeds, and the global group/trajectory ids. Replaying exactly that in one
    process (the native Trainer's policy, each group's rollout drawn from its runner's stream, the groups joined,
    the native credit and update) gives the same rows, the same advantages and the same update: several runners
    change which random draws a run makes, not what the algorithm does with them."""
    from ecpo_train.core.credit import compute_advantages
    from ecpo_train.core.iteration import update_plan
    from ecpo_train.integrations.rllib.llm.runner import RUNNER_SEED_STRIDE
    from ecpo_train.runtime.trainer import Trainer

    values = run_values(tiny_model_dir, tmp_path)
    cfg = make_config(values)
    trainer = Trainer(cfg)
    task_ids = [trainer.train_tasks[int(k)] for k in trainer.rng.integers(len(trainer.train_tasks), size=cfg.n_groups)]
    env_seed = int(trainer.rng.integers(2**31 - 1))
    runner_seeds = [cfg.seed + RUNNER_SEED_STRIDE * g for g in range(cfg.n_groups)]  # runner g+1 plays group g
    batch = replay_runner_sampling(trainer.policy, cfg, task_ids, env_seed, runner_seeds)
    advantages, _ = compute_advantages(cfg.estimator, batch, cfg.credit_hyperparameters())
    plan = update_plan(cfg, trainer.rng, [batch], shards=1)
    stats = trainer.learner.learn(plan, trainer.rng).update  # the native steps B-E
    trainer.close()

    algo = algo_for(values, num_env_runners=2)
    try:
        result = algo.train()["ecpo"]
        learner = algo.learner_group._learner
        assert result["sampling/num_groups_sampled"] == 2
        assert result["num_steps"] == len(batch)
        np.testing.assert_array_equal(learner.last_advantages, advantages)
        assert np.any(advantages != 0)
        for key in ("pg_loss", "grad_norm", "ratio_mean", "ratio_max_dev"):
            assert result[f"update/{key}"] == pytest.approx(stats[key], rel=1e-5), key
    finally:
        algo.stop()


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_checkpoint_restore_continues_exactly(tiny_model_dir, tmp_path, ray_session, device):
    """save_to_path -> Algorithm.from_checkpoint: the next iteration's metrics equal the uninterrupted run's. (Seed
    7: that iteration updates, its returns not all equal, with the one candidate chooser's stream; seed 5's did only
    with the stream before issue 72.)"""
    algo = algo_for(run_values(tiny_model_dir, tmp_path, device=device, seed=7), num_env_runners=1)
    try:
        algo.train()
        algo.save_to_path(str(tmp_path / "ckpt"))
        uninterrupted = algo.train()["ecpo"]
    finally:
        algo.stop()
    assert uninterrupted["update/optimizer_steps"] >= 1  # (the comparison covers an update)
    restored = ECPO.from_checkpoint(str(tmp_path / "ckpt"))
    try:
        assert restored.ecpo.iteration == 1
        resumed = restored.train()["ecpo"]
    finally:
        restored.stop()
    same = compare_resumed(uninterrupted, resumed)
    assert same["equal"], same


@pytest.mark.slow
def test_a_lost_env_runner_is_replaced_and_its_groups_topped_up(tiny_model_dir, tmp_path, ray_session):
    """With restart_failed_env_runners, a runner whose actor died during the iteration loses only its calls: its
    groups are played again on the healthy runner, the update sees every configured group whole, the result
    says so, and the next iteration runs on a replaced actor."""
    config = (ECPOConfig.from_train_config(make_config(run_values(tiny_model_dir, tmp_path, n_groups=4)))
              .env_runners(num_env_runners=2).fault_tolerance(restart_failed_env_runners=True))
    algo = config.build_algo()
    try:
        victim = algo.env_runner_group._worker_manager._actors[2]
        ray.kill(victim, no_restart=False)
        first = algo.train()["ecpo"]
        assert first["sampling/num_groups_configured"] == 4
        assert first["sampling/num_groups_sampled"] == 4
        assert first["sampling/num_groups_resampled"] == 2  # runner 2's share: groups 2 and 3
        assert first["sampling/num_runner_failures"] == 1
        assert first["credit/num_groups"] == 4 and first["credit/num_trajectories"] == 16  # whole groups only
        deadline = time.monotonic() + 360  # Ray restarts the actor (minutes on a loaded machine); RLlib probes it
        while time.monotonic() < deadline:  # at the start of an iteration and syncs it
            later = algo.train()["ecpo"]
            assert later["sampling/num_runner_failures"] == 0 and later["sampling/num_groups_sampled"] == 4
            if sorted(algo.env_runner_group.healthy_worker_ids()) == [1, 2]:
                break
        assert sorted(algo.env_runner_group.healthy_worker_ids()) == [1, 2]
        assert algo.train()["ecpo"]["sampling/num_groups_resampled"] == 0  # both runners play their share again
    finally:
        algo.stop()


@pytest.mark.slow
def test_lost_groups_refuse_raises_naming_the_setting(tiny_model_dir, tmp_path, ray_session):
    config = (ECPOConfig.from_train_config(make_config(run_values(tiny_model_dir, tmp_path)))
              .env_runners(num_env_runners=2).fault_tolerance(restart_failed_env_runners=True)
              .training(lost_groups="refuse"))
    algo = config.build_algo()
    try:
        ray.kill(algo.env_runner_group._worker_manager._actors[1], no_restart=False)
        with pytest.raises(RuntimeError, match="lost_groups='refuse'"):
            algo.train()
    finally:
        algo.stop()


@pytest.mark.slow
def test_tune_runs_a_two_trial_grid(tiny_model_dir, tmp_path, ray_session):
    from ray import tune

    config = ECPOConfig.from_train_config(make_config(run_values(tiny_model_dir, tmp_path))).env_runners(
        num_env_runners=0)
    config.training(lr=tune.grid_search([1e-3, 1e-4]))
    results = tune.Tuner(ECPO, param_space=config, run_config=tune.RunConfig(
        stop={"training_iteration": 1}, storage_path=str(tmp_path / "tune"), verbose=0)).fit()
    assert len(results) == 2 and not results.errors
    assert sorted(r.config["lr"] for r in results) == [1e-4, 1e-3]
    assert all(0.0 <= r.metrics["ecpo"]["success"] <= 1.0 for r in results)


@pytest.mark.slow
@pytest.mark.parametrize("env_id, env_kwargs", [
    ("ecpo/ALFWorldGen-v0", {"task_types": ["Pick"], "num_receptacles": [4, 5], "max_steps": 6}),
    ("ecpo/WebShopGen-v0", {"max_steps": 4}),
])
def test_scoring_llm_one_iteration_on_mission_envs(tiny_model_dir, tmp_path, ray_session, env_id, env_kwargs):
    values = run_values(tiny_model_dir, tmp_path, env_id=env_id, env_kwargs=env_kwargs, credit={},
                        max_prompt_length=512, history_length=1)
    algo = algo_for(values, num_env_runners=2)
    try:
        result = algo.train()["ecpo"]
    finally:
        algo.stop()
    assert result["num_steps"] >= 8 and result["credit/num_groups"] == 2
    assert result["invalid_action_rate"] == 0.0  # the scoring policy only ever picks an admissible action


def test_bad_configs_are_one_error_before_any_actor(tiny_model_dir, tmp_path, monkeypatch):
    base = run_values(tiny_model_dir, tmp_path)
    config = ECPOConfig.from_train_config(make_config(base))
    config.environment("ecpo/Nope-v0")
    with pytest.raises(ValueError, match="unknown env id 'ecpo/Nope-v0'"):
        config.validate()
    with pytest.raises(ValueError, match="policy_mode=score"):
        config = ECPOConfig.from_train_config(make_config(base))
        config.environment("ecpo/SearchQAGen-v0")
        config.validate()
    config = ECPOConfig.from_train_config(make_config(base)).learners(num_learners=3)
    with pytest.raises(ValueError, match="num_learners"):
        config.validate()
    monkeypatch.setitem(sys.modules, "peft", None)
    config = ECPOConfig.from_train_config(make_config(base)).rl_module(
        model_config={**ECPOConfig.from_train_config(make_config(base))._model_config, "lora": {"r": 4}})
    with pytest.raises(ValueError, match="peft"):
        config.validate()
    with pytest.raises(ValueError, match="lost_groups"):
        ECPOConfig.from_train_config(make_config(base)).training(lost_groups="retry").validate()
    with pytest.raises(ValueError, match="unknown rl_module model_config key"):
        ECPOConfig.from_train_config(make_config(base)).rl_module(model_config={"model": "x", "modle": 1}).validate()


def test_one_run_two_spellings_round_trip(tiny_model_dir, tmp_path):
    """ECPOConfig.from_train_config(c).to_train_config() == c for every key the RLlib path runs with."""
    import dataclasses

    values = run_values(tiny_model_dir, tmp_path, lora={"r": 4, "alpha": 8}, kl_coef=0.05, max_grad_norm=0.5,
                        val_every=2, rollout_temperature=0.8, anchor_key="observation_key")
    original = make_config(values)
    again = ECPOConfig.from_train_config(original).to_train_config()
    assert dataclasses.asdict(again) == dataclasses.asdict(original)


@pytest.mark.slow
def test_ecpo_train_engine_rllib_writes_the_native_run_folder(tiny_model_dir, tmp_path):
    """``ecpo train --engine rllib``: the native run folder and metric names; --resume continues it; the native
    engine run and resumed the same way leaves the same files with the same records."""
    from typer.testing import CliRunner

    from ecpo_train.apps.cli import app
    from ecpo_train.runtime.config import load_config
    from ecpo_train.runtime.run import open_run
    from ecpo_train.runtime.run_dir import read_validation_file
    from ecpo_train.runtime.trainer import Trainer

    run_dir = tmp_path / "run"
    args = ["train", "--config", "corridor_llm", "--engine", "rllib", "--env-runners", "0",
            f"model={tiny_model_dir}", f"run_dir={run_dir}", "iterations=2", "val_every=1", "progress=false",
            "n_groups=2", "group_size=4", "val_episodes_per_task=4"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [int(m["iteration"]) for m in lines] == [0, 1, 2]
    for key in ("success", "val/exact_success", "credit/divergent_anchor_fraction", "credit/mean_rho",
                "credit/advantage_std", "time/generation", "time/update", "update/pg_loss", "invalid_action_rate",
                "credit/ecpo_strict_valid_fraction", "credit/num_single_visit_states", "credit/step_credit_fraction",
                "credit/corr_gigpo_std", "credit/rel_dist_grpo"):
        assert key in lines[1], key
    assert (run_dir / "rllib_checkpoint").is_dir() and (run_dir / "curves.png").exists()
    validations = read_validation_file(run_dir / "validation.jsonl")
    assert [v["iteration"] for v in validations] == [0, 1, 2]
    # the same weights and validation draws as the native trainer's: its validation gives the same episodes
    with open_run(Trainer, load_config("corridor_llm", [a for a in args[7:] if not a.startswith("run_dir=")]
                                       + [f"run_dir={tmp_path / 'native'}"])) as native:
        native.validate()
    first = read_validation_file(tmp_path / "native" / "validation.jsonl")[0]
    assert {k: first[k] for k in ("task_ids", "copies", "won", "lengths")} == \
        {k: validations[0][k] for k in ("task_ids", "copies", "won", "lengths")}
    refused = CliRunner().invoke(app, args)  # the folder holds a run
    assert refused.exit_code == 2 and "--resume" in refused.output
    resumed = CliRunner().invoke(app, [*args[:-6], *args[-5:], "iterations=3", "--resume"])
    assert resumed.exit_code == 0, resumed.output
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [int(m["iteration"]) for m in lines] == [0, 1, 2, 3]
    assert [v["iteration"] for v in read_validation_file(run_dir / "validation.jsonl")] == [0, 1, 2, 3]
    # the native engine, started and resumed the same way, leaves the same files, written by the same functions
    native_dir = tmp_path / "native_run"
    native_args = [a for a in args if a not in ("--engine", "rllib", "--env-runners", "0")
                   and not a.startswith("run_dir=")] + [f"run_dir={native_dir}"]
    for native_run in (native_args, [*native_args, "iterations=3", "--resume"]):
        result = CliRunner().invoke(app, native_run)
        assert result.exit_code == 0, result.output
    checkpoints = {"checkpoint.pt": "<checkpoint>", "rllib_checkpoint": "<checkpoint>"}
    names = [sorted(checkpoints.get(p.name, p.name) for p in folder.iterdir()) for folder in (run_dir, native_dir)]
    assert names[0] == names[1] == sorted(["config.yaml", "metrics.jsonl", "validation.jsonl", "history.jsonl",
                                           "curves.png", "<checkpoint>"])
    native_config = (native_dir / "config.yaml").read_text().replace(str(native_dir), str(run_dir))
    assert (run_dir / "config.yaml").read_text() == native_config + "engine: rllib\n"
    for folder in (run_dir, native_dir):
        history = [json.loads(line) for line in (folder / "history.jsonl").read_text().splitlines()]
        assert [(h["event"], h["iteration"], h["changes"]) for h in history] == \
            [("start", 0, {}), ("resume", 2, {"iterations": [2, 3]})]
        assert [v["iteration"] for v in read_validation_file(folder / "validation.jsonl")] == [0, 1, 2, 3]


@pytest.mark.slow
def test_corridor_llm_learns_through_build_algo_with_two_runners(tiny_model_dir, tmp_path, ray_session):
    """``corridor_llm`` through ``build_algo()`` with 2 env-runner actors raises the exact (noise-free, DP)
    success of the LM: SmolLM2 when it has been pulled, else the tiny random model with a larger step."""
    from ecpo_train.runtime.config import load_config
    from ecpo_train.runtime.models import default_cache_dir

    real = default_cache_dir() / "smollm2-135m-instruct"
    model, lr = (real, "2e-5") if (real / "config.json").exists() else (tiny_model_dir, "3e-3")
    train = load_config("corridor_llm", [
        f"model={model}", f"lr={lr}", f"run_dir={tmp_path}", "progress=false", "iterations=5", "val_every=5",
        "env_kwargs={num_tasks: 1, depth: 2, rare_prob: [0.0, 0.2]}", "n_groups=2", "val_num_tasks=1",
        "val_episodes_per_task=4", "num_epochs=2"])
    algo = ECPOConfig.from_train_config(train).env_runners(num_env_runners=2).build_algo()
    try:
        before = algo.validate()["val/exact_success"]
        history = [algo.train()["ecpo"] for _ in range(train.iterations)]
    finally:
        algo.stop()
    after = history[-1]["val/exact_success"]
    assert after > before + 0.1, (str(model), before, after)
    assert all(m["sampling/num_groups_sampled"] == 2 for m in history)
    assert sum(m["credit/advantage_std"] > 0 and m["update/grad_norm"] > 0 for m in history) >= 3


@pytest.mark.slow
def test_two_learners_give_one_learners_update(tiny_model_dir, tmp_path, ray_session):
    """Two learner actors (DDP over gloo, one group each) make the update one learner makes on both groups: the
    token counts are all-reduced, so the averaged gradient is the whole batch's (one mini-batch, one step). Seed
    5: one group's returns are all equal, so one learner holds only zero-advantage rows; its statistics count as 0
    in the learners' average (before, they were missing from it and ``pg_loss`` read twice the one learner's;
    ``tests/test_loss_data_parallel.py`` pins the same on ``policy_update`` directly)."""
    values = run_values(tiny_model_dir, tmp_path, mini_batch_size=2**31 - 1, num_epochs=1, seed=5)
    outcome = {}
    for learners in (1, 2):
        algo = (ECPOConfig.from_train_config(make_config(values)).env_runners(num_env_runners=0)
                .learners(num_learners=learners, num_cpus_per_learner=0).build_algo())
        try:
            result = algo.train()["ecpo"]
            weights = {k: np.asarray(v) for k, v in algo.learner_group.get_weights()["default_policy"].items()}
        finally:
            algo.stop()
        outcome[learners] = (result, weights)
    (one, one_w), (two, two_w) = outcome[1], outcome[2]
    assert one["update/optimizer_steps"] == two["update/optimizer_steps"] == 1
    assert two["update/pg_loss"] == pytest.approx(one["update/pg_loss"], rel=1e-5)
    assert two["update/grad_norm"] == pytest.approx(one["update/grad_norm"], rel=1e-5)
    assert max(float(np.abs(one_w[k] - two_w[k]).max()) for k in one_w) < 1e-4  # lr 1e-3: a step is ~1e-3


def text_values(tmp_path, **changes):
    """The corridors with the small text policy (a random-weight folder): the same run as native values."""
    from ecpo_train.policies.text import TextPolicy

    folder = tmp_path / "text-policy"
    folder.mkdir(exist_ok=True)
    TextPolicy(seed=3).save_pretrained(folder)
    values = run_values(folder, tmp_path, policy="text", policy_mode="generate", lr=3e-3)
    return values | changes


@pytest.mark.slow
@pytest.mark.parametrize("estimator", ["ecpo", "pgpo", "hgpo", "graphgpo", "pace"])
def test_text_policy_first_iteration_equals_the_native_trainer(tmp_path, ray_session, estimator):
    """The small text policy through RLlib (one runner actor, a local learner): the native trainer's rows,
    advantages and update, as for the LLM; for ECPO and for each other paper's step credit (issue 57; TIGPO, which
    keeps state, over three iterations in tests/test_tigpo.py)."""
    same = first_iterations_side_by_side(text_values(tmp_path, estimator=estimator))
    assert same["equal"], same


@pytest.mark.slow
def test_text_policy_with_the_open_command_set_equals_the_native_trainer(tmp_path, ray_session):
    """The open command set (invalid commands possible) through RLlib: the native trainer's rows, advantages and
    update on generated ALFWorld households (issue 71)."""
    values = text_values(tmp_path, env_id="ecpo/ALFWorldGen-v0", env_kwargs={"num_tasks": 6, "max_steps": 8},
                         command_set="open", history_length=8)
    same = first_iterations_side_by_side(values)
    assert same["equal"], same


@pytest.mark.slow
def test_text_policy_trains_with_two_runners_and_two_learners(tmp_path):
    """``ecpo train --engine rllib --env-runners 2 --learners 2 --actor-cpus 0.5`` with the text policy: two runner
    actors sample, two learner actors (DDP over gloo) compute the credit and update; the native run folder."""
    import subprocess

    import yaml

    values = text_values(tmp_path, iterations=2, n_groups=2)
    preset = tmp_path / "text.yaml"
    preset.write_text(yaml.safe_dump(values), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "ecpo_train.apps.cli", "train", "--config", str(preset),
                           "--engine", "rllib", "--env-runners", "2", "--learners", "2", "--actor-cpus", "0.5"],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [json.loads(line) for line in (tmp_path / "native" / "metrics.jsonl").read_text().splitlines()]
    assert [int(line["iteration"]) for line in lines] == [1, 2]
    assert all(line["update/optimizer_steps"] >= 1 for line in lines if line["credit/advantage_std"] > 0)
    # each learner credits one group: the diagnostics count both (counts summed over learners, as natively)
    assert all(line["credit/num_groups"] == 2 and line["credit/num_trajectories"] == 8 for line in lines)


def replay_runner_sampling(policy: Any, train_config: Any, task_ids: list[str], env_seed: int,
                           stream_seeds: list[int]) -> Any:
    """What the runners sample, replayed in one process (the test's independent account of it): group ``g`` is played alone (a one-group env, as a
    runner given one group plays it), its actions chosen from the policy's own generator (``policies.choose``)
    seeded ``stream_seeds[g]``, torch's stream seeded alike (runner k's seed is ``seed + RUNNER_SEED_STRIDE *
    (k - 1)``), copy ``i`` reset with ``env_seed + g * N + i``; the rows get the run's global ids and come back
    joined, as the learner receives them."""
    from ecpo_gym.group import GroupVectorEnv
    from ecpo_train.core.batch import TrajectoryBatch
    from ecpo_train.core.iteration import first_copy_seed
    from ecpo_train.core.rollout import training_rollout

    tc, n = train_config, int(train_config.group_size)
    envs = GroupVectorEnv(tc.env_id, 1, n, env_kwargs=tc.env_kwargs)
    parts = []
    try:
        for g, stream_seed in enumerate(stream_seeds):
            torch.manual_seed(int(stream_seed))
            policy.generator.manual_seed(int(stream_seed))
            rollout = training_rollout(envs, policy, task_ids[g:g + 1], tc, first_copy_seed(env_seed, g, n))
            parts.append(rollout.batch.renumbered(g, g * n))
    finally:
        envs.close()
    return TrajectoryBatch.concat(parts)
