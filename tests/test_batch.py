"""TrajectoryBatch: flat rows from per-trajectory lists, validation errors, credit arrays."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ecpo_train.core.batch import TrajectoryBatch
from ecpo_train.credit import compute_advantages


def _trajectories():
    return [
        {"group_id": "task-1", "traj_id": "r0", "anchor_keys": ["a", "b"], "action_keys": ["go", "<invalid>"],
         "rewards": [0.0, -0.1], "extras": {"response_ids": [[1, 2], [3]]}},
        {"group_id": "task-1", "traj_id": "r1", "anchor_keys": ["a", "c", "d"], "action_keys": ["go", "x", "y"],
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
    adv, diag = compute_advantages("gigpo", rows=batch, gamma=1.0)
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
        (lambda t: t[0].pop("anchor_keys"), "lacks required"),
        (lambda t: t[0].update(reward=[0.0, 1.0]), "unknown field"),
        (lambda t: t[1].update(rewards=[0.0, math.nan, 1.0]), "not finite"),
        (lambda t: t[1].update(rewards=[0.0, math.inf, 1.0]), "not finite"),
        (lambda t: t[0].update(anchor_keys=[], action_keys=[], rewards=[], extras={}), "no steps"),
        (lambda t: t[0].update(extras={}), "extra columns"),
        (lambda t: t[0].update(anchor_keys="ab"), "per-step list"),
        (lambda t: t[0].update(rewards=["x", "y"]), "numbers"),
        (lambda t: t[0].update(anchor_keys=[None, "b"]), "missing"),
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
        TrajectoryBatch(group_id=[], traj_id=[], step=[], anchor_key=[], action_key=[], reward=[], is_action_valid=[])
    with pytest.raises(ValueError, match="one entry per step row"):
        TrajectoryBatch(group_id=[0], traj_id=[0, 1], step=[1, 1], anchor_key=["s", "s"], action_key=["a", "a"],
                        reward=[0.0, 1.0], is_action_valid=[True, True])


def test_the_batch_codes_its_keys_once(monkeypatch):
    from ecpo_train.core import rows as credit

    calls = []
    real = credit.factorize_keys
    monkeypatch.setattr(credit, "factorize_keys", lambda keys, name="keys": calls.append(name) or real(keys, name))
    batch = TrajectoryBatch.from_trajectories(_trajectories())
    assert sorted(calls) == ["action_keys", "anchor_keys", "group_ids", "traj_ids"]  # validation = coding
    calls.clear()
    wider = batch.with_columns(old_logprobs=[-1.0] * 5)
    adv, diag = compute_advantages("ecpo", rows=wider, d_min=1)
    by_rows, _ = compute_advantages("ecpo", rows=wider.credit_rows(), d_min=1)
    assert calls == []  # neither the copy nor the credit step factorises again
    expected, expected_diag = compute_advantages("ecpo", **batch.credit_arrays(), d_min=1)
    np.testing.assert_array_equal(adv, expected)
    np.testing.assert_array_equal(by_rows, expected)
    assert diag == expected_diag


def test_compute_advantages_takes_rows_or_columns_not_both():
    batch = TrajectoryBatch.from_trajectories(_trajectories())
    with pytest.raises(ValueError, match="either rows= or the step columns"):
        compute_advantages("grpo", rows=batch.credit_rows(), rewards=batch.reward)
    columns = batch.credit_arrays()
    del columns["anchor_keys"]
    with pytest.raises(TypeError, match="anchor_keys"):
        compute_advantages("grpo", **columns)
    with pytest.raises(TypeError, match="CreditRows"):
        compute_advantages("grpo", rows=batch.credit_arrays())
    with pytest.raises(ValueError, match="unknown credit hyperparameter.*state_keys"):  # the old keyword
        compute_advantages("grpo", **columns, state_keys=batch.anchor_key)


def test_rows_appended_step_by_step_build_the_same_batch_as_per_trajectory_records():
    """collect_rollout appends each step's row as it happens (copies interleave); the built table equals the
    batch the per-trajectory records give: trajectories contiguous, steps numbered 1..T, extras row-aligned."""
    from ecpo_train.core.batch import StepTableBuilder

    trajectories = _trajectories()
    builder = StepTableBuilder(["tag"])
    longest = max(len(t["rewards"]) for t in trajectories)
    for step in range(longest):  # round-robin over trajectories, as the group vector env steps its copies
        for index, t in enumerate(trajectories):
            if step < len(t["rewards"]):
                got = builder.append(group_id=t["group_id"], traj_id=t.get("traj_id", index),
                                     anchor_key=t["anchor_keys"][step], action_key=t["action_keys"][step],
                                     reward=t["rewards"][step], is_action_valid=t["action_keys"][step] != "<invalid>",
                                     tag=(index, step))
                assert got == step + 1
    built = builder.build()
    expected = TrajectoryBatch.from_trajectories(
        [t | {"extras": {"tag": [(i, s) for s in range(len(t["rewards"]))]}} for i, t in enumerate(trajectories)])
    for name in TrajectoryBatch.column_names():
        assert list(getattr(built, name)) == list(getattr(expected, name)), name
    assert built.extras["tag"] == expected.extras["tag"]
    with pytest.raises(ValueError, match="extra columns"):
        builder.append(group_id=0, traj_id=9, anchor_key="s", action_key="a", reward=0.0, is_action_valid=True)


def test_the_table_does_not_import_credit():
    """Credit reads the step-row table; the table (and its row coding) never imports credit."""
    import subprocess
    import sys

    code = ("import sys; import ecpo_train.core.batch, ecpo_train.core.rows, ecpo_train.core.rollout; "
            "print(sorted(m for m in sys.modules if m.startswith('ecpo_train.core.credit')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
