"""TrajectoryBatch: flat rows from per-trajectory lists, validation errors, credit arrays, token columns."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ecpo_train.core.batch import TrajectoryBatch
from ecpo_train.credit import compute_advantages


def _trajectories():
    return [
        {"group_id": "task-1", "traj_id": "r0", "anchor_keys": ["a", "b"], "action_keys": ["go", "<invalid>"],
         "rewards": [0.0, -0.1], "prompt_ids": [[9, 8, 7], [9]], "response_ids": [[1, 2], [3]],
         "old_logprobs": [[-0.5, -0.25], [-2.0]], "extras": {"response": ["go", "?"]}},
        {"group_id": "task-1", "traj_id": "r1", "anchor_keys": ["a", "c", "d"], "action_keys": ["go", "x", "y"],
         "rewards": [0.0, 0.0, 10.0], "prompt_ids": [[9], [8, 8], [7]], "response_ids": [[4], [5], [6, 7, 1]],
         "old_logprobs": [[-1.0], [-0.125], [-3.0, -0.75, -0.1]], "extras": {"response": ["go", "x", "y"]}},
    ]


def _credit_only(trajectories):
    return [{k: v for k, v in t.items() if k not in ("prompt_ids", "response_ids", "old_logprobs")}
            for t in trajectories]


def test_from_trajectories_builds_flat_rows():
    batch = TrajectoryBatch.from_trajectories(_trajectories())
    assert len(batch) == 5
    assert batch.step.tolist() == [1, 2, 1, 2, 3]
    assert batch.traj_id.tolist() == ["r0", "r0", "r1", "r1", "r1"]
    assert batch.is_action_valid.tolist() == [True, False, True, True, True]
    assert batch.reward.dtype == np.float64
    assert batch.response_ids[4] == [6, 7, 1] and batch.prompt_ids[2] == [9]
    assert batch.extras["response"] == ["go", "?", "go", "x", "y"]
    adv, diag = compute_advantages("gigpo", batch, {"gamma": 1.0})
    expected, _ = compute_advantages("gigpo", batch.credit_arrays(), {"gamma": 1.0})
    np.testing.assert_array_equal(adv, expected)
    # GRPO part: R = -0.1 vs 10 -> +-1/sqrt(2) scaled; anchor "a" (G = -0.1 vs 10) adds -+5.05
    r = np.array([-0.1, 10.0])
    grpo = (r - r.mean()) / (r.std(ddof=1) + 1e-6)
    assert adv[0] == pytest.approx(grpo[0] + (-0.1 - 4.95))
    assert diag["num_anchors"] == 1.0


def test_with_columns_attaches_per_row_fields():
    batch = TrajectoryBatch.from_trajectories(_trajectories()).with_columns(tag=list("abcde"))
    assert batch.extras["tag"] == list("abcde") and batch.response_ids[0] == [1, 2]
    with pytest.raises(ValueError, match="one entry per step row"):
        batch.with_columns(tag=[0.0])
    with pytest.raises(ValueError, match="core columns"):
        batch.with_columns(reward=[0.0] * 5)
    # a token column is replaced as the constructor checks it
    shorter = batch.with_columns(response_ids=[[1]] * 5, old_logprobs=[[-4.0]] * 5)
    assert shorter.old_logprobs.tolist() == [[-4.0]] * 5 and shorter.old_logprob_mask.tolist() == [[1.0]] * 5
    with pytest.raises(ValueError, match="old_logprobs of row 0 .* has 1 values; its response has 2 tokens"):
        batch.with_columns(old_logprobs=[[-4.0]] * 5)
    credit_only = TrajectoryBatch.from_trajectories(_credit_only(_trajectories()))
    with pytest.raises(ValueError, match="come together"):
        credit_only.with_columns(old_logprobs=[[-4.0]] * 5)


@pytest.mark.parametrize(
    "mutate,match",
    [
        (lambda t: t[0].update(rewards=[0.0]), "ragged"),
        (lambda t: t[0].pop("anchor_keys"), "lacks required"),
        (lambda t: t[0].update(reward=[0.0, 1.0]), "unknown field"),
        (lambda t: t[1].update(rewards=[0.0, math.nan, 1.0]), "not finite"),
        (lambda t: t[1].update(rewards=[0.0, math.inf, 1.0]), "not finite"),
        (lambda t: t[0].update(anchor_keys=[], action_keys=[], rewards=[], prompt_ids=[], response_ids=[],
                               old_logprobs=[], extras={"response": []}), "no steps"),
        (lambda t: t[0].update(extras={}), "extra columns"),
        (lambda t: t[1].pop("old_logprobs"), "token columns"),
        (lambda t: t[1].update(response_ids=[[4], [5]]), "ragged"),
        (lambda t: [r["extras"].update(prompt_ids=r["prompt_ids"]) for r in t], "typed columns of the table, not extras"),
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
    wider = batch.with_columns(tag=[-1.0] * 5)
    adv, diag = compute_advantages("ecpo", wider, {"d_min": 1})
    by_rows, _ = compute_advantages("ecpo", wider.credit_rows(), {"d_min": 1})
    assert calls == []  # neither the copy nor the credit step factorises again
    expected, expected_diag = compute_advantages("ecpo", batch.credit_arrays(), {"d_min": 1})
    np.testing.assert_array_equal(adv, expected)
    np.testing.assert_array_equal(by_rows, expected)
    assert diag == expected_diag


def test_compute_advantages_takes_rows_or_columns_not_both():
    batch = TrajectoryBatch.from_trajectories(_trajectories())
    columns = batch.credit_arrays()
    del columns["anchor_keys"]
    with pytest.raises(TypeError, match="anchor_keys"):
        compute_advantages("grpo", columns)
    with pytest.raises(TypeError, match="CreditRows"):
        compute_advantages("grpo", list(batch.credit_arrays().values()))
    with pytest.raises(ValueError, match="unknown credit hyperparameter.*state_keys"):  # the old keyword
        compute_advantages("grpo", columns, {"state_keys": batch.anchor_key})


def test_rows_appended_step_by_step_build_the_same_batch_as_per_trajectory_records():
    """collect_rollout appends each step's row as it happens (copies interleave); the built table equals the
    batch the per-trajectory records give: trajectories contiguous, steps numbered 1..T, extras row-aligned."""
    from ecpo_train.core.batch import StepTableBuilder

    trajectories = _trajectories()
    builder = StepTableBuilder(["tag"], tokens=True)
    longest = max(len(t["rewards"]) for t in trajectories)
    for step in range(longest):  # round-robin over trajectories, as the group vector env steps its copies
        for index, t in enumerate(trajectories):
            if step < len(t["rewards"]):
                got = builder.append(group_id=t["group_id"], traj_id=t.get("traj_id", index),
                                     anchor_key=t["anchor_keys"][step], action_key=t["action_keys"][step],
                                     reward=t["rewards"][step], is_action_valid=t["action_keys"][step] != "<invalid>",
                                     tag=(index, step), prompt_ids=t["prompt_ids"][step],
                                     response_ids=t["response_ids"][step], old_logprobs=t["old_logprobs"][step])
                assert got == step + 1
    built = builder.build()
    expected = TrajectoryBatch.from_trajectories(
        [t | {"extras": {"tag": [(i, s) for s in range(len(t["rewards"]))]}} for i, t in enumerate(trajectories)])
    for name in TrajectoryBatch.column_names():
        assert list(getattr(built, name)) == list(getattr(expected, name)), name
    assert built.extras["tag"] == expected.extras["tag"]
    _assert_same_tokens(built, expected)
    with pytest.raises(ValueError, match="extra columns"):
        builder.append(group_id=0, traj_id=9, anchor_key="s", action_key="a", reward=0.0, is_action_valid=True,
                       prompt_ids=[1], response_ids=[2], old_logprobs=[-1.0])
    with pytest.raises(ValueError, match="needs the token columns"):
        builder.append(group_id=0, traj_id=9, anchor_key="s", action_key="a", reward=0.0, is_action_valid=True,
                       tag=0)
    with pytest.raises(ValueError, match="no token columns"):
        StepTableBuilder().append(group_id=0, traj_id=9, anchor_key="s", action_key="a", reward=0.0,
                                  is_action_valid=True, prompt_ids=[1], response_ids=[2], old_logprobs=[-1.0])


def _assert_same_tokens(batch, expected):
    assert [list(p) for p in batch.prompt_ids] == [list(p) for p in expected.prompt_ids]
    assert [list(r) for r in batch.response_ids] == [list(r) for r in expected.response_ids]
    np.testing.assert_array_equal(batch.old_logprobs, expected.old_logprobs)
    np.testing.assert_array_equal(batch.old_logprob_mask, expected.old_logprob_mask)


def test_old_logprobs_are_padded_once_to_the_per_row_values():
    """The learner reads the padded [rows, L] log-probs as built: each row's values (as float32) left-aligned,
    zeros and mask 0 after its response, L the longest response."""
    trajectories = _trajectories()
    batch = TrajectoryBatch.from_trajectories(trajectories)
    per_row = [logp for t in trajectories for logp in t["old_logprobs"]]
    assert batch.old_logprobs.dtype == np.float32 and batch.old_logprobs.shape == (5, 3)
    for row, logp in enumerate(per_row):
        np.testing.assert_array_equal(batch.old_logprobs[row, : len(logp)], np.float32(logp))
        assert not batch.old_logprobs[row, len(logp):].any()
        assert batch.old_logprob_mask[row].tolist() == [1.0] * len(logp) + [0.0] * (3 - len(logp))
    empty = TrajectoryBatch.from_trajectories([{"group_id": 0, "anchor_keys": ["s"], "action_keys": ["a"],
                                                "rewards": [1.0], "prompt_ids": [[]], "response_ids": [[]],
                                                "old_logprobs": [[]]}])
    assert empty.old_logprobs.tolist() == [[0.0]] and empty.old_logprob_mask.tolist() == [[0.0]]
    credit_only = TrajectoryBatch.from_trajectories(_credit_only(trajectories))
    assert not credit_only.has_tokens() and credit_only.old_logprobs is None and credit_only.prompt_ids is None


def test_token_columns_survive_concat_select_by_group_and_renumbering():
    base = TrajectoryBatch.from_trajectories(_trajectories())
    other = TrajectoryBatch.from_trajectories(
        [{"group_id": 7, "traj_id": 0, "anchor_keys": ["s"], "action_keys": ["a"], "rewards": [1.0],
          "prompt_ids": [[5, 5]], "response_ids": [[3]], "old_logprobs": [[-0.5]], "extras": {"response": ["a"]}}])
    joined = TrajectoryBatch.concat([other, base])
    assert joined.old_logprobs.shape == (6, 3)  # as wide as the widest
    _assert_same_tokens(joined.select([1, 2, 3, 4, 5]), base)
    _assert_same_tokens(joined.select([0]), other)
    assert joined.select([0]).old_logprobs.shape == (1, 1)  # trimmed to its own longest response
    groups = joined.by_group()
    _assert_same_tokens(groups[0], other)
    _assert_same_tokens(groups[1], base)
    _assert_same_tokens(TrajectoryBatch.concat(groups), joined)
    _assert_same_tokens(other.renumbered(10, 100), other)
    assert TrajectoryBatch.concat([other.renumbered(1, 1), other]).response_ids.tolist() == [[3], [3]]
    with pytest.raises(ValueError, match="batch 1 lacks the token columns"):
        TrajectoryBatch.concat([base, TrajectoryBatch.from_trajectories(_credit_only(_trajectories()))])


def test_policy_version_is_zero_by_default_and_survives_concat_select_by_group_and_renumbering():
    base = TrajectoryBatch.from_trajectories(_trajectories())
    assert base.policy_version.dtype == np.int64 and base.policy_version.tolist() == [0] * 5
    late = TrajectoryBatch.from_trajectories(
        [{"group_id": 7, "traj_id": 0, "anchor_keys": ["s", "t"], "action_keys": ["a", "b"], "rewards": [1.0, 0.0],
          "prompt_ids": [[5], [5]], "response_ids": [[3], [3]], "old_logprobs": [[-0.5], [-0.5]],
          "extras": {"response": ["a", "b"]}}]).with_policy_version(4)
    assert late.policy_version.tolist() == [4, 4]
    joined = TrajectoryBatch.concat([late, base.with_policy_version(3)])
    assert joined.policy_version.tolist() == [4, 4, 3, 3, 3, 3, 3]
    assert joined.select([2, 3, 0, 1]).policy_version.tolist() == [3, 3, 4, 4]
    assert [g.policy_version.tolist() for g in joined.by_group()] == [[4, 4], [3, 3, 3, 3, 3]]
    assert late.renumbered(10, 100).policy_version.tolist() == [4, 4]
    assert late.with_columns(response=["x", "y"]).policy_version.tolist() == [4, 4]
    assert TrajectoryBatch.concat([late, base]).policy_version.tolist() == [4, 4, 0, 0, 0, 0, 0]
    for bad in (-1, 1.0, True, "1"):
        with pytest.raises(ValueError, match="must be an integer >= 0"):
            base.with_policy_version(bad)
    columns = {"group_id": [0], "traj_id": [0], "step": [1], "anchor_key": ["s"], "action_key": ["a"],
               "reward": [1.0], "is_action_valid": [True]}
    with pytest.raises(ValueError, match=r"policy_version needs one integer per step row \(1\)"):
        TrajectoryBatch(**columns, policy_version=[0.5])
    with pytest.raises(ValueError, match="policy_version must be >= 0, got -2"):
        TrajectoryBatch(**columns, policy_version=[-2])
    with pytest.raises(ValueError, match="are core columns"):
        base.with_columns(policy_version=[1] * 5)


@pytest.mark.parametrize(
    "mutate,match",
    [
        (lambda t: t[1].update(old_logprobs=[[-1.0], [-0.125], [-3.0, -0.75]]),
         r"old_logprobs of row 4 \(traj_id='r1'\) has 2 values; its response has 3 tokens"),
        (lambda t: t[1].update(old_logprobs=[[-1.0], [math.nan], [-3.0, -0.75, -0.1]]),
         r"old_logprobs of row 3 \(traj_id='r1'\) is nan at token 0, not finite"),
        (lambda t: t[0].update(old_logprobs=[[-0.5, math.inf], [-2.0]]),
         r"old_logprobs of row 0 \(traj_id='r0'\) is inf at token 1, not finite"),
        (lambda t: t[0].update(old_logprobs=[[-0.5, "x"], [-2.0]]), r"old_logprobs of row 0 .* must be numbers"),
        (lambda t: t[1].update(response_ids=[[4], 5, [6, 7, 1]]),
         r"response_ids of row 3 \(traj_id='r1'\) must be a sequence of token ids, got int"),
        (lambda t: t[1].update(prompt_ids=[[9], [8, 8.5], [7]]), r"prompt_ids of row 3 .* must be integer token ids"),
    ],
)
def test_a_bad_token_column_is_one_error_naming_the_row(mutate, match):
    trajectories = _trajectories()
    mutate(trajectories)
    with pytest.raises(ValueError, match=match):
        TrajectoryBatch.from_trajectories(trajectories)


def test_the_table_does_not_import_credit():
    """Credit reads the step-row table; the table (and its row coding) never imports credit."""
    import subprocess
    import sys

    code = ("import sys; import ecpo_train.core.batch, ecpo_train.core.rows, ecpo_train.core.rollout; "
            "print(sorted(m for m in sys.modules if m.startswith('ecpo_train.core.credit')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
