"""The native ALFWorld engine plays exactly like TextWorld's engine: same texts, admissible commands (order
included), rewards, won flags and state keys, on generated games here and on real games with data."""

from __future__ import annotations

import glob
import json
import random
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import ecpo_gym  # noqa: F401
from ecpo_gym.alfworld.engine import make_engine, release_engine, state_key_of_facts
from ecpo_gym.alfworld.env import ALFWorldEnv, ALFWorldGenEnv
from ecpo_gym.alfworld.expert import play_expert
from ecpo_gym.alfworld.generator import generate_game, render_plan
from ecpo_gym.alfworld.native import GameLoadError, NativeEngine

SMALL = {"num_receptacles": (6, 10), "max_objects_per_receptacle": 2}
INVALID = ["", "   ", "help", "xyzzy", "go to nowhere 7", "take sofa 1 from apple 1", "LOOK", "go  to"]


def _same(tw_state, nat_state, scope: str) -> None:
    assert nat_state["feedback"] == tw_state["feedback"]
    assert nat_state["admissible_commands"] == tw_state["admissible_commands"]
    assert bool(nat_state["won"]) == bool(tw_state["won"])
    assert state_key_of_facts(nat_state["_facts"], scope) == state_key_of_facts(tw_state["_facts"], scope)


def _play_both(game: dict, commands_of, scope: str, steps: int = 25) -> int:
    """Drive both engines with the commands ``commands_of(state, step)`` picks; return steps compared."""
    tw, nat = make_engine(), NativeEngine()
    try:
        tw.load(game)
        nat.load(game)
        a, b = tw.reset(), nat.reset()
        _same(a, b, scope)
        for step in range(steps):
            command = commands_of(a, step)
            if command is None:
                return step
            a, reward_a, done_a = tw.step(command)
            b, reward_b, done_b = nat.step(command)
            _same(a, b, scope)
            assert (reward_a, bool(done_a)) == (reward_b, bool(done_b)), command
        return steps
    finally:
        release_engine(tw)


@pytest.mark.parametrize("task_type,seed", [("Pick", 0), ("Look", 1), ("Clean", 2), ("Heat", 3), ("Cool", 4),
                                            ("Pick2", 5), ("Look", 6)])
def test_engines_identical_on_generated_games(task_type, seed):
    generated = generate_game(task_type, seed, **SMALL)
    nat = NativeEngine()
    nat.load(generated.game)
    plan = render_plan(generated.plan, nat.entity_names())
    rng = random.Random(seed)

    def expert_then_random(state, step):
        if step == 2:
            return rng.choice(INVALID)
        if step - (step > 2) < len(plan):
            return plan[step - (step > 2)]
        if rng.random() < 0.3:
            return rng.choice(INVALID + [c.upper() for c in state["admissible_commands"][:3]])
        return rng.choice(state["admissible_commands"])

    assert _play_both(generated.game, expert_then_random, f"gen/{task_type}/{seed}", steps=len(plan) + 20) > 0
    nat.reset()
    won = [nat.step(c)[0]["won"] for c in plan]
    assert won[-1] and not any(won[:-1])


def test_envs_on_both_engines_give_identical_episodes():
    kwargs = dict(num_tasks=6, **SMALL)
    envs = {name: ALFWorldGenEnv(engine=name, **kwargs) for name in ("native", "textworld")}
    try:
        for task_id in ["gen/Heat/0", "gen/Look/1", "gen/Pick2/5"]:
            results = {name: play_expert(env, task_id) for name, env in envs.items()}
            assert results["native"] == results["textworld"] and results["native"]["won"]
            obs = {name: env.reset(options={"task_id": task_id}) for name, env in envs.items()}
            assert obs["native"][0] == obs["textworld"][0]
            assert obs["native"][1]["state_key"] == obs["textworld"][1]["state_key"]
            for action in ["inventory", "help", "not a command", obs["native"][1]["admissible_actions"][-1]]:
                steps = {name: env.step(action) for name, env in envs.items()}
                a, b = steps["native"], steps["textworld"]
                assert a[:4] == b[:4]
                assert (a[4]["state_key"], a[4]["admissible_actions"], a[4]["is_action_valid"]) == \
                    (b[4]["state_key"], b[4]["admissible_actions"], b[4]["is_action_valid"])
    finally:
        for env in envs.values():
            env.close()


