"""Credit from the state graph of a group's rollouts: GraphGPO (arXiv 2605.26684; each transition's return
``success_return * gamma^d`` by the distance d to success, z-scored among the transitions leaving one state) and
TIGPO (arXiv 2609.03383), GraphGPO's graph term on the task's persistent graph with a cross-temporal episode term."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import numpy as np
from annotated_types import Interval

from ecpo_train.core.credit.equations import (
    cross_temporal_advantage,
    distance_to_success,
    gigpo_anchor_advantage,
    graph_step_return,
    graphgpo_advantage,
    grpo_advantage,
    tigpo_advantage,
    transition_targets,
)
from ecpo_train.core.credit.estimators.base import finish, last_rows, returns_of, successes
from ecpo_train.core.credit.estimators.gigpo import COMPAT, episode_rows
from ecpo_train.core.credit.history import SUCCESS, TaskHistory, group_histories
from ecpo_train.core.credit.registry import (
    Advantages,
    EstimatorInputs,
    Hyperparameter,
    Positive,
    register_estimator,
)
from ecpo_train.core.rows import CreditRows

if TYPE_CHECKING:
    from ecpo_train.core.credit import CreditConfig  # the type (the package builds it after these register)

# GraphGPO's distance discount is in (0, 1): its 10 * gamma^d must fall with d
GRAPH_HYPERPARAMETERS = (
    Hyperparameter("graph_gamma", Annotated[float, Interval(gt=0, lt=1)], 0.1,
                   "GraphGPO's distance discount: a transition's return is success_return * gamma^d"),
    Hyperparameter("graph_success_return", Positive, 10.0, "GraphGPO's return of the step that succeeds"),
)


def _groups_won(rows: CreditRows, success: np.ndarray) -> np.ndarray:
    """Whether each group has a successful trajectory (``success``: per trajectory)."""
    return np.bincount(rows.traj_group, weights=success, minlength=rows.n_groups) > 0


def _graph_term(rows: CreditRows, config: CreditConfig, success: np.ndarray, earlier: tuple[np.ndarray, ...] = (),
                won_before: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """GraphGPO's graph term per row (host array) and whether each group's graph reaches a success: the group's
    state graph (eq. transition_targets) joined to ``earlier`` edges (sources, targets, and the groups of the nodes
    only they hold, numbered after the dead ends; TIGPO's persistent graphs), each state's distance to success by
    reverse shortest path (eq. distance_to_success), each transition's return ``10 gamma^d`` of the state it
    reaches, z-scored among the transitions leaving the same state. A group whose graph reaches no success (it won
    neither now nor, ``won_before``, earlier) gets no graph term."""
    _, length = last_rows(rows)
    target = transition_targets(rows.anchor, rows.traj, rows.position, length, rows.traj_group, success,
                                rows.n_anchors, rows.n_groups, rows.horizon)
    old_source, old_target, old_group = earlier or (np.zeros(0, np.int64),) * 3
    node_group = np.concatenate([rows.anchor_group, np.arange(rows.n_groups), rows.traj_group, old_group])
    reaches = _groups_won(rows, success)
    if won_before is not None:
        reaches = reaches | won_before
    distance = distance_to_success(np.concatenate([rows.anchor, old_source]), np.concatenate([target, old_target]),
                                   node_group, rows.n_anchors + np.flatnonzero(reaches))
    step_return = graph_step_return(distance[target].astype(np.float64), config.graph_gamma, config.graph_success_return)
    graph_adv = gigpo_anchor_advantage(step_return, rows.anchor, rows.n_anchors, config.eps, True)
    return np.where(reaches[rows.traj_group[rows.traj]], graph_adv, 0.0), reaches


@register_estimator("graphgpo", hyperparameters=(COMPAT, *GRAPH_HYPERPARAMETERS), grpo_trajectory=True)
def graphgpo_estimator(rows: CreditRows, config: CreditConfig, inputs: EstimatorInputs) -> Advantages:
    """GraphGPO (arXiv 2605.26684): per group, the graph term of its rollouts' state graph (:func:`_graph_term`:
    each transition's return ``10 gamma^d``, gamma 0.1, z-scored among the transitions leaving the same state)
    added to the GRPO episode term. A group with no success gets no graph term. Diagnostic: the share of groups
    whose graph reaches a success.

    ``compat="verl-agent"`` gives the authors' recipe's numbers (verl-agent ``recipe/GraphGPO``, ``mode=
    "mean_std_norm"``): its episode term is GiGPO's there, over step rows (:func:`episode_rows`)."""
    ret = returns_of(rows, config)
    graph_adv, reaches = _graph_term(rows, config, successes(rows))
    adv = graphgpo_advantage(episode_rows(rows, ret, config, normalize_std=True), rows.ops.asarray(graph_adv))
    return finish(rows, ret, adv, {"graph_success_group_fraction": float(reaches.mean())})


def _history_edges(rows: CreditRows, anchor_keys: np.ndarray, histories: list[TaskHistory], first_node: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The persistent graphs' edges in the union graph's node codes: a state key one of the group's rows is at is
    that anchor's node, the success key the group's success node (``n_anchors + group``), any other key a node of
    its own (from ``first_node`` on). Returned: the edges' sources and targets, and each new node's group."""
    node: dict[tuple[int, str], int] = {}
    for row in range(rows.n_rows):
        node.setdefault((int(rows.traj_group[rows.traj[row]]), str(anchor_keys[row])), int(rows.anchor[row]))
    extra_group: list[int] = []

    def code(group: int, key: str) -> int:
        if key == SUCCESS:
            return rows.n_anchors + group
        if (group, key) not in node:
            node[(group, key)] = first_node + len(extra_group)
            extra_group.append(group)
        return node[(group, key)]

    source, target = [], []
    for group, history in enumerate(histories):
        for here, there in sorted(history.edges):
            source.append(code(group, here))
            target.append(code(group, there))
    return (np.asarray(source, dtype=np.int64), np.asarray(target, dtype=np.int64),
            np.asarray(extra_group, dtype=np.int64))


@register_estimator("tigpo", keeps_state=True, hyperparameters=GRAPH_HYPERPARAMETERS)
def tigpo_estimator(rows: CreditRows, config: CreditConfig, inputs: EstimatorInputs) -> Advantages:
    """TIGPO (arXiv 2609.03383), its credit: GraphGPO's graph term on the temporal graph ``H_x + G_x``, the task's
    persistent transitions from earlier updates (``inputs.history``, one :class:`TaskHistory` per row) joined to this
    group's own, so a state's distance to success counts paths found by earlier policies; each transition's
    return ``10 gamma^d`` z-scored among this update's transitions leaving the same state; plus the episode term:
    for a revisit group (its history has a ``reference``) the cross-temporal advantage against the frozen scores of
    the task's earlier exploration group, else GRPO's (eq. tigpo_advantage, both weights 1). A group whose temporal
    graph reaches no success gets no graph term. Only this update's rows get advantages: the history shapes their
    credit, never the loss. Diagnostics: the share of groups that reach success only through their history, the
    share of revisit groups and the persistent edges read."""
    ret = returns_of(rows, config)
    success = successes(rows)
    histories = group_histories(inputs.history, rows.traj_group[rows.traj], rows.n_groups)
    first_node = rows.n_anchors + rows.n_groups + rows.n_trajs
    earlier = _history_edges(rows, np.asarray(inputs.anchor_keys, dtype=object), histories, first_node)
    won_now = _groups_won(rows, success)
    won_before = np.array([any(there == SUCCESS for _, there in h.edges) for h in histories], dtype=bool)
    graph_adv, _ = _graph_term(rows, config, success, earlier, won_before)
    scores = np.asarray(rows.ops.host(ret.trajectory), dtype=np.float64)
    episode = grpo_advantage(scores, rows.traj_group, rows.n_groups, config.eps)
    revisit = np.array([h.reference is not None for h in histories], dtype=bool)
    for group in np.flatnonzero(revisit):
        members = np.flatnonzero(rows.traj_group == group)
        episode[members] = cross_temporal_advantage(scores[members], np.asarray(histories[group].reference), config.eps)
    adv = tigpo_advantage(episode[rows.traj], graph_adv)
    return finish(rows, ret, rows.ops.asarray(adv), {
        "tigpo_success_from_history_fraction": float((won_before & ~won_now).mean()),
        "tigpo_revisit_group_fraction": float(revisit.mean()),
        "tigpo_history_edges": float(len(earlier[0]))})

