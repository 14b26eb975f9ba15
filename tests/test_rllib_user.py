"""The RLlib LLM algorithm as an RLlib user meets it: RLlib's result keys, the native defaults, options honoured
or refused before Ray starts, the README example as written, every preset on two runners, resources, and the
learner of a vLLM config.

The Ray tests use the tiny random Qwen2 (conftest ``tiny_model_dir``) and the module's 2-CPU Ray session.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from conftest import small_values

from ecpo_gym.kwargs import shown
from ecpo_train.integrations.rllib import ECPO, ECPOConfig
from ecpo_train.runtime.config import TrainConfig, load_config, make_config, preset_values

README = Path(__file__).resolve().parents[1] / "README.md"
CONFIG_DIR = Path(__file__).resolve().parents[1] / "ecpo_train" / "runtime" / "configs"
# Keys of a preset that say where and how long a run goes, not what it trains on
BOOKKEEPING = ("run_dir", "iterations", "checkpoint_every", "save_optimizer", "tensorboard", "progress",
               "val_before_training")


def readme_example() -> str:
    """The README's RLlib example, the first python block under '## RLlib'."""
    section = README.read_text().split("\n## RLlib\n", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


# ------------------------------------------------------------------ defaults (no Ray)
def test_a_bare_llm_config_trains_with_the_native_defaults(tiny_model_dir):
    rllib = (ECPOConfig().environment("ecpo/DivergentAnchor-v0")
             .rl_module(model_config={"model": str(tiny_model_dir)})).to_train_config()
    native = make_config({"model": str(tiny_model_dir), "env_id": "ecpo/DivergentAnchor-v0"})
    for key in ("lr", "num_epochs", "mini_batch_size", "micro_batch_size", "max_grad_norm", "kl_coef",
                "clip_eps", "entropy_coef", "n_groups", "group_size", "estimator", "credit", "seed"):
        assert getattr(rllib, key) == getattr(native, key), key
    assert (rllib.lr, rllib.num_epochs, rllib.max_grad_norm) == (TrainConfig.lr, 1, 1.0)


def test_the_readme_states_the_defaults_of_a_bare_config():
    """The README's comment on ``ECPOConfig()`` names its defaults, the clip among them as the gradient-norm clip
    (``grad_clip``; PPO's ratio clip, ``clip_param``, is 0.2)."""
    line = next(line for line in readme_example().splitlines() if "defaults:" in line)
    stated = re.search(r"\(lr (\S+), (\d+) epoch, mini-batch (\d+), grad clip (\S+), KL (\S+)\)", line)
    assert stated is not None, line
    config = ECPOConfig()
    assert (config.lr, config.num_epochs, config.minibatch_size, config.grad_clip, config.kl_coeff) == (
        float(stated[1]), int(stated[2]), int(stated[3]), float(stated[4]), float(stated[5]))


def test_the_readme_example_is_the_corridor_llm_preset():
    """The README says its example is the run `ecpo train --config corridor_llm --engine rllib` makes."""
    code = readme_example().split("algo = ")[0]  # the config, without building it
    namespace: dict = {}
    exec(code, namespace)
    example = dataclasses.asdict(namespace["config"].to_train_config())
    preset = dataclasses.asdict(ECPOConfig.from_train_config(load_config("corridor_llm")).to_train_config())
    differ = {k: (example[k], preset[k]) for k in example if k not in BOOKKEEPING and example[k] != preset[k]}
    assert differ == {}


# ------------------------------------------------------------------ refusals before Ray starts
@pytest.mark.parametrize("change, named", [
    (lambda c: c.training(train_batch_size_per_learner=512), "train_batch_size_per_learner"),
    (lambda c: c.training(train_batch_size=512), "train_batch_size"),
    (lambda c: c.training(vf_loss_coeff=0.5), "vf_loss_coeff"),
    (lambda c: c.training(lambda_=0.9), "lambda_"),
    (lambda c: c.training(kl_target=0.2), "kl_target"),
    (lambda c: c.training(lr=[[0, 1e-5], [100, 1e-6]]), "lr as a schedule"),
    (lambda c: c.evaluation(evaluation_interval=1), "evaluation(...) (evaluation_interval)"),
])
def test_options_the_llm_path_does_not_run_are_one_line_before_ray(tiny_model_dir, tmp_path, change, named):
    config = change(ECPOConfig.from_train_config(make_config(small_values(tiny_model_dir, tmp_path))))
    with pytest.raises(ValueError) as error:
        config.validate()
    message = str(error.value)
    assert message.startswith(named) and "\n" not in message
    assert ("groups_per_batch" in message or "critic-free" in message or "kl_coeff" in message
            or "warm-up" in message or "val_every" in message)
    assert not ray.is_initialized()


def test_a_missing_model_is_one_line_before_ray(tmp_path):
    config = ECPOConfig.from_train_config(make_config(small_values(tmp_path / "no-model", tmp_path)))
    with pytest.raises(ValueError) as error:
        config.validate()
    missing = shown(str(tmp_path / "no-model"))  # the path quoted as a bounded prefix (a long tmp path is cut)
    assert str(error.value) == (f"rl_module(model_config={{'model': {missing}}}): "
                                f"{missing} does not exist; give a folder with the model's config.json, "
                                "weights and tokenizer (`ecpo models pull smollm2-135m-instruct`) or a hub id")
    assert not ray.is_initialized()


def test_the_sampling_timeout_fits_group_rollouts(tiny_model_dir, tmp_path):
    """RLlib's 60 s is one PPO fragment; by default a runner call gets the env's step limit x its groups x 30 s."""
    alfworld = ECPOConfig.from_train_config(load_config("alfworld_cpu", [f"model={tiny_model_dir}"]))
    alfworld.env_runners(num_env_runners=2)
    assert alfworld.sample_timeout_s is None
    assert alfworld.group_sample_timeout_s == 12 * 2 * 30.0  # max_steps 12, 4 groups over 2 runners
    assert alfworld.env_runners(sample_timeout_s=900).group_sample_timeout_s == 900.0


# ------------------------------------------------------------------ runners with train_tasks
def test_a_runner_given_train_tasks_is_healthy_before_it_builds_an_env(tiny_model_dir, tmp_path):
    """webshop_cpu names its train_tasks, so a runner asks the env for none: RLlib's health probe and space query
    (what build_algo calls on every runner) must not need an env yet."""
    from ecpo_train.integrations.rllib import LLMEnvRunner

    train = load_config("webshop_cpu", [f"model={tiny_model_dir}", "device=cpu", f"run_dir={tmp_path}",
                                        "n_groups=2", "group_size=2"])
    config = ECPOConfig.from_train_config(train)
    config.validate()
    runner = LLMEnvRunner(config=config)
    try:
        runner.assert_healthy()
        assert runner.task_ids == [str(t) for t in train.train_tasks]
        assert sorted(runner.get_spaces()) == ["__env__", "default_policy"]
    finally:
        runner.stop()
    assert not ray.is_initialized()


# ------------------------------------------------------------------ a learner never starts vLLM
def test_a_learner_built_from_a_vllm_config_starts_no_engine(tiny_model_dir, tmp_path, monkeypatch):
    from ecpo_train.integrations.rllib.llm.module import TRAIN_CONFIG, CausalLMRLModule

    monkeypatch.setitem(sys.modules, "vllm", None)  # any import of vllm raises ImportError
    train = make_config(small_values(tiny_model_dir, tmp_path, policy_mode="generate", generation_backend="vllm",
                                     max_response_length=8))
    module = CausalLMRLModule(observation_space=None, action_space=None, inference_only=False,
                              model_config={TRAIN_CONFIG: train})
    assert module.train_config is train  # the run's config; only the learner's policy is built without vLLM
    assert type(module.policy).__name__ == "TransformersPolicy" and module.policy.generation_backend == "transformers"


# ------------------------------------------------------------------ Ray
@pytest.mark.slow
def test_rllib_result_keys_after_one_llm_iteration(tiny_model_dir, tmp_path, ray_session):
    """What user scripts, Tune stoppers and dashboards read, after one iteration with one runner actor."""
    config = (ECPOConfig.from_train_config(make_config(small_values(tiny_model_dir, tmp_path)))
              .env_runners(num_env_runners=1))
    algo = config.build_algo()
    try:
        result = algo.train()
    finally:
        algo.stop()
    ecpo = result["ecpo"]
    runners = result["env_runners"]
    assert runners["num_episodes"] == 8 and runners["num_env_steps_sampled"] == ecpo["num_steps"]
    assert runners["episode_return_min"] <= runners["episode_return_mean"] <= runners["episode_return_max"]
    assert runners["episode_return_mean"] == pytest.approx(ecpo["reward_mean"])
    assert runners["episode_len_mean"] == pytest.approx(ecpo["episode_length"])
    learner = result["learners"]["default_policy"]
    assert learner["policy_loss"] == pytest.approx(ecpo["update/pg_loss"])
    assert learner["mean_kl_loss"] == pytest.approx(ecpo["update/kl"]) and learner["curr_kl_coeff"] == 0.01
    assert learner["gradients_default_optimizer_global_norm"] == pytest.approx(ecpo["update/grad_norm"])
    assert learner["default_optimizer_learning_rate"] == pytest.approx(1e-3)
    assert learner["num_module_steps_trained"] == ecpo["num_steps"]
    assert result["num_env_steps_sampled_lifetime"] == ecpo["num_steps"]
    assert result["num_env_steps_trained_lifetime"] == ecpo["num_steps"]
    assert result["learners"]["__all_modules__"]["num_env_steps_trained_lifetime"] == ecpo["num_steps"]
    timers = result["timers"]
    assert timers["env_runner_sampling_timer"] == pytest.approx(ecpo["time/sampling"])
    assert timers["learner_update_timer"] == pytest.approx(ecpo["time/update"])
    # the learners' credit step is its own phase, outside time/update, as on the native trainer
    assert 0 < ecpo["time/credit"] and ecpo["time/credit"] + ecpo["time/update"] < ecpo["time/iteration"]
    assert timers["synch_weights"] == pytest.approx(ecpo["time/sync"])


@pytest.mark.slow
def test_all_zero_advantages_are_said_on_the_rllib_engine(tiny_model_dir, tmp_path, ray_session, capfd):
    """The tiny random LM generating 4 tokens never writes an action: every return is equal, every advantage 0."""
    values = small_values(tiny_model_dir, tmp_path, policy_mode="generate", max_response_length=4,
                          env_kwargs={"num_tasks": 1, "depth": 2})
    algo = ECPOConfig.from_train_config(make_config(values)).env_runners(num_env_runners=0).build_algo()
    try:
        result = algo.train()
    finally:
        algo.stop()
    assert result["ecpo"]["credit/num_nonzero_advantages"] == 0
    assert ("warning: iteration 1: every advantage is 0, so this update changes nothing: every action was invalid"
            in capfd.readouterr().err)


@pytest.mark.slow
def test_the_runs_train_config_is_built_once_and_every_actor_reads_it(tiny_model_dir, tmp_path, ray_session,
                                                                      monkeypatch):
    """The TrainConfig the CLI built is the run's to the credit step: building the algorithm and training an
    iteration build no other (no actor translates or rebuilds it), and the algorithm, its runner and the runner's
    module, the learner and its credit connector hold it (a copy where RLlib copies the config)."""
    train = make_config(small_values(tiny_model_dir, tmp_path, estimator="gigpo_std"))
    built: list = []
    post_init = TrainConfig.__post_init__
    monkeypatch.setattr(TrainConfig, "__post_init__", lambda self: (built.append(self), post_init(self))[-1])
    algo = ECPOConfig.from_train_config(train).env_runners(num_env_runners=0).build_algo()
    try:
        result = algo.train()
        runner, learner = algo.env_runner_group.local_env_runner, algo.learner_group._learner
        held = {"algorithm": algo.ecpo.train_config, "runner": runner.train_config,
                "runner module": runner.module.train_config, "learner": learner.train_config,
                "credit connector": learner._learner_connector.connectors[0].train_config}
    finally:
        algo.stop()
    assert built == []
    held["algorithm's config"] = algo.config.to_train_config()
    assert {name: config == train for name, config in held.items()} == dict.fromkeys(held, True)
    assert result["ecpo"]["credit/num_groups"] == train.n_groups  # the estimator's diagnostics, as named before


@pytest.mark.slow
def test_the_readme_example_runs_as_written(tiny_model_dir, tmp_path, ray_session, monkeypatch):
    """The README's RLlib example, with the tiny model in place of SmolLM2, run in a fresh folder: its last line
    saves to the relative path ``ckpt``, and ``ECPO.from_checkpoint("ckpt")`` reads it back."""
    code = readme_example().replace("~/.cache/ecpo/models/smollm2-135m-instruct", str(tiny_model_dir))
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    try:
        exec(code, namespace)
    finally:
        if "algo" in namespace:
            namespace["algo"].stop()
    assert 0.0 <= namespace["result"]["env_runners"]["episode_return_mean"]
    assert (tmp_path / "ckpt" / "algorithm_state.pkl").exists() or any((tmp_path / "ckpt").iterdir())
    restored = ECPO.from_checkpoint("ckpt")
    try:
        assert restored.ecpo.iteration == 1
    finally:
        restored.stop()


@pytest.mark.slow
def test_a_trial_that_can_never_fit_is_one_error(tiny_model_dir, tmp_path, ray_session):
    """Two runner actors on the session's 2 CPUs beside a trial's driver: 3 CPUs, never free."""
    config = (ECPOConfig.from_train_config(make_config(small_values(tiny_model_dir, tmp_path)))
              .env_runners(num_env_runners=2))
    with pytest.raises(ValueError, match=r"^this trial needs 3 CPUs \(1 for the driver, the rest for 2 actors\) "
                                         r"and the Ray cluster has 2"):
        ECPO.default_resource_request(config)
    with pytest.raises(ValueError, match="needs 3 CPUs"):
        config.copy().env_runners(num_env_runners=3).build_algo()


@pytest.mark.slow
def test_tune_names_trials_after_the_env(tiny_model_dir, tmp_path, ray_session):
    from ray import tune

    config = (ECPOConfig.from_train_config(make_config(small_values(tiny_model_dir, tmp_path)))
              .env_runners(num_env_runners=0))
    results = tune.Tuner(ECPO, param_space=config, run_config=tune.RunConfig(
        stop={"training_iteration": 1}, storage_path=str(tmp_path / "tune"), verbose=0)).fit()
    assert not results.errors
    assert Path(results[0].path).name.startswith("ECPO_ecpo_DivergentAnchor-v0_")
    assert results[0].metrics["env_runners"]["num_episodes"] == 8


PRESETS = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))
SMALL = {"corridor_llm", "alfworld_cpu", "webshop_cpu"}  # CPU presets: these run one iteration here