def test_damaged_game_file_is_one_error_naming_the_file(tmp_path):
    game = generate_game("Pick", 0, **SMALL).game
    cases = {
        "truncated.tw-pddl": json.dumps(game)[:5000],
        "not_json.tw-pddl": "this is not a game",
        "no_problem.tw-pddl": json.dumps({k: v for k, v in game.items() if k != "pddl_problem"}),
        "unbalanced.tw-pddl": json.dumps({**game, "pddl_problem": game["pddl_problem"] + "("}),
        "forall.tw-pddl": json.dumps({**game, "pddl_problem": game["pddl_problem"].replace(
            "(:goal", "(:goal (forall (?o - object) (pickupable ?o))) (:goalx", 1)}),
        "unknown_predicate.tw-pddl": json.dumps({**game, "pddl_problem": game["pddl_problem"].replace(
            "(:init", "(:init (flying agent1)", 1)}),
        "bad_grammar.tw-pddl": json.dumps({**game, "grammar": game["grammar"].replace("action", "actio", 1)}),
    }
    for name, text in cases.items():
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(GameLoadError) as err:
            NativeEngine().load(path)
        assert str(path) in str(err.value), name
    with pytest.raises(GameLoadError, match="nowhere.tw-pddl"):
        NativeEngine().load(tmp_path / "nowhere.tw-pddl")


def test_bad_engine_name_is_a_value_error_at_construction():
    with pytest.raises(ValueError, match="engine"):
        ALFWorldGenEnv(engine="fast")
    with pytest.raises(ValueError, match="engine"):
        gym.make("ecpo/ALFWorldGen-v0", engine="TextWorld")


def test_generator_kwargs_are_checked_when_the_env_is_made():
    for bad in [{"num_receptacles": (3, 4)}, {"num_receptacles": (9, 5)}, {"num_receptacles": 7},
                {"max_objects_per_receptacle": -1}]:
        with pytest.raises(ValueError, match="num_receptacles|max_objects"):
            gym.make("ecpo/ALFWorldGen-v0", **bad)
    env = gym.make("ecpo/ALFWorldGen-v0", num_receptacles=(4, 4), num_tasks=2)
    env.reset(options={"task_id": "gen/Clean/0"})
    env.close()


def test_split_is_read_from_the_folder(tmp_path):
    # a folder named like another split, holding games: the env reports that split, not valid_seen
    game = generate_game("Pick", 0, **SMALL).game
    folder = tmp_path / "valid_unseen" / "pick_and_place_simple-Apple-None-Sofa-1" / "trial_1"
    folder.mkdir(parents=True)
    (folder / "game.tw-pddl").write_text(json.dumps(game))
    env = gym.make("ecpo/ALFWorld-v0", data_dir=tmp_path / "valid_unseen")
    assert env.unwrapped.split == "valid_unseen" and len(env.unwrapped.task_ids) == 1
    env.close()
    assert ALFWorldEnv(data_dir=tmp_path, split="valid_unseen").split == "valid_unseen"
    with pytest.raises(ValueError, match="valid_unseen"):
        ALFWorldEnv(data_dir=tmp_path / "valid_unseen", split="train")


def _real_games(data_dir: Path) -> list[str]:
    return sorted(glob.glob(str(data_dir / "alfworld" / "json_2.1.1" / "valid_seen" / "*" / "*" / "game.tw-pddl")))


@pytest.mark.slow
@pytest.mark.data
def test_engines_identical_on_a_sample_of_real_games(data_dir):
    games = _real_games(data_dir)
    assert len(games) == 140
    for path in random.Random(0).sample(games, 12):
        with open(path) as handle:
            game = json.load(handle)
        plan = list(game["walkthrough"])
        rng = random.Random(path)

        def walk(state, step, plan=plan, rng=rng):
            if step < len(plan):
                return plan[step]
            if rng.random() < 0.25:
                return rng.choice(INVALID)
            return rng.choice([c for c in state["admissible_commands"] if c != "help"])

        _play_both(game, walk, path, steps=len(plan) + 15)


@pytest.mark.slow
@pytest.mark.data
def test_walkthrough_wins_every_valid_seen_game_on_the_native_engine():
    env = ALFWorldEnv(engine="native")
    try:
        results = [play_expert(env, task_id) for task_id in env.task_ids]
    finally:
        env.close()
    assert len(results) == 140
    for r in results:
        assert r["won"] and r["terminated"] and r["all_valid"] and not r["won_at_reset"], r["task_id"]
        assert r["steps"] == r["plan_length"]


def test_native_engine_on_copied_game_file(tmp_path):
    # a game file on disk loads like its dict; the walkthrough field comes along
    generated = generate_game("Cool", 3, **SMALL)
    path = tmp_path / "game.tw-pddl"
    path.write_text(json.dumps({**generated.game, "walkthrough": ["look"]}))
    a, b = NativeEngine(), NativeEngine()
    a.load(path)
    b.load(generated.game)
    assert a.reset() == b.reset() and a.walkthrough == ["look"] and b.walkthrough is None


def test_native_env_passes_gymnasium_checks():
    env = gym.make("ecpo/ALFWorldGen-v0", engine="native", num_tasks=6, **SMALL)
    check_env(env.unwrapped, skip_render_check=True)
    assert env.unwrapped.engine == "native"
    env.close()
