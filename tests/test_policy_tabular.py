"""Tabular softmax policy: zero-init uniform start, act/logprobs agreement, lazy growth with Adam state."""

import math

import torch

from ecpo_train.policies.base import StepContext
from ecpo_train.policies.tabular import TabularSoftmaxPolicy


def ctx(state, actions):
    return StepContext("ecpo/DivergentAnchor-v0", "t", 0, [], "obs", list(actions), state)


def test_uniform_start_and_act_logprobs_agree():
    policy = TabularSoftmaxPolicy(seed=0)
    out = policy.act([ctx("s", ["a", "b", "c"]), ctx("u", ["x", "y"])])
    assert abs(out.logprobs[0][0] - math.log(1 / 3)) < 1e-6
    assert abs(out.logprobs[1][0] - math.log(1 / 2)) < 1e-6
    logp, mask, entropy = policy.logprobs(out.prompt_ids, out.response_ids, with_entropy=True)
    assert torch.allclose(logp[:, 0], torch.tensor([out.logprobs[0][0], out.logprobs[1][0]]))
    assert torch.allclose(entropy[:, 0], torch.tensor([math.log(3), math.log(2)]), atol=1e-6)
    assert mask.tolist() == [[1.0], [1.0]]


def test_gradient_step_raises_the_chosen_action_and_growth_keeps_adam_state():
    policy = TabularSoftmaxPolicy(seed=0, initial_capacity=2)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=0.5, weight_decay=0.0)
    first = policy.act([ctx("s", ["a", "b"])])
    logp, _, _ = policy.logprobs(first.prompt_ids, first.response_ids)
    (-logp.sum()).backward()
    optimizer.step()
    probs = policy.action_probabilities("s", ["a", "b"])
    assert probs[first.actions[0]] > 0.6
    policy.act([ctx("t", ["c", "d", "e"])])  # 5 slots > capacity 2: the table grows
    assert policy.logits.numel() >= 5
    optimizer.zero_grad()
    logp, _, _ = policy.logprobs(first.prompt_ids, first.response_ids)
    (-logp.sum()).backward()
    policy.grow_optimizer_state(optimizer)
    optimizer.step()  # would raise on a shape mismatch
    assert abs(policy.action_probabilities("t", ["c", "d", "e"])["c"] - 1 / 3) < 1e-6  # untouched state
    state = policy.state_dict()
    fresh = TabularSoftmaxPolicy(seed=1)
    fresh.load_state_dict(state)
    assert fresh.slots == policy.slots and torch.equal(fresh.logits, policy.logits)
