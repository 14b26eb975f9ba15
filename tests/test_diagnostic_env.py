"""Diagnostic divergent-anchor MDPs: env contract, exact DP values against Monte Carlo rollouts."""

from __future__ import annotations

import math
from collections import defaultdict

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import ecpo_gym  # noqa: F401  (registers the ids)
from ecpo_gym.diagnostic import DivergentAnchorEnv, action_values, success_probability
from ecpo_gym.diagnostic.env import room_key

GAMMA = 0.95


def _rollout_returns(env: DivergentAnchorEnv, task_id: str, policy, episodes: int, seed: int):
    """Every (state, action) occurrence's discounted return-to-go, sampled by playing ``policy``."""
    rng = np.random.default_rng(seed)
    samples: dict[tuple[str, str], list[float]] = defaultdict(list)
    wins = 0
    for ep in range(episodes):
        _, info = env.reset(seed=seed * 100_000 + ep, options={"task_id": task_id})
        rows, done = [], False
        while not done:
            actions = info["admissible_actions"]
            probs = np.array([policy.get(info["state_key"], {}).get(a, 1.0) for a in actions], dtype=float)
            action = actions[int(rng.choice(len(actions), p=probs / probs.sum()))]
            state = info["state_key"]
            _, reward, terminated, truncated, info = env.step(action)
            rows.append((state, info["action_key"], reward))
            done = terminated or truncated
        wins += bool(info["won"])
        ret = 0.0
        for state, action, reward in reversed(rows):
            ret = reward + GAMMA * ret
            samples[(state, action)].append(ret)
    return samples, wins / episodes


@pytest.mark.parametrize("env_id", ["ecpo/DivergentAnchor-v0", "ecpo/DivergentAnchorNoisy-v0",
                                    "ecpo/DivergentAnchorWide-v0"])
def test_registered_ids_follow_the_env_contract(env_id):
    env = gym.make(env_id, disable_env_checker=True)
    check_env(env.unwrapped, skip_render_check=True)
    obs, info = env.reset(seed=3)
    assert env.observation_space.contains(obs) and len(obs) < 80
    assert info["state_key"].endswith(":room0") and len(info["admissible_actions"]) >= 2
    # invalid text: -0.1, state unchanged, never raises
    _, reward, terminated, _, info2 = env.step("fly out of the window!!")
    assert (reward, terminated, info2["action_key"], info2["is_action_valid"]) == (-0.1, False, "<invalid>", False)
    assert info2["state_key"] == info["state_key"]
    # canonicalisation: case and trailing punctuation do not change the action's identity
    _, _, _, _, info3 = env.step(info["admissible_actions"][0].upper() + ".")
    assert info3["action_key"] == info["admissible_actions"][0] and info3["is_action_valid"]


def test_reset_is_deterministic_and_outcomes_follow_the_seed():
    env = DivergentAnchorEnv()
    traces = []
    for _ in range(2):
        _, info = env.reset(seed=11, options={"task_id": "corridor2"})
        trace = [info["state_key"]]
        done = False
        while not done:
            _, r, te, tr, info = env.step(info["admissible_actions"][-1])
            trace.append((info["state_key"], r))
            done = te or tr
        traces.append(trace)
    assert traces[0] == traces[1]
    with pytest.raises(ValueError, match="unknown task_id"):
        env.reset(options={"task_id": "nope"})


def test_rewards_goal_pit_and_anchor_depth():
    env = DivergentAnchorEnv(depth=9, good_prob=1.0, rare_prob=(0.0, 0.0))
    layout = env.layout("corridor0")
    _, info = env.reset(seed=0, options={"task_id": "corridor0"})
    for room in range(9):
        assert info["state_key"] == room_key("corridor0", room) and info["step"] == room
        good = layout.doors[room][layout.good_door[room]]
        _, reward, terminated, _, info = env.step(good)
    assert (reward, terminated, info["won"]) == (10.0, True, True)
    _, info = env.reset(seed=0, options={"task_id": "corridor0"})
    bad = next(d for j, d in enumerate(layout.doors[0]) if j != layout.good_door[0])
    _, reward, terminated, _, info = env.step(bad)
    assert (reward, terminated, info["won"], info["state_key"]) == (0.0, True, False, "corridor0:pit")


def test_transition_model_is_a_distribution_over_the_admissible_actions():
    env = DivergentAnchorEnv(noise=0.05, branching=4)
    model = env.transition_model("corridor1")
    assert len(model) == env.depth
    _, info = env.reset(options={"task_id": "corridor1"})
    assert sorted(model[info["state_key"]]) == sorted(info["admissible_actions"])
    for actions in model.values():
        for outcomes in actions.values():
            assert math.isclose(sum(o.prob for o in outcomes), 1.0)


def test_optimal_values_have_the_closed_form():
    env = DivergentAnchorEnv(depth=10, noise=0.02)
    model = env.transition_model("corridor0")
    values = action_values(model, gamma=GAMMA, horizon=env.max_steps)
    p = env.good_prob * (1 - env.noise)
    start = env.initial_state("corridor0")
    # optimal: the good door in every room -> reach the exit with p**depth, reward 10 discounted 9 steps
    assert values.v[start] == pytest.approx(10 * GAMMA ** 9 * p ** 10)
    assert values.win[start] == pytest.approx(p ** 10)
    layout = env.layout("corridor0")
    for room in range(env.depth):
        q = values.q[room_key("corridor0", room)]
        good = layout.doors[room][layout.good_door[room]]
        assert max(q, key=q.get) == good  # the frequent good door is truly best in every room
    # truncation is modelled: with fewer steps left than rooms, nothing can be won
    assert success_probability(model, start, horizon=9) == 0.0


@pytest.mark.parametrize("noise,skew", [(0.0, False), (0.03, True)])
def test_dp_action_values_match_monte_carlo_rollouts(noise, skew):
    env = DivergentAnchorEnv(depth=8, branching=3, noise=noise)
    task = "corridor3"
    layout = env.layout(task)
    # uniform policy, or one that prefers the good door 4:1 (the late-training shape that makes anchors divergent)
    policy = {}
    if skew:
        for room in range(env.depth):
            policy[room_key(task, room)] = {d: (4.0 if j == layout.good_door[room] else 1.0)
                                            for j, d in enumerate(layout.doors[room])}
    model = env.transition_model(task)
    values = action_values(model, gamma=GAMMA, horizon=env.max_steps, policy=policy)
    samples, win_rate = _rollout_returns(env, task, policy, episodes=6000, seed=1 + int(skew))
    start = env.initial_state(task)
    assert abs(win_rate - values.win[start]) < 4 * math.sqrt(values.win[start] * (1 - values.win[start]) / 6000)
    checked = 0
    for (state, action), returns in samples.items():
        if len(returns) < 200:
            continue
        returns = np.asarray(returns)
        stderr = returns.std(ddof=1) / math.sqrt(len(returns))
        assert abs(returns.mean() - values.q[state][action]) < 4.5 * stderr + 1e-9, (state, action)
        checked += 1
    assert checked >= 2 * env.depth  # deep anchors (rooms >= 7 reached at step >= 8) are checked too
