"""Shared prompt prefill in free generation (``TransformersPolicy(share_prefix=True)``).

The N copies of a group hold the same prompt at the first step: it is prefilled once and the KV cache rows
are expanded to every copy. With the same random stream, the sampled tokens and their log-probs are exactly
those of the unshared path, and the prefill forward sees only the distinct prompts.
"""

from __future__ import annotations

import pytest
import torch
from conftest import TOKENIZER_DIR

from ecpo_train.policies.base import StepContext

ENV_ID = "ecpo/DivergentAnchor-v0"


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    if not (TOKENIZER_DIR / "tokenizer.json").exists():
        pytest.skip(f"Qwen2.5 tokenizer not found at {TOKENIZER_DIR}; set ECPO_TOKENIZER_DIR")
    from ecpo_train.policies.llm import TransformersPolicy
    from ecpo_train.runtime.models import write_tiny_model

    folder = write_tiny_model(tmp_path_factory.mktemp("tiny"), tokenizer_path=TOKENIZER_DIR, seed=0)
    return TransformersPolicy(str(folder), env_name=ENV_ID, max_response_length=12, history_length=0,
                              prompt_style="compact")


def prompts(policy) -> list[list[int]]:
    """[p, p, p, q]: three copies of one group at its first step, and another group's (longer) prompt."""
    def context(room: int, doors: list[str]) -> StepContext:
        return StepContext(env_name=ENV_ID, task="walk through all 4 rooms", step_count=room, history=[],
                           observation=f"room {room + 1}/4. doors: {', '.join(d.split()[1] for d in doors)}.",
                           admissible_actions=doors, state_key=f"corridor0:room{room}")

    p, q = policy.encode_prompts([context(0, ["open red door", "open blue door"]),
                                  context(2, ["open teal door", "open gold door", "open pink door"])])
    assert p != q and len(p) != len(q)
    return [p, p, p, q]


def sample(policy, rows, temperature, share_prefix, seed=7):
    policy.share_prefix = share_prefix
    try:
        torch.manual_seed(seed)
        return policy.sample(rows, temperature)
    finally:
        policy.share_prefix = True


@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_shared_prefill_samples_exactly_what_the_unshared_path_samples(policy, temperature):
    rows = prompts(policy)
    shared = sample(policy, rows, temperature, share_prefix=True)
    unshared = sample(policy, rows, temperature, share_prefix=False)
    assert shared[0] == unshared[0]
    assert shared[1] == unshared[1]  # float lists compared exactly
    if temperature > 0:  # the random stream really matters: another seed draws other tokens
        assert sample(policy, rows, temperature, share_prefix=True, seed=8)[0] != shared[0]


def test_prefill_runs_on_the_distinct_prompts_only(policy):
    rows = prompts(policy)
    batch_sizes = []
    handle = policy.model.register_forward_pre_hook(
        lambda module, args, kwargs: batch_sizes.append(kwargs["input_ids"].shape), with_kwargs=True)
    try:
        sample(policy, rows, 1.0, share_prefix=True)
        prefill_shared = batch_sizes[0]
        batch_sizes.clear()
        sample(policy, rows, 1.0, share_prefix=False)
        prefill_unshared = batch_sizes[0]
    finally:
        handle.remove()
    width = max(len(r) for r in rows)
    assert tuple(prefill_shared) == (2, width)
    assert tuple(prefill_unshared) == (4, width)


def test_all_copies_identical_and_all_distinct(policy):
    p, _, _, q = prompts(policy)
    for rows in ([p, p, p, p], [p, q]):
        assert sample(policy, rows, 1.0, share_prefix=True) == sample(policy, rows, 1.0, share_prefix=False)
