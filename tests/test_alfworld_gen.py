"""Generated ALFWorld households: expert plans win, goals are false at reset, games are varied and
deterministic, state keys follow the world state."""

from __future__ import annotations

import re
from collections import Counter

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import ecpo_gym  # noqa: F401
from ecpo_gym.alfworld.engine import DYNAMIC_PREDICATES, SUBTASKS, state_key_of_facts
from ecpo_gym.alfworld.env import ALFWorldGenEnv
from ecpo_gym.alfworld.expert import ExpertAgent, expert_plan, play_expert, play_expert_parallel
from ecpo_gym.alfworld.generator import alfworld_tables, generate_game

SMALL = {"num_receptacles": (6, 10), "max_objects_per_receptacle": 2}


@pytest.fixture(scope="module")
def env():
    env = ALFWorldGenEnv(num_tasks=12)
    yield env
    env.close()


def test_made_by_id_passes_check_env():
    env = gym.make("ecpo/ALFWorldGen-v0", num_tasks=6, **SMALL)
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


def test_task_ids_cycle_types_and_filter():
    env = ALFWorldGenEnv(num_tasks=12, task_types=["heat", "pick_two_obj_and_place"])
    assert env.task_ids[:4] == ["gen/Heat/0", "gen/Pick2/1", "gen/Heat/2", "gen/Pick2/3"]
    with pytest.raises(ValueError):
        ALFWorldGenEnv(task_types=["Slice"])


@pytest.mark.slow
def test_expert_plans_win_100_seeds_and_goals_are_false_at_reset():
    ids = [f"gen/{SUBTASKS[k % 6]}/{k}" for k in range(100)]
    results = play_expert_parallel("ecpo/ALFWorldGen-v0", ids, env_kwargs=SMALL, processes=2)
    assert [r["task_id"] for r in results] == ids
    for r in results:
        # won exactly on the last plan step, every command admissible, reward 10 only there
        assert r["won"] and r["terminated"] and r["all_valid"] and not r["won_at_reset"], r["task_id"]
        assert r["steps"] == r["plan_length"] and r["rewards"] == [0.0] * (r["steps"] - 1) + [10.0]
    assert Counter(r["task_type"] for r in results) == {t: 17 if k < 4 else 16 for k, t in enumerate(SUBTASKS)}


def test_default_size_games_win_and_start_unwon(env):
    for k, task_type in enumerate(SUBTASKS):
        task_id = f"gen/{task_type}/{1000 + k}"
        _, info = env.reset(options={"task_id": task_id})
        assert env.game_state["won"] is False and info["task_type"] == task_type
        assert 12 <= len([a for a in info["admissible_actions"] if a.startswith("go to")]) <= 20
        result = play_expert(env, task_id)
        assert result["won"] and result["steps"] == result["plan_length"], task_id


def test_generation_is_deterministic_and_goal_matches_intro(env):
    a, b = generate_game("Cool", 7), generate_game("Cool", 7)
    assert a.game == b.game and a.plan == b.plan
    assert generate_game("Cool", 8).game["pddl_problem"] != a.game["pddl_problem"]
    obs1, info1 = env.reset(seed=3, options={"task_id": "gen/Cool/7"})
    obs2, info2 = env.reset(seed=4, options={"task_id": "gen/Cool/7"})
    assert obs1 == obs2 and info1["state_key"] == info2["state_key"]
    assert obs1.endswith(f"Your task is to: {a.goal}.") and info1["task"] == a.goal
    assert env.reset(seed=5)[1]["task_id"] == env.reset(seed=5)[1]["task_id"]


def test_generated_games_are_varied():
    tables = alfworld_tables()
    rclasses, oclasses, openable_games, lamp_games, toggled_games = set(), set(), 0, 0, 0
    for k in range(60):
        game = generate_game(SUBTASKS[k % 6], k)
        problem = game.game["pddl_problem"]
        rclasses |= set(re.findall(r"\(receptacleType \S+ (\w+)Type\)", problem))
        oclasses |= set(re.findall(r"\(objectType \S+ (\w+)Type\)", problem))
        openable_games += "(openable " in problem
        lamp_games += "DeskLampType)" in problem
        toggled_games += "(isToggled " in problem
        assert "(opened " not in problem  # openable receptacles start closed
    # valid_seen's 140 problems hold 29 receptacle classes and 76 object classes (scenery included)
    assert len(rclasses) >= 29 and len(oclasses) >= 70
    assert rclasses & tables.openable >= {"Cabinet", "Drawer", "Fridge", "Microwave", "Safe"}
    assert openable_games >= 50 and lamp_games >= 10 and 0 < toggled_games < lamp_games


