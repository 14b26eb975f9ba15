"""TIGPO's state across updates (arXiv 2609.03383): a persistent transition graph per task, the exploration groups'
scores, and the exploration-revisit schedule that sends the current policy back to earlier tasks.

One ``TaskGraphMemory`` per run, held by whoever draws the iteration's tasks (the native trainer, the RLlib
driver) and saved with the run's checkpoint (:meth:`TaskGraphMemory.state_dict`), so a resumed run continues it.
Each iteration it

    draws      ``draw``: of the ``n_groups`` groups, ``round(revisit_fraction * n_groups)`` revisit tasks whose
               exploration group played at least ``revisit_delay`` updates earlier (oldest first, each exploration
               group revisited once); the rest are explored (the run's usual draw); too few waiting revisits leave
               their places to exploration. Groups are in that order: explorations, then revisits.
    annotates  ``annotate``: each row of the sampled table gets its group's frozen ``TaskHistory`` (its task's
               graph as earlier updates left it; for a revisit, its exploration group's scores) in the table's
               ``HISTORY_COLUMN``, which travels with the rows to the learner that runs credit;
    absorbs    ``absorb``: after the update, the iteration's transitions join their tasks' graphs (a winning last
               step links to the success node) and each exploration group's scores are kept for its revisit.

The schedule reads only what was drawn, never what was learned, so a pipelined sampler that draws one iteration
ahead gets the same schedule. A task is identified by its task id (the environment's, fixed at reset:
``kappa(x)`` of the paper). Only this update's rows get advantages and enter the loss; the history only changes
their credit. Our readings where the paper is loose are in ``docs/paper_notes.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import numpy as np

from ecpo_gym.kwargs import shown
from ecpo_train.core.batch import TrajectoryBatch
from ecpo_train.core.credit.equations import trajectory_success
from ecpo_train.core.credit.history import HISTORY_COLUMN, SUCCESS, TaskHistory

EXPLORE, REVISIT = "explore", "revisit"
STATE_VERSION = 1


@dataclass
class TaskGraphMemory:
    """See the module docstring. ``revisit_fraction``: the share of an iteration's groups kept for revisits (the
    paper's 8 of 16: 0.5); ``revisit_delay``: updates between an exploration group and its revisit (the paper's
    10)."""

    revisit_fraction: float = 0.5
    revisit_delay: int = 10
    graphs: dict[str, set[tuple[str, str]]] = field(default_factory=dict)
    waiting: list[tuple[str, int, int]] = field(default_factory=list)  # (task, iteration, group) to revisit, oldest first
    scores: dict[tuple[int, int], list[float]] = field(default_factory=dict)  # (iteration, group) -> Z_E
    plans: dict[int, list[tuple[str, str, tuple[int, int] | None]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0 <= float(self.revisit_fraction) < 1:
            raise ValueError(f"revisit_fraction={shown(self.revisit_fraction)}: it must be in [0, 1) (some groups explore)")
        if int(self.revisit_delay) < 1 or int(self.revisit_delay) != self.revisit_delay:
            raise ValueError(f"revisit_delay={shown(self.revisit_delay)}: it must be a whole number of updates >= 1 (a "
                             "revisit is scored against an exploration group already absorbed)")

    # ------------------------------------------------------------------ the schedule
    def draw(self, iteration: int, n_groups: int, explore: Callable[[int], Sequence[str]]) -> list[str]:
        """Iteration ``iteration``'s tasks (explorations, then revisits); ``explore(n)`` draws ``n`` new ones."""
        wanted = min(round(float(self.revisit_fraction) * int(n_groups)), int(n_groups) - 1)  # one explores
        due = [entry for entry in self.waiting if entry[1] <= iteration - int(self.revisit_delay)][:wanted]
        for entry in due:
            self.waiting.remove(entry)
        explored = [str(task) for task in explore(int(n_groups) - len(due))]
        plan: list[tuple[str, str, tuple[int, int] | None]] = [(task, EXPLORE, None) for task in explored]
        plan += [(task, REVISIT, (at, group)) for task, at, group in due]
        self.waiting += [(task, iteration, group) for group, task in enumerate(explored)]
        self.plans[iteration] = plan
        return [task for task, _, _ in plan]

    def planned(self, iteration: int) -> list[tuple[str, str, tuple[int, int] | None]]:
        if iteration not in self.plans:
            raise ValueError(f"iteration {iteration + 1} was not drawn by this TaskGraphMemory")
        return self.plans[iteration]

    # ------------------------------------------------------------------ credit's view
    def history(self, task: str, reference: tuple[int, int] | None = None) -> TaskHistory:
        """Task ``task``'s frozen history now; with ``reference`` (an exploration group's ``(iteration, group)``)
        that group's scores as the cross-temporal reference."""
        ref = None
        if reference is not None:
            if tuple(reference) not in self.scores:
                raise ValueError(f"no scores kept for the exploration group {reference} (its update not absorbed yet)")
            ref = tuple(self.scores[tuple(reference)])
        return TaskHistory(frozenset(self.graphs.get(str(task), ())), ref)

    def group_histories(self, iteration: int) -> list[TaskHistory]:
        """Each group's :class:`TaskHistory` for iteration ``iteration`` (in group order)."""
        return [self.history(task, ref) for task, _, ref in self.planned(iteration)]

    def annotate(self, tables: Sequence[TrajectoryBatch], iteration: int) -> list[TrajectoryBatch]:
        """The iteration's sampled ``tables``, each with :data:`HISTORY_COLUMN`: each row its group's history (group
        ids are the groups' places in the iteration's draw, as every engine numbers them), built once per group."""
        histories = self.group_histories(iteration)
        return [table.with_columns(**{HISTORY_COLUMN: [histories[int(g)] for g in table.group_id]})
                for table in tables]

    # ------------------------------------------------------------------ after the update
    def absorb(self, tables: Iterable[TrajectoryBatch], iteration: int) -> dict[str, float]:
        """Join iteration ``iteration``'s transitions to their tasks' graphs, keep its exploration groups' scores
        for their revisits and drop the scores its revisits used. Returned: the memory's size, for the metrics."""
        plan = self.planned(iteration)
        for table in tables:
            self.absorb_columns(plan, table.group_id, table.traj_id, table.step, table.anchor_key, table.reward,
                                iteration)
        for _, kind, ref in plan:
            if kind == REVISIT:
                self.scores.pop(tuple(ref), None)
        del self.plans[iteration]
        return self.size()

    def absorb_columns(self, plan: Sequence[tuple[str, str, Any]], group_ids: Any, traj_ids: Any, steps: Any,
                       anchor_keys: Any, rewards: Any, iteration: int) -> None:
        """:meth:`absorb` on plain step columns (``group_ids`` index ``plan``)."""
        order = np.lexsort((np.asarray(steps), np.asarray(traj_ids), np.asarray(group_ids)))
        trajectories: dict[tuple[int, Any], list[int]] = {}
        for row in order.tolist():
            trajectories.setdefault((int(group_ids[row]), traj_ids[row]), []).append(row)
        returns: dict[int, list[float]] = {}
        for (group, _), members in trajectories.items():
            task, kind, _ = plan[group]
            graph = self.graphs.setdefault(task, set())
            keys = [str(anchor_keys[row]) for row in members]
            graph.update(pairwise(keys))
            if trajectory_success(float(rewards[members[-1]])):
                graph.add((keys[-1], SUCCESS))
            if kind == EXPLORE:
                returns.setdefault(group, []).append(float(sum(float(rewards[row]) for row in members)))
        for group, scores in returns.items():
            self.scores[(iteration, group)] = scores

    def size(self) -> dict[str, float]:
        return {"task_graphs": float(len(self.graphs)),
                "task_graph_edges": float(sum(len(edges) for edges in self.graphs.values())),
                "revisits_waiting": float(len(self.waiting))}

    # ------------------------------------------------------------------ the run folder
    def state_dict(self) -> dict[str, Any]:
        """Plain lists and numbers (the checkpoint keeps it; :meth:`from_state` restores it exactly)."""
        return {"version": STATE_VERSION, "revisit_fraction": float(self.revisit_fraction),
                "revisit_delay": int(self.revisit_delay),
                "graphs": {task: sorted([a, b] for a, b in edges) for task, edges in sorted(self.graphs.items())},
                "waiting": [list(entry) for entry in self.waiting],
                "scores": [[at, group, scores] for (at, group), scores in sorted(self.scores.items())],
                "plans": [[at, [[task, kind, None if ref is None else list(ref)] for task, kind, ref in plan]]
                          for at, plan in sorted(self.plans.items())]}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> TaskGraphMemory:
        if int(state.get("version", 0)) != STATE_VERSION:
            raise ValueError(f"task memory version {shown(state.get('version'))}; this ecpo reads {STATE_VERSION}")
        return cls(float(state["revisit_fraction"]), int(state["revisit_delay"]),
                   {task: {(a, b) for a, b in edges} for task, edges in state["graphs"].items()},
                   [(str(task), int(at), int(group)) for task, at, group in state["waiting"]],
                   {(int(at), int(group)): [float(z) for z in scores] for at, group, scores in state["scores"]},
                   {int(at): [(str(task), str(kind), None if ref is None else (int(ref[0]), int(ref[1])))
                              for task, kind, ref in plan] for at, plan in state["plans"]})


def task_memory_for(config: Any) -> TaskGraphMemory | None:
    """The run's memory when its estimator keeps state across updates (``tigpo``), else ``None``; its schedule's
    settings are the config's ``revisit_fraction`` and ``revisit_delay``."""
    from ecpo_train.core.credit import estimator_spec

    if not estimator_spec(config.estimator).keeps_state:
        return None
    return TaskGraphMemory(config.revisit_fraction, config.revisit_delay)
