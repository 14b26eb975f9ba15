"""One CPU iteration of the LLM path with a tiny random Qwen2: rollout -> credit -> update.

At the first update pi_theta == pi_old == pi_ref, so the importance ratio is 1 (rollout and learner
log-probs agree within 1e-5) and the k3 KL is 0; after the update the parameters have moved.
"""

import importlib.util
import json

import numpy as np
import pytest
import torch

from ecpo_gym.group import GroupVectorEnv
from ecpo_train.core.loss import UpdateSettings, policy_update
from ecpo_train.core.rollout import collect_rollout
from ecpo_train.credit import compute_advantages
from ecpo_train.policies.base import StepContext

ENV_ID = "ecpo/DivergentAnchor-v0"




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
    assert all(len(r) >= 1 for r in batch.response_ids)

    advantages, diag = compute_advantages("ecpo", batch.credit_arrays())
    assert diag["num_rows"] == len(batch)
    step_adv = torch.as_tensor(np.asarray(advantages), dtype=torch.float32) + torch.linspace(-1, 1, len(batch))

    prompts, responses = list(batch.prompt_ids), list(batch.response_ids)
    old_logp, old_mask = torch.from_numpy(batch.old_logprobs), torch.from_numpy(batch.old_logprob_mask)
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


# ---------------------------------------------------------------------------------------------- PPO value head
@pytest.mark.slow
def test_llm_value_head_gae_targets_and_one_critic_update_lowers_value_loss(tiny_model_dir, policy):
    """The PPO baseline's LLM critic: finite values, GAE targets = advantages + values, one step fits better."""
    from ecpo_train.credit import CreditConfig, gae_targets
    from ecpo_train.policies.critic import LLMValueCritic, critic_update

    torch.manual_seed(2)
    envs = GroupVectorEnv(ENV_ID, num_groups=2, group_size=2, env_kwargs={"depth": 2, "num_tasks": 2, "max_steps": 3})
    rollout = collect_rollout(envs, policy, ["corridor0", "corridor1"], env_name=ENV_ID, temperature=1.0, seed=3)
    envs.close()
    batch = rollout.batch
    prompts, keys = batch.prompt_ids, batch.extras["state_key"]
    critic = LLMValueCritic(str(tiny_model_dir), pad_token_id=policy.pad_token_id)
    # a non-zero head so the values depend on the prompt (the head starts at zero: V = 0 everywhere)
    torch.nn.init.normal_(critic.head.weight, std=0.1)
    with torch.no_grad():
        values = critic.values(prompts, keys).numpy()
    assert values.shape == (len(batch),) and np.all(np.isfinite(values)) and np.ptp(values) > 0

    gamma, lam = 0.95, 0.95
    advantages, targets = gae_targets(batch.credit_rows(), values, CreditConfig(gamma=gamma), lam)
    assert np.allclose(targets, advantages + values)
    # the last step of each trajectory bootstraps from V = 0: its advantage is r - V(s)
    for traj in np.unique(batch.traj_id):
        rows = np.flatnonzero(batch.traj_id == traj)
        last = rows[np.argmax(batch.step[rows])]
        assert advantages[last] == pytest.approx(batch.reward[last] - values[last], abs=1e-6)

    def value_loss() -> float:
        with torch.no_grad():
            v = critic.values(prompts, keys).double().numpy()
        return float(np.mean(0.5 * (v - targets) ** 2))

    before = value_loss()
    optimizer = torch.optim.AdamW(critic.parameters(), lr=1e-5, weight_decay=0.0)  # the paper critic lr
    stats = critic_update(critic, optimizer, prompts, keys, targets, mini_batch_size=len(batch), micro_batch_size=3,
                          max_grad_norm=1.0, generator=np.random.default_rng(0))
    assert stats["value_loss"] == pytest.approx(before, rel=1e-4)  # reported on the pre-step parameters
    assert value_loss() < before


