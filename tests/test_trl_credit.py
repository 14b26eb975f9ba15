"""ECPO's credit for TRL users: the drop-in's per-turn numbers equal ``compute_advantages("ecpo", ...)`` on the same
episodes, each on exactly its turn's tokens; through TRL's own ``GRPOTrainer`` code path (slow) too."""

from __future__ import annotations

import random

import gymnasium as gym
import numpy as np
import pytest

import ecpo_gym  # noqa: F401
from ecpo_train.credit import STEP_COLUMNS, compute_advantages
from ecpo_train.integrations.trl_credit import TURNS_FIELD, token_advantages, turn_advantages

ANCHOR = "ecpo/DivergentAnchor-v0"
CORRIDOR = {"depth": 4, "num_tasks": 2, "rare_prob": (0.4, 0.8)}


def play_groups(n_groups: int = 3, group_size: int = 4, seed: int = 0) -> tuple[list[int], list[list[dict]]]:
    """Episodes of the real corridor env, ``group_size`` per reset seed, with token spans laid out as a TRL row
    would hold them (each turn's reply, then the environment's tokens)."""
    env = gym.make(ANCHOR, disable_env_checker=True, **CORRIDOR)
    rng = random.Random(seed)
    groups, episodes = [], []
    for g in range(n_groups):
        for _ in range(group_size):
            _, info = env.reset(seed=100 + g)
            turns, position, done = [], 0, False
            while not done:
                actions = info["admissible_actions"]
                action = "jump" if rng.random() < 0.1 else rng.choice(actions)
                before = info["state_key"]
                _, reward, terminated, truncated, info = env.step(action)
                reply = rng.randint(1, 6)
                turns.append({"state_key": before, "action_key": info["action_key"], "reward": reward,
                              "start": position, "end": position + reply})
                position += reply + rng.randint(2, 5)  # the environment's tokens before the next reply
                done = terminated or truncated
            groups.append(g)
            episodes.append(turns)
    env.close()
    return groups, episodes


def reference(groups: list[int], episodes: list[list[dict]], **options) -> np.ndarray:
    """``compute_advantages("ecpo", ...)`` on the step rows, listed in reverse order (any order is a batch)."""
    rows = [(groups[i], i, k + 1, t["state_key"], t["action_key"], t["reward"])
            for i, turns in enumerate(episodes) for k, t in enumerate(turns)][::-1]
    columns = list(zip(*rows, strict=True))
    values, _ = compute_advantages("ecpo", dict(zip(STEP_COLUMNS, columns)), options)
    return {(traj, step): float(v) for traj, step, v in zip(columns[1], columns[2], values, strict=True)}


@pytest.mark.parametrize("options", [{}, {"d_min": 1}, {"d_min": 1, "omega": 0.3, "kappa": 2.0}],
                         ids=["paper", "shallow-anchors", "other-weights"])
def test_turn_advantages_equal_compute_advantages_ecpo(options: dict) -> None:
    groups, episodes = play_groups()
    per_turn = turn_advantages(groups, episodes, **options)
    expected = reference(groups, episodes, **options)
    assert [len(v) for v in per_turn] == [len(t) for t in episodes]
    assert [v for values in per_turn for v in values] == pytest.approx(
        [expected[(i, k + 1)] for i, turns in enumerate(episodes) for k in range(len(turns))], abs=1e-12)
    assert np.count_nonzero(np.concatenate(per_turn)) >= 5
    if options:  # anchors from depth 1: ECPO's step term moves turns of one episode apart
        assert any(len(set(np.round(v, 9))) > 1 for v in per_turn)


def test_token_advantages_put_each_turn_on_its_span_only() -> None:
    groups, episodes = play_groups(n_groups=2)
    per_turn = turn_advantages(groups, episodes)
    length = max(t[-1]["end"] for t in episodes) + 7  # TRL pads every row to the longest
    tokens = token_advantages(episodes, per_turn, length)
    assert tokens.shape == (len(episodes), length)
    for row, (turns, values) in enumerate(zip(episodes, per_turn, strict=True)):
        covered = np.zeros(length, dtype=bool)
        for turn, value in zip(turns, values, strict=True):
            assert np.all(tokens[row, turn["start"]:turn["end"]] == value)
            covered[turn["start"]:turn["end"]] = True
        assert np.all(tokens[row, ~covered] == 0)  # the environment's tokens and the padding


def test_bad_turns_are_refused_with_one_line() -> None:
    groups, episodes = play_groups(n_groups=1, group_size=2)
    broken = [episodes[0], [{k: v for k, v in episodes[1][0].items() if k != "action_key"}]]
    with pytest.raises(ValueError, match=f"{TURNS_FIELD} of row 1, turn 1 lacks action_key"):
        turn_advantages(groups, broken)
    with pytest.raises(ValueError, match="non-empty list"):
        turn_advantages(groups, [episodes[0], []])
    with pytest.raises(ValueError, match="runs past"):
        token_advantages(episodes, turn_advantages(groups, episodes), 1)
    with pytest.raises(ValueError, match="3 group ids for 2 episodes"):
        turn_advantages([0, 0, 1], episodes)



@pytest.mark.parametrize(("key", "value", "words"), [
    ("start", 1.7, "start=1.7 is not a token index"), ("end", None, "end=None is not a token index"),
    ("start", True, "start=True is not a token index"), ("reward", "1", "reward='1' is not a number"),
    ("reward", None, "reward=None is not a number"),
])
def test_a_turn_field_of_the_wrong_type_is_named(key, value, words) -> None:
    """A span of 1.7 was cut to 1 (the turn's advantage on the wrong tokens) and None was a TypeError naming nothing."""
    groups, episodes = play_groups(n_groups=1, group_size=2)
    broken = [episodes[0], [episodes[1][0] | {key: value}, *episodes[1][1:]]]
    with pytest.raises(ValueError, match=f"{TURNS_FIELD} of row 1, turn 1: {words}".replace("(", r"\(")):
        turn_advantages(groups, broken)


@pytest.mark.parametrize(("estimator", "options", "words"), [
    ("ecpp", {}, "unknown advantage estimator 'ecpp'"),
    ("ecpo", {"kapa": 2.0}, "unknown credit hyperparameter(s) ['kapa']"),
    ("ecpo", {"kappa": float("nan")}, "credit.kappa=nan is invalid"),
    ("ppo", {}, "credit_estimator='ppo' needs critic values"),
    ("tigpo", {}, "credit_estimator='tigpo' needs a task history"),
])
def test_the_trainer_refuses_a_credit_it_cannot_compute_before_it_is_built(estimator, options, words) -> None:
    """A misspelt estimator or hyperparameter, or one needing a critic, was found only after the first batch had
    been generated; it is now refused when ECPOGRPOTrainer is built, before GRPOTrainer loads anything."""
    pytest.importorskip("trl")
    from ecpo_train.integrations.trl_credit import ecpo_grpo_trainer

    with pytest.raises(ValueError) as raised:  # (model=None: GRPOTrainer would fail on it, after the check)
        ecpo_grpo_trainer()(model=None, credit_estimator=estimator, credit_options=options)
    assert words in str(raised.value)
