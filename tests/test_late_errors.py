"""Errors found late or not naming their cause (issue 70, items 16 and 17): each is refused up front in one line
naming the setting, with input quoted only as a bounded prefix (``ecpo_gym.kwargs.shown``, the one rule)."""

from __future__ import annotations

import pytest
import torch
from cli_refusals import FAST, refused, runner  # noqa: F401  (tests/cli_refusals.py)


def test_leaderboard_refuses_more_seeds_than_it_can_list(tmp_path):
    line = refused(["leaderboard", "--agent", "random", "--seeds", "100000000000", "--out-dir", str(tmp_path / "lb")])
    assert "--seeds must be in [1, 10000]" in line
    assert not (tmp_path / "lb").exists()


@pytest.mark.parametrize("seed", [2**32, 10**30])
def test_a_seed_numpy_cannot_take_is_refused_by_name_before_the_run_folder(tmp_path, seed):
    line = refused(["train", "--config", "quickstart", f"run_dir={tmp_path / 'run'}", f"seed={seed}", *FAST])
    assert line.startswith(f"error: seed={seed} is invalid") and str(2**32 - 1) in line
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("override", [f"env_kwargs.max_steps={'9' * 100_000}",
                                      "env_kwargs.max_steps=[" + ", ".join(["1"] * 50_000) + "]",
                                      f"credit.kappa='{'k ' * 50_000}'", f"estimator='{'e ' * 50_000}'"])
def test_long_input_is_quoted_as_a_bounded_prefix(tmp_path, override):
    line = refused(["train", "--config", "quickstart", f"run_dir={tmp_path / 'run'}", *FAST, override])
    assert len(line) < 400, line[:500]
    assert override.split("=")[0].split(".")[-1] in line


def test_the_python_api_bounds_quoted_input_too():
    from ecpo_gym.kwargs import check_int
    from ecpo_train.credit import CreditConfig

    for call in (lambda: check_int("max_steps", "x " * 100_000, 1), lambda: CreditConfig(kappa="k " * 100_000)):
        with pytest.raises(ValueError) as error:
            call()
        assert len(str(error.value)) < 300


def test_a_damaged_tabular_state_says_what_is_damaged(tmp_path):
    from ecpo_train.policies.tabular import TabularSoftmaxPolicy

    state = TabularSoftmaxPolicy().state_dict()
    for extra, words in (({}, "needs 'slots'"), ({"slots": [[["a", "b"], "x"]], "generator": torch.zeros(1)},
                                                 "slot indices"), ({"slots": [], "generator": 3}, "generator state")):
        with pytest.raises(ValueError, match=words) as error:
            TabularSoftmaxPolicy().load_state_dict({**state, "_extra_state": extra})
        assert "invalid literal" not in str(error.value) and str(error.value) != "slots"


def test_an_overflow_names_the_credit_value_that_caused_it():
    from ecpo_train.core.credit import STEP_COLUMNS, compute_advantages

    columns = (["g"] * 4, [0, 1, 2, 3], [1] * 4, ["s"] * 4, ["x", "x", "y", "z"], [10.0, 0.0, 10.0, 0.0])
    with pytest.raises(ValueError, match=r"credit.kappa=1e\+308 takes the ecpo advantages past float64") as error:
        compute_advantages("ecpo", dict(zip(STEP_COLUMNS, columns)), {"kappa": 1e308})
    assert "omega" not in str(error.value)


def test_sft_out_dot_without_a_model_is_not_called_the_model_folder(tmp_path, monkeypatch):
    from ecpo_train.runtime.sft import check_sft_out

    monkeypatch.chdir(tmp_path)
    assert str(check_sft_out(".", "")) == "."  # an empty folder with no model given: sft may write there
    (tmp_path / "other.txt").write_text("x")
    with pytest.raises(ValueError, match="holds files that are not an sft output") as error:
        check_sft_out(".", "")
    assert "input model" not in str(error.value)


def test_text_policy_distributions_when_the_last_context_lists_no_command():
    from ecpo_train.policies.base import StepContext
    from ecpo_train.policies.text import TextPolicy

    policy = TextPolicy(seed=0, env_name="ecpo/ALFWorldGen-v0")
    contexts = [StepContext("ecpo/ALFWorldGen-v0", "put a mug", 1, [], "You see a mug.", actions, "s")
                for actions in (["look", "take mug 1"], [])]
    first, last = policy.action_distributions(contexts, 1.0)
    assert last == {} and set(first) == {"look", "take mug 1"} and abs(sum(first.values()) - 1) < 1e-6
    assert policy.action_distributions(contexts[::-1], 0.0)[1] in ({"look": 1.0, "take mug 1": 0.0},
                                                                   {"look": 0.0, "take mug 1": 1.0})


def test_models_tiny_names_a_seed_torch_cannot_take(tmp_path):
    line = refused(["models", "tiny", str(tmp_path / "tiny"), "--seed", str(10**23)])
    assert line.startswith("error: seed must be an integer in [0, 4294967295]")
    assert not (tmp_path / "tiny").exists()
