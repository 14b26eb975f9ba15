"""LoRA on the RLlib LLM path: the adapter is what the learner trains, what its optimizer holds, what weight
sync carries to the env runners, and switching it off is the KL reference."""

import numpy as np
import pytest
import torch

ray = pytest.importorskip("ray")
pytest.importorskip("peft")

from ecpo_train.integrations.rllib import ECPOConfig
from ecpo_train.runtime.config import make_config

ENV_ID = "ecpo/DivergentAnchor-v0"
LORA = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj", "up_proj"]}


def lora_run(model_dir, tmp_path, **changes):
    values = {
        "run_dir": str(tmp_path / "run"),
        "policy": "llm",
        "policy_mode": "score",
        "model": str(model_dir),
        "device": "cpu",
        "env_id": ENV_ID,
        "env_kwargs": {"num_tasks": 2, "depth": 3, "rare_prob": [0.4, 0.7]},
        "n_groups": 2,
        "group_size": 4,
        "history_length": 0,
        "prompt_style": "compact",
        "val_every": 0,
        "credit": {"d_min": 1},
        "lr": 1e-2,
        "kl_coef": 0.05,
        "num_epochs": 1,
        "seed": 1,
        "lora": LORA,
        "tensorboard": False,
        "progress": False,
    }
    return ECPOConfig.from_train_config(make_config(values | changes))


def test_config_lora_is_validated_and_filled_in():
    from ecpo_train.policies.lora import DEFAULT_TARGET_MODULES

    assert ECPOConfig().lora == {}
    config = ECPOConfig().training(lora={"r": 16, "alpha": 32})
    assert config.lora == {
        "r": 16,
        "alpha": 32,
        "dropout": 0.0,
        "target_modules": list(DEFAULT_TARGET_MODULES),
    }
    assert ECPOConfig().training(lora=None).lora == {}
    with pytest.raises(ValueError, match="unknown lora key"):
        ECPOConfig().training(lora={"rank": 8})
    with pytest.raises(ValueError, match="positive integer"):
        ECPOConfig().training(lora={"r": 0})
    with pytest.raises(ValueError, match="ECPO trains an LLM"):
        ECPOConfig().environment(ENV_ID).training(lora={"r": 4}).validate()


def test_adapter_and_full_weights_never_load_into_each_other(tiny_model_dir, tmp_path):
    from ecpo_train.integrations.rllib.llm.module import TRAIN_CONFIG, CausalLMRLModule

    def module(config):
        return CausalLMRLModule(
            observation_space=None,
            action_space=None,
            inference_only=True,
            model_config={TRAIN_CONFIG: config.to_train_config()},
        )

    adapted, plain = (
        module(lora_run(tiny_model_dir, tmp_path)),
        module(lora_run(tiny_model_dir, tmp_path, lora={})),
    )
    assert adapted.get_state() and all("lora_" in k for k in adapted.get_state())
    with pytest.raises(ValueError, match="do not fit"):
        adapted.set_state(plain.get_state())
    with pytest.raises(ValueError, match="do not fit"):
        plain.set_state(adapted.get_state())


@pytest.mark.slow
def test_lora_run_trains_only_the_adapter_and_syncs_it_to_the_runners(tiny_model_dir, tmp_path, ray_session):
    from ecpo_train.policies.lora import AdapterOffReference, is_adapter_key

    algo = lora_run(tiny_model_dir, tmp_path).env_runners(num_env_runners=1).build_algo()
    try:
        learner = algo.learner_group._learner
        module = learner.policy_module
        names = {id(p): n for n, p in module.named_parameters()}
        optimized = [
            names[id(p)] for g in learner.get_optimizer("default_policy").param_groups for p in g["params"]
        ]
        assert optimized and all(is_adapter_key(n) for n in optimized)  # AdamW holds the adapter only
        assert isinstance(
            learner.reference, AdapterOffReference
        )  # the KL reference: the adapter switched off
        sent = algo.learner_group.get_weights()["default_policy"]
        assert sent and all(is_adapter_key(k) for k in sent)  # weight sync: adapter tensors only
        before = {k: v.detach().clone() for k, v in module.state_dict().items()}
        result = algo.train()["ecpo"]
        # one mini-batch at theta_old: the runner sampled with the learner's adapter (ratio 1), and a fresh adapter
        # (B = 0) is the adapter-off reference itself (KL 0)
        assert result["update/optimizer_steps"] == 1 and result["update/ratio_max_dev"] < 1e-4
        assert result["update/kl"] < 1e-6
        after = module.state_dict()
        changed = [k for k in before if not torch.equal(before[k], after[k])]
        assert changed and all(is_adapter_key(k) for k in changed)  # only adapter weights moved
        learner_weights = algo.learner_group.get_weights()["default_policy"]
        (runner_state,) = algo.env_runner_group.foreach_env_runner(
            lambda r: r.get_state(), local_env_runner=False
        )
        runner_weights = runner_state["rl_module"]["default_policy"]
        assert sorted(runner_weights) == sorted(learner_weights)
        for key, value in learner_weights.items():  # the runner samples with the learner's adapter
            assert np.array_equal(np.asarray(value), np.asarray(runner_weights[key]))
    finally:
        algo.stop()
