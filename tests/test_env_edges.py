"""Environments at their edges (issue 70, items 10 and 13): a step limit no id can skip, kwargs refused when the
environment is made (not at its first reset), the id's module named when it does not exist, ``step`` after ``close``,
and vector envs in every mode Gymnasium offers carrying the text exactly."""

from __future__ import annotations

import gymnasium as gym
import pytest
from typer.testing import CliRunner

import ecpo_gym  # noqa: F401  (registers the ids)
from ecpo_gym.core import MAX_STEPS
from ecpo_gym.group_workers import make_env
from ecpo_train.apps.cli import app

IDS = ("ecpo/DivergentAnchor-v0", "ecpo/ALFWorldGen-v0")
FAST = ["iterations=1", "n_groups=2", "group_size=2", "val_every=0", "progress=false", "tensorboard=false"]


@pytest.mark.parametrize("env_id", [*IDS, "ecpo/WebShopGen-v0", "ecpo/SearchQAGen-v0"])
def test_every_step_limit_is_capped_in_one_place(env_id):
    with pytest.raises(ValueError, match="max_steps"):
        gym.make(env_id, max_steps=10**18)
    with pytest.raises(ValueError, match="max_steps"):
        gym.make(env_id, max_steps=MAX_STEPS + 1)
    assert gym.make(env_id, max_steps=MAX_STEPS).unwrapped.max_steps == MAX_STEPS


@pytest.mark.parametrize("first_seed", [2.5, float("nan"), -1, "3", True])
def test_alfworld_gen_refuses_a_first_seed_that_is_no_seed_when_made(first_seed):
    with pytest.raises(ValueError, match="first_seed must be an int >= 0"):
        gym.make("ecpo/ALFWorldGen-v0", first_seed=first_seed)
    env = gym.make("ecpo/ALFWorldGen-v0", first_seed=10**30, num_tasks=2)
    assert env.reset(seed=0)[1]["task_id"].endswith(str(10**30)) or env.unwrapped.task_ids[0].endswith(str(10**30))


@pytest.mark.parametrize(("kwargs", "env_id", "words"), [
    ({"render_mode": 1}, "ecpo/DivergentAnchor-v0", "render_mode=1 is invalid"),
    ({"render_mode": [1]}, "ecpo/ALFWorldGen-v0", r"render_mode=\[1\] is invalid"),
    ({}, "nosuchmod:X-v0", "no module 'nosuchmod' to import"),
    ({}, "nosuchmod.sub:X-v0", "no module 'nosuchmod.sub' to import"),
])
def test_make_names_the_setting_gymnasium_would_trace_back_on(kwargs, env_id, words):
    with pytest.raises(ValueError, match=words) as error:
        make_env(env_id, kwargs)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(("env_id", "words"), [
    ("ecpo/Nope-v0", "env_id 'ecpo/Nope-v0' is not a registered id: Environment `Nope` doesn't exist"),
    ("ecpo/DivergentAnchor-v9", "env_id 'ecpo/DivergentAnchor-v9' is not a registered id: Environment version `v9`"),
    ("", "env_id '' is not an id: ids look like"), ("x" * 5000, "env_id 'xxx"),
])
def test_an_unknown_or_malformed_env_id_is_named_as_the_setting(env_id, words):
    """gymnasium's own message named the id's parts ('Environment `Nope` doesn't exist'), not the setting."""
    with pytest.raises(gym.error.Error) as error:
        make_env(env_id)
    assert str(error.value).startswith(words) and len(str(error.value)) < 1000


@pytest.mark.parametrize("override", ["env_id=nosuchmod:X-v0", "env_kwargs.render_mode=1",
                                      f"env_kwargs.max_steps={10**18}"])
def test_train_refuses_them_in_one_line(tmp_path, override):
    result = CliRunner().invoke(app, ["train", "--config", "quickstart", f"run_dir={tmp_path / 'run'}", *FAST,
                                      override])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert override.split("=")[0].split(".")[-1] in lines[-1]
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("env_id", IDS)
def test_step_after_close_asks_for_reset_and_reset_starts_again(env_id):
    env = gym.make(env_id)
    env.reset(seed=0)
    env.close()
    with pytest.raises(gym.error.ResetNeeded, match="closed"):
        env.step("look")
    observation, _ = env.reset(seed=0)
    assert observation and env.step("look")[4]["step"] == 1


VECTOR_MODES = [("sync", {}), ("async", {}), ("async", {"shared_memory": False}), ("async", {"copy": False}),
                ("async", {"context": "spawn"})]


@pytest.mark.parametrize(("mode", "vector_kwargs"), VECTOR_MODES)
@pytest.mark.parametrize("env_id", IDS)
def test_vector_envs_carry_the_same_text_as_single_envs_in_every_mode(env_id, mode, vector_kwargs):
    singles = [gym.make(env_id) for _ in range(2)]
    vector = gym.make_vec(env_id, num_envs=2, vectorization_mode=mode, vector_kwargs=vector_kwargs)
    try:
        observations, _ = vector.reset(seed=3)
        expected = [env.reset(seed=3 + k)[0] for k, env in enumerate(singles)]
        assert list(observations) == expected
        for actions in (["look", "go left"], ["inventory", "go to cabinet 1"]):
            got = vector.step(actions)
            want = [env.step(action) for env, action in zip(singles, actions)]
            assert list(got[0]) == [w[0] for w in want]  # newlines, unicode: character for character
            assert list(got[1]) == [w[1] for w in want]
    finally:
        vector.close()
        for env in singles:
            env.close()


def test_the_vector_entry_point_mode_is_gymnasiums_own_refusal():
    with pytest.raises(gym.error.Error, match="vector"):
        gym.make_vec("ecpo/DivergentAnchor-v0", num_envs=2, vectorization_mode="vector_entry_point")


@pytest.mark.parametrize("autoreset", ["NEXT_STEP", "SAME_STEP", "DISABLED"])
def test_async_vector_envs_equal_sync_ones_in_every_autoreset_mode(autoreset):
    from gymnasium.vector import AutoresetMode

    def play(mode: str) -> list:
        vector = gym.make_vec("ecpo/DivergentAnchor-v0", num_envs=2, vectorization_mode=mode, max_steps=2,
                              vector_kwargs={"autoreset_mode": AutoresetMode[autoreset]})
        try:
            seen = [tuple(vector.reset(seed=0)[0])]
            for k in range(4):  # (DISABLED: a reset after the episodes end at step 2, as the mode asks)
                if autoreset == "DISABLED" and k == 2:
                    seen.append(tuple(vector.reset(seed=1)[0]))
                observations, rewards, terminated, truncated, _ = vector.step(["go left", "door 1"])
                seen.append((tuple(observations), rewards.tolist(), terminated.tolist(), truncated.tolist()))
            return seen
        finally:
            vector.close()

    assert play("async") == play("sync")
