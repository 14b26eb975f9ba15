"""Sampled replies are cut after their first end-of-sequence token: the vectorised cut of ``TransformersPolicy.sample``
gives exactly the rows (tokens and log-probs) of the element-wise loop it replaced, for every placement of EOS."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ecpo_train.policies.llm import TransformersPolicy, cut_at_first_eos

EOS = torch.tensor([5, 7])


def loop_reference(all_tokens: torch.Tensor, all_logps: torch.Tensor, eos_ids: torch.Tensor):
    """The cut as ``sample`` did it before it was vectorised (one Python read per token), kept verbatim: the
    reference (timed against the vectorised cut at commit ef1fb73, ``benchmarks/results/eos_cut.json``)."""
    responses, logprobs = [], []
    eos = set(eos_ids.tolist())
    for row in range(all_tokens.shape[0]):
        length = all_tokens.shape[1]
        for t in range(all_tokens.shape[1]):
            if int(all_tokens[row, t]) in eos:
                length = t + 1
                break
        responses.append(all_tokens[row, :length].tolist())
        logprobs.append(all_logps[row, :length].tolist())
    return responses, logprobs


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 6).flatmap(lambda rows: st.integers(1, 9).flatmap(
    lambda width: st.lists(st.lists(st.integers(0, 8), min_size=width, max_size=width), min_size=rows,
                           max_size=rows))))
def test_the_cut_equals_the_loop_it_replaced(token_rows):
    tokens = torch.tensor(token_rows)
    logps = -torch.rand(tokens.shape)
    assert cut_at_first_eos(tokens, logps, EOS) == loop_reference(tokens, logps, EOS)


def test_the_worked_cases():
    tokens = torch.tensor([[1, 5, 7, 2], [7, 1, 1, 1], [1, 2, 3, 4], [1, 2, 3, 5]])
    logps = -torch.arange(16, dtype=torch.float32).reshape(4, 4) / 8
    responses, logprobs = cut_at_first_eos(tokens, logps, EOS)
    assert responses == [[1, 5], [7], [1, 2, 3, 4], [1, 2, 3, 5]]
    assert logprobs == [[0.0, -0.125], [-0.5], [-1.0, -1.125, -1.25, -1.375], [-1.5, -1.625, -1.75, -1.875]]


def test_sampled_replies_end_at_their_first_eos(tiny_model_dir):
    policy = TransformersPolicy(str(tiny_model_dir), env_name="ecpo/ALFWorldGen-v0", max_response_length=6)
    eos = set(policy.eos_token_ids.tolist())
    policy.eos_token_ids = torch.tensor(sorted(eos | {11, 13, 17}))  # frequent stops: every placement shows up
    torch.manual_seed(0)
    responses, logprobs = policy.sample([[1, 2, 3], [4, 5], [1, 2, 3]] * 8, temperature=1.0)
    stops = set(policy.eos_token_ids.tolist())
    for response, logp in zip(responses, logprobs):
        assert len(response) == len(logp) >= 1
        assert not stops & set(response[:-1])
        assert response[-1] in stops or len(response) == 6
