"""One CPU iteration of the LLM path with a tiny random Qwen2: rollout -> credit -> update.

At the first update pi_theta == pi_old == pi_ref, so the importance ratio is 1 (rollout and learner
log-probs agree within 1e-5) and the k3 KL is 0; after the update the parameters have moved.
"""

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from ecpo_gym.group import GroupVectorEnv
from ecpo_train.credit import compute_advantages
from ecpo_train.loss import UpdateSettings, policy_update
from ecpo_train.policies.base import StepContext
from ecpo_train.rollout import collect_rollout
from ecpo_train.trainer import pad_logprobs

TOKENIZER_DIR = Path(os.environ.get("ECPO_TOKENIZER_DIR", "/work/shared/models/qwen2.5-tokenizer"))
ENV_ID = "ecpo/DivergentAnchor-v0"


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    if not (TOKENIZER_DIR / "tokenizer.json").exists():
        pytest.skip(f"Qwen2.5 tokenizer not found at {TOKENIZER_DIR}; set ECPO_TOKENIZER_DIR")
    from ecpo_train.models import write_tiny_model

    return write_tiny_model(tmp_path_factory.mktemp("tiny"), tokenizer_path=TOKENIZER_DIR, seed=0)


@pytest.fixture(scope="module")
def policy(tiny_model_dir):
    from ecpo_train.policies.llm import TransformersPolicy

    torch.manual_seed(0)
    return TransformersPolicy(str(tiny_model_dir), env_name=ENV_ID, max_prompt_length=512, max_response_length=8)


@pytest.mark.slow
def test_llm_iteration_ratio_one_kl_zero_and_parameters_move(policy):
    torch.manual_seed(1)
    reference = policy.frozen_copy()
    envs = GroupVectorEnv(ENV_ID, num_groups=2, group_size=2, env_kwargs={"depth": 2, "num_tasks": 2, "max_steps": 2})
    rollout = collect_rollout(envs, policy, ["corridor0", "corridor1"], env_name=ENV_ID, temperature=1.0, seed=0)
    envs.close()
    batch = rollout.batch
    # a random tiny model never writes a well-formed <action> block: every step is the env's invalid action
    assert set(batch.action_key) == {"<invalid>"}
    assert np.allclose(batch.reward, -0.1)
    assert all(len(r) >= 1 for r in batch.extras["response_ids"])

    advantages, diag = compute_advantages("ecpo", **batch.credit_arrays())
    assert diag["num_rows"] == len(batch)
    step_adv = torch.as_tensor(np.asarray(advantages), dtype=torch.float32) + torch.linspace(-1, 1, len(batch))

    prompts, responses = batch.extras["prompt_ids"], batch.extras["response_ids"]
    old_logp, old_mask = pad_logprobs(batch.extras["old_logprobs"])
    with torch.no_grad():
        learner_logp, mask, _ = policy.logprobs(prompts, responses)
    assert torch.equal(mask, old_mask)
    assert float(((learner_logp - old_logp).abs() * mask).max()) < 1e-5

    before = [p.detach().clone() for p in policy.parameters()]
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    settings = UpdateSettings(mini_batch_size=len(batch), micro_batch_size=3, kl_coef=0.01)

    def logprob_fn(rows):
        return policy.logprobs([prompts[i] for i in rows], [responses[i] for i in rows])

    def ref_fn(rows):
        with torch.no_grad():
            return reference.logprobs([prompts[i] for i in rows], [responses[i] for i in rows])[0]

    stats = policy_update(logprob_fn, ref_fn, list(policy.parameters()), optimizer, old_logp, old_mask, step_adv,
                          settings, np.random.default_rng(0))
    assert stats["ratio_max_dev"] < 1e-5
    assert abs(stats["kl"]) < 1e-6
    assert stats["clip_frac"] == 0.0
    assert np.isfinite(stats["pg_loss"]) and stats["grad_norm"] > 0
    moved = max(float((p.detach() - b).abs().max()) for p, b in zip(policy.parameters(), before))
    assert moved > 1e-5
    with torch.no_grad():
        after_logp, _, _ = policy.logprobs(prompts, responses)
    assert float(((after_logp - old_logp).abs() * mask).max()) > 1e-4


def test_llm_policy_parses_well_formed_action(policy):
    ctx = StepContext(env_name=ENV_ID, task="reach the goal", step_count=0, history=[], observation="a room",
                      admissible_actions=["go red", "go blue"], state_key="s")
    prompt = policy.prompt_text(ctx)
    assert "go red" in prompt and "<|im_start|>assistant" in prompt
    # the policy's parser is the one the env sees: a well-formed block gives the action text
    from ecpo_train.policies.parsing import parse_action

    assert parse_action("<think>red looks safe</think><action>go red</action>", ENV_ID) == "go red"
    assert parse_action("go red", ENV_ID) is None