# ---------------------------------------------------------------------------------------------- vLLM wiring
def test_default_generation_backend_is_transformers(tiny_model_dir, policy):
    from ecpo_train.runtime.config import load_config

    cfg = load_config("quickstart", ["policy=llm", f"model={tiny_model_dir}"])
    assert cfg.generation_backend == "transformers"
    assert policy.generation_backend == "transformers" and policy.backend is None
    # with no backend, act samples through the transformers model: same tokens as `sample` for the same seed
    ctx = StepContext(env_name=ENV_ID, task="t", step_count=0, history=[], observation="a room",
                      admissible_actions=["open red door"], state_key="s")
    torch.manual_seed(5)
    out = policy.act([ctx], temperature=1.0)
    torch.manual_seed(5)
    responses, logprobs = policy.sample(policy.encode_prompts([ctx]), 1.0)
    assert out.response_ids == responses and out.logprobs == logprobs
    policy.sync_generation_weights()  # a no-op without a backend
    with pytest.raises(ValueError, match="generation_backend="):
        load_config("quickstart", ["generation_backend=sglang"])
    with pytest.raises(ValueError, match="needs policy=llm"):
        load_config("quickstart", ["generation_backend=vllm"])


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_vllm_backend_without_vllm_is_a_clear_error(tiny_model_dir, tmp_path):
    from ecpo_train.runtime.config import load_config
    from ecpo_train.runtime.trainer import Trainer

    cfg = load_config("quickstart", ["policy=llm", f"model={tiny_model_dir}", "generation_backend=vllm",
                                     f"run_dir={tmp_path}", "progress=false", "tensorboard=false"])
    with pytest.raises(ImportError, match=r"pip install 'ecpo\[vllm\]'"):
        Trainer(cfg)


# ---------------------------------------------------------------------------------------------- checkpoint -> leaderboard
@pytest.mark.slow
def test_llm_ppo_iteration_checkpoint_plays_on_the_leaderboard(tiny_model_dir, tmp_path):
    """One tiny-Qwen2 PPO iteration (LLM critic) writes a checkpoint; the leaderboard's checkpoint agent loads
    exactly those weights and plays an episode on the embedded corridor env."""
    from ecpo_train.evaluation.build import build_agent
    from ecpo_train.evaluation.manifests import TaskGroup, TaskManifest
    from ecpo_train.evaluation.runner import EvalSettings, evaluate
    from ecpo_train.runtime.config import load_config
    from ecpo_train.runtime.run import open_run
    from ecpo_train.runtime.trainer import Trainer

    env_kwargs = {"depth": 2, "num_tasks": 2, "max_steps": 2}
    cfg = load_config("quickstart", [
        "policy=llm", f"model={tiny_model_dir}", "estimator=ppo", f"run_dir={tmp_path / 'run'}", "iterations=1",
        "n_groups=2", "group_size=2", "max_prompt_length=512", "max_response_length=6", "lr=1e-3",
        "critic_lr=1e-3", "mini_batch_size=64", "micro_batch_size=4", "kl_coef=0.01", "val_every=0",
        "progress=false", "tensorboard=false", f"env_kwargs={json.dumps(env_kwargs)}",
    ])
    run = open_run(Trainer, cfg)
    trainer = run.engine
    initial = {k: v.detach().clone() for k, v in trainer.policy.model.state_dict().items()}
    with run:
        (metrics,) = run.train()
    assert np.isfinite(metrics["credit/value_loss"]) and np.isfinite(metrics["update/pg_loss"])
    trained = trainer.policy.model.state_dict()
    assert (tmp_path / "run" / "checkpoint.pt").exists()

    agent = build_agent("checkpoint", checkpoint=str(tmp_path / "run"), temperature=0.4, name="tiny-ppo")
    loaded = agent.policy.model.state_dict()
    assert all(torch.equal(loaded[k], trained[k]) for k in trained)
    assert any(not torch.equal(loaded[k], initial[k]) for k in initial)  # the trained weights, not the base model
    manifest = TaskManifest("corridor_one", "diagnostic", ENV_ID, env_kwargs, [TaskGroup("all", task_ids=["corridor0"])])
    (record,) = evaluate(agent, [manifest], tmp_path / "board", EvalSettings(seeds=[0], progress=False))["episodes"]
    # a random tiny model writes no <action> block: both steps are invalid, the episode is truncated, not won
    assert (record["steps"], record["invalid_actions"], record["success"]) == (2, 2, False)
    assert record["reward"] == pytest.approx(-0.2)