def _go(env, *actions):
    info = None
    for a in actions:
        _, _, _, _, info = env.step(a)
        assert info["is_action_valid"], (a, info["admissible_actions"])
    return info["state_key"]


def test_state_keys_follow_the_world_state(env):
    _, info = env.reset(options={"task_id": "gen/Heat/0"})
    places = [a[len("go to "):] for a in info["admissible_actions"] if a.startswith("go to ")]
    others = [p for p in places if not p.startswith("microwave")]
    y, z = others[0], others[1]
    start_key = info["state_key"]
    key_a = _go(env, "go to microwave 1", "open microwave 1", f"go to {y}")
    env.reset(options={"task_id": "gen/Heat/0"})
    key_b = _go(env, f"go to {z}", "go to microwave 1", "open microwave 1", "inventory", f"go to {y}")
    assert key_a == key_b != start_key  # same world state through different action orders
    # the key is the game-scoped digest of the positive dynamic facts only
    facts = env.game_state["_facts"]
    assert key_a == state_key_of_facts(facts, scope="gen/Heat/0") != state_key_of_facts(facts, scope="gen/Heat/1")
    assert state_key_of_facts([f for f in facts if f.name not in DYNAMIC_PREDICATES]) == state_key_of_facts([])
    # look / inventory / examine change the text, not the key
    for a in ["look", "inventory", f"examine {y}"]:
        _, _, _, _, info = env.step(a)
        assert info["state_key"] == key_a
    # moving an object changes the key; putting it back restores it
    plan = expert_plan(env)
    env.reset(options={"task_id": "gen/Heat/0"})
    before_take = _go(env, *plan[: plan.index(next(c for c in plan if c.startswith("take ")))])
    take = next(c for c in plan if c.startswith("take "))
    held = _go(env, take)
    obj, src = re.match(r"take (.+) from (.+)", take).groups()
    assert held != before_take
    assert _go(env, f"move {obj} to {src}") == before_take


def test_help_hidden_but_runs_and_expert_agent(env):
    _, info = env.reset(options={"task_id": "gen/Look/1"})
    assert "help" not in info["admissible_actions"] and "look" in info["admissible_actions"]
    obs, reward, _, _, info = env.step("help")
    assert info["action_key"] == "help" and reward == 0.0 and "Available commands" in obs
    _, info = env.reset(options={"task_id": "gen/Look/1"})
    agent = ExpertAgent()
    agent.start(env)
    obs, done = "", False
    while not done:
        obs, reward, terminated, truncated, info = env.step(agent.act(obs, info))
        done = terminated or truncated
    assert info["won"] and reward == 10.0


def test_bad_ids_raise_clear_errors(env):
    with pytest.raises(KeyError, match="gen/Heat/17"):
        env.reset(options={"task_id": "gen/heat"})
    with pytest.raises(ValueError):
        generate_game("Pick", 0, num_receptacles=(2, 3))


def test_closing_one_env_leaves_others_working_and_exit_is_clean(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "close_envs.py"
    script.write_text(
        "from ecpo_gym.alfworld.env import ALFWorldGenEnv\n"
        "from ecpo_gym.alfworld.expert import play_expert\n"
        "envs = [ALFWorldGenEnv(num_tasks=2, num_receptacles=(6, 8)) for _ in range(3)]\n"
        "for env in envs:\n"
        "    env.reset(options={'task_id': 'gen/Pick2/5'})\n"
        "    for _ in range(20):\n"
        "        env.step(env.admissible_actions()[-1])\n"
        "envs[0].close(); envs[1].close()\n"
        "assert play_expert(envs[2], 'gen/Pick2/5')['won']\n"
        "envs[2].close()\n"
        "print('clean')\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0 and "clean" in done.stdout, done.stderr[-2000:]
