"""verl-agent drop-in: every token against ``compute_advantages`` on the same step rows, GiGPO against
verl-agent's formulas worked by explicit loops, and the batch layouts verl-agent produces."""

from __future__ import annotations

import subprocess
import sys
from collections import defaultdict

import numpy as np
import pytest
import torch

from ecpo_train.credit import STEP_COLUMNS, compute_advantages
from ecpo_train.integrations.verl_agent import compute_ecpo_outcome_advantage, trajectory_steps

GAMMA = 0.9
RESPONSE_LEN = 5
EPS = 1e-6

# group -> trajectories -> steps (anchor, canonical action, per-step reward, penalties included).
# g0: three rollouts of different lengths; anchor "s" is divergent (action "a" twice, "b" once).
# g1: a singleton group; g2: a singleton group of one step row.
EPISODES = {
    "g0": {
        "t0": [("start", "go", 0.0), ("s", "a", 0.0), ("win", "b", 10.0)],
        "t1": [("start", "go", 0.0), ("s", "a", 0.0), ("lost", "c", 0.0), ("lost2", "c", 0.0)],
        "t2": [("start", "look", -0.1), ("s", "b", 0.0), ("win", "b", 10.0)],
    },
    "g1": {"t3": [("start", "go", 0.0), ("x", "a", 10.0)]},
    "g2": {"t4": [("start", "go", 1.0)]},
}


def rollout_rows(episodes=EPISODES):
    """Step rows in verl-agent's rollout layout: each trajectory contiguous, in step order."""
    rows = defaultdict(list)
    for group, trajectories in episodes.items():
        for traj, steps in trajectories.items():
            for t, (anchor, action, reward) in enumerate(steps, start=1):
                for key, value in zip(("index", "traj_index", "step", "anchor_obs", "action_keys", "reward"),
                                      (group, traj, t, anchor, action, reward), strict=True):
                    rows[key].append(value)
    return {key: np.array(values, dtype=object if key not in ("step", "reward") else None)
            for key, values in rows.items()}


def verl_agent_tensors(rows, gamma=GAMMA):
    """What verl-agent hands ``compute_gigpo_outcome_advantage``: the episode score on the last valid response
    token of every row, ``step_rewards`` = discounted return-to-go (a reverse loop per trajectory, as
    ``compute_step_discounted_returns``), a right-padded response mask of varying length."""
    n = len(rows["reward"])
    episode_return = defaultdict(float)
    for traj, reward in zip(rows["traj_index"], rows["reward"], strict=True):
        episode_return[traj] += reward
    step_rewards = np.zeros(n)
    for traj in episode_return:
        running = 0.0
        for i in reversed(np.flatnonzero(rows["traj_index"] == traj)):
            running = rows["reward"][i] + gamma * running
            step_rewards[i] = running
    valid = [1 + i % RESPONSE_LEN for i in range(n)]
    mask = torch.zeros(n, RESPONSE_LEN)
    token_level_rewards = torch.zeros(n, RESPONSE_LEN)
    for i in range(n):
        mask[i, : valid[i]] = 1.0
        token_level_rewards[i, valid[i] - 1] = episode_return[rows["traj_index"][i]]
    return {
        "token_level_rewards": token_level_rewards,
        "step_rewards": torch.tensor(step_rewards, dtype=torch.float32),
        "response_mask": mask,
        "anchor_obs": rows["anchor_obs"],
        "index": rows["index"],
        "traj_index": rows["traj_index"],
    }


def verl_agent_gigpo_by_hand(tensors, step_advantage_w, mode):
    """verl-agent's GiGPO from its formulas, one loop per statistic: ``episode_norm_reward`` (statistics over
    the group's step rows; a single row gets mean 0, std 1) + ``step_advantage_w * step_norm_reward``
    (statistics over rows of equal anchor within a group; a single row gets its own mean, std 1); unbiased
    std; ``mean_norm`` drops the std scaling of both terms. One value per row."""
    scores = tensors["token_level_rewards"].double().sum(-1).tolist()
    returns_to_go = tensors["step_rewards"].double().tolist()
    index, anchors = tensors["index"], tensors["anchor_obs"]

    def normalised(values, keys, single_mean_zero):
        members = defaultdict(list)
        for value, key in zip(values, keys, strict=True):
            members[key].append(value)
        out = []
        for value, key in zip(values, keys, strict=True):
            group = members[key]
            if len(group) == 1:
                mean, std = (0.0 if single_mean_zero else group[0]), 1.0
            else:
                mean = sum(group) / len(group)
                std = (sum((v - mean) ** 2 for v in group) / (len(group) - 1)) ** 0.5
            out.append(value - mean if mode == "mean_norm" else (value - mean) / (std + EPS))
        return out

    episode = normalised(scores, list(index), single_mean_zero=True)
    step = normalised(returns_to_go, list(zip(index, anchors, strict=True)), single_mean_zero=False)
    return np.array([e + step_advantage_w * s for e, s in zip(episode, step, strict=True)])


