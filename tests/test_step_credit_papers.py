"""PGPO, HGPO, GraphGPO and PACE (issue 57): each against a batch worked by hand from its equations, HGPO and
GraphGPO against their public reference code's numbers (tests/vectors/, inputs and outputs only), and the
registry's declaration of what each needs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from ecpo_train.core.credit import (
    STEP_COLUMNS,
    CreditConfig,
    available_estimators,
    compute_advantages,
    estimator_spec,
)

VECTORS = Path(__file__).parent / "vectors"

# One group, three trajectories (the success reward 10 on a successful last step, gamma 0.95):
#   0: s0 -a-> s1 -b-> s2 -c-> success     G = 9.025, 9.5, 10    R = 10
#   1: s0 -a-> s1 -d-> (failed)            G = 0, 0              R = 0
#   2: s0 -e-> x  -f-> (failed)            G = 0, 0              R = 0
BATCH = {"group_ids": [0] * 7, "traj_ids": [0, 0, 0, 1, 1, 2, 2], "steps": [1, 2, 3, 1, 2, 1, 2],
             "anchor_keys": ["s0", "s1", "s2", "s0", "s1", "s0", "x"], "action_keys": list("abcadef"),
             "rewards": [0, 0, 10, 0, 0, 0, 0]}
A_E = np.array([2, 2, 2, -1, -1, -1, -1]) / math.sqrt(3)  # GRPO: (10, 0, 0) -> mean 10/3, unbiased std 10/sqrt(3)
SQ2 = 1 / math.sqrt(2)


def advantages(name: str, **kwargs) -> np.ndarray:
    """The estimator's advantages on BATCH, with eps ~ 0: the equations as written (eps is ours, not theirs)."""
    hidden = {"hidden_states": kwargs.pop("hidden_states")} if "hidden_states" in kwargs else {}
    return compute_advantages(name, BATCH, {"eps": 1e-12} | kwargs, **hidden)[0]


def test_graphgpo_by_hand():
    """The group's graph: s0->s1 (twice), s0->x, s1->s2, s1->end1, s2->success, x->end2. Reverse shortest paths:
    d(s2) = 1, d(s1) = 2, d(s0) = 3; x and the dead ends reach no success: 3 + 1 = 4. Step returns 10 * 0.1^d
    of the state reached: from s0 (0.1, 0.1, 0.001) -> z (1, 1, -2)/sqrt(3); from s1 (1, 0.001) -> +-1/sqrt(2);
    s2 and x leave once -> 0. Plus GRPO's episode term."""
    graph = np.array([1 / math.sqrt(3), SQ2, 0, 1 / math.sqrt(3), -SQ2, -2 / math.sqrt(3), 0])
    assert advantages("graphgpo") == pytest.approx(A_E + graph, abs=1e-9)
    # no success in the group: no graph term, and GRPO's term is 0 too
    failed = compute_advantages("graphgpo", BATCH | {"rewards": [0] * 7})[0]
    assert np.all(failed == 0)


def test_pgpo_by_hand():
    """Phi = anchor means of G: s0 9.025/3, s1 4.75, s2 10, x 0. delta = Phi(next) - Phi(here), the final reward
    after the last step: s0->s1 1.7417 (twice), s0->x -3.0083, s1->s2 5.25, s1 last 0 - 4.75, s2 last 10 - 10,
    x last 0. z-scored per anchor: s0 (1, 1, -2)/sqrt(3), s1 +-1/sqrt(2). A^S = GiGPO_w/std's: s0 (2, -1, -1)
    / sqrt(3), s1 +-1/sqrt(2). p_succ 1/3 -> w = (2/3)^2. A = A^S + w A^phi, no episode term."""
    step = np.array([2 / math.sqrt(3), SQ2, 0, -1 / math.sqrt(3), -SQ2, -1 / math.sqrt(3), 0])
    potential = np.array([1 / math.sqrt(3), SQ2, 0, 1 / math.sqrt(3), -SQ2, -2 / math.sqrt(3), 0])
    assert advantages("pgpo") == pytest.approx(step + 4 / 9 * potential, abs=1e-9)
    assert advantages("pgpo", pgpo_alpha=0.0, pgpo_beta=0.5) == pytest.approx(step + 0.5 * potential, abs=1e-9)


def test_hgpo_by_hand():
    """Level 1 (the anchor): s0's G (9.025, 0, 0) -> population z (sqrt 2, -1/sqrt 2, -1/sqrt 2); s1's (9.5, 0) ->
    +-1. Level 2 (s0 then s1, twice): +-1. Level 3: no pair. Weights (k + 1)^1 over the nonzero levels:
    traj 0's s1 gets (2 * 1 + 3 * 1) / 5 = 1. Rows in no group (s2, x) get 0: HGPO has no episode term."""
    assert advantages("hgpo") == pytest.approx([math.sqrt(2), 1, 0, -SQ2, -1, -SQ2, 0], abs=1e-9)
    centred = advantages("hgpo", hgpo_std=False)  # its mean_norm: G - mean
    assert centred[:2] == pytest.approx([9.025 * 2 / 3, 4.75], rel=1e-5)


