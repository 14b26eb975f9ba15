"""TrajectoryBatch: flat rows from per-trajectory lists, validation errors, credit arrays."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ecpo_train.batch import TrajectoryBatch
from ecpo_train.credit import compute_advantages


def _trajectories():
    return [
        {"group_id": "task-1", "traj_id": "r0", "state_keys": ["a", "b"], "action_keys": ["go", "<invalid>"],
         "rewards": [0.0, -0.1], "extras": {"response_ids": [[1, 2], [3]]}},
        {"group_id": "task-1", "traj_id": "r1", "state_keys": ["a", "c", "d"], "action_keys": ["go", "x", "y"],
         "rewards": [0.0, 0.0, 10.0], "extras": {"response_ids": [[4], [5], [6, 7]]}},
    ]


def test_from_trajectories_builds_flat_rows():
    batch = TrajectoryBatch.from_trajectories(_trajectories())
    assert len(batch) == 5
    assert batch.step.tolist() == [1, 2, 1, 2, 3]
    assert batch.traj_id.tolist() == ["r0", "r0", "r1", "r1", "r1"]
    assert batch.is_action_valid.tolist() == [True, False, True, True, True]
    assert batch.reward.dtype == np.float64
    assert batch.extras["response_ids"][4] == [6, 7]
    adv, diag = batch.advantages("gigpo", gamma=1.0)
    expected, _ = compute_advantages("gigpo", **batch.credit_arrays(), gamma=1.0)
    np.testing.assert_array_equal(adv, expected)
    # GRPO part: R = -0.1 vs 10 -> +-1/sqrt(2) scaled; anchor "a" (G = -0.1 vs 10) adds -+5.05
    r = np.array([-0.1, 10.0])
    grpo = (r - r.mean()) / (r.std(ddof=1) + 1e-6)
    assert adv[0] == pytest.approx(grpo[0] + (-0.1 - 4.95))
    assert diag["num_anchors"] == 1.0


def test_with_columns_attaches_per_row_fields():
    batch = TrajectoryBatch.from_trajectories(_trajectories()).with_columns(old_logprobs=[-1.0] * 5)
    assert batch.extras["old_logprobs"] == [-1.0] * 5 and "response_ids" in batch.extras
    with pytest.raises(ValueError, match="one entry per step row"):
        batch.with_columns(old_logprobs=[0.0])
    with pytest.raises(ValueError, match="core columns"):
        batch.with_columns(reward=[0.0] * 5)


@pytest.mark.parametrize(
    "mutate,match",
    [
        (lambda t: t[0].update(rewards=[0.0]), "ragged"),
        (lambda t: t[0].pop("state_keys"), "lacks required"),
        (lambda t: t[0].update(reward=[0.0, 1.0]), "unknown field"),
        (lambda t: t[1].update(rewards=[0.0, math.nan, 1.0]), "not finite"),
        (lambda t: t[1].update(rewards=[0.0, math.inf, 1.0]), "not finite"),
        (lambda t: t[0].update(state_keys=[], action_keys=[], rewards=[], extras={}), "no steps"),
        (lambda t: t[0].update(extras={}), "extra columns"),
        (lambda t: t[0].update(state_keys="ab"), "per-step list"),
        (lambda t: t[0].update(rewards=["x", "y"]), "numbers"),
        (lambda t: t[0].update(state_keys=[None, "b"]), "missing"),
        (lambda t: t[1].update(traj_id="r0"), "1..T"),  # two trajectories under one id
    ],
)
def test_invalid_trajectories_raise_clear_errors(mutate, match):
    trajectories = _trajectories()
    mutate(trajectories)
    with pytest.raises(ValueError, match=match):
        TrajectoryBatch.from_trajectories(trajectories)


def test_empty_and_malformed_batches():
    with pytest.raises(ValueError, match="non-empty"):
        TrajectoryBatch.from_trajectories([])
    with pytest.raises(ValueError, match="mapping"):
        TrajectoryBatch.from_trajectories([["not", "a", "mapping"]])
    with pytest.raises(ValueError, match="empty batch"):
        TrajectoryBatch(group_id=[], traj_id=[], step=[], state_key=[], action_key=[], reward=[], is_action_valid=[])
    with pytest.raises(ValueError, match="one entry per step row"):
        TrajectoryBatch(group_id=[0], traj_id=[0, 1], step=[1, 1], state_key=["s", "s"], action_key=["a", "a"],
                        reward=[0.0, 1.0], is_action_valid=[True, True])
