"""Which tasks an iteration's groups play, and the seed validation plays with: the one rule of each that both
training engines (and the leaderboard) use."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

TASK_DRAWS = ("random", "cycle")
VALIDATION_SEED_OFFSET = 7919  # a prime away from the run's seed: validation draws never replay a training stream


def validation_seed(run_seed: int) -> int:
    """The seed of a run's validation episodes: fixed by the run's seed alone, so every validation of a run (and of
    its resumption, and of the same run on the other engine) plays the same episodes with the same draws."""
    return int(run_seed) + VALIDATION_SEED_OFFSET


def draw_tasks(pool: Sequence[str], n_groups: int, rng: np.random.Generator, iteration: int,
               mode: str = "random") -> list[str]:
    """The task of each of iteration ``iteration``'s ``n_groups`` groups (``iteration`` counts from 0).

    ``random``: each group's task drawn uniformly from ``pool`` with replacement, from ``rng`` (the draw every run
    made before ``cycle`` existed, so its random stream is unchanged). ``cycle``: the pool in its order, ``n_groups``
    tasks per iteration, wrapping around: iteration ``k`` plays tasks ``k * n_groups + j`` (mod the pool's size), so
    a pool of 16 with 4 groups sees each task every 4 iterations and a pool of 4 sees all of them every iteration.
    ``cycle`` leaves ``rng`` untouched.
    """
    if not pool:
        raise ValueError("there are no training tasks to draw from")
    if mode == "random":
        return [pool[int(k)] for k in rng.integers(len(pool), size=n_groups)]
    if mode == "cycle":
        start = iteration * n_groups
        return [pool[(start + j) % len(pool)] for j in range(n_groups)]
    raise ValueError(f"task_draw={mode!r}; valid: {', '.join(TASK_DRAWS)}")


def training_tasks(config: Any, env_tasks: Callable[[], Sequence[Any]]) -> list[str]:
    """A run's training tasks: the config's ``train_tasks``, else every task of the environment (``env_tasks()``,
    asked for only then)."""
    return [str(t) for t in (config.train_tasks or env_tasks())]


def run_tasks(config: Any, env_tasks: Callable[[], Sequence[Any]]) -> tuple[list[str], list[str]]:
    """A run's training and validation task lists, from its config (``train_tasks``, ``val_tasks``,
    ``val_num_tasks``) and ``env_tasks()``, the environment's tasks in their order (asked for only where the config
    lists none): by default every task trains and the first ``val_num_tasks`` validate."""
    val = [str(t) for t in (config.val_tasks or list(env_tasks())[: config.val_num_tasks])]
    return training_tasks(config, env_tasks), val
