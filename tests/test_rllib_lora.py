"""LoRA on the RLlib LLM path: ECPOConfig.training(lora=...) -> learner module, runners, weight sync, KL reference."""

import numpy as np
import pytest
import torch

ray = pytest.importorskip("ray")
pytest.importorskip("peft")

from ecpo_train.integrations.rllib import ECPOConfig, split_groups

ENV_ID = "ecpo/DivergentAnchor-v0"
LORA = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj", "up_proj"]}
RUNNER_KWARGS = {"env_kwargs": {"depth": 1, "num_tasks": 1}, "group_size": 2, "num_groups": 1,
                 "max_prompt_tokens": 192, "max_new_tokens": 8, "seed": 0}


@pytest.fixture(scope="module")
def ray_session():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def on_learners(learner_group, func):
    results = learner_group.foreach_learner(func)
    return [r.get() if hasattr(r, "get") else r for r in results]


def test_config_lora_is_validated_and_filled_in():
    from ecpo_train.policies.lora import DEFAULT_TARGET_MODULES

    assert ECPOConfig().lora == {}
    config = ECPOConfig().training(lora={"r": 16, "alpha": 32})
    assert config.lora == {"r": 16, "alpha": 32, "dropout": 0.0, "target_modules": list(DEFAULT_TARGET_MODULES)}
    assert ECPOConfig().training(lora=None).lora == {}
    with pytest.raises(ValueError, match="unknown lora key"):
        ECPOConfig().training(lora={"rank": 8})
    with pytest.raises(ValueError, match="positive integer"):
        ECPOConfig().training(lora={"r": 0})
    with pytest.raises(ValueError, match="candidate scorer"):
        ECPOConfig().environment(ENV_ID).training(lora={"r": 4}).validate()


def test_runner_lora_settings_and_reference_must_agree(tiny_model_dir, tmp_path):
    from ecpo_train.integrations.rllib import LLMGroupRunner
    from ecpo_train.policies.lora import AdapterOffReference

    runner = LLMGroupRunner(ENV_ID, tiny_model_dir, lora=LORA, reference_model_path=tiny_model_dir, **RUNNER_KWARGS)
    assert runner.policy.lora_model is not None and isinstance(runner.reference, AdapterOffReference)
    runner.configure_lora(LORA)  # the same settings: nothing to do
    with pytest.raises(ValueError, match="built with LoRA"):
        runner.configure_lora({"r": 8})
    with pytest.raises(ValueError, match="built with LoRA"):
        runner.configure_lora(None)
    # full-model weights cannot silently load into an adapter runner (and the reverse)
    plain = LLMGroupRunner(ENV_ID, tiny_model_dir, **RUNNER_KWARGS)
    with pytest.raises(ValueError, match="do not fit"):
        runner.set_weights(plain.get_weights())
    with pytest.raises(ValueError, match="do not fit"):
        plain.set_weights(runner.get_weights())
    assert runner.get_weights() and all("lora_" in k for k in runner.get_weights())
    # a plain runner takes the adapter later (LLMTrainer does this); its reference becomes the adapter-off model
    plain_ref = LLMGroupRunner(ENV_ID, tiny_model_dir, reference_model_path=tiny_model_dir, **RUNNER_KWARGS)
    plain_ref.configure_lora(LORA)
    assert plain_ref.describe()["lora"] == runner.describe()["lora"]
    assert isinstance(plain_ref.reference, AdapterOffReference)
    with pytest.raises(ValueError, match="adapter off"):
        LLMGroupRunner(ENV_ID, tiny_model_dir, lora=LORA, reference_model_path=tmp_path, **RUNNER_KWARGS)


