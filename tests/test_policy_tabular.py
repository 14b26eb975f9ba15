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


def test_resume_after_growth_restores_optimizer_on_the_new_table():
    policy = TabularSoftmaxPolicy(seed=0, initial_capacity=2)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=0.1)
    out = policy.act([ctx("s", ["a", "b", "c", "d"])])  # grows to 4
    policy.grow_optimizer_state(optimizer)
    (-policy.logprobs(out.prompt_ids, out.response_ids)[0].sum()).backward()
    optimizer.step()
    saved_policy, saved_opt = policy.state_dict(), optimizer.state_dict()

    fresh = TabularSoftmaxPolicy(seed=0, initial_capacity=2)
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=0.1)
    fresh.load_state_dict(saved_policy)
    fresh_opt.load_state_dict(saved_opt)
    fresh.grow_optimizer_state(fresh_opt)
    assert fresh_opt.param_groups[0]["params"][0] is fresh.logits
    assert torch.equal(fresh_opt.state[fresh.logits]["exp_avg"], optimizer.state[policy.logits]["exp_avg"])


def test_inverse_cdf_draws_reproduce_the_distribution_and_skip_impossible_actions():
    from ecpo_train.policies.base import inverse_cdf_index

    probs = torch.tensor([0.2, 0.0, 0.5, 0.3])
    n = 10_000
    counts = torch.zeros(4)
    for j in range(n):  # an even grid of draws: each action's share is its probability to 1/n
        counts[inverse_cdf_index(probs, (j + 0.5) / n)] += 1
    assert torch.allclose(counts / n, probs, atol=1 / n)
    assert inverse_cdf_index(probs, 0.0) == 0 and inverse_cdf_index(probs, 0.9999999) == 3
    assert inverse_cdf_index(probs, 0.2) == 2  # the zero-probability action is never picked, even at its edge


def test_shared_draws_make_the_choice_independent_of_the_random_stream():
    """With a draw per context the tabular policy's choice is the draw's, whatever its own generator says."""
    contexts = [StepContext("ecpo/DivergentAnchor-v0", "t", 0, [], "obs", ["a", "b", "c"], "s", draw=d)
                for d in (0.1, 0.5, 0.9)]
    choices = {tuple(TabularSoftmaxPolicy(seed=seed).act(contexts).actions) for seed in range(5)}
    assert choices == {("a", "b", "c")}  # uniform start: thirds