@pytest.mark.slow
@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_builds_and_the_cpu_ones_train_with_two_runners(preset, tiny_model_dir, tmp_path, ray_session):
    """Each preset builds with the tiny model on CPU (the GPU ones' vLLM and bf16 replaced), its envs and module
    in the driver's runner; the CPU ones build two env-runner actors and play one iteration of 2 groups of 2."""
    model = tiny_model_dir
    values = preset_values(preset)
    if values.get("policy") == "text":  # the small text policy: a folder of random weights
        if values.get("env_id") == "ecpo/ALFWorld-v0" and not os.environ.get("ECPO_DATA_DIR"):
            pytest.skip(f"{preset} plays real ALFWorld games: set ECPO_DATA_DIR")
        from ecpo_train.policies.text import TextPolicy

        model = tmp_path / "text-policy"
        model.mkdir()
        TextPolicy(seed=0).save_pretrained(model)
    tabular = values.get("policy") == "tabular"  # it reads no model (a run refuses a setting it would not read)
    overrides = [*([] if tabular else [f"model={model}"]), "device=cpu", "dtype=float32",
                 "generation_backend=transformers", "env_workers=0", f"run_dir={tmp_path / 'run'}", "val_every=0",
                 "n_groups=2", "group_size=2"]
    train = load_config(preset, overrides)
    if train.policy == "tabular":
        with pytest.raises(ValueError, match="the RLlib engine trains an LLM or text policy"):
            ECPOConfig.from_train_config(train)
        return
    runners = 2 if preset in SMALL else 0
    algo = ECPOConfig.from_train_config(train).env_runners(num_env_runners=runners).build_algo()
    try:
        assert sorted(algo.env_runner_group.healthy_worker_ids()) == list(range(1, runners + 1))
        if train.train_tasks:
            assert algo.ecpo.train_tasks == [str(t) for t in train.train_tasks]
        if preset in SMALL:
            result = algo.train()
            assert result["env_runners"]["num_episodes"] == 4
            assert result["ecpo"]["sampling/num_groups_sampled"] == 2
    finally:
        algo.stop()
