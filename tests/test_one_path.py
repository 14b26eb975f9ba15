"""One rollout path (issue #12): every consumer plays episodes through ``collect_rollout``, so a malformed reply
(empty, ``None``, not a string, or text that is no action) is the same thing everywhere: the environment
receives the canonical ``INVALID_ACTION`` (or the garbage text itself, which it rejects) and the step counts
as invalid."""

from __future__ import annotations

import gymnasium as gym

from ecpo_gym.canonical import INVALID_ACTION
from ecpo_gym.group import GroupVectorEnv
from ecpo_train.core.rollout import collect_rollout
from ecpo_train.evaluation.agents import Agent
from ecpo_train.evaluation.manifests import TaskGroup, TaskManifest
from ecpo_train.evaluation.runner import EvalSettings, evaluate
from ecpo_train.policies.base import PolicyOutput

GARBAGE = ["", None, 42, "do a barrel roll"]  # one malformed reply per step
SENT = [INVALID_ACTION, INVALID_ACTION, INVALID_ACTION, "do a barrel roll"]  # what the environment must receive
RECORDING_ID = "ecpo-test/RecordingWebShopGen-v0"
TASK = "goal_0"
RECEIVED: list = []  # every action the recording environment was stepped with


class _RecordingEnv(gym.Wrapper):
    """Logs every action the environment receives in ``RECEIVED``."""

    def step(self, action):
        RECEIVED.append(action)
        return self.env.step(action)


def _recording_env(**kwargs):
    import ecpo_gym  # noqa: F401  (registers the ids)

    return _RecordingEnv(gym.make("ecpo/WebShopGen-v0", disable_env_checker=True, **kwargs))


if RECORDING_ID not in gym.registry:
    gym.register(RECORDING_ID, entry_point=_recording_env)


class _GarbageAgent(Agent):
    """A leaderboard agent whose replies are all malformed."""

    name = "garbage"

    def act(self, ctx):
        return GARBAGE[ctx.step_count]


class _GarbagePolicy:
    """The same replies from the trainer's side: a policy's batched ``act``."""

    def act(self, contexts, temperature=1.0):
        empty = [[] for _ in contexts]
        return PolicyOutput(actions=[GARBAGE[c.step_count] for c in contexts], responses=["" for _ in contexts],
                            prompt_ids=empty, response_ids=empty, logprobs=empty)


def test_malformed_reply_leaderboard(tmp_path):
    env_kwargs = {"max_steps": len(GARBAGE)}
    manifest = TaskManifest("garbage_one", "webshop", RECORDING_ID, env_kwargs, [TaskGroup("gen", task_ids=[TASK])])
    RECEIVED.clear()
    (record,) = evaluate(_GarbageAgent(), [manifest], tmp_path, EvalSettings(seeds=[0], progress=False))["episodes"]
    assert RECEIVED == SENT
    assert (record["steps"], record["invalid_actions"], record["success"]) == (4, 4, False)

    # the trainer's path: collect_rollout with a policy answering the same garbage
    RECEIVED.clear()
    with GroupVectorEnv(RECORDING_ID, num_groups=1, group_size=1, env_kwargs=env_kwargs) as envs:
        (episode,) = collect_rollout(envs, _GarbagePolicy(), [TASK], env_name=RECORDING_ID, temperature=1.0,
                                     seed=0).episodes
    assert RECEIVED == SENT
    assert [action for _, action, _ in episode.transcript] == SENT
    assert (episode.length, episode.invalid_steps, episode.won) == (record["steps"], record["invalid_actions"], False)
    assert episode.total_reward == record["reward"]


RECORDING_ANCHOR_ID = "ecpo-test/RecordingDivergentAnchor-v0"


def _recording_anchor_env(**kwargs):
    import ecpo_gym  # noqa: F401  (registers the ids)

    return _RecordingEnv(gym.make("ecpo/DivergentAnchor-v0", disable_env_checker=True, **kwargs))


if RECORDING_ANCHOR_ID not in gym.registry:
    gym.register(RECORDING_ANCHOR_ID, entry_point=_recording_anchor_env)


def test_malformed_reply_rllib(tmp_path, monkeypatch):
    """The RLlib algorithm's env runner plays through collect_rollout with the native TransformersPolicy: a random
    tiny LM's replies hold no action block, so the environment receives INVALID_ACTION and the step-row table
    records invalid steps, with the replies' tokens and sampling log-probs for the learner."""
    import numpy as np
    import pytest

    ray = pytest.importorskip("ray")
    from ecpo_train.integrations.rllib import ECPOConfig
    from ecpo_train.policies.parsing import parse_action
    from ecpo_train.runtime.models import write_tiny_model

    monkeypatch.delenv("ECPO_TOKENIZER_DIR", raising=False)  # the small trained tokenizer keeps this fast
    model_dir = write_tiny_model(tmp_path / "tiny", seed=0)
    config = (ECPOConfig().environment(RECORDING_ANCHOR_ID, env_config={"env_kwargs": {"depth": 1, "num_tasks": 1,
                                                                                       "max_steps": 3}})
              .rl_module(model_config={"model": str(model_dir), "policy_mode": "generate", "max_prompt_length": 256,
                                       "max_response_length": 8, "device": "cpu"})
              .training(group_size=2, groups_per_batch=1, credit={"d_min": 1}, run_settings={"val_every": 0})
              .env_runners(num_env_runners=0))
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        algo = config.build_algo()
        RECEIVED.clear()
        sampled = algo.env_runner_group.local_env_runner.sample_groups(["corridor0"], env_seed=0)
        algo.stop()
    finally:
        ray.shutdown()
    table = sampled["batch"]
    assert len(sampled["episodes"]) == 2 and len(table) == 6
    assert RECEIVED == [INVALID_ACTION] * 6  # two copies, three steps each, nothing else reached the env
    assert list(table.action_key) == [INVALID_ACTION] * 6 and not table.is_action_valid.any()
    assert list(table.reward) == [-0.1] * 6
    assert all(parse_action(reply, RECORDING_ANCHOR_ID) is None for reply in table.extras["response"])
    assert all(not e.won and not e.terminated and e.invalid_steps == 3 for e in sampled["episodes"])
    assert all(len(ids) > 0 for ids in table.response_ids)
    assert np.isfinite(table.old_logprobs).all()
    assert table.old_logprob_mask.sum(axis=1).tolist() == [len(ids) for ids in table.response_ids]
