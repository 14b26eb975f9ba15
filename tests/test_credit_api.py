"""The credit entry point's contract: numpy and torch backends, the estimator registry (PPO's GAE included: the
estimator that asks for values), and bad input rejected up front with one clear error."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from test_credit import ESTIMATORS, _columns, _fig1_batch

from ecpo_train.credit import (
    STEP_COLUMNS,
    CreditConfig,
    available_estimators,
    compute_advantages,
    estimator_spec,
    gae_targets,
    get_estimator,
    prepare_rows,
    register_estimator,
)


def test_torch_in_torch_out_equals_numpy():
    rows, _ = _fig1_batch()
    cols = _columns(rows)
    tensor_cols = cols | {"rewards": torch.tensor(cols["rewards"], dtype=torch.float32),
                          "steps": torch.tensor(cols["steps"]), "traj_ids": torch.tensor(cols["traj_ids"])}
    for name in ESTIMATORS:
        expected, diag = compute_advantages(name, cols)
        got, diag_t = compute_advantages(name, tensor_cols)
        assert isinstance(got, torch.Tensor) and got.dtype == torch.float64 and got.device.type == "cpu"
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12, atol=1e-12)
        assert diag_t == pytest.approx(diag)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_tensors_stay_on_device():
    rows, _ = _fig1_batch()
    cols = _columns(rows)
    for name in ESTIMATORS:
        expected, _ = compute_advantages(name, cols)
        got, _ = compute_advantages(name, cols | {"rewards": torch.tensor(cols["rewards"], device="cuda")})
        assert got.device.type == "cuda"
        np.testing.assert_allclose(got.cpu().numpy(), expected, rtol=1e-10, atol=1e-10, err_msg=name)


def test_long_trajectory_returns_are_exact():
    # 400 steps, reward 1 each: G_t = (1 - gamma^(T-t+1)) / (1 - gamma)
    n = 400
    cols = {"group_ids": [0] * n, "traj_ids": [0] * n, "steps": list(range(n, 0, -1)), "anchor_keys": ["s"] * n,
                "action_keys": ["a"] * n, "rewards": [1.0] * n}
    adv, _ = compute_advantages("gigpo", cols, {"gamma": 0.95})
    g = np.array([(1 - 0.95 ** (n - s + 1)) / 0.05 for s in cols["steps"]])
    np.testing.assert_allclose(adv, g - g.mean(), rtol=1e-10, atol=1e-10)


def test_the_package_docstring_lists_every_registered_estimator():
    """An estimator registered in the package without a line in ``core/credit/__init__.py``'s docstring fails here."""
    import ecpo_train.core.credit as package

    built_in = [name for name in available_estimators()
                if estimator_spec(name).fn.__module__.startswith("ecpo_train.core.credit.")]
    assert len(built_in) == 15
    assert [name for name in built_in if f"``{name}``" not in package.__doc__] == []


def test_hyperparameters_are_declared_once_on_the_registrations():
    """Every estimator-specific CreditConfig field is a registration's declaration (type with range, default); a
    second declaration of a name that disagrees, or a new credit field after CreditConfig is built, is refused."""
    from ecpo_train.core.credit.config import ESTIMATOR_CREDIT_KEYS, SHARED
    from ecpo_train.core.credit.registry import Hyperparameter, declared_hyperparameter

    fields = [f.name for f in dataclasses.fields(CreditConfig)]
    assert fields == [h.name for h in SHARED] + list(ESTIMATOR_CREDIT_KEYS)
    assert {key for name in available_estimators() for key in estimator_spec(name).credit_keys} == set(
        ESTIMATOR_CREDIT_KEYS)
    assert declared_hyperparameter("graph_gamma").default == CreditConfig().graph_gamma == 0.1
    assert [name for name in available_estimators() if "compat" in estimator_spec(name).credit_keys] == [
        "gigpo", "gigpo_std", "graphgpo"]
    other = Hyperparameter("graph_gamma", float, 0.5, "another reading")
    with pytest.raises(ValueError, match="'graph_gamma' is already declared differently"):
        register_estimator("my_graph", hyperparameters=(other,))
    with pytest.raises(ValueError, match="'my_weight' is not a credit field"):
        register_estimator("my_estimator", hyperparameters=(Hyperparameter("my_weight", float, 1.0, "a weight"),))
    assert "my_graph" not in available_estimators() and "my_estimator" not in available_estimators()


