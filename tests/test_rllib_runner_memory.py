"""What an RLlib env runner holds: one frozen copy of the weights, no optimizer, no KL reference; a vLLM runner
without LoRA no transformers copy at all (its engine holds the weights), one under LoRA says why it keeps one.

Runners are built in process without Ray (the tiny random Qwen2); vLLM cannot run here, so ``RecordingEngine``
stands in for the engine only and records the weights the runner hands it.
"""

from __future__ import annotations

import gc

import pytest
import torch

pytest.importorskip("ray")

from conftest import small_values

from ecpo_train.integrations.rllib import ECPOConfig, LLMEnvRunner
from ecpo_train.integrations.rllib.llm.module import TRAIN_CONFIG, CausalLMRLModule
from ecpo_train.runtime.config import make_config


def alive(kind: type) -> list:
    gc.collect()
    return [o for o in gc.get_objects() if issubclass(type(o), kind)]


def model_parameter_count(model_dir) -> int:
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        return sum(p.numel() for p in AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir))
                   .parameters())


def learner_module(train) -> CausalLMRLModule:
    return CausalLMRLModule(observation_space=None, action_space=None, inference_only=False,
                            model_config={TRAIN_CONFIG: train})


def test_a_runner_holds_one_frozen_copy_of_the_weights_and_no_optimizer_or_reference(tiny_model_dir, tmp_path):
    """kl_coef > 0, so a learner of this config holds a reference model and AdamW; its runner holds neither, its
    parameters never take gradients, and it samples and loads the learner's weights as before."""
    from transformers import GenerationMixin  # a causal LM (its inner decoder stack is not one)

    train = make_config(small_values(tiny_model_dir, tmp_path))
    models_before = {id(m) for m in alive(GenerationMixin)}
    optimizers_before = {id(o) for o in alive(torch.optim.Optimizer)}
    runner = LLMEnvRunner(config=ECPOConfig.from_train_config(train))
    try:
        new_models = [m for m in alive(GenerationMixin) if id(m) not in models_before]
        assert new_models == [runner.policy.model]  # no reference copy beside it
        assert [o for o in alive(torch.optim.Optimizer) if id(o) not in optimizers_before] == []
        params = list(runner.module.parameters())
        assert sum(p.numel() for p in params) == model_parameter_count(tiny_model_dir)
        assert [name for name, p in runner.module.named_parameters() if p.requires_grad] == []

        trained = learner_module(train)
        with torch.no_grad():
            for p in trained.parameters():
                p.add_(0.01)
        runner.set_state({"rl_module": {"default_policy": trained.get_state()}, "weights_seq_no": 1})
        sampled = runner.sample_groups(runner.task_ids[:1], env_seed=3)
        assert len(sampled["episodes"]) == train.group_size
        for (name, mine), theirs in zip(runner.module.named_parameters(), trained.parameters()):
            assert torch.equal(mine, theirs), name
            assert not mine.requires_grad and mine.grad is None, name
    finally:
        runner.stop()


def test_bfloat16_weights_sync_in_bfloat16(tiny_model_dir, tmp_path):
    """A bfloat16 learner's state (numpy has no bfloat16: RLlib's own conversion raises on it) reaches a runner
    weight for weight, in bfloat16 (no float32 copy on the way)."""
    train = make_config(small_values(tiny_model_dir, tmp_path, dtype="bfloat16"))
    learner = learner_module(train)
    with torch.no_grad():
        for p in learner.parameters():
            p.add_(0.5)
    state = learner.get_state()
    assert {value.dtype for value in state.values()} == {torch.bfloat16}
    runner_module = CausalLMRLModule(observation_space=None, action_space=None, inference_only=True,
                                     model_config={TRAIN_CONFIG: train})
    runner_module.set_state(state)
    for (name, mine), theirs in zip(runner_module.named_parameters(), learner.parameters()):
        assert mine.dtype == torch.bfloat16 and torch.equal(mine, theirs), name


class RecordingEngine:
    """Test double for the vLLM engine (vLLM cannot run here): records what the runner loads into it."""

    started: list[RecordingEngine] = []

    def __init__(self, model_path, **kwargs):
        self.model_path, self.kwargs, self.loaded = model_path, kwargs, []
        RecordingEngine.started.append(self)

    def sync_weights(self, model_or_state_dict):
        from ecpo_train.policies.vllm_backend import named_tensors

        self.loaded.append({name: tensor.clone() for name, tensor in named_tensors(model_or_state_dict)})


@pytest.fixture
def recording_engine(monkeypatch):
    import ecpo_train.policies.vllm_backend as vllm_backend

    RecordingEngine.started = []
    monkeypatch.setattr(vllm_backend, "VLLMBackend", RecordingEngine)
    return RecordingEngine


def test_a_vllm_runner_keeps_no_transformers_copy(tiny_model_dir, tmp_path, recording_engine):
    """Generation, its log-probs (the rows' old log-probs) and the weight sync all go through the engine; the
    learner recomputes the current log-probs on its own module. So the runner's policy has no transformers
    model, and the learner's full state goes straight into the engine."""
    from transformers import PreTrainedModel

    train = make_config(small_values(tiny_model_dir, tmp_path, policy_mode="generate", generation_backend="vllm",
                                     max_response_length=8))
    models_before = {id(m) for m in alive(PreTrainedModel)}
    runner_module = CausalLMRLModule(observation_space=None, action_space=None, inference_only=True,
                                     model_config={TRAIN_CONFIG: train})
    assert [m for m in alive(PreTrainedModel) if id(m) not in models_before] == []
    assert runner_module.policy.model is None and list(runner_module.parameters()) == []
    (engine,) = recording_engine.started
    assert engine.model_path == str(tiny_model_dir)

    learner = learner_module(train)  # transformers only: the learner starts no engine
    assert len(recording_engine.started) == 1
    runner_module.set_state(learner.get_state())
    runner_module.policy.sync_generation_weights()  # what LLMEnvRunner.set_state calls next: nothing to resend
    (loaded,) = engine.loaded
    expected = learner.policy.model.state_dict()
    assert sorted(loaded) == sorted(expected)
    assert all(torch.equal(loaded[name], expected[name]) for name in expected)


def test_a_vllm_runner_under_lora_keeps_its_copy_and_says_why(tiny_model_dir, tmp_path, recording_engine, capfd):
    pytest.importorskip("peft")
    train = make_config(small_values(tiny_model_dir, tmp_path, policy_mode="generate", generation_backend="vllm",
                                     max_response_length=8, lora={"r": 4, "alpha": 8, "dropout": 0.0}))
    runner = LLMEnvRunner(config=ECPOConfig.from_train_config(train))
    try:
        assert runner.policy.model is not None
        assert [name for name, p in runner.module.named_parameters() if p.requires_grad] == []
    finally:
        runner.stop()
    err = capfd.readouterr().err
    assert err.count("keeps a transformers copy of the model") == 1
    assert ("the learner sends the LoRA adapter only, and vLLM needs the merged weights (base + adapter), "
            "computed here") in err