def credit_on_rows(name, rows, **hyperparameters):
    columns = (rows["index"], rows["traj_index"], rows["step"], rows["anchor_obs"], rows["action_keys"], rows["reward"])
    given = {key: hyperparameters.pop(key) for key in ("hidden_states", "history") if key in hyperparameters}
    adv, _ = compute_advantages(name, dict(zip(STEP_COLUMNS, columns)), {"gamma": GAMMA, **hyperparameters}, **given)
    return adv


def run(tensors, rows, **kwargs):
    kwargs.setdefault("action_keys", rows["action_keys"])
    return compute_ecpo_outcome_advantage(**tensors, gamma=GAMMA, **kwargs)


def assert_tokens(advantages, per_row, mask):
    expected = torch.as_tensor(per_row, dtype=torch.float64)[:, None] * mask.double()
    np.testing.assert_allclose(advantages.double().numpy(), expected.numpy(), rtol=1e-6, atol=1e-5)


# --------------------------------------------------------------------------------------------------------
# The same numbers as credit.py on the same rows
# --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("estimator", "mode", "credit_name", "compat"),
    [
        ("ecpo", "mean_norm", "ecpo", "native"),
        ("ecpo_eca_only", "mean_std_norm", "ecpo_eca_only", "native"),
        ("ecpo_vargate_only", "mean_std_norm", "ecpo_vargate_only", "native"),
        ("grpo", "mean_norm", "grpo", "native"),
        ("rloo", "mean_norm", "rloo", "native"),
        ("gigpo", "mean_norm", "gigpo", "verl-agent"),
        ("gigpo", "mean_std_norm", "gigpo_std", "verl-agent"),
        ("gigpo_std", "mean_std_norm", "gigpo_std", "verl-agent"),
    ],
)
def test_every_token_is_compute_advantages_on_the_same_rows(estimator, mode, credit_name, compat):
    rows = rollout_rows()
    tensors = verl_agent_tensors(rows)
    hyper = {"kappa": 1.5, "tau": 3.0, "d_min": 2, "rho_min": 0.4}
    omega = 0.7
    advantages, returns = run(tensors, rows, step_advantage_w=omega, mode=mode, estimator=estimator, **hyper)

    assert advantages.shape == (len(rows["reward"]), RESPONSE_LEN) and advantages.dtype == torch.float32
    expected = credit_on_rows(credit_name, rows, omega=omega, compat=compat, **hyper)
    assert_tokens(advantages, expected, tensors["response_mask"])
    assert torch.equal(returns, advantages) and returns.data_ptr() != advantages.data_ptr()
    assert torch.all(advantages[tensors["response_mask"] == 0] == 0)


@pytest.mark.parametrize(("estimator", "options"), [("pgpo", {"pgpo_alpha": 1.0}), ("hgpo", {"hgpo_history": 1}),
                                                     ("graphgpo", {"graph_gamma": 0.2}), ("pace", {}),
                                                     ("graphgpo", {"compat": "verl-agent"})])
def test_the_other_papers_estimators_are_credit_on_the_same_rows(estimator, options):
    rows = rollout_rows()
    tensors = verl_agent_tensors(rows)
    advantages, _ = run(tensors, rows, step_advantage_w=0.7, estimator=estimator, **options)
    assert_tokens(advantages, credit_on_rows(estimator, rows, omega=0.7, **options), tensors["response_mask"])
    if options.get("compat") == "verl-agent":  # the GraphGPO recipe's episode term: not the native one
        native, _ = run(tensors, rows, step_advantage_w=0.7, estimator=estimator)
        assert not torch.allclose(native, advantages)
    if estimator == "pace":  # hidden states, one per batch row, reach PACE's clustering
        hidden = np.eye(len(rows["reward"]))
        clustered, _ = run(tensors, rows, step_advantage_w=0.7, estimator="pace", hidden_states=hidden)
        assert_tokens(clustered, credit_on_rows("pace", rows, omega=0.7, hidden_states=hidden), tensors["response_mask"])