def test_registry_and_bad_input_errors():
    assert set(ESTIMATORS) <= set(available_estimators())
    with pytest.raises(ValueError, match="valid: grpo, rloo"):
        get_estimator("dqn")
    with pytest.raises(ValueError, match="already registered"):
        register_estimator("grpo")(lambda rows, config: None)
    rows, _ = _fig1_batch()
    cols = _columns(rows)
    with pytest.raises(ValueError, match="unknown credit hyperparameter.*valid ones: gamma"):
        compute_advantages("ecpo", cols, {"kapa": 2.0})
    with pytest.raises(ValueError, match="kappa"):
        compute_advantages("ecpo", cols, {"kappa": 0.0})
    with pytest.raises(ValueError, match="compat"):
        compute_advantages("ecpo", cols, {"compat": "verl-agent"})
    with pytest.raises(ValueError, match="lengths"):
        compute_advantages("grpo", cols | {"rewards": cols["rewards"][:-1]})
    with pytest.raises(ValueError, match="finite"):
        compute_advantages("grpo", cols | {"rewards": [math.nan] + cols["rewards"][1:]})
    with pytest.raises(ValueError, match="no step rows"):
        compute_advantages("grpo", {column: [] for column in STEP_COLUMNS})
    with pytest.raises(ValueError, match="1..T"):
        compute_advantages("grpo", cols | {"steps": [s + (s > 3) for s in cols["steps"]]})
    with pytest.raises(ValueError, match="1-based"):
        compute_advantages("grpo", cols | {"steps": [s - 1 for s in cols["steps"]]})
    with pytest.raises(ValueError, match="hashable"):
        compute_advantages("grpo", cols | {"anchor_keys": [[1]] * len(rows)})


@pytest.mark.parametrize("name, value, valid", [
    ("omega", "1", "expects float"), ("omega", -0.5, ">= 0"),
    ("gamma", 0.0, r"in \(0, 1\]"), ("gamma", 1.5, r"in \(0, 1\]"), ("gamma", math.nan, r"in \(0, 1\]"),
    ("gamma", "0.95", "expects float"), ("gamma", True, "expects float"),
    ("kappa", 0.0, "> 0"), ("kappa", [2.0], "expects float"), ("tau", 0.0, "> 0"), ("tau", None, "expects float"),
    ("d_min", 0, "integer >= 1"), ("d_min", 7.5, "expects int"), ("d_min", 7.0, "expects int"),
    ("d_min", "7", "expects int"),
    ("rho_min", 1.5, r"in \[0, 1\]"), ("rho_min", -0.1, r"in \[0, 1\]"),
    ("eps", 0.0, "> 0"), ("eps", math.inf, "> 0"),
    ("compat", "verl", "valid: native, verl-agent"), ("compat", 1, "valid: native, verl-agent"),
])
def test_hyperparameters_are_checked_up_front_with_the_valid_range(name, value, valid):
    rows, _ = _fig1_batch()
    with pytest.raises(ValueError, match=rf"credit.{name}\b.*{valid}"):
        compute_advantages("gigpo_std", _columns(rows), {name: value})


def test_hyperparameter_boundaries_are_accepted():
    cols = _columns(_fig1_batch()[0])
    for hp in ({"gamma": 1.0}, {"omega": 0}, {"rho_min": 0.0}, {"rho_min": 1}, {"d_min": 1}, {"d_min": np.int64(3)},
               {"kappa": np.float32(0.5)}):
        adv, _ = compute_advantages("ecpo", cols, hp)
        assert np.isfinite(adv).all()


