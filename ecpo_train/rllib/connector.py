"""The learner connector piece that replaces GAE: episodes -> ``credit.compute_advantages`` -> batch.

It only turns RLlib episodes into the flat step rows ``credit.py`` takes and writes the result back
(ADVANTAGES, and VALUE_TARGETS = the discounted return-to-go, PPO's column that a critic would fit); the math lives in
``ecpo_train.credit`` alone.

Row ``t`` (1-based) of an episode: ``state_key`` from the info *before* the step (``get_infos()`` starts
with the reset info), ``action_key`` from the info after it, the reward of the step, the group from
``info["group_key"]`` (``CandidateActionEnv`` or the LLM runner sets it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.evaluation.postprocessing import Postprocessing

from ecpo_train import credit

GROUP_KEY = "group_key"


@dataclass
class StepRows:
    """Flat per-step arrays in the credit contract's order (episodes concatenated, steps in order)."""

    group_ids: np.ndarray
    traj_ids: np.ndarray
    steps: np.ndarray
    state_keys: list[str]
    action_keys: list[str]
    rewards: np.ndarray
    episode_lengths: list[int]


def episodes_to_step_rows(episodes: Sequence[Any]) -> StepRows:
    """Read the credit inputs out of single-agent episodes (their infos and rewards)."""
    group_codes: dict[str, int] = {}
    group_ids, traj_ids, steps, rewards = [], [], [], []
    state_keys: list[str] = []
    action_keys: list[str] = []
    lengths: list[int] = []
    for traj, episode in enumerate(episodes):
        infos = episode.get_infos()
        n = len(episode)
        if len(infos) != n + 1:
            raise ValueError(
                f"episode {episode.id_} has {len(infos)} infos for {n} steps; ECPO needs complete episodes "
                "with the reset info first (batch_mode='complete_episodes')"
            )
        if n and GROUP_KEY not in infos[0]:
            raise KeyError(
                f"episode {episode.id_}'s reset info has no {GROUP_KEY!r}: wrap the text env in "
                "ecpo_train.rllib.CandidateActionEnv (or set the key in the runner that builds episodes)"
            )
        key = str(infos[0].get(GROUP_KEY)) if n else ""
        group_ids.extend([group_codes.setdefault(key, len(group_codes))] * n)
        traj_ids.extend([traj] * n)
        steps.extend(range(1, n + 1))
        state_keys.extend(str(info["state_key"]) for info in infos[:n])
        action_keys.extend(str(info["action_key"]) for info in infos[1:])
        rewards.extend(np.asarray(episode.get_rewards(), dtype=np.float64).tolist())
        lengths.append(n)
    return StepRows(
        group_ids=np.asarray(group_ids, dtype=np.int64),
        traj_ids=np.asarray(traj_ids, dtype=np.int64),
        steps=np.asarray(steps, dtype=np.int64),
        state_keys=state_keys,
        action_keys=action_keys,
        rewards=np.asarray(rewards, dtype=np.float64),
        episode_lengths=lengths,
    )


def group_sizes(episodes: Sequence[Any]) -> dict[str, int]:
    """How many episodes of each group the list holds."""
    sizes: dict[str, int] = {}
    for episode in episodes:
        key = str(episode.get_infos(0).get(GROUP_KEY))
        sizes[key] = sizes.get(key, 0) + 1
    return sizes


class ECPOAdvantages(ConnectorV2):
    """Learner connector: compute the estimator's advantages with ``credit.compute_advantages``.

    ``estimator`` is a credit registry name (``ecpo``, ``grpo``, ``gigpo``, ...); ``hyperparameters``
    go to ``compute_advantages`` unchanged (gamma, omega, kappa, tau, d_min, rho_min). With
    ``group_size`` set, a batch holding a partial group is an error: anchors and group baselines
    would silently change.
    """

    def __init__(self, input_observation_space=None, input_action_space=None, *, estimator: str = "ecpo",
                 group_size: int | None = None, hyperparameters: dict[str, Any] | None = None, **kwargs):
        super().__init__(input_observation_space, input_action_space, **kwargs)
        self.estimator = estimator
        self.group_size = group_size
        self.hyperparameters = dict(hyperparameters or {})

    def __call__(self, *, rl_module, batch, episodes, explore=None, shared_data=None, metrics=None,
                 **kwargs):
        sa_episodes = list(self.single_agent_episode_iterator(episodes, agents_that_stepped_only=False))
        if not sa_episodes:
            return batch
        sizes = group_sizes(sa_episodes)
        if self.group_size is not None and any(n != self.group_size for n in sizes.values()):
            raise ValueError(f"ECPO needs complete groups of {self.group_size} episodes; got sizes {sizes}")
        rows = episodes_to_step_rows(sa_episodes)
        advantages, diagnostics = credit.compute_advantages(
            self.estimator, rows.group_ids, rows.traj_ids, rows.steps, rows.state_keys, rows.action_keys,
            rows.rewards, **self.hyperparameters,
        )
        advantages = np.asarray(advantages, dtype=np.float32)
        returns = np.asarray(self._future_returns(rows), dtype=np.float32)
        start = 0
        for episode, n in zip(sa_episodes, rows.episode_lengths):
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

    def _future_returns(self, rows: StepRows) -> np.ndarray:
        """``G_{i,t}`` per row from ``credit.future_return`` (PPO's value-target column; unused without a critic).

        The rows are already coded (``traj_ids`` = 0..E-1, steps 1..T in order), so no second key
        factorisation is needed.
        """
        gamma = float(self.hyperparameters.get("gamma", credit.CreditConfig().gamma))
        return credit.future_return(rows.rewards, rows.traj_ids, rows.steps - 1, len(rows.episode_lengths),
                                    max(rows.episode_lengths), gamma)


__all__ = ["ECPOAdvantages", "StepRows", "episodes_to_step_rows", "group_sizes"]