def test_tigpo_reads_each_rows_task_history():
    """One ``TaskHistory`` per batch row reaches TIGPO (its rows kept as the credit's step rows): the same numbers
    as ``compute_advantages`` on the same rows, and the history changes them (g0's lost trajectory ends in a state
    an earlier update saw win from; g1 is a revisit scored against earlier scores)."""
    from ecpo_train.credit import TaskHistory

    rows = rollout_rows()
    tensors = verl_agent_tensors(rows)
    by_group = {"g0": TaskHistory(frozenset({("lost2", "<success>")})), "g1": TaskHistory(reference=(0.0, 10.0)),
                "g2": TaskHistory()}
    history = np.array([by_group[g] for g in rows["index"]], dtype=object)
    advantages, _ = run(tensors, rows, estimator="tigpo", history=history)
    expected = credit_on_rows("tigpo", rows, history=list(history))
    assert_tokens(advantages, expected, tensors["response_mask"])
    fresh = credit_on_rows("tigpo", rows, history=[TaskHistory()] * len(history))
    assert not np.allclose(expected, fresh)


def test_defaults_are_the_papers():
    rows = rollout_rows()
    tensors = verl_agent_tensors(rows)
    advantages, _ = compute_ecpo_outcome_advantage(**tensors, action_keys=rows["action_keys"], gamma=GAMMA)
    assert_tokens(advantages, credit_on_rows("ecpo", rows), tensors["response_mask"])


def test_numpy_in_numpy_out_and_diagnostics():
    rows = rollout_rows()
    tensors = {k: v.numpy() if isinstance(v, torch.Tensor) else v for k, v in verl_agent_tensors(rows).items()}
    diagnostics = {}
    advantages, returns = run(tensors, rows, d_min=2, diagnostics=diagnostics)
    assert isinstance(advantages, np.ndarray) and advantages.dtype == np.float32
    np.testing.assert_allclose(advantages, credit_on_rows("ecpo", rows, d_min=2)[:, None] * tensors["response_mask"],
                               rtol=1e-6, atol=1e-5)
    np.testing.assert_array_equal(returns, advantages)
    assert diagnostics["num_trajectories"] == 5 and diagnostics["divergent_anchor_fraction"] > 0


# --------------------------------------------------------------------------------------------------------
# GiGPO mode: verl-agent's numbers, from its formulas by hand
# --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
@pytest.mark.parametrize("step_advantage_w", [1.0, 0.5])
def test_gigpo_mode_is_verl_agents_gigpo(mode, step_advantage_w):
    rows = rollout_rows()
    tensors = verl_agent_tensors(rows)
    advantages, returns = run(tensors, rows, estimator="gigpo", mode=mode, step_advantage_w=step_advantage_w)
    expected = verl_agent_gigpo_by_hand(tensors, step_advantage_w, mode)
    assert_tokens(advantages, expected, tensors["response_mask"])
    assert torch.equal(returns, advantages)


def test_gigpo_worked_numbers():
    """A few of the hand values, written out (mean_norm, omega 1): g0's step rows score [10]*3 + [0]*4 +
    [9.9]*3 (mean 5.97); anchor "s" holds G = 9, 0, 9 (mean 6); g2's single row keeps its score 1."""
    rows = rollout_rows()
    tensors = verl_agent_tensors(rows)
    advantages, _ = run(tensors, rows, estimator="gigpo", mode="mean_norm")
    per_row = advantages[:, 0]
    assert per_row[1].item() == pytest.approx((10 - 5.97) + (9 - 6), abs=1e-4)  # t0 at "s"
    assert per_row[4].item() == pytest.approx((0 - 5.97) + (0 - 6), abs=1e-4)  # t1 at "s"
    assert per_row[11].item() == pytest.approx((10 - 10) + 0.0, abs=1e-6)  # g1: one trajectory, 2 rows
    assert per_row[12].item() == pytest.approx(1.0, abs=1e-6)  # g2: a single row, mean 0


def test_ecpo_departs_from_gigpo_at_a_divergent_anchor():
    rows = rollout_rows()
    tensors = verl_agent_tensors(rows)
    at_s = np.flatnonzero(rows["anchor_obs"] == "s")
    diagnostics = {}
    ecpo, _ = run(tensors, rows, estimator="ecpo", mode="mean_std_norm", d_min=2, diagnostics=diagnostics)
    gigpo, _ = run(tensors, rows, estimator="gigpo", mode="mean_std_norm")
    assert diagnostics["mean_rho"] > 0
    assert not np.allclose(ecpo[at_s, 0].numpy(), gigpo[at_s, 0].numpy(), atol=1e-3)
    # ECA credits a canonical action, not an occurrence: t0 and t1 both took "a" at "s", so their step-level
    # terms agree and the advantage gap between them is their GRPO gap alone -- GiGPO's anchor term differs.
    grpo = credit_on_rows("grpo", rows)
    assert (ecpo[at_s[0], 0] - ecpo[at_s[1], 0]).item() == pytest.approx(grpo[at_s[0]] - grpo[at_s[1]], abs=1e-4)


