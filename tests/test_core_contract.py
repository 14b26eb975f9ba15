"""The TextAgentEnv contract on a tiny environment defined here: a row of rooms with a key and a door."""

from __future__ import annotations

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from ecpo_gym import INVALID_ACTION, ActionCanonicalizer, TaskStart, TextAgentEnv, Transition

INFO_KEYS = {"task_id", "task", "task_type", "state_key", "observation_key", "admissible_actions", "step"}
STEP_KEYS = INFO_KEYS | {"action_key", "is_action_valid", "won"}


class KeyDoorEnv(TextAgentEnv):
    """Corridor of ``n`` rooms; the key lies in the last room; ``open door`` in room 0 with the key wins."""

    canonicalizer = ActionCanonicalizer(rewrites=[(r"^walk (east|west)$", r"go \1"), (r"\bthe\s+", "")])

    def __init__(self, max_steps: int = 8, **kwargs):
        super().__init__(max_steps=max_steps, **kwargs)
        self.released = False

    @property
    def task_ids(self):
        return ["corridor-2", "corridor-3"]

    def _load_task(self, task_id):
        self.length = int(task_id.split("-")[1])
        self.room, self.has_key = 0, False
        return TaskStart(observation=f"You are in room 0 of {self.length}.", task="open the door",
                         task_type="KeyDoor", extra_info={"length": self.length})

    def _admissible_actions(self):
        actions = ["look"]
        if self.room > 0:
            actions.append("go west")
        if self.room < self.length - 1:
            actions.append("go east")
        if self.room == self.length - 1 and not self.has_key:
            actions.append("take key")
        if self.room == 0 and self.has_key:
            actions.append("open door")
        return actions

    def _state_key(self):
        return f"{self.room}|{int(self.has_key)}"

    def _execute(self, command):
        if command == "go east":
            self.room += 1
        elif command == "go west":
            self.room -= 1
        elif command == "take key":
            self.has_key = True
        elif command == "open door":
            return Transition("The door opens.", won=True)
        return Transition(f"You are in room {self.room}.")

    def _release(self):
        self.released = True


def test_reset_and_step_info_keys_and_rewards():
    env = KeyDoorEnv()
    obs, info = env.reset(seed=0, options={"task_id": "corridor-2"})
    assert obs == "You are in room 0 of 2."
    assert INFO_KEYS <= set(info) and info["won"] is False and info["length"] == 2
    assert info["task_id"] == "corridor-2" and info["task"] == "open the door" and info["task_type"] == "KeyDoor"
    assert info["state_key"] == "0|0" and info["observation_key"] == "you are in room 0 of 2"
    assert info["admissible_actions"] == ["look", "go east"] and info["step"] == 0
    total = 0.0
    for action in ["Walk East", "take the key.", "  GO   west ", "open door"]:
        obs, reward, terminated, truncated, info = env.step(action)
        assert STEP_KEYS <= set(info) and info["is_action_valid"]
        total += reward
    assert (terminated, truncated, info["won"], reward, total) == (True, False, True, 10.0, 10.0)
    assert info["action_key"] == "open door" and info["step"] == 4


def test_invalid_action_costs_penalty_and_keeps_state():
    env = KeyDoorEnv(reward_invalid=-0.5)
    env.reset(options={"task_id": "corridor-3"})
    for bad in ["take key", "", "go north", None, 17, "go east now"]:
        obs, reward, terminated, truncated, info = env.step(bad)
        assert not truncated
        assert (reward, terminated, info["action_key"], info["is_action_valid"]) == (-0.5, False, INVALID_ACTION, False)
        assert obs == "Nothing happens." and info["state_key"] == "0|0" and info["won"] is False


def test_step_limit_truncates_and_step_after_done_is_inert():
    env = KeyDoorEnv(max_steps=3)
    env.reset(options={"task_id": "corridor-3"})
    results = [env.step("look") for _ in range(3)]
    assert [r[3] for r in results] == [False, False, True] and not any(r[2] for r in results)
    obs, reward, terminated, truncated, info = env.step("go east")
    assert obs == "You are in room 0."  # the last observation, unchanged
    assert STEP_KEYS <= set(info) and info["action_key"] == INVALID_ACTION and info["won"] is False
    assert (reward, terminated, truncated, info["is_action_valid"]) == (0.0, False, True, False)
    assert "error" in info and info["state_key"] == "0|0"
    env.reset(options={"task_id": "corridor-3"})
    assert env.step("go east")[4]["state_key"] == "1|0"


