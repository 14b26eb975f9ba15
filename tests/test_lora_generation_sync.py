"""LoRA + a generation engine (vLLM): the weights sent are the merged model under the plain model's names.

vLLM cannot run here (no GPU); ``RecordingBackend`` stands in for the engine only and records what
``TransformersPolicy.sync_generation_weights`` hands it. The code under test (``generation_weights`` /
``lora.merged_state_dict``) runs for real against peft's own ``merge_and_unload``.
"""

import copy

import pytest
import torch
from conftest import make_policy

pytest.importorskip("peft")

LORA = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj", "up_proj", "down_proj"]}


class RecordingBackend:
    """Test double for the vLLM engine: keeps every ``sync_weights`` argument (as VLLMBackend reads it)."""

    def __init__(self):
        self.received = []

    def sync_weights(self, model_or_state_dict):
        from ecpo_train.policies.vllm_backend import named_tensors

        self.received.append({name: tensor.clone() for name, tensor in named_tensors(model_or_state_dict)})


def trained_lora_policy(model_dir):
    """A LoRA policy whose adapter is non-zero (B random), as after some updates."""
    policy = make_policy(model_dir, lora=LORA)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in policy.model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.05)
    return policy


def test_lora_sync_sends_merged_weights_under_the_plain_names(tiny_model_dir):
    policy = trained_lora_policy(tiny_model_dir)
    training_state = {k: v.clone() for k, v in policy.model.state_dict().items()}
    backend = policy.backend = RecordingBackend()

    policy.sync_generation_weights()

    (sent,) = backend.received
    plain = make_policy(tiny_model_dir).model.state_dict()
    assert sorted(sent) == sorted(plain)  # no base_layer / lora_A / lora_B names
    expected = copy.deepcopy(policy.lora_model).merge_and_unload().state_dict()
    assert sorted(expected) == sorted(plain)
    adapted = [k for k in sent if any(f"{m}.weight" in k for m in LORA["target_modules"])]
    assert adapted
    for name, tensor in sent.items():
        torch.testing.assert_close(tensor, expected[name], rtol=0, atol=1e-6)
    for name in adapted:  # the adapter really is in what was sent
        assert not torch.equal(sent[name], plain[name])
    for name in set(sent) - set(adapted):
        assert torch.equal(sent[name], plain[name])
    # the training model is untouched: same keys (adapter layers still in), bit-identical tensors, not merged
    after = policy.model.state_dict()
    assert sorted(after) == sorted(training_state)
    assert all(torch.equal(after[k], training_state[k]) for k in after)
    assert any("lora_A" in k for k in after)


def test_plain_sync_sends_the_model_state_dict(tiny_model_dir):
    policy = make_policy(tiny_model_dir)
    backend = policy.backend = RecordingBackend()
    policy.sync_generation_weights()
    (sent,) = backend.received
    state = policy.model.state_dict()
    assert sorted(sent) == sorted(state) and all(torch.equal(sent[k], state[k]) for k in state)


def test_merged_generation_weights_score_like_the_lora_model(tiny_model_dir):
    """A plain model loaded with the sent weights gives the LoRA policy's log-probs (what vLLM would sample)."""
    policy = trained_lora_policy(tiny_model_dir)
    plain = make_policy(tiny_model_dir)
    plain.model.load_state_dict(policy.generation_weights())
    prompts, responses = [[1, 2, 3, 4], [5, 6, 7]], [[8, 9], [10, 11, 12]]
    with torch.no_grad():
        want, mask, _ = policy.logprobs(prompts, responses)
        got, _, _ = plain.logprobs(prompts, responses)
    torch.testing.assert_close(got * mask, want * mask, rtol=0, atol=1e-5)
