"""Env kwargs are checked at ``gym.make`` (issue 25): a wrong type, an out-of-range value or a size too large to
build is one ``ValueError`` naming the argument, before any layout, catalogue or world is built."""

from __future__ import annotations

import gymnasium as gym
import pytest

import ecpo_gym  # noqa: F401  (registers the ids)

DIAGNOSTIC = ["ecpo/DivergentAnchor-v0", "ecpo/DivergentAnchorNoisy-v0", "ecpo/DivergentAnchorWide-v0"]
BAD_DIAGNOSTIC = [
    ({"depth": 100_000_000}, "depth=100000000 is invalid: it must be an integer in [1, 10000]"),
    ({"depth": 1.5}, "depth=1.5 is invalid"),
    ({"depth": "8"}, "depth='8' is invalid"),
    ({"num_tasks": 10**9}, "num_tasks=1000000000 is invalid"),
    ({"depth": 5000, "num_tasks": 100}, "at most 100000 rooms"),
    ({"branching": 11}, "branching=11 is invalid"),
    ({"rare_prob": 5}, "rare_prob=5 is invalid: it must be a pair"),
    ({"rare_prob": (0.9, 0.1)}, "low <= high"),
    ({"good_prob": 1.5}, "good_prob=1.5 is invalid"),
    ({"noise": "x"}, "noise='x' is invalid"),
    ({"layout_seed": -1}, "layout_seed=-1 is invalid"),
    ({"max_steps": True}, "max_steps=True is invalid"),
    ({"max_steps": 0}, "max_steps=0 is invalid"),
    ({"reward_success": float("nan")}, "reward_success=nan is invalid"),
]


@pytest.mark.parametrize("env_id", DIAGNOSTIC)
@pytest.mark.parametrize("kwargs,message", BAD_DIAGNOSTIC, ids=[str(k) for k, _ in BAD_DIAGNOSTIC])
def test_diagnostic_envs_refuse_bad_kwargs_at_make(env_id, kwargs, message):
    with pytest.raises(ValueError) as caught:
        gym.make(env_id, **kwargs)
    assert message in str(caught.value)


BAD_WEBSHOP_GEN = [
    ({"num_products": 10**9}, "num_products=1000000000 is invalid: it must be an integer in [1, 50000]"),
    ({"num_products": 0}, "num_products=0 is invalid"),
    ({"catalogue_seed": -1}, "catalogue_seed=-1 is invalid"),
    ({"seed": "x"}, "seed='x' is invalid"),
    ({"shuffle_seed": 1.5}, "shuffle_seed=1.5 is invalid"),
    ({"split": "nope"}, "split='nope' is invalid"),
    ({"split_convention": "nope"}, "split_convention='nope' is invalid"),
    ({"observation_mode": "nope"}, "observation_mode='nope' is invalid"),
    ({"show_attrs": "yes"}, "show_attrs='yes' is invalid"),
    ({"max_steps": 1.5}, "max_steps=1.5 is invalid"),
    ({"max_query_chars": 0}, "max_query_chars=0 is invalid"),
    ({"reward_invalid": "x"}, "reward_invalid='x' is invalid"),
]


@pytest.mark.parametrize("kwargs,message", BAD_WEBSHOP_GEN, ids=[str(k) for k, _ in BAD_WEBSHOP_GEN])
def test_generated_webshop_refuses_bad_kwargs_at_make(kwargs, message):
    with pytest.raises(ValueError) as caught:
        gym.make("ecpo/WebShopGen-v0", **kwargs)
    assert message in str(caught.value)


BAD_SEARCHQA_GEN = [
    ({"world_seed": -1}, "world_seed=-1 is invalid"),
    ({"world_size": {"n_people": 10**8}}, "world_size.n_people=100000000 is invalid"),
    ({"world_size": {"n_planets": 3}}, "world_size key='n_planets' is invalid"),
    ({"world_size": [3]}, "world_size=[3] is invalid"),
    ({"topk": 0}, "topk=0 is invalid"),
    ({"topk": "3"}, "topk='3' is invalid"),
    ({"max_steps": 10**9}, "max_steps=1000000000 is invalid"),
    ({"max_query_chars": -1}, "max_query_chars=-1 is invalid"),
]


@pytest.mark.parametrize("kwargs,message", BAD_SEARCHQA_GEN, ids=[str(k) for k, _ in BAD_SEARCHQA_GEN])
def test_generated_searchqa_refuses_bad_kwargs_at_make(kwargs, message):
    with pytest.raises(ValueError) as caught:
        gym.make("ecpo/SearchQAGen-v0", **kwargs)
    assert message in str(caught.value)


def test_valid_kwargs_still_make_working_envs():
    env = gym.make("ecpo/DivergentAnchor-v0", depth=3, num_tasks=2, rare_prob=[0.2, 0.4], max_steps=6)
    observation, info = env.reset(seed=0)
    assert observation.startswith("room 1/3") and len(info["admissible_actions"]) == 3
    env = gym.make("ecpo/SearchQAGen-v0", world_size={"n_people": 5}, topk=2)
    env.reset(seed=0)
    env.close()


@pytest.mark.parametrize("env_id,kwargs,message", [
    ("ecpo/WebShop-v0", {"max_steps": 0}, "max_steps=0 is invalid"),
    ("ecpo/WebShop-v0", {"num_products": -5}, "num_products=-5 is invalid"),
    ("ecpo/WebShop-v0", {"small": "yes"}, "small='yes' is invalid"),
    ("ecpo/SearchQA-v0", {"topk": 0}, "topk=0 is invalid"),
    ("ecpo/SearchQA-v0", {"max_steps": "4"}, "max_steps='4' is invalid"),
])
def test_real_data_envs_refuse_bad_kwargs_before_looking_for_their_data(env_id, kwargs, message):
    """The data folder does not exist: the refusal names the bad argument, so it came before any loading."""
    data = {"data_dir": "/nonexistent/ecpo-data"}
    with pytest.raises(ValueError) as caught:
        gym.make(env_id, **data, **kwargs)
    assert message in str(caught.value)


def _declared_ids() -> list[str]:
    from gymnasium.envs.registration import registry

    return sorted(env_id for env_id in registry if env_id.startswith("ecpo/"))


@pytest.mark.parametrize("env_id", _declared_ids())
@pytest.mark.parametrize("name, value", [("reward_success", float("nan")), ("reward_invalid", float("inf")),
                                         ("reward_failure", float("-inf")), ("reward_success", "1")])
def test_every_env_refuses_a_reward_that_is_not_a_finite_number_at_make(env_id, name, value):
    """Issue 58.7: ALFWorld and ALFWorldGen accepted reward_success=nan and reward_invalid=inf; every env's
    rewards are checked in the one base constructor, before any data is looked for."""
    generated = "Gen-" in env_id or "DivergentAnchor" in env_id  # (the others read a data folder: none here)
    with pytest.raises(ValueError) as caught:
        gym.make(env_id, **{name: value}, **({} if generated else {"data_dir": "/nonexistent/ecpo-data"}))
    assert f"{name}={value!r} is invalid: it must be a finite number" in str(caught.value)
