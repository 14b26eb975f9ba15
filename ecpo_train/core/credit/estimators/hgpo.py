"""HGPO (arXiv 2602.22817; ``docs/paper_notes.md``): rows grouped by their last k anchors, k = 1..K+1, each level
z-scored within its groups and the levels aggregated with weights ``(k + 1)^alpha``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import numpy as np
from annotated_types import Interval

from ecpo_train.core.credit.equations import (
    hgpo_aggregate,
    hgpo_level_advantage,
    history_groups,
    verl_agent_episode_advantage,
)
from ecpo_train.core.credit.estimators.base import finish, returns_of
from ecpo_train.core.credit.registry import (
    Advantages,
    EstimatorInputs,
    Hyperparameter,
    NonNegative,
    register_estimator,
)
from ecpo_train.core.rows import CreditRows

if TYPE_CHECKING:
    from ecpo_train.core.credit import CreditConfig  # the type (the package builds it after these register)

# HGPO's history depth: an episode has at most this many steps (every environment's step limit, ecpo_gym.core), so a
# deeper history gives no group; the bound refuses 10**30 when the config is built, not after the first rollout
MAX_HGPO_HISTORY = 100_000
HGPO_HYPERPARAMETERS = (
    Hyperparameter("hgpo_history", Annotated[int, Interval(ge=0, le=MAX_HGPO_HISTORY)], 2,
                   "HGPO's history depth K: groups share the last k = 1..K+1 anchors"),
    Hyperparameter("hgpo_alpha", NonNegative, 1.0, "the exponent of HGPO's level weights (k + 1)^alpha"),
    Hyperparameter("hgpo_std", bool, True, "whether each level is std-normalised (HGPO's mean_std_norm)"),
    Hyperparameter("hgpo_base_group", bool, False, "whether the episode advantage joins the levels as k = 0"),
)


@register_estimator("hgpo", hyperparameters=HGPO_HYPERPARAMETERS)
def hgpo_estimator(rows: CreditRows, config: CreditConfig, inputs: EstimatorInputs) -> Advantages:
    """HGPO (arXiv 2602.22817): for k = 1..K+1 the rows that share their last k anchors form a group of level k
    (eq. history_groups; k = 1 is GiGPO's anchor group); each level z-scores G within its groups (population
    std, or only centres it with ``hgpo_std=False``); a row's advantage is the ``(k + 1)^alpha``-weighted mean
    of its nonzero levels (eq. hgpo_aggregate). No episode term unless ``hgpo_base_group``: then the episode
    advantage over the group's step rows (verl-agent's, eq. verl_agent_episode_advantage) joins as level k = 0. Diagnostic: the share of rows with no level to compare in."""
    ret = returns_of(rows, config)
    g = np.asarray(rows.ops.host(ret.future), dtype=np.float64)
    # levels past the longest trajectory hold no row (a row needs k - 1 steps behind it): they add nothing
    levels = np.arange(1, min(config.hgpo_history + 1, rows.horizon) + 1)
    per_level = [hgpo_level_advantage(g, history_groups(rows.anchor, rows.traj, rows.position, rows.n_trajs,
                                                        rows.horizon, int(k)), config.eps, config.hgpo_std)
                 for k in levels]
    level_adv, level_in = np.stack([a for a, _ in per_level]), np.stack([m for _, m in per_level])
    if config.hgpo_base_group:  # the recipe's episode term: every step row counts its trajectory's R_i
        episode = verl_agent_episode_advantage(np.asarray(rows.ops.host(ret.trajectory), dtype=np.float64), rows.traj,
                                               rows.traj_group[rows.traj], rows.n_groups, config.eps, config.hgpo_std)
        level_adv, level_in = np.vstack([episode, level_adv]), np.vstack([np.ones(rows.n_rows, bool), level_in])
        levels = np.concatenate([[0], levels])
    adv = hgpo_aggregate(level_adv, level_in, levels, config.hgpo_alpha, config.eps)
    alone = float((~level_in.any(axis=0)).mean())
    return finish(rows, ret, rows.ops.asarray(adv), {"hgpo_no_group_fraction": alone})