# --------------------------------------------------------------------------------------------------------
# Batch layouts: rollout order, verl-agent's reordering and copies, and what raises
# --------------------------------------------------------------------------------------------------------
def test_split_trajectory_without_steps_raises():
    rows = rollout_rows()
    order = np.r_[0, 3, 1, 2, np.arange(4, len(rows["reward"]))]  # t1's first row moved into t0's run
    shuffled = {k: v[order] for k, v in rows.items()}
    tensors = verl_agent_tensors(shuffled)
    with pytest.raises(ValueError, match=r"traj_index='t0'.*separate runs.*trajectory_steps"):
        run(tensors, shuffled)


def test_balanced_and_copied_batch_with_recorded_steps():
    """``_balance_batch`` permutes rows and ``adjust_batch(mode="copy")`` appends copies: with the steps
    recorded on the rollout output, every row gets its rollout-order advantage and a copy its source's."""
    rows = rollout_rows()
    tensors = verl_agent_tensors(rows)
    rows["recorded_step"] = trajectory_steps(rows["traj_index"])
    np.testing.assert_array_equal(rows["recorded_step"], rows["step"])
    reference, _ = run(tensors, rows, d_min=2)

    rng = np.random.default_rng(0)
    order = np.r_[rng.permutation(len(rows["reward"])), [2, 5, 12]]
    moved = {k: v[order] if isinstance(v, np.ndarray) else v[torch.as_tensor(order)] for k, v in tensors.items()}
    advantages, _ = compute_ecpo_outcome_advantage(
        **moved, action_keys=rows["action_keys"][order], steps=rows["recorded_step"][order].astype(object),
        gamma=GAMMA, d_min=2,
    )
    np.testing.assert_allclose(advantages.numpy(), reference[torch.as_tensor(order)].numpy(), rtol=0, atol=1e-6)


def test_trajectory_steps_reads_batch_order_per_trajectory():
    assert trajectory_steps(np.array(["a", "b", "a", "a", "b"], dtype=object)).tolist() == [1, 1, 2, 3, 2]


def test_rows_sharing_a_step_must_be_copies():
    rows = rollout_rows()
    tensors = verl_agent_tensors(rows)
    steps = rows["step"].copy()
    steps[2] = 2  # t0's last row claims step 2 as well
    with pytest.raises(ValueError, match="same .index, traj_index, step. but differ"):
        run(tensors, rows, steps=steps)


def test_a_dropped_row_leaves_a_gap():
    rows = rollout_rows()
    keep = np.r_[0, 2:len(rows["reward"])]  # adjust_batch(mode="delete") dropped t0's step 2
    tensors = {k: v[keep] if isinstance(v, np.ndarray) else v[torch.as_tensor(keep)]
               for k, v in verl_agent_tensors(rows).items()}
    with pytest.raises(ValueError, match=r"steps exactly 1..T, it has \[1, 3\]"):
        run(tensors, {k: v[keep] for k, v in rows.items()}, steps=rows["step"][keep])


def test_per_row_penalty_is_not_a_step_reward():
    """verl-agent's ``apply_invalid_action_penalty`` subtracts from one row's score and ``step_rewards`` only."""
    rows = rollout_rows()
    tensors = verl_agent_tensors(rows)
    tensors["token_level_rewards"][1, 1] -= 0.1
    tensors["step_rewards"][1] -= 0.1
    with pytest.raises(ValueError, match="episode score.*invalid-action penalty"):
        run(tensors, rows)


def test_wrong_gamma_is_caught():
    rows = rollout_rows()
    tensors = verl_agent_tensors(rows)
    with pytest.raises(ValueError, match="gamma=1.0"):
        compute_ecpo_outcome_advantage(**tensors, action_keys=rows["action_keys"], gamma=1.0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "std"}, "mode='std'"),
        ({"enable_similarity": True}, "anchors exactly"),
        ({"estimator": "gigpo_std", "mode": "mean_norm"}, "mean_std_norm"),
        ({"estimator": "ppo"}, "needs values="),  # the drop-in passes no critic values
        ({"estimator": "dqn"}, "unknown advantage estimator"),
    ],
)
def test_bad_arguments(kwargs, message):
    rows = rollout_rows()
    with pytest.raises(ValueError, match=message):
        run(verl_agent_tensors(rows), rows, **kwargs)


def test_import_needs_no_verl():
    code = (
        "import sys; from ecpo_train.integrations.verl_agent import compute_ecpo_outcome_advantage; "
        "assert not any(m == 'verl' or m.startswith('verl.') for m in sys.modules), 'verl imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
