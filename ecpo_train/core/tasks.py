"""Which tasks an iteration's groups play, and the seed validation plays with: the one rule of each that both
training engines (and the leaderboard) use."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ecpo_gym.kwargs import shown

TASK_DRAWS = ("random", "cycle")
VALIDATION_SEED_OFFSET = 7919  # a prime away from the run's seed: validation draws never replay a training stream


def task_lists(config: Any, all_tasks: Sequence[str], env: Any = None) -> tuple[list[str], list[str]]:
    """A run's training and validation tasks: ``train_tasks`` (else every task of the environment) and ``val_tasks``
    (else its first ``val_num_tasks``), as strings. A listed task the environment cannot reset to is a one-line
    ``ValueError`` here, while the engine is built and before its run folder is written, not when a group first
    draws it. ``env`` (a made environment) answers for tasks outside ``all_tasks`` (a WebShop goal of another
    split); without it one is made from ``config.env_id``, and only when such a task is listed."""
    from ecpo_gym.group_workers import unknown_tasks

    all_tasks = [str(t) for t in all_tasks]
    lists = {"train_tasks": training_tasks(config, lambda: all_tasks),
             "val_tasks": [str(t) for t in config.val_tasks] if config.val_tasks is not None
             else all_tasks[: config.val_num_tasks]}
    known = set(all_tasks)
    named = [t for t in dict.fromkeys(lists["train_tasks"] + lists["val_tasks"]) if t not in known]
    missing = set(unknown_tasks(config.env_id if env is None else env, named, config.env_kwargs)) if named else set()
    for key, tasks in lists.items():
        absent = [t for t in dict.fromkeys(tasks) if t in missing]
        if absent:
            listed = ", ".join(repr(t[:40]) for t in absent[:3]) + (f" and {len(absent) - 3} more" if len(absent) > 3 else "")
            raise ValueError(f"{key}: {config.env_id} has no task {listed} (its {len(all_tasks)} tasks look like "
                             f"{all_tasks[:3]})")
    return lists["train_tasks"], lists["val_tasks"]


def validation_label(config: Any, val_tasks: Sequence[str]) -> str:
    """What a run's validation figure measures, in a few words (the progress line's ``val``): how many tasks
    ``val_tasks`` holds and how :func:`task_lists` chose them (the environment's first ones, or the listed ones).
    Another way of choosing them (a named set, say) is worded here too, so that the line stays true."""
    if config.val_tasks is None:
        return f"the env's first {len(val_tasks)} tasks"
    return f"{len(val_tasks)} listed tasks"


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
    raise ValueError(f"task_draw={shown(mode)}; valid: {', '.join(TASK_DRAWS)}")


def training_tasks(config: Any, env_tasks: Callable[[], Sequence[Any]]) -> list[str]:
    """A run's training tasks: the config's ``train_tasks``, else every task of the environment (``env_tasks()``,
    asked for only then). The one default rule; :func:`task_lists` checks the lists against the environment."""
    return [str(t) for t in (config.train_tasks if config.train_tasks is not None else env_tasks())]


def stratified_tasks(task_ids: Sequence[str], type_of: Callable[[str], str], per_type: int) -> list[str]:
    """A fixed validation set that covers every task type: ``per_type`` tasks of each type (``type_of(task)``),
    evenly spaced through that type's sorted ids (the ``j``-th of ``n`` at index ``floor((j + 1/2) n / per_type)``),
    the types interleaved in sorted order (type 1's first, type 2's first, ...). A type with fewer tasks gives all
    of them. Deterministic: the same ids give the same list (the presets commit theirs)."""
    by_type: dict[str, list[str]] = {}
    for task in sorted(map(str, task_ids)):
        by_type.setdefault(type_of(task), []).append(task)
    picked = {kind: [tasks[int((j + 0.5) * len(tasks) / per_type)] for j in range(min(per_type, len(tasks)))]
              if len(tasks) > per_type else tasks for kind, tasks in sorted(by_type.items())}
    return [tasks[j] for j in range(max(map(len, picked.values()), default=0))
            for tasks in picked.values() if j < len(tasks)]
