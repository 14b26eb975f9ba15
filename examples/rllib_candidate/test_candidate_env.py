"""The example's CandidateActionEnv: the adapter that makes ecpo_gym text envs usable by RLlib (no Ray needed)."""

import subprocess
import sys

import numpy as np
import pytest

from examples.rllib_candidate.env import (
    CandidateActionEnv,
    hashed_text_features,
    split_observation,
)

ENV = {"env_id": "ecpo/DivergentAnchor-v0", "env_kwargs": {"depth": 3, "num_tasks": 3},
       "group_size": 3, "max_candidates": 4, "feature_dim": 16, "seed": 0}


def test_each_task_is_repeated_for_group_size_consecutive_resets_with_keys_in_infos():
    env = CandidateActionEnv(ENV)
    seen = []
    for _ in range(9):
        obs, info = env.reset(seed=123)  # RLlib passes the same seed on every sample call
        assert env.observation_space.contains(obs)
        seen.append((info["group_key"], info["group_copy"], info["task_id"]))
        assert info["state_key"].endswith(":room0") and info["candidates"] == info["admissible_actions"]
    keys = [k for k, _, _ in seen]
    assert keys == ["w0v0g0"] * 3 + ["w0v0g1"] * 3 + ["w0v0g2"] * 3
    assert [c for _, c, _ in seen] == [0, 1, 2] * 3
    for g in range(3):
        assert len({t for _, _, t in seen[3 * g: 3 * g + 3]}) == 1  # one task per group
    # the repeated seed did not restart the task stream: a fresh env with the same config replays it
    replay = CandidateActionEnv(ENV)
    assert [replay.reset(seed=5)[1]["task_id"] for _ in range(9)] == [t for _, _, t in seen]


def test_action_index_maps_to_admissible_action_and_bad_indices_are_invalid_actions():
    env = CandidateActionEnv(ENV)
    obs, info = env.reset()
    mask = split_observation(obs, 16, 4)[2]
    assert mask.tolist() == [1.0, 1.0, 1.0, 0.0]  # 3 doors, 4 slots
    _, reward, terminated, _, step_info = env.step(3)  # masked slot
    assert step_info["action_key"] == "<invalid>" and step_info["is_action_valid"] is False
    assert reward == pytest.approx(-0.1) and not terminated
    _, _, _, _, step_info = env.step(1)
    assert step_info["action_key"] == info["candidates"][1] and step_info["is_action_valid"] is True
    assert step_info["state_key"] != info["state_key"] or step_info["won"] or step_info["state_key"].endswith("pit")


def test_hashed_features_are_deterministic_across_processes_and_bounded():
    here = hashed_text_features("Open the RED door!", 32)
    code = ("from examples.rllib_candidate.env import hashed_text_features as h;"
            "print(list(h('Open the RED door!', 32)))")
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert np.allclose(here, eval(there))
    assert np.abs(here).max() <= 1.0 and np.linalg.norm(here) == pytest.approx(1.0)


def test_missing_env_id_is_a_clear_error():
    with pytest.raises(ValueError, match="env_id"):
        CandidateActionEnv({"group_size": 2})
