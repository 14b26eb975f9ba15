"""The learner connector piece that replaces GAE: episodes -> ``TrajectoryBatch`` -> ``credit.compute_advantages``.

It only turns RLlib episodes into the rows the native path uses (``batch_from_episodes``) and writes the
result back (ADVANTAGES, and VALUE_TARGETS = the discounted return-to-go, PPO's column that a critic would
fit); the math lives in ``ecpo_train.core.credit`` alone.

Row ``t`` (1-based) of an episode: the anchor from the info *before* the step (``get_infos()`` starts with
the reset info), ``action_key`` from the info after it, the reward of the step, the group from
``info["group_key"]`` (``CandidateActionEnv`` sets it). The anchor is the info field
``anchor_key`` names, as on the native path (``rollout.collect_rollout``): the env's structured
``state_key`` or the normalised observation text ``observation_key``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.evaluation.postprocessing import Postprocessing

from ecpo_train.core import credit
from ecpo_train.core.batch import TrajectoryBatch
from ecpo_train.core.rollout import check_anchor_key

GROUP_KEY = "group_key"


def batch_from_episodes(episodes: Sequence[Any], *, anchor_key: str = "state_key") -> TrajectoryBatch:
    """The credit rows of complete single-agent episodes; trajectory ``i`` is ``episodes[i]``, steps in order."""
    check_anchor_key(anchor_key)
    trajectories = []
    for index, episode in enumerate(episodes):
        infos = episode.get_infos()
        n = len(episode)
        if len(infos) != n + 1:
            raise ValueError(
                f"episode {episode.id_} has {len(infos)} infos for {n} steps; ECPO needs complete episodes "
                "with the reset info first (batch_mode='complete_episodes')"
            )
        if GROUP_KEY not in infos[0]:
            raise KeyError(
                f"episode {episode.id_}'s reset info has no {GROUP_KEY!r}: wrap the text env in "
                "ecpo_train.integrations.rllib.CandidateActionEnv (or set the key in the env that builds episodes)"
            )
        if any(anchor_key not in info for info in infos[:n]):
            raise KeyError(f"episode {episode.id_} has an info without the anchor {anchor_key!r}")
        trajectories.append({
            "group_id": str(infos[0][GROUP_KEY]),
            "traj_id": index,
            "anchor_keys": [str(info[anchor_key]) for info in infos[:n]],
            "action_keys": [str(info["action_key"]) for info in infos[1:]],
            "rewards": np.asarray(episode.get_rewards(), dtype=np.float64).tolist(),
        })
    return TrajectoryBatch.from_trajectories(trajectories)


def group_sizes(episodes: Sequence[Any]) -> dict[str, int]:
    """How many episodes of each group the list holds."""
    sizes: dict[str, int] = {}
    for episode in episodes:
        key = str(episode.get_infos(0).get(GROUP_KEY))
        sizes[key] = sizes.get(key, 0) + 1
    return sizes


class ECPOAdvantages(ConnectorV2):
    """Learner connector: compute the estimator's advantages with ``credit.compute_advantages``.

    ``estimator`` is a credit registry name (``ecpo``, ``grpo``, ``gigpo``, ...); ``credit_config`` (a
    ``credit.CreditConfig``, default the paper's) goes to ``compute_advantages`` field for field;
    ``anchor_key`` picks the anchor (see the module docstring). With ``group_size`` set, a batch holding a
    partial group is an error: anchors and group baselines would silently change.
    """

    def __init__(self, input_observation_space=None, input_action_space=None, *, estimator: str = "ecpo",
                 group_size: int | None = None, credit_config: credit.CreditConfig | None = None,
                 anchor_key: str = "state_key", **kwargs):
        super().__init__(input_observation_space, input_action_space, **kwargs)
        check_anchor_key(anchor_key)
        self.estimator = estimator
        self.group_size = group_size
        self.credit_config = credit_config if credit_config is not None else credit.CreditConfig()
        self.anchor_key = anchor_key

    def __call__(self, *, rl_module, batch, episodes, explore=None, shared_data=None, metrics=None,
                 **kwargs):
        sa_episodes = list(self.single_agent_episode_iterator(episodes, agents_that_stepped_only=False))
        if not sa_episodes:
            return batch
        sizes = group_sizes(sa_episodes)
        if self.group_size is not None and any(n != self.group_size for n in sizes.values()):
            raise ValueError(f"ECPO needs complete groups of {self.group_size} episodes; got sizes {sizes}")
        step_rows = batch_from_episodes(sa_episodes, anchor_key=self.anchor_key)
        advantages, diagnostics = credit.compute_advantages(self.estimator, step_rows, self.credit_config)
        advantages = np.asarray(advantages, dtype=np.float32)
        returns = np.asarray(self._future_returns(step_rows, sa_episodes), dtype=np.float32)
        start = 0
        for episode in sa_episodes:
            n = len(episode)
            for column, values in ((Postprocessing.ADVANTAGES, advantages), (Postprocessing.VALUE_TARGETS, returns)):
                self.add_n_batch_items(batch, column, items_to_add=values[start:start + n], num_items=n,
                                       single_agent_episode=episode)
            start += n
        if metrics is not None:
            metrics.log_value(("ecpo", "batch_groups"), len(sizes), reduce="sum", window=1)
            metrics.log_value(("ecpo", "batch_group_size_min"), min(sizes.values()), reduce="min", window=1)
            metrics.log_value(("ecpo", "batch_group_size_max"), max(sizes.values()), reduce="max", window=1)
            for name, value in diagnostics.items():
                if np.isscalar(value) and np.isfinite(float(value)):
                    metrics.log_value(("ecpo", str(name)), float(value), window=1)
        return batch

    def _future_returns(self, step_rows: TrajectoryBatch, episodes: list) -> np.ndarray:
        """``G_{i,t}`` per row from ``credit.future_return`` (PPO's value-target column; unused without a critic).

        ``batch_from_episodes`` numbers trajectories 0..E-1 and steps 1..T in order, so the rows are already
        coded: no second key factorisation.
        """
        return credit.future_return(step_rows.reward, step_rows.traj_id.astype(np.int64), step_rows.step - 1,
                                    len(episodes), max(len(e) for e in episodes), self.credit_config.gamma)


__all__ = ["ECPOAdvantages", "batch_from_episodes", "group_sizes"]
