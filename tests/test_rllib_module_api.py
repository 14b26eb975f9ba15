"""The RLlib wing's placement and module API: GPU requests that cannot be met are one ``ValueError`` from
``validate()``; the learner's module, optimizer state and credit stay where ``num_gpus_per_learner`` puts them;
the modules are built the way RLlib 2.60 asks, with no ``RLModule(config=RLModuleConfig)`` notice."""

from __future__ import annotations

import logging

import gymnasium as gym
import numpy as np
import pytest

ray = pytest.importorskip("ray")

from conftest import small_values as run_values
from ray.rllib.core.rl_module.rl_module import RLModuleConfig, RLModuleSpec
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.util.debug import reset_log_once

from ecpo_train.integrations.rllib import ECPOConfig
from ecpo_train.integrations.rllib.base_algorithm import check_gpu_request
from ecpo_train.integrations.rllib.base_module import DEPRECATION_LOGGER, OLD_FORM_FILTER, OLD_FORM_NOTICE
from ecpo_train.runtime.config import make_config


def placement(num_learners=0, per_learner=0.0, num_env_runners=0, per_runner=0.0):
    return type("Placement", (), {"num_learners": num_learners, "num_gpus_per_learner": per_learner,
                                  "num_env_runners": num_env_runners, "num_gpus_per_env_runner": per_runner})()


def refusal(config, gpus) -> str | None:
    try:
        check_gpu_request(config, gpus)
    except ValueError as error:
        return str(error)
    return None


def test_gpu_requests_that_fit_pass_and_those_that_cannot_are_named():
    assert refusal(placement(per_learner=1, num_env_runners=2, per_runner=0.25), gpus=2) is None  # 1 + 0.5
    assert refusal(placement(per_learner=0.5, num_env_runners=2, per_runner=0.25), gpus=1) is None  # one GPU shared
    assert refusal(placement(num_learners=2, per_learner=1, num_env_runners=4), gpus=2) is None  # runners on CPUs
    assert refusal(placement(num_learners=2, per_learner=0), gpus=0) is None  # nothing asked of the GPUs
    # more than there are: the driver's learner counts when num_learners=0
    assert "ask 2 GPUs" in refusal(placement(per_learner=1, num_env_runners=2, per_runner=0.5), gpus=1)
    assert "ask 1 GPUs and this machine has 0" in refusal(placement(per_learner=1), gpus=0)
    # fractions come from one GPU each: 0.6 + 0.6 + 0.5 fit 2 GPUs in sum but not in placement
    assert "need 3 GPU(s)" in refusal(placement(per_learner=0.5, num_env_runners=2, per_runner=0.6), gpus=2)
    assert refusal(placement(per_learner=1, num_env_runners=2, per_runner=0.6), gpus=3) is None
    assert "must be whole" in refusal(placement(per_learner=1.5), gpus=4)


def test_validate_refuses_a_gpu_this_machine_does_not_have_before_any_actor(tiny_model_dir, tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)  # (this test's machine, whatever it has)
    assert not ray.is_initialized()
    llm = ECPOConfig.from_train_config(make_config(run_values(tiny_model_dir, tmp_path))).learners(
        num_learners=1, num_gpus_per_learner=1)
    with pytest.raises(ValueError) as raised:
        llm.validate()
    assert str(raised.value).count("\n") == 0 and "num_gpus_per_learner=1" in str(raised.value)
    runners = ECPOConfig.from_train_config(make_config(run_values(tiny_model_dir, tmp_path))).env_runners(
        num_env_runners=2, num_gpus_per_env_runner=0.5)
    with pytest.raises(ValueError, match="num_gpus_per_env_runner=0.5 x 2 env runner"):
        runners.validate()
    assert not ray.is_initialized()


def test_the_learner_module_is_built_on_the_device_num_gpus_per_learner_asks_for(tiny_model_dir, tmp_path):
    config = ECPOConfig.from_train_config(make_config(run_values(tiny_model_dir, tmp_path, device="auto")))
    assert config.get_default_rl_module_spec().model_config["learner_device"] == "cpu"
    config.learners(num_gpus_per_learner=1)
    assert config.get_default_rl_module_spec().model_config["learner_device"] == "cuda"


def notices_while(build, *, rllib_alone: bool = False) -> list[str]:
    """RLlib's old-form deprecation notices logged while ``build()`` runs (its once-per-process memory cleared
    first); ``rllib_alone``: as RLlib logs them without this project's filter."""
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    logger = logging.getLogger(DEPRECATION_LOGGER)
    logger.addHandler(handler)
    if rllib_alone:
        logger.removeFilter(OLD_FORM_FILTER)
    reset_log_once()
    try:
        build()
    finally:
        logger.removeHandler(handler)
        logger.addFilter(OLD_FORM_FILTER)
    return [text for text in seen if OLD_FORM_NOTICE in text]


def test_modules_are_built_the_rllib_2_60_way_without_the_old_form_notice(tiny_model_dir, tmp_path):
    class Plain(TorchRLModule):  # RLlib's own base, built RLlib's new way
        def _forward(self, batch, **kwargs):
            return {}

    box, choices = gym.spaces.Box(0.0, 1.0, (3 + 2 * 3 + 2,)), gym.spaces.Discrete(2)
    plain = RLModuleSpec(module_class=Plain, observation_space=box, action_space=choices)
    # the notice comes from RLlib's RLModule.__init__ itself, for a module built the new way too
    assert notices_while(plain.build, rllib_alone=True)
    assert notices_while(plain.build) == []
    train = make_config(run_values(tiny_model_dir, tmp_path))
    spec = ECPOConfig.from_train_config(train).get_default_rl_module_spec()
    spec.observation_space, spec.action_space = box, choices
    built: list = []
    assert notices_while(lambda: built.append(spec.build())) == []
    assert not built[0].inference_only and built[0].train_config == train  # the run's TrainConfig, not rebuilt
    with pytest.raises(TypeError):  # the old form is not a path these modules keep
        spec.module_class(RLModuleConfig(observation_space=box, action_space=choices))


@pytest.mark.slow
def test_nothing_is_pinned_to_cuda_where_no_gpu_was_asked_for(tiny_model_dir, tmp_path, ray_session):
    """num_gpus_per_learner=0 (the default): after an iteration the learner's module, its KL reference, AdamW's
    state and the credit's advantages are all CPU arrays and tensors. Building the algorithm (its learner's
    MultiRLModule included) logs no old-form notice."""
    import torch

    config = ECPOConfig.from_train_config(make_config(run_values(tiny_model_dir, tmp_path, device="auto",
                                                                 kl_coef=0.01)))
    built: list = []
    assert notices_while(lambda: built.append(config.env_runners(num_env_runners=0).build_algo())) == []
    algo = built[0]
    try:
        algo.train()
        learner = algo.learner_group._learner
        assert learner._device == torch.device("cpu") or str(learner._device) == "cpu"
        tensors = [*learner.policy_module.parameters(), *learner.reference.model.parameters()]
        optimizer = learner.get_optimizer(learner.module_id)
        tensors += [value for state in optimizer.state.values() for value in state.values() if torch.is_tensor(value)]
        assert len(optimizer.state) > 0 and {t.device.type for t in tensors} == {"cpu"}
        assert isinstance(learner.last_advantages, np.ndarray) and np.any(learner.last_advantages != 0)
        assert learner.policy_module.policy.device in ("cpu", torch.device("cpu"))
    finally:
        algo.stop()
