"""The admissible-action scoring policy (policy_mode=score) and an LLM that learns with it.

The tree-masked forward gives each candidate exactly the log-likelihood a plain forward over
``prompt + candidate`` gives; the learner's candidate distribution equals the sampler's (ratio 1 at the first
update); the sampled action is always admissible; and a real run of the trainer raises the exact success of
the LM on a small corridor task with non-zero advantages.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from ecpo_train.policies.base import StepContext

ENV_ID = "ecpo/DivergentAnchor-v0"
DOORS = ["open red door", "open blue door", "open green door"]




@pytest.fixture(scope="module")
def scorer(tiny_model_dir):
    from ecpo_train.policies.scoring import ScoringPolicy

    return ScoringPolicy(str(tiny_model_dir), env_name=ENV_ID, history_length=0, prompt_style="compact")


def context(room: int, actions=DOORS) -> StepContext:
    return StepContext(env_name=ENV_ID, task="walk through all 4 rooms", step_count=room, history=[],
                       observation=f"room {room + 1}/4. doors: red, blue, green.", admissible_actions=list(actions),
                       state_key=f"corridor0:room{room}")


def test_tree_scores_equal_one_forward_per_candidate(scorer):
    from ecpo_train.policies.scoring import unpack_candidates

    out = scorer.act([context(0), context(1, DOORS[:2])], temperature=1.0)
    for packed in out.prompt_ids:
        prompt, candidates = unpack_candidates(packed)
        with torch.no_grad():
            tree = scorer.candidate_scores([(prompt, candidates)])[0]
            for k, cand in enumerate(candidates):
                logits = scorer.model(torch.tensor([list(prompt) + list(cand)])).logits[0].float()
                logp = torch.log_softmax(logits, -1)
                plain = sum(float(logp[len(prompt) - 1 + j, cand[j]]) for j in range(len(cand)))
                assert float(tree[k]) == pytest.approx(plain, abs=1e-4)


def test_sampled_actions_are_admissible_and_learner_ratio_is_one(scorer):
    torch.manual_seed(0)
    contexts = [context(0)] * 6 + [context(2)] * 4
    out = scorer.act(contexts, temperature=1.0)
    assert all(a in DOORS for a in out.actions)
    assert [len(r) for r in out.response_ids] == [1] * len(contexts)
    token_logp, mask, entropy = scorer.logprobs(out.prompt_ids, out.response_ids, temperature=1.0, with_entropy=True)
    old = torch.tensor([lp[0] for lp in out.logprobs])
    assert torch.allclose(token_logp[:, 0].detach(), old, atol=1e-5)  # ratio exactly 1 at theta_old
    assert mask.shape == (len(contexts), 1) and bool((mask == 1).all())
    assert bool((entropy > 0).all()) and float(entropy.max()) <= np.log(3) + 1e-6
    token_logp.sum().backward()  # gradients reach the model
    grads = [p.grad for p in scorer.model.parameters() if p.grad is not None]
    assert grads and any(float(g.abs().sum()) > 0 for g in grads)
    scorer.model.zero_grad(set_to_none=True)


def test_probabilities_follow_temperature_and_greedy_is_argmax(scorer):
    hot = scorer.action_distributions([context(0)], temperature=1.0)[0]
    cold = scorer.action_distributions([context(0)], temperature=0.1)[0]
    greedy = scorer.action_distributions([context(0)], temperature=0.0)[0]
    assert sum(hot.values()) == pytest.approx(1.0) and set(hot) == set(DOORS)
    best = max(hot, key=hot.get)
    assert cold[best] > hot[best] and greedy[best] == 1.0
    assert scorer.act([context(0)], temperature=0.0).actions == [best]


def test_shared_draws_fix_the_sampled_action_whatever_torchs_stream(scorer):
    """Validation's common random numbers: a context carrying a draw gets the action its inverse CDF picks,
    with the sampler's log-prob, whatever torch's random state is."""
    from ecpo_train.policies.base import inverse_cdf_index

    draws = [0.05, 0.5, 0.95]
    contexts = [dataclasses.replace(context(0), draw=d) for d in draws]
    outputs = []
    for seed in (0, 1, 2):
        torch.manual_seed(seed)
        outputs.append(scorer.act(contexts, temperature=1.0))
    assert all(out.actions == outputs[0].actions and out.logprobs == outputs[0].logprobs for out in outputs)
    probs = torch.tensor([scorer.action_distributions([context(0)], 1.0)[0][a] for a in DOORS])
    assert outputs[0].actions == [DOORS[inverse_cdf_index(probs, d)] for d in draws]


def test_placeholders_are_filled_and_empty_action_lists_refused(scorer):
    from ecpo_train.policies.scoring import fill_placeholders

    assert fill_placeholders("search[<your query>]", "red shoes under $20") == "search[red shoes under $20]"
    with pytest.raises(ValueError, match="policy_mode=generate"):
        scorer.act([context(0, actions=[])])


def _smollm2_dir() -> Path | None:
    from ecpo_train.runtime.models import default_cache_dir

    folder = default_cache_dir() / "smollm2-135m-instruct"
    return folder if (folder / "config.json").exists() else None


@pytest.mark.slow
def test_an_llm_learns_on_a_corridor(tmp_path, tiny_model_dir):
    """A few trainer iterations of ECPO on a two-room corridor raise the exact success of the LM.

    The real SmolLM2-135M when it has been pulled (``ecpo models pull smollm2-135m-instruct``), else the tiny
    random model (with a larger learning rate): either way success must rise and advantages be non-zero.
    """
    from ecpo_train.runtime.config import load_config
    from ecpo_train.runtime.run import train
    from ecpo_train.runtime.trainer import Trainer

    real = _smollm2_dir()
    model, lr = (real, "2e-5") if real is not None else (tiny_model_dir, "3e-3")
    config = load_config("corridor_llm", [
        f"model={model}", f"lr={lr}", f"run_dir={tmp_path}", "progress=false", "iterations=5", "val_every=5",
        "env_kwargs={num_tasks: 1, depth: 2, rare_prob: [0.0, 0.2]}", "n_groups=2", "val_num_tasks=1",
        "val_episodes_per_task=4", "num_epochs=2",
    ])
    history = train(Trainer, config)
    validated = [m for m in history if "val/exact_success" in m]
    assert [int(m["iteration"]) for m in validated] == [0, 1, 5]
    before, after = validated[0]["val/exact_success"], validated[-1]["val/exact_success"]
    assert after > before + 0.1, (str(model), before, after)
    trained = [m for m in history if "credit/advantage_std" in m]
    assert sum(m["credit/advantage_std"] > 0 and m["update/grad_norm"] > 0 for m in trained) >= 3
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [int(m["iteration"]) for m in lines] == [0, 1, 2, 3, 4, 5]
