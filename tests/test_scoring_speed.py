"""The fast scoring update computes the gradient of the plain objective, and spends nothing on rows without one.

The reference gradient is the definition, computed the slow way: one plain causal forward per (prompt,
candidate), the candidate's summed token log-prob as its score, the tempered softmax over candidates, and
the clipped surrogate's token mean over *every* row. The fast path (contexts packed without padding, one
forward per distinct context, zero-advantage rows skipped, several micro-batches) must give the same
gradient. Also: an update whose rows all carry no gradient leaves the weights and AdamW untouched; the
exploration mixture is the policy the learner scores (ratio 1); the packers and the thread chooser.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ecpo_train.core.loss import UpdateSettings, equal_return_rows, policy_update
from ecpo_train.core.micro_batches import pack_micro_batches
from ecpo_train.core.objective import clipped_surrogate
from ecpo_train.policies.base import StepContext

ENV_ID = "ecpo/DivergentAnchor-v0"
DOORS = ["open red door", "open blue door", "open green door", "open the small yellow door on the left"]


@pytest.fixture(scope="module")
def scorer(tiny_model_dir):
    from ecpo_train.policies.scoring import ScoringPolicy

    return ScoringPolicy(str(tiny_model_dir), env_name=ENV_ID, history_length=0, prompt_style="compact")


def context(room: int, n_doors: int, note: str = "") -> StepContext:
    return StepContext(env_name=ENV_ID, task="walk through all 4 rooms" + note, step_count=room, history=[],
                       observation=f"room {room + 1}/4. doors: red, blue, green.",
                       admissible_actions=DOORS[:n_doors], state_key=f"c:{room}:{n_doors}:{note}")


def rollout_rows(scorer):
    """Rows of unequal lengths and candidate counts, with repeated contexts (as a group's copies give)."""
    torch.manual_seed(1)
    contexts = [context(0, 3)] * 3 + [context(1, 4, " and then report back to the captain")] * 2 \
        + [context(2, 2)] + [context(3, 4)] * 2 + [context(1, 3, " quickly")]
    out = scorer.act(contexts, temperature=1.0)
    return out.prompt_ids, out.response_ids


def plain_chosen_logp(scorer, packed, chosen: int, temperature: float) -> torch.Tensor:
    from ecpo_train.policies.scoring import unpack_candidates

    prompt, candidates = unpack_candidates(packed)
    scores = []
    for cand in candidates:  # a plain causal forward; the vocabulary projection only where a token is predicted
        hidden = scorer.model.base_model(input_ids=torch.tensor([list(prompt) + list(cand)])).last_hidden_state[0]
        logits = scorer.model.get_output_embeddings()(hidden[len(prompt) - 1 : -1]).float()
        logp = torch.log_softmax(logits, -1)
        scores.append(sum(logp[j, cand[j]] for j in range(len(cand))))
    return scorer.log_policy(torch.stack(scores), temperature)[chosen]


def gradients(scorer) -> list[torch.Tensor]:
    return [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in scorer.parameters()]


@pytest.mark.parametrize("epsilon", [0.0, 0.3])
def test_fast_update_gradient_equals_the_plain_objective(scorer, epsilon):
    scorer.explore_epsilon = epsilon
    try:
        prompts, responses = rollout_rows(scorer)
        n = len(prompts)
        temperature, clip = 0.7, 0.2
        advantages = torch.tensor([0.0, 1.3, -0.4, 0.0, 0.9, 0.0, -1.1, 0.5, 0.0])
        with torch.no_grad():
            old = scorer.logprobs(prompts, responses, temperature=temperature)[0]
        old = old - torch.linspace(-0.3, 0.3, n).unsqueeze(-1)  # ratios away from 1, some clipped

        scorer.zero_grad(set_to_none=True)
        plain = torch.stack([plain_chosen_logp(scorer, p, r[0], temperature) for p, r in zip(prompts, responses)])
        surrogate = clipped_surrogate(plain, old[:, 0], advantages, clip)
        (-surrogate.sum() / n).backward()
        expected = gradients(scorer)

        scorer.zero_grad(set_to_none=True)
        optimizer = torch.optim.SGD(scorer.parameters(), lr=0.0)  # lr 0: the gradients stay to be read
        settings = UpdateSettings(clip_eps=clip, kl_coef=0.0, mini_batch_size=n, micro_batch_size=2,
                                  max_grad_norm=1e9)
        stats = policy_update(
            lambda rows: scorer.logprobs([prompts[i] for i in rows], [responses[i] for i in rows],
                                         temperature=temperature),
            None, list(scorer.parameters()), optimizer, old, torch.ones(n, 1), advantages, settings,
            np.random.default_rng(0), row_keys=[tuple(p) for p in prompts],
            row_tokens=np.asarray([len(p) for p in prompts]))
        got = gradients(scorer)
        assert stats["rows_skipped"] == 4.0 and stats["rows_computed"] == 5.0
        # the tokens computed: the 5 rows with an advantage, each its whole scored sequence (row_tokens)
        assert stats["tokens_computed"] == sum(len(prompts[i]) for i in np.flatnonzero(advantages.numpy() != 0))
        scale = max(float(g.abs().max()) for g in expected)
        assert scale > 0
        for want, have in zip(expected, got):
            # two float32 computation orders (packed tree-masked contexts against one plain forward per candidate,
            # summed over torch's CPU threads; 1.2e-5 of the norm seen on 1 of 2 free cores): each parameter's
            # gradient agrees to 1e-4 of its norm, and no element differs by more than 1e-4 of the largest gradient
            # element. A wrong row, clip or scale is off by far more (a relative error of order 1)
            assert float((have - want).norm()) <= 1e-4 * max(float(want.norm()), 1e-12) + 1e-9
            torch.testing.assert_close(have, want, atol=1e-4 * scale, rtol=0.0)
    finally:
        scorer.explore_epsilon = 0.0
        scorer.zero_grad(set_to_none=True)


def test_update_without_gradient_leaves_weights_and_adamw_untouched(scorer):
    prompts, responses = rollout_rows(scorer)
    n = len(prompts)
    with torch.no_grad():
        old = scorer.logprobs(prompts, responses)[0]
    before = [p.detach().clone() for p in scorer.parameters()]
    optimizer = torch.optim.AdamW(scorer.parameters(), lr=1e-2, weight_decay=0.1)
    calls = []

    def logprob_fn(rows):
        calls.append(rows)
        return scorer.logprobs([prompts[i] for i in rows], [responses[i] for i in rows])

    stats = policy_update(logprob_fn, None, list(scorer.parameters()), optimizer, old, torch.ones(n, 1),
                          torch.zeros(n), UpdateSettings(kl_coef=0.0, mini_batch_size=4, num_epochs=2),
                          np.random.default_rng(0))
    assert calls == [] and stats["optimizer_steps"] == 0.0 and stats["rows_skipped"] == 2.0 * n
    assert optimizer.state_dict()["state"] == {}
    assert all(torch.equal(a, b) for a, b in zip(before, scorer.parameters()))


def test_exploration_mixture_is_what_the_learner_scores(scorer):
    scorer.explore_epsilon = 0.5
    try:
        torch.manual_seed(3)
        contexts = [context(0, 4), context(2, 2)]
        out = scorer.act(contexts, temperature=1.0)
        with torch.no_grad():
            learner = scorer.logprobs(out.prompt_ids, out.response_ids, temperature=1.0)[0][:, 0]
        assert learner.tolist() == pytest.approx([lp[0] for lp in out.logprobs], abs=1e-5)
        dist = scorer.action_distributions([context(0, 4)], temperature=1.0)[0]
        scorer.explore_epsilon = 0.0
        plain = scorer.action_distributions([context(0, 4)], temperature=1.0)[0]
        for action, p in dist.items():
            assert p == pytest.approx(0.5 * plain[action] + 0.5 / 4, abs=1e-6)
        assert min(dist.values()) >= 0.5 / 4 - 1e-9
    finally:
        scorer.explore_epsilon = 0.0


def test_pack_items_fills_sequences_no_longer_than_the_longest():
    from ecpo_train.policies.scoring import pack_items

    lengths = [50, 20, 30, 10, 45, 5, 50]
    rows = pack_items(lengths)
    assert sorted(i for row in rows for i in row) == list(range(len(lengths)))
    assert all(sum(lengths[i] for i in row) <= 50 for row in rows)
    assert len(rows) == math.ceil(sum(lengths) / 50)  # 210 tokens in 5 sequences of 50, not 7 padded rows


def test_micro_batches_keep_a_context_together_and_count_it_once():
    keys = ["a", "b", "a", "c", "b", "a", "d"]
    tokens = np.asarray([100, 40, 100, 60, 40, 100, 30])
    batches = pack_micro_batches(np.arange(7), tokens, micro_batch_size=2, row_keys=keys)
    assert [sorted(b.tolist()) for b in batches] == [[0, 1, 2, 4, 5], [3, 6]]
    budget = pack_micro_batches(np.arange(7), tokens, micro_batch_size=99, max_tokens=150, row_keys=keys)
    assert [sorted(b.tolist()) for b in budget] == [[0, 1, 2, 4, 5], [3, 6]]  # 100 + 40 <= 150 < 100 + 40 + 60


def test_equal_return_groups_are_found():
    group = ["g0"] * 4 + ["g1"] * 4
    traj = ["t0", "t0", "t1", "t1", "t2", "t3", "t3", "t3"]
    reward = np.asarray([0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0])  # g0: 1 and 1 (flat); g1: 0 and 1
    assert equal_return_rows(group, traj, reward).tolist() == [True] * 4 + [False] * 4


def test_auto_threads_stay_within_the_usable_cores():
    from ecpo_train.runtime.threads import choose_threads, usable_cores

    assert 1 <= choose_threads("auto") <= usable_cores()
    assert choose_threads(3) == 3
    assert choose_threads(0) == torch.get_num_threads()
