"""ecpo/WebShopGen-v0: the contract, the scripted shopper, state keys, canonical actions, robustness."""

import subprocess
import sys

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ecpo_gym  # noqa: F401  (registers the ids)
from ecpo_gym.canonical import INVALID_ACTION
from ecpo_gym.webshop.env import WebShopGenEnv
from ecpo_gym.webshop.expert import expert_actions_for_task

SMALL = {"num_products": 150, "catalogue_seed": 3}


@pytest.fixture(scope="module")
def env():
    return WebShopGenEnv(**SMALL)


def test_scripted_shopper_wins_every_generated_goal(env):
    assert len(env.task_ids) > 100
    for task_id in env.task_ids:
        env.reset(options={"task_id": task_id})
        actions = expert_actions_for_task(env, task_id)
        assert actions[0].startswith("search[") and actions[-1] == "click[buy now]"
        for action in actions:
            _, reward, terminated, truncated, info = env.step(action)
            assert info["is_action_valid"], (task_id, action)
        assert terminated and not truncated
        assert info["won"] and info["score"] == 1.0 and reward == 10.0, (task_id, info)


def test_wrong_purchase_scores_below_one(env):
    task_id = env.task_ids[0]
    goal = env.goal_of(task_id)
    env.reset(options={"task_id": task_id})
    navigation = ("search", "click[next", "click[b0")
    actions = [a for a in expert_actions_for_task(env, task_id) if a.startswith(navigation)]
    for action in actions:
        env.step(action)
    _, reward, terminated, _, info = env.step("click[buy now]")
    assert terminated and reward == 0.0 and not info["won"]
    if goal.goal_options:  # no option chosen: score loses the option terms
        assert info["score"] < 1.0


def test_score_reward_mode_pays_the_score_of_every_purchase(env):
    """reward_mode="score": a purchase earns reward_success x WebShop's score (a near miss most of a win, where
    the default pays it nothing); a win still earns reward_success, and success (won) is the same in both."""
    scored = WebShopGenEnv(reward_mode="score", **SMALL)
    task_id = next(t for t in env.task_ids if env.goal_of(t).goal_options)
    navigation = ("search", "click[next", "click[b0")
    for shop in (env, scored):
        shop.reset(options={"task_id": task_id})
        for action in (a for a in expert_actions_for_task(shop, task_id) if a.startswith(navigation)):
            assert shop.step(action)[1] == 0.0  # no reward before the purchase
    _, plain, _, _, plain_info = env.step("click[buy now]")
    _, reward, terminated, _, info = scored.step("click[buy now]")
    assert terminated and not info["won"] and info["score"] == plain_info["score"] and 0.0 < info["score"] < 1.0
    assert plain == 0.0 and reward == pytest.approx(10.0 * info["score"])
    scored.reset(options={"task_id": task_id})
    for action in expert_actions_for_task(scored, task_id):
        _, reward, _, _, info = scored.step(action)
    assert info["won"] and reward == 10.0
    with pytest.raises(ValueError, match="reward_mode='dense' is invalid"):
        WebShopGenEnv(reward_mode="dense", **SMALL)


def test_gymnasium_make_and_env_checker():
    from gymnasium.utils.env_checker import check_env

    made = gym.make("ecpo/WebShopGen-v0", **SMALL)
    check_env(made.unwrapped, skip_render_check=True)
    obs, info = made.reset(seed=0)
    assert obs.startswith("WebShop [SEP] Instruction: [SEP] ") and obs.endswith(" [SEP] Search")
    assert info["admissible_actions"] == ["search[<query>]"] and info["state_key"] == "home"


def test_state_key_is_the_page_identity_not_the_path(env):
    task_id = env.task_ids[0]
    env.reset(options={"task_id": task_id})
    _, _, _, _, results = env.step("search[ Red   Shoes ]")
    assert results["action_key"] == "search[red shoes]" and results["state_key"] == "results|q=red shoes|p=1"
    asin = next(a for a in results["admissible_actions"] if a.startswith("click[b0"))
    _, _, _, _, item = env.step(asin)
    _, _, _, _, back = env.step("click[< prev]")
    assert back["state_key"] == results["state_key"]
    # options chosen in either order reach the same key
    env.step(asin)
    product = env.catalogue.by_asin[item["state_key"].split("asin=")[1].split("|")[0]]
    values = [vals[0] for vals in product.options.values()]
    keys = []
    for order in (values, values[::-1]):
        env.reset(options={"task_id": task_id})
        env.step("search[red shoes]")
        env.step(asin)
        for value in order:
            _, _, _, _, info = env.step(f"click[{value}]")
        keys.append(info["state_key"])
    assert keys[0] == keys[1]
    # a search from another page still lands on the same results state
    _, _, _, _, again = env.step("search[red shoes]")
    assert again["state_key"] == results["state_key"]


