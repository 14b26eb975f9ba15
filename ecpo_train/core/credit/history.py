"""What an estimator that keeps state across updates (TIGPO) reads of that state: one :class:`TaskHistory` per
step row, the history of the row's task as it stood before this update. The state itself (its task graphs, the
exploration scores, the revisit schedule) is ``ecpo_train.core.task_memory.TaskGraphMemory``'s; credit only reads
this frozen view, so an estimator stays a function of its inputs."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

SUCCESS = "<success>"
"""The success node of a task's graph: an edge ``(key, SUCCESS)`` says a trajectory won from state ``key``."""

HISTORY_COLUMN = "credit_history"
"""The step-row table's extra column that carries each row's :class:`TaskHistory` to wherever credit runs (the
native learner, an RLlib learner actor)."""


@dataclass(frozen=True)
class TaskHistory:
    """The history of a group's task before this update (TIGPO, arXiv 2609.03383).

    ``edges``: the task's persistent transition graph ``H_x``, every transition ``(state key, next state key)``
    seen in earlier updates (``next`` is :data:`SUCCESS` for a step that won); ``reference``: for a revisit group,
    the episode scores ``Z_E`` of the task's earlier exploration group (frozen), else ``None``."""

    edges: frozenset[tuple[str, str]] = frozenset()
    reference: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        try:
            edges = frozenset((str(here), str(there)) for here, there in self.edges)
        except (TypeError, ValueError):
            raise ValueError("a TaskHistory's edges are (state key, next state key) pairs") from None
        object.__setattr__(self, "edges", edges)
        if self.reference is not None:
            try:
                reference = tuple(float(z) for z in self.reference)
            except (TypeError, ValueError):
                raise ValueError("a TaskHistory's reference holds the exploration group's scores, numbers") from None
            if not reference or not all(math.isfinite(z) for z in reference):
                raise ValueError("a TaskHistory's reference holds the earlier exploration group's scores: finite "
                                 "numbers, at least one")
            object.__setattr__(self, "reference", reference)


def group_histories(history: Sequence[Any], row_group: Any, n_groups: int) -> list[TaskHistory]:
    """Each group's :class:`TaskHistory` from the per-row column ``history`` (``row_group``: each row's group
    code). Every row of a group must carry the same history; anything else is a one-line ``ValueError``."""
    if len(history) != len(row_group):
        raise ValueError(f"history has {len(history)} entries, expected {len(row_group)}: one TaskHistory per step row")
    found: list[TaskHistory | None] = [None] * n_groups
    for entry, group in zip(history, row_group):
        if not isinstance(entry, TaskHistory):
            raise ValueError(f"history holds a {type(entry).__name__}: it takes one TaskHistory per step row "
                             "(TaskGraphMemory gives them; TaskHistory() is a task with no history)")
        seen = found[int(group)]
        if seen is None:
            found[int(group)] = entry
        elif seen is not entry and seen != entry:
            raise ValueError("the rows of one group carry different histories: a group plays one task")
    return [h if h is not None else TaskHistory() for h in found]
