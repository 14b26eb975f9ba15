"""An environment whose info lacks the anchor a step row reads is refused in one line before a step is played."""

from __future__ import annotations

import gymnasium as gym
import pytest

from ecpo_gym.group import GroupVectorEnv
from ecpo_train.core.rollout import collect_rollout
from ecpo_train.policies.tabular import TabularSoftmaxPolicy

ENV_ID = "ecpo/DivergentAnchor-v0"


class NoStateKey(gym.Wrapper):
    """A user's env built on an ecpo_gym one that drops the structured state from its info."""

    def reset(self, **kwargs):
        observation, info = self.env.reset(**kwargs)
        return observation, {k: v for k, v in info.items() if k != "state_key"}


def no_state_key(**kwargs) -> gym.Env:
    return NoStateKey(gym.make(ENV_ID, **kwargs))


@pytest.mark.parametrize("anchor_key", ["state_key", "observation_key"])
def test_an_env_without_state_key_is_refused_in_one_line(anchor_key):
    with GroupVectorEnv(no_state_key, num_groups=1, group_size=2, env_kwargs={"num_tasks": 2}) as envs:
        with pytest.raises(ValueError) as raised:
            collect_rollout(envs, TabularSoftmaxPolicy(seed=0), ["corridor0"], env_name="my-env", temperature=1.0, seed=0,
                            anchor_key=anchor_key)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("my-env: the info of reset() has no state_key;")