def test_step_before_reset_raises_reset_needed():
    with pytest.raises(gym.error.ResetNeeded):
        KeyDoorEnv().step("look")


def test_failed_reset_leaves_no_half_reset_episode():
    env = KeyDoorEnv()
    env.reset(options={"task_id": "corridor-2"})
    env.step("go east")
    with pytest.raises(ValueError):
        env.reset(options={"task_id": "corridor-x"})  # the task cannot load
    with pytest.raises(gym.error.ResetNeeded):  # not the old episode under the new task id
        env.step("look")
    _, info = env.reset(options={"task_id": "corridor-3"})
    assert (info["task_id"], info["state_key"], info["step"]) == ("corridor-3", "0|0", 0)


def test_seeded_reset_is_deterministic_and_render_ansi():
    env = KeyDoorEnv(render_mode="ansi")
    picks = {env.reset(seed=s)[1]["task_id"] for s in range(20)}
    assert picks == {"corridor-2", "corridor-3"}
    assert [env.reset(seed=7)[1]["task_id"] for _ in range(3)] == [KeyDoorEnv().reset(seed=7)[1]["task_id"]] * 3
    env.reset(seed=1)
    env.step("go east")
    assert env.render() == "You are in room 1."
    assert KeyDoorEnv().render() is None
    with pytest.raises(ValueError):
        KeyDoorEnv(render_mode="human")


def test_spaces_contain_any_text_and_close_releases():
    env = KeyDoorEnv()
    assert env.observation_space.contains("Ünïcode\nwith [punct]!") and not env.action_space.contains(3)
    check_env(env, skip_render_check=True)
    env.close()
    assert env.released


def test_a_parser_that_raises_gives_an_invalid_action():
    class FragileParser(KeyDoorEnv):
        def parse_action(self, action):
            if action == "crash":
                raise RuntimeError("parser bug")
            return super().parse_action(action)

    env = FragileParser()
    env.reset(options={"task_id": "corridor-2"})
    obs, reward, terminated, truncated, info = env.step("crash")
    assert (obs, reward, terminated, truncated) == ("Nothing happens.", -0.1, False, False)
    assert STEP_KEYS <= set(info) and info["action_key"] == INVALID_ACTION and "parser bug" in info["error"]
    assert env.step("go east")[4]["state_key"] == "1|0"


def test_custom_rewards():
    env = KeyDoorEnv(reward_success=1.0, reward_invalid=-0.01)
    env.reset(options={"task_id": "corridor-2"})
    rewards = [env.step(a)[1] for a in ["xyz", "go east", "take key", "go west", "open door"]]
    assert rewards == [-0.01, 0.0, 0.0, 0.0, 1.0]


# ---------------------------------------------------------------------- failed resets (issue #15)
EMBEDDED_ENVS = {
    "ecpo/ALFWorldGen-v0": {"num_tasks": 6},
    "ecpo/WebShopGen-v0": {"num_products": 80, "catalogue_seed": 5},
    "ecpo/SearchQAGen-v0": {},
    "ecpo/DivergentAnchor-v0": {},
    "ecpo/DivergentAnchorNoisy-v0": {},
    "ecpo/DivergentAnchorWide-v0": {},
}


def test_unknown_task_error_is_both_key_error_and_value_error_and_prints_plainly():
    from ecpo_gym import UnknownTaskError

    error = UnknownTaskError("unknown task_id 'x'")
    assert isinstance(error, KeyError) and isinstance(error, ValueError)
    assert str(error) == "unknown task_id 'x'"  # not KeyError's repr with extra quotes


@pytest.mark.parametrize("env_id", [*EMBEDDED_ENVS, "KeyDoor"])
def test_unknown_task_id_is_one_error_type_and_ends_the_previous_episode(env_id):
    from ecpo_gym import UnknownTaskError

    env = KeyDoorEnv() if env_id == "KeyDoor" else gym.make(env_id, **EMBEDDED_ENVS[env_id]).unwrapped
    env.reset(seed=0)
    with pytest.raises(UnknownTaskError, match="no/such"):
        env.reset(options={"task_id": "no/such"})
    with pytest.raises(gym.error.ResetNeeded):  # not a step of the previous episode
        env.step("look")
    _, info = env.reset(options={"task_id": env.task_ids[0]})
    assert info["task_id"] == env.task_ids[0]
    env.close()