def test_llm_trainer_with_lora_trains_only_the_adapter_and_syncs_runners(tiny_model_dir, ray_session):
    from ecpo_train.integrations.rllib import LLMGroupRunner, LLMTrainer
    from ecpo_train.policies.llm import TransformersPolicy
    from ecpo_train.policies.lora import AdapterOffReference, is_adapter_key

    # runners built without lora: the config's settings reach them through LLMTrainer
    runner = LLMGroupRunner(ENV_ID, tiny_model_dir, runner_id=0, reference_model_path=tiny_model_dir,
                            **RUNNER_KWARGS)
    remote_runner = ray.remote(LLMGroupRunner).options(num_cpus=0).remote(
        ENV_ID, tiny_model_dir, runner_id=1, reference_model_path=tiny_model_dir, **RUNNER_KWARGS)
    # the tiny model's replies are malformed (equal returns -> zero advantages); the entropy bonus still moves
    # the adapter; KL to the adapter-off reference is on
    config = ECPOConfig().training(group_size=2, groups_per_batch=2, credit={"d_min": 1}, lr=1e-3, num_epochs=1,
                                   entropy_coeff=0.01, use_kl_loss=True, kl_coeff=0.05, lora=LORA)
    trainer = LLMTrainer(config, [runner, remote_runner])
    group = trainer.learner_group
    assert ray.get(remote_runner.describe.remote())["lora"] == config.lora == runner.lora
    assert isinstance(runner.reference, AdapterOffReference)

    def learner_state(learner):
        return {k: v.detach().cpu().clone() for k, v in learner.module["default_policy"].state_dict().items()}

    def optimizer_params(learner):
        module = learner.module["default_policy"]
        names = {id(p): n for n, p in module.named_parameters()}
        optim = learner.get_optimizer("default_policy")
        return [names[id(p)] for g in optim.param_groups for p in g["params"]]

    (trained,) = on_learners(group, optimizer_params)
    assert trained and all(is_adapter_key(n) for n in trained)  # the optimizer holds the adapter only
    (before,) = on_learners(group, learner_state)
    assert any("base_layer" in k for k in before)  # the learner's model carries the adapter
    sent = group.get_weights()["default_policy"]
    assert sent and all(is_adapter_key(k) for k in sent)  # weight sync: adapter tensors only

    out = trainer.train_iteration()
    episodes, stats = out["episodes"], out["learner"]
    assert len(episodes) == 4 and len(split_groups(episodes, 2)) == 2
    # the runners sampled with the learner's (synced) adapter: first ratio 1; the reference = initial policy
    assert stats["default_policy"]["ratio_max_dev"].peek() < 1e-4
    for episode in episodes:
        np.testing.assert_allclose(np.stack(episode.get_extra_model_outputs("ref_token_logp")),
                                   np.stack(episode.get_extra_model_outputs("token_logp")), atol=1e-4)

    (after,) = on_learners(group, learner_state)
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert changed and all(is_adapter_key(k) for k in changed)  # only adapter weights moved
    assert any("lora_B" in k for k in changed)

    # the runners now hold the learner's adapter: same weights, same scores
    learner_weights = group.get_weights()["default_policy"]
    remote_weights = ray.get(remote_runner.get_weights.remote())
    local_weights = runner.get_weights()
    assert sorted(learner_weights) == sorted(remote_weights) == sorted(local_weights)
    for key, value in learner_weights.items():
        assert np.array_equal(np.asarray(value), np.asarray(remote_weights[key]))
        assert np.array_equal(np.asarray(value), np.asarray(local_weights[key]))
    prompts = [e.get_observations(0)[e.get_extra_model_outputs("prompt_mask", 0) > 0].tolist() for e in episodes]
    replies = [e.get_actions(0)[e.get_extra_model_outputs("response_mask", 0) > 0].tolist() for e in episodes]

    def learner_scores(learner):
        with torch.no_grad():
            logp, _, _ = learner.module["default_policy"].policy.logprobs(prompts, replies)
        return logp.cpu()

    (learner_logp,) = on_learners(group, learner_scores)
    with torch.no_grad():
        runner_logp, mask, _ = runner.policy.logprobs(prompts, replies)
        ref_logp, _, _ = runner.reference.logprobs(prompts, replies)
        base_logp, _, _ = TransformersPolicy(str(tiny_model_dir), env_name=ENV_ID).logprobs(prompts, replies)
    torch.testing.assert_close(runner_logp, learner_logp, rtol=0, atol=1e-6)
    # the KL reference is the adapter-off model: the base model's scores, not the trained policy's
    torch.testing.assert_close(ref_logp, base_logp, rtol=0, atol=1e-6)
    assert not torch.equal(runner_logp * mask, base_logp * mask)
    ray.kill(remote_runner)