def test_actions_grammar_and_invalid_penalty(env):
    obs, _ = env.reset(options={"task_id": env.task_ids[1]})
    for bad in ("click[buy now]", "search[]", "buy the thing", "click[search]", "", "search", None, 42):
        new_obs, reward, terminated, truncated, info = env.step(bad)
        assert info["action_key"] == INVALID_ACTION and not info["is_action_valid"]
        assert reward == pytest.approx(-0.1) and new_obs == obs and info["state_key"] == "home"
        assert not terminated and not truncated
    _, _, _, _, info = env.step("search[wireless earbuds] trailing text")  # not the whole action: invalid
    assert info["action_key"] == INVALID_ACTION and info["state_key"] == "home"
    _, _, _, _, info = env.step('"Search[Wireless  earbuds]".')
    assert info["action_key"] == "search[wireless earbuds]" and info["is_action_valid"]
    assert info["admissible_actions"][0] == "click[back to search]"
    assert env.canonical_action("  CLICK[Next >]. ") == "click[next >]"
    _, _, _, _, info = env.step("click[next >]")
    assert info["state_key"].endswith("|p=2") and "click[< prev]" in info["admissible_actions"]


def test_truncation_at_max_steps():
    short = WebShopGenEnv(max_steps=3, **SMALL)
    short.reset(seed=1)
    for step in range(3):
        _, _, terminated, truncated, _ = short.step("search[tea]")
    assert truncated and not terminated


def test_text_rich_marks_buttons_and_clicked_options():
    rich = WebShopGenEnv(observation_mode="text_rich", **SMALL)
    task_id = next(t for t in rich.task_ids if rich.goal_of(t).goal_options)
    rich.reset(options={"task_id": task_id})
    actions = expert_actions_for_task(rich, task_id)
    for action in actions[:-1]:
        obs, *_ = rich.step(action)
    last_value = actions[-2][len("click["):-1]
    assert f"[clicked button] {last_value} [clicked button_]" in obs
    assert obs.startswith("You have clicked ") and "[button] Buy Now [button_]" in obs


def test_same_seed_gives_same_goals_in_another_process():
    code = ("from ecpo_gym.webshop.env import WebShopGenEnv as E; e = E(num_products=80, catalogue_seed=5);"
            "print(repr([(g.asin, g.instruction_text, g.price_upper) for g in e.catalogue.goals]))")
    outputs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                              env={"PYTHONHASHSEED": str(seed), "PATH": ""}).stdout for seed in (1, 2)}
    assert len(outputs) == 1 and "price lower than" in outputs.pop()


def test_random_shopping_rarely_wins(env):
    import numpy as np

    rng = np.random.default_rng(0)
    wins = episodes = 0
    for episode in range(150):
        _, info = env.reset(seed=episode)
        done = False
        while not done:
            actions = info["admissible_actions"]
            action = actions[int(rng.integers(len(actions)))]
            if action == "search[<query>]":
                action = f"search[{env.goal.query}]"  # even with the right query
            _, _, terminated, truncated, info = env.step(action)
            done = terminated or truncated
        wins += info["won"]
        episodes += 1
    assert wins / episodes < 0.05


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.text(max_size=40),
                          st.sampled_from(["click[", "search[x]", "click[next >]", "click[< prev]",
                                           "click[back to search]", "click[buy now]", "]["])),
                max_size=12))
def test_fuzzed_actions_never_raise(env, actions):
    _, info = env.reset(seed=7)
    for action in actions:
        if not info["admissible_actions"]:
            break
        _, reward, terminated, truncated, info = env.step(action)
        assert isinstance(info["state_key"], str)
        assert reward in (0.0, 10.0) or reward == pytest.approx(-0.1)
        if terminated or truncated:
            break
