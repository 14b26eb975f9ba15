"""An environment declared from outside the package (docs/environments.md, "Add an environment"): a toy text game
written here, declared with ``ecpo_gym.register_env`` like the built-in families, trains through both engines."""

from __future__ import annotations

from typing import ClassVar

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from ecpo_gym import EnvDeclaration, EnvFamily, TaskStart, TextAgentEnv, Transition, family_of, register_env
from ecpo_gym.families import ENV_DECLARATIONS, unregister_env
from ecpo_train.policies.prompting import render_prompt
from ecpo_train.runtime.config import make_config

ENV_ID = "toy/Counter-v0"
TEMPLATE = """The counter's own prompt (two sections, filled by ecpo_train/policies/prompting.py).
[[first_step]]
COUNTER GAME. {task}
The counter shows: {current_observation}
Choose one of [{admissible_actions}] and answer <action>...</action>.
[[with_history]]
COUNTER GAME. {task}
Your last moves:
{action_history}
The counter shows: {current_observation}
Choose one of [{admissible_actions}] and answer <action>...</action>.
"""


class CounterEnv(TextAgentEnv):
    """Bring a counter from 0 to the task's target with "add one" / "add two"; passing it loses. The state key is
    the count (two histories that reach the same count share an anchor), the canonical action the matched
    admissible text, the reward the base class's (10 for reaching the target, 0 for passing it)."""

    TARGETS: ClassVar[dict[str, int]] = {"reach-3": 3, "reach-4": 4}

    def __init__(self, max_steps: int = 4, **kwargs):
        super().__init__(max_steps=max_steps, **kwargs)
        self.count = 0

    @property
    def task_ids(self):
        return list(self.TARGETS)

    def _load_task(self, task_id):
        self.count, self.target = 0, self.TARGETS[task_id]
        return TaskStart(observation="0", task=f"Make the counter show {self.target}.", task_type="counter")

    def _admissible_actions(self):
        return ["add one", "add two"]

    def _state_key(self):
        return f"count={self.count}"

    def _execute(self, command):
        self.count += 1 if command == "add one" else 2
        return Transition(observation=str(self.count), won=self.count == self.target,
                          terminated=self.count >= self.target)


@pytest.fixture
def counter_env(tmp_path):
    template = tmp_path / "counter.txt"
    template.write_text(TEMPLATE)
    declared = register_env(EnvDeclaration(ENV_ID, CounterEnv, EnvFamily("counter", prompt=str(template)),
                                           max_steps=4))
    yield declared
    unregister_env(ENV_ID)  # the other tests see only the built-in ids


def values(model, run_dir, **changes):
    """A tiny scoring run on the counter: 2 groups of 2, one iteration, the family's own prompt."""
    return {"run_dir": str(run_dir), "policy": "llm", "policy_mode": "score", "model": str(model), "device": "cpu",
            "env_id": ENV_ID, "n_groups": 2, "group_size": 2, "history_length": 1, "val_every": 0,
            "credit": {"d_min": 1}, "lr": 1e-3, "kl_coef": 0.0, "mini_batch_size": 8, "micro_batch_size": 4,
            "max_prompt_length": 256, "iterations": 1, "checkpoint_every": 0, "tensorboard": False,
            "progress": False, "seed": 3} | changes


def test_the_declared_env_is_a_gymnasium_env_with_its_family(counter_env):
    env = gym.make(ENV_ID)
    check_env(env.unwrapped, skip_render_check=True)
    _, info = env.reset(seed=0, options={"task_id": "reach-3"})
    _, reward, terminated, _, info = env.step("Add two")
    assert (info["action_key"], info["state_key"], reward, terminated) == ("add two", "count=2", 0.0, False)
    assert env.step("add one")[1:3] == (10.0, True)
    assert family_of(env) == counter_env.family and ENV_DECLARATIONS[ENV_ID] is counter_env
    prompt = render_prompt(ENV_ID, task="Make the counter show 3.", step_count=0, history=[], observation="0",
                           admissible_actions=["add one", "add two"])
    assert prompt.startswith("COUNTER GAME. Make the counter show 3.")
    with pytest.raises(ValueError, match="already declared"):
        register_env(EnvDeclaration(ENV_ID, CounterEnv, EnvFamily("other"), max_steps=9))


def test_the_native_engine_trains_it_one_iteration(counter_env, tiny_model_dir, tmp_path):
    from ecpo_train.runtime.run import train
    from ecpo_train.runtime.trainer import Trainer

    history = train(Trainer, make_config(values(tiny_model_dir, tmp_path / "native")))
    assert len(history) == 1 and history[0]["credit/num_groups"] == 2 and history[0]["num_steps"] >= 4
    assert history[0]["invalid_action_rate"] == 0.0  # every reply the scoring policy writes is an admissible action


@pytest.mark.slow
def test_the_rllib_engine_trains_it_one_iteration(counter_env, tiny_model_dir, tmp_path, ray_session):
    from ecpo_train.integrations.rllib.llm.config import ECPOConfig

    config = make_config(values(tiny_model_dir, tmp_path / "rllib"))
    algo = ECPOConfig.from_train_config(config).env_runners(num_env_runners=0).build_algo()
    try:
        result = algo.train()["ecpo"]
    finally:
        algo.stop()
    assert result["credit/num_groups"] == 2 and result["num_steps"] >= 4 and result["invalid_action_rate"] == 0.0