@pytest.mark.parametrize("name", ESTIMATORS)
def test_finite_rewards_near_the_float_limit_are_rejected_not_turned_into_nan(name):
    """Rewards of +-1e308 are finite, but their returns overflow float64: a clear error instead of NaN rows."""
    rows, _ = _fig1_batch()
    cols = _columns(rows)
    huge = [1e308 * (1 if k % 2 else -1) if r else 1e308 for k, r in enumerate(cols["rewards"])]
    for rewards in (huge, [r * 1e199 for r in cols["rewards"]]):  # sums overflow; squared deviations overflow
        with pytest.raises(ValueError, match="rewards too large.*rescale"):
            compute_advantages(name, cols | {"rewards": rewards})
    # below the bound, finite in gives finite out, and the std-normalised estimators barely notice the scale
    adv, diag = compute_advantages(name, cols | {"rewards": [r * 1e140 for r in cols["rewards"]]})
    assert np.isfinite(adv).all() and all(math.isfinite(v) for v in diag.values())
    if name not in ("gigpo", "rloo"):
        np.testing.assert_allclose(adv, compute_advantages(name, cols)[0], rtol=1e-5, atol=1e-6)


def test_advantages_that_overflow_raise_instead_of_returning_inf():
    cols = _columns(_fig1_batch()[0])
    with pytest.raises(ValueError, match="advantages overflow float64"):
        compute_advantages("gigpo", cols | {"rewards": [r * 1e140 for r in cols["rewards"]]}, {"omega": 1e300})


# ---------------------------------------------------------------------------------------------- the ppo estimator
PPO_COLUMNS = {  # two trajectories of one group, rows scrambled: a (3 steps, reward 10 at the end), b (2 steps)
    "group_ids": [0] * 5, "traj_ids": ["a", "b", "a", "b", "a"], "steps": [3, 1, 1, 2, 2],
    "anchor_keys": ["s"] * 5, "action_keys": ["u"] * 5, "rewards": [10.0, 0.0, 0.0, 1.0, 0.0],
}
PPO_VALUES = np.array([3.0, 0.5, 1.0, 0.25, 2.0])


def _gae_by_hand(gamma: float, lam: float) -> np.ndarray:
    """A_t = sum_k (gamma lam)^k delta_{t+k}, delta_t = r_t + gamma V_{t+1} - V_t, V after the last step = 0."""
    out = np.zeros(5)
    for traj in ("a", "b"):
        rows = sorted((s, i) for i, (t, s) in enumerate(zip(PPO_COLUMNS["traj_ids"], PPO_COLUMNS["steps"]))
                      if t == traj)
        index = [i for _, i in rows]
        rewards, values = [PPO_COLUMNS["rewards"][i] for i in index], [PPO_VALUES[i] for i in index] + [0.0]
        for t in range(len(index)):
            out[index[t]] = sum((gamma * lam) ** k * (rewards[t + k] + gamma * values[t + k + 1] - values[t + k])
                                for k in range(len(index) - t))
    return out


def test_ppo_is_a_registered_estimator_that_asks_for_values():
    spec = estimator_spec("ppo")
    assert spec.needs_values and not spec.group_relative and dict(spec.options) == {"gae_lambda": 0.95}
    assert "ppo" in available_estimators() and "ppo" not in available_estimators(needs_values=False)
    assert available_estimators(needs_values=True) == ["ppo"]
    assert not any(estimator_spec(name).needs_values for name in ESTIMATORS)


def test_ppo_advantages_are_whitened_gae_on_the_given_values():
    raw = _gae_by_hand(0.9, 0.8)
    adv, diag = compute_advantages("ppo", PPO_COLUMNS, {"gamma": 0.9, "gae_lambda": 0.8}, values=PPO_VALUES)
    np.testing.assert_allclose(adv, (raw - raw.mean()) / (raw.std() + 1e-8), rtol=1e-12)
    assert diag == {"value_mean": pytest.approx(PPO_VALUES.mean()), "advantage_std": pytest.approx(raw.std())}
    rows = prepare_rows(*PPO_COLUMNS.values())
    got, targets = gae_targets(rows, PPO_VALUES, CreditConfig(gamma=0.9), 0.8)
    np.testing.assert_allclose(got, raw, rtol=1e-12)
    np.testing.assert_allclose(targets, raw + PPO_VALUES, rtol=1e-12)  # the critic's lambda-returns
    tensor_adv, _ = compute_advantages("ppo", PPO_COLUMNS | {"rewards": torch.tensor(PPO_COLUMNS["rewards"])},
                                       {"gamma": 0.9, "gae_lambda": 0.8}, values=torch.tensor(PPO_VALUES))
    assert isinstance(tensor_adv, torch.Tensor) and tensor_adv.dtype == torch.float64
    np.testing.assert_allclose(tensor_adv.numpy(), adv, rtol=1e-12)