def test_pace_by_hand_and_with_hidden_states():
    """Q^ - V^: at s0 action a's mean (9.025 + 0) / 2 against the anchor's 9.025 / 3, e's 0 against it; at s1
    b's 9.5 and d's 0 against 4.75. Added to GRPO's term with omega. With hidden states that put every row in
    one cluster, V^ is the group's mean return and Q^ each action's (a: rows 0 and 3)."""
    gap = np.array([9.025 / 6, 4.75, 0, 9.025 / 6, -4.75, -9.025 / 3, 0])
    assert advantages("pace") == pytest.approx(A_E + gap, abs=1e-9)
    assert advantages("pace", omega=0.5) == pytest.approx(A_E + 0.5 * gap, abs=1e-9)
    g = np.array([9.025, 9.5, 10, 0, 0, 0, 0])
    one_cluster = advantages("pace", hidden_states=np.ones((7, 3)))
    q = np.array([9.025 / 2, 9.5, 10, 9.025 / 2, 0, 0, 0])
    assert one_cluster == pytest.approx(A_E + q - g.mean(), abs=1e-9)
    # orthogonal hidden states: every row its own cluster, so Q^ = V^ and only the episode term is left
    assert advantages("pace", hidden_states=np.eye(7)) == pytest.approx(A_E, abs=1e-12)


def test_the_registry_declares_what_each_estimator_needs():
    for name in ("pgpo", "hgpo", "graphgpo", "pace"):
        spec = estimator_spec(name)
        assert name in available_estimators(needs_values=False) and not spec.keeps_state and spec.group_relative
        assert spec.hidden_states == ("optional" if name == "pace" else "none")
    assert estimator_spec("ppo").needs_values
    with pytest.raises(ValueError, match="reads no hidden states"):
        compute_advantages("hgpo", BATCH, hidden_states=np.ones((7, 2)))
    with pytest.raises(ValueError, match=r"expected \(7, d\)"):
        compute_advantages("pace", BATCH, hidden_states=np.ones(7))


@pytest.mark.parametrize(("name", "file"), [("hgpo", "hgpo_reference.json"), ("graphgpo", "graphgpo_reference.json"),
                                          ("graphgpo", "graphgpo_recipe_reference.json")])
def test_the_reference_codes_numbers(name, file):
    """Random batches and the reference code's advantages (float32 for HGPO's torch code; GraphGPO's: a third-party
    reproduction, and the authors' recipe, whose episode term is ``compat="verl-agent"``'s): equal to 1e-6."""
    vectors = json.loads((VECTORS / file).read_text())
    for case in vectors["cases"]:
        options = {key: value for key, value in case.items() if key.startswith("hgpo_") or key == "gamma"}
        columns = (case["group_ids"], case["traj_ids"], case["steps"], case["anchor_keys"], ["a"] * len(case["steps"]),
                   case["rewards"])
        ours, _ = compute_advantages(name, dict(zip(STEP_COLUMNS, columns)), options | vectors.get("options", {}))
        assert ours == pytest.approx(np.array(case["advantages"]), abs=1e-6)


def test_graphgpo_under_verl_agent_compat_takes_gigpos_episode_term_over_step_rows():
    """One group: t0 goes s0 -> success (R = 10), t1 s0 -> s1 -> failed (R = 0). The graph term: from s0, 10 * 0.1^0
    and 10 * 0.1^2 (s1 cannot reach the success: the largest finite distance, 1, plus 1), z-scored: +-1/sqrt(2); s1
    is left once: 0. The episode term: GRPO's over the two trajectories, +-1/sqrt(2); the recipe's (verl-agent's
    GiGPO) over the three step rows, returns 10, 0, 0: mean 10/3, unbiased std 10/sqrt(3)."""
    batch = (["g"] * 3, ["t0", "t1", "t1"], [1, 1, 2], ["s0", "s0", "s1"], ["a", "b", "c"], [10.0, 0.0, 0.0])
    graph = np.array([1, -1, 0]) / np.sqrt(2)
    native, _ = compute_advantages("graphgpo", dict(zip(STEP_COLUMNS, batch)))
    assert native == pytest.approx(graph + np.array([1, -1, -1]) / np.sqrt(2), abs=1e-6)  # eps 1e-6 in each std
    recipe, _ = compute_advantages("graphgpo", dict(zip(STEP_COLUMNS, batch)), {"compat": "verl-agent"})
    assert recipe == pytest.approx(graph + (np.array([10, 0, 0]) - 10 / 3) / (10 / np.sqrt(3)), abs=1e-6)
    with pytest.raises(ValueError, match="compat='verl-agent' applies only to"):
        compute_advantages("hgpo", dict(zip(STEP_COLUMNS, batch)), {"compat": "verl-agent"})


def test_their_hyperparameters_are_declared_on_the_credit_config():
    assert (CreditConfig().pgpo_alpha, CreditConfig().hgpo_history, CreditConfig().graph_gamma) == (2.0, 2, 0.1)
    for field, bad, says in (("graph_gamma", 1.0, r"=1.0 is invalid: it must be a number in \(0, 1\)"),
                             ("hgpo_history", -1, r"=-1 is invalid: it must be an integer in \[0, 100000\]"),
                             ("hgpo_std", "yes", "' expects bool"), ("pgpo_alpha", -0.5, "=-0.5 is invalid: .*>= 0")):
        with pytest.raises(ValueError, match=f"credit.{field}{says}"):
            CreditConfig(**{field: bad})


@pytest.mark.parametrize("name", ["pgpo", "hgpo", "graphgpo", "pace"])
def test_torch_rewards_give_the_same_advantages_as_a_tensor(name):
    torch = pytest.importorskip("torch")
    expected = advantages(name)
    got = compute_advantages(name, BATCH | {"rewards": torch.tensor(BATCH["rewards"], dtype=torch.float64)},
                             {"eps": 1e-12})[0]
    assert isinstance(got, torch.Tensor) and np.array_equal(got.numpy(), expected)