@pytest.mark.parametrize("options", ["corridor-2", ["task_id", "corridor-2"], 3, ("task_id",)])
def test_reset_options_that_are_not_a_dict_are_a_clear_error(options):
    env = KeyDoorEnv()
    env.reset(options={"task_id": "corridor-2"})
    with pytest.raises(TypeError, match="options=.*dict"):
        env.reset(options=options)
    with pytest.raises(gym.error.ResetNeeded):
        env.step("look")


@pytest.mark.parametrize("options", [{"task": "corridor-3"}, {"task_id": "corridor-3", "taskid": "x"},
                                     {"x" * 10_000: 1}])
def test_reset_options_other_than_task_id_are_refused_not_ignored(options):
    """A misspelt key (``task`` for ``task_id``) used to be ignored: the episode was a random task."""
    env = KeyDoorEnv()
    env.reset(options={"task_id": "corridor-2"})
    with pytest.raises(TypeError, match="reads only 'task_id'; got '(task|taskid|x+\\.\\.\\.)") as raised:
        env.reset(options=options)
    assert len(str(raised.value)) < 300  # a huge key is quoted as a prefix
    with pytest.raises(gym.error.ResetNeeded):
        env.step("look")


def test_webshop_rejects_options_that_are_not_a_dict():
    env = gym.make("ecpo/WebShopGen-v0", **EMBEDDED_ENVS["ecpo/WebShopGen-v0"]).unwrapped
    env.reset(seed=0)
    with pytest.raises(TypeError, match="dict"):
        env.reset(options="goal_0")
    with pytest.raises(gym.error.ResetNeeded):
        env.step("search[shoes]")
    for bad in ("goal_-1", "goal_ 3", "goal_3_0", "goal_99999", "fixed_0"):
        with pytest.raises(KeyError):
            env.reset(options={"task_id": bad})


# ---------------------------------------------------------------------- families and data_dir (issue #12)
def test_every_registered_id_declares_its_family():
    import ecpo_gym
    from ecpo_gym import ENV_ENTRY_POINTS, EnvFamily, family_of
    from ecpo_gym.families import FAMILIES

    assert set(ecpo_gym.ENV_FAMILIES) == set(ENV_ENTRY_POINTS)
    for env_id in ENV_ENTRY_POINTS:
        family = family_of(env_id)
        assert isinstance(family, EnvFamily) and family.family in FAMILIES
        assert family_of(gym.spec(env_id)) == family and "ecpo_family" not in gym.spec(env_id).kwargs
        assert family_of(f"ecpo_gym:{env_id}") == family
    assert family_of("ecpo/ALFWorld-v0") == EnvFamily("alfworld", "alfworld", "alfworld", "alfworld_valid_seen",
                                                      "data_dir", "ecpo_gym.alfworld.commands:open_commands")
    assert family_of("ecpo/DivergentAnchorWide-v0").family == "diagnostic"
    assert family_of("ecpo/DivergentAnchor-v0").prompt == "default"
    assert [i for i in ENV_ENTRY_POINTS if family_of(i).needs_data] == [
        "ecpo/ALFWorld-v0", "ecpo/WebShop-v0", "ecpo/SearchQA-v0"]
    made = gym.make("ecpo/DivergentAnchor-v0")
    assert family_of(made) == family_of(made.unwrapped) == family_of(made.spec) == family_of("ecpo/DivergentAnchor-v0")
    assert family_of("CartPole-v1") is None and family_of(KeyDoorEnv()) is None


def test_manifests_named_by_families_exist():
    from pathlib import Path

    from ecpo_gym import ENV_FAMILIES

    manifests = Path(__file__).resolve().parent.parent / "ecpo_train" / "manifests"
    if not manifests.is_dir():
        pytest.skip("no manifests folder in this checkout")
    for family in ENV_FAMILIES.values():
        if family.manifest is not None:
            assert (manifests / f"{family.manifest}.json").is_file(), family


def test_every_real_data_env_takes_data_dir(tmp_path, monkeypatch):
    import inspect

    from ecpo_gym import ENV_ENTRY_POINTS, family_of
    from ecpo_gym.alfworld.env import ALFWorldEnv

    for env_id, entry_point in ENV_ENTRY_POINTS.items():
        if family_of(env_id).needs_data:
            module, _, name = entry_point.partition(":")
            cls = getattr(__import__(module, fromlist=[name]), name)
            assert "data_dir" in inspect.signature(cls).parameters, env_id
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    for kwarg in ("data_dir", "data_path"):  # the old name still works for ALFWorld
        with pytest.raises(FileNotFoundError, match="nowhere"):
            ALFWorldEnv(**{kwarg: tmp_path / "nowhere"})