def test_values_go_only_to_an_estimator_that_asks_for_them():
    with pytest.raises(ValueError, match="'ppo' needs values="):
        compute_advantages("ppo", PPO_COLUMNS)
    with pytest.raises(ValueError, match="'grpo' is critic-free"):
        compute_advantages("grpo", PPO_COLUMNS, values=PPO_VALUES)
    with pytest.raises(ValueError, match="unknown credit hyperparameter"):
        compute_advantages("grpo", PPO_COLUMNS, {"gae_lambda": 0.9})  # an option of ppo only
    with pytest.raises(ValueError, match=r"gae_lambda=1.5 is invalid: it must be a number in \[0, 1\]"):
        compute_advantages("ppo", PPO_COLUMNS, {"gae_lambda": 1.5}, values=PPO_VALUES)
    with pytest.raises(ValueError, match=r"values has shape \(4,\), expected \(5,\)"):
        compute_advantages("ppo", PPO_COLUMNS, values=PPO_VALUES[:4])


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_ppo_refuses_a_value_that_is_not_finite_rather_than_returning_nan_advantages(bad):
    """One nan V(s) made every advantage nan (the whitening mixes them): it is one ValueError naming values=."""
    values = PPO_VALUES.copy()
    values[2] = bad
    with pytest.raises(ValueError, match=f"values must be finite; row 2 holds {bad}"):
        compute_advantages("ppo", PPO_COLUMNS, values=values)
    with pytest.raises(ValueError, match="values must be finite"):
        gae_targets(prepare_rows(*PPO_COLUMNS.values()), torch.tensor(values), CreditConfig(), 0.9)


def test_values_and_hidden_states_that_are_not_numbers_are_named():
    with pytest.raises(ValueError, match="values must be numbers, got dtype <U1"):
        compute_advantages("ppo", PPO_COLUMNS, values=["a"] * 5)
    with pytest.raises(ValueError, match=r"hidden_states has shape \(5, 1\) \(<U1\), expected \(5, d\) finite"):
        compute_advantages("pace", PPO_COLUMNS, hidden_states=[["a"]] * 5)


def test_the_credit_config_travels_as_one_object():
    """``compute_advantages(name, rows, CreditConfig(...))`` is the same as its fields as a mapping; passing something
    else is one clear error."""
    import numpy as np
    import pytest

    from ecpo_train.credit import CreditConfig, compute_advantages

    columns = {"group_ids": [0] * 6, "traj_ids": [0, 0, 1, 1, 2, 2], "steps": [1, 2] * 3,
               "anchor_keys": ["s", "t", "s", "u", "s", "t"], "action_keys": ["a", "b", "c", "d", "a", "b"],
               "rewards": [0.0, 1.0, 0.0, 0.0, 0.0, 1.0]}
    config = CreditConfig(kappa=3.0, d_min=1, tau=1.5)
    by_object, _ = compute_advantages("ecpo", columns, config)
    by_fields, _ = compute_advantages("ecpo", columns, {"kappa": 3.0, "d_min": 1, "tau": 1.5})
    np.testing.assert_array_equal(by_object, by_fields)
    with pytest.raises(TypeError, match="a CreditConfig or a mapping of its fields"):
        compute_advantages("ecpo", columns, [("kappa", 3.0)])


def test_steps_that_are_booleans_are_refused():
    """A column of flags passed as ``steps`` read True as step 1 (every row a first step)."""
    with pytest.raises(ValueError, match="steps must be integers, got dtype bool"):
        compute_advantages("grpo", PPO_COLUMNS | {"steps": [True] * 5})


@pytest.mark.parametrize("column", ["group_ids", "traj_ids", "anchor_keys", "action_keys"])
@pytest.mark.parametrize("missing", [None, float("nan")])
def test_a_missing_id_or_key_is_refused_not_taken_for_one_id(column, missing):
    """``None`` anchor keys were one anchor (rows whose state key went missing shared evidence); a NaN id made a
    misleading 'steps 1..T' error."""
    values = list(PPO_COLUMNS[column])
    values[1] = missing
    with pytest.raises(ValueError, match=f"{column} must hold ids \\(str or int\\), and one is {missing}"):
        compute_advantages("grpo", PPO_COLUMNS | {column: values})
