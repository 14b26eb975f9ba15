"""The paper's credit equations, one vectorised function each (its label in the docstring), and the segment
statistics they share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ecpo_train.core.backend import ops_of


@dataclass(frozen=True)
class Moments:
    count: Any  # per segment, float
    mean: Any
    sq_dev: Any  # sum of squared deviations from the segment mean
    constant: Any  # bool per segment: all values equal (a singleton included)


def moments(values: Any, codes: Any, n: int, ops: Any) -> Moments:
    """The statistics of ``values`` in each of ``n`` segments (``codes``: a row's segment), the one helper every
    equation's mean, variance and std come from (numpy or torch alike, ``ops``)."""
    count = ops.segment_sum(values * 0.0 + 1.0, codes, n)
    mean = ops.segment_sum(values, codes, n) / ops.where(count > 0, count, 1.0)
    sq_dev = ops.segment_sum((values - mean[codes]) ** 2, codes, n)
    constant = ops.segment_max(values, codes, n) == ops.segment_min(values, codes, n)
    return Moments(count, mean, sq_dev, constant)


def unbiased_std(m: Moments, ops: Any) -> Any:
    """The (n-1) std of each segment (GRPO's, GiGPO's)."""
    return ops.sqrt(m.sq_dev / ops.where(m.count > 1, m.count - 1.0, 1.0))


def population_std(m: Moments, ops: Any) -> Any:
    """The population (n) std of each segment (HGPO's)."""
    return ops.sqrt(m.sq_dev / ops.where(m.count > 0, m.count, 1.0))


def future_return(rewards: Any, traj: Any, position: Any, n_trajs: int, horizon: int, gamma: float) -> Any:
    """Discounted future return ``G_{i,t} = sum_{l>=t} gamma^(l-t) r_{i,l}`` of every row (eq. future_return).

    Rows are scattered into a dense (trajectory x step) matrix and multiplied by the upper-triangular
    kernel ``K[l, t] = gamma^(l-t)`` (l >= t): one matmul, a direct sum of non-negative weights (no
    cancellation for long trajectories, unlike a global reverse cumsum rescaled by gamma powers).
    ``traj``/``position`` are backend index arrays (row -> trajectory code, step - 1).
    """
    ops = ops_of(rewards)
    flat = traj * horizon + position
    dense = ops.zeros(n_trajs * horizon)
    dense[flat] = rewards
    lag = np.arange(horizon)
    diff = lag[:, None] - lag[None, :]
    kernel = np.where(diff >= 0, float(gamma) ** np.maximum(diff, 0), 0.0)
    returns = dense.reshape(n_trajs, horizon) @ ops.asarray(kernel)
    return returns.reshape(-1)[flat]


def trajectory_return(rewards: Any, traj: Any, n_trajs: int) -> Any:
    """``R_i``: the undiscounted sum of a trajectory's rewards, penalties included (Sec. 3)."""
    return ops_of(rewards).segment_sum(rewards, traj, n_trajs)


def grpo_advantage(returns: Any, group: Any, n_groups: int, eps: float) -> Any:
    """GRPO trajectory advantage ``(R_i - mu_R) / (sigma_R + eps)`` (eq. grpo_adv).

    ``returns`` holds one ``R_i`` per trajectory and ``group`` its group code. ``sigma_R`` is the unbiased
    (n-1) std, as verl's GRPO; a group whose returns are all equal (a group of one included) gets 0.
    """
    ops = ops_of(returns)
    m = moments(returns, group, n_groups, ops)
    adv = (returns - m.mean[group]) / (unbiased_std(m, ops)[group] + eps)
    return ops.where(m.constant[group], 0.0, adv)


def rloo_advantage(returns: Any, group: Any, n_groups: int) -> Any:
    """RLOO trajectory advantage ``R_i - mean_{j != i} R_j`` (leave-one-out baseline, no std scaling).

    Not a paper equation (a baseline of the experiments). A group of one, or of equal returns, gets 0.
    """
    ops = ops_of(returns)
    m = moments(returns, group, n_groups, ops)
    count = m.count[group]
    others_mean = (m.mean[group] * count - returns) / ops.where(count > 1, count - 1.0, 1.0)
    return ops.where(m.constant[group], 0.0, returns - others_mean)


def gigpo_anchor_advantage(future_returns: Any, anchor: Any, n_anchors: int, eps: float, normalize_std: bool) -> Any:
    """GiGPO occurrence-level anchor advantage (Sec. 3, "Step-level credit in GiGPO").

    ``(G_{i,t} - mu_s) / (sigma_s + eps)`` with the unbiased std when ``normalize_std`` (GiGPO_w/std, the
    input of the VarGate-only ablation), else ``G_{i,t} - mu_s``. An anchor visited once, or whose
    returns are all equal, gets 0.
    """
    ops = ops_of(future_returns)
    m = moments(future_returns, anchor, n_anchors, ops)
    centered = future_returns - m.mean[anchor]
    if normalize_std:
        centered = centered / (unbiased_std(m, ops)[anchor] + eps)
    return ops.where(m.constant[anchor], 0.0, centered)


def eca_shrinkage(action_mean: Any, action_count: Any, anchor_mean: Any, kappa: float) -> Any:
    """Calibrated action return ``(n_{s,u} Gbar_{s,u} + kappa mu_s) / (n_{s,u} + kappa)`` (eq. eca_shrinkage).

    All arguments are per canonical action (``anchor_mean`` is ``mu_s`` of the action's anchor).
    """
    return (action_count * action_mean + kappa * anchor_mean) / (action_count + kappa)


def eca_action_std(calibrated: Any, anchor_mean: Any, action_anchor: Any, n_anchors: int) -> Any:
    """``sigma^act_s``, the denominator of eq. eca_adv: the unweighted population std of ``mu~_{s,u} - mu_s``
    over the anchor's canonical actions, per anchor."""
    ops = ops_of(calibrated)
    centered = calibrated - anchor_mean[action_anchor]
    n_actions = ops.segment_sum(centered * 0.0 + 1.0, action_anchor, n_anchors)
    return ops.sqrt(ops.segment_sum(centered**2, action_anchor, n_anchors) / ops.where(n_actions > 0, n_actions, 1.0))


def eca_advantage(calibrated: Any, anchor_mean: Any, action_anchor: Any, scale: Any, eps: float) -> Any:
    """Calibrated action advantage ``(mu~_{s,u} - mu_s) / (scale_s + eps)`` (eq. eca_adv), per canonical action.

    The paper's ``scale_s`` is ``sigma^act_s`` (:func:`eca_action_std`); ``ecpo_anchor_scale`` passes the
    anchor's occurrence-level std ``sigma_s`` instead (see :func:`ecpo_anchor_scale_estimator`). ``scale`` is
    per anchor; the caller broadcasts the action value to every occurrence of that action.
    """
    return (calibrated - anchor_mean[action_anchor]) / (scale[action_anchor] + eps)


def between_action_variance(
    action_mean: Any, action_count: Any, anchor_mean: Any, action_anchor: Any, anchor_size: Any, n_anchors: int
) -> Any:
    """``B_s = (1/n_s) sum_u n_{s,u} (Gbar_{s,u} - mu_s)^2`` (eq. between_var), per anchor."""
    ops = ops_of(action_mean)
    weighted = action_count * (action_mean - anchor_mean[action_anchor]) ** 2
    return ops.segment_sum(weighted, action_anchor, n_anchors) / anchor_size


def within_action_variance(
    future_returns: Any, action: Any, action_mean: Any, action_count: Any, action_anchor: Any, anchor_size: Any,
    n_anchors: int,
) -> Any:
    """``W_s = (1/n_s) sum_u n_{s,u} Var_s(G | u)`` with population ``Var_s(G | u)`` (eq. within_var)."""
    ops = ops_of(future_returns)
    n_actions = len(action_count)
    var_given_action = ops.segment_sum((future_returns - action_mean[action]) ** 2, action, n_actions) / action_count
    return ops.segment_sum(action_count * var_given_action, action_anchor, n_anchors) / anchor_size


def vargate_reliability(between: Any, within: Any, anchor_size: Any, tau: float, eps: float) -> Any:
    """``rho_VG(s) = tanh(n_s / tau) * B_s / (B_s + W_s + eps)`` (eq. vargate), in [0, 1)."""
    ops = ops_of(between)
    return ops.tanh(anchor_size / tau) * between / (between + within + eps)


def strict_valid(
    depth: Any, anchor_size: Any, anchor_action_count: Any, between: Any, within: Any, d_min: int, eps: float
) -> Any:
    """StrictValid(s) (App. A): ``depth >= d_min``, ``n_s >= 2``, ``|U_s| >= 2``, ``B_s + W_s > eps``.

    ``depth`` is the smallest step number at which the anchor occurs in its group (ARCHITECTURE).
    """
    return (depth >= d_min) & (anchor_size >= 2) & (anchor_action_count >= 2) & (between + within > eps)


def reliability_weight(rho_vg: Any, is_strict_valid: Any, rho_min: float) -> Any:
    """Final ``rho``: 0 for anchors failing StrictValid (non-comparable ones included, Sec. 4.2), else
    ``max(rho_VG, rho_min)`` -- the App. A reliability floor, applied only to StrictValid anchors."""
    ops = ops_of(rho_vg)
    return ops.where(is_strict_valid, ops.floor_at(rho_vg, rho_min), 0.0)


def gigpo_advantage(trajectory_adv: Any, anchor_adv: Any, omega: float) -> Any:
    """GiGPO final advantage ``A^GRPO_i + omega * A^anchor_{i,t}`` (Sec. 3), per row."""
    return trajectory_adv + omega * anchor_adv


def ecpo_advantage(trajectory_adv: Any, rho: Any, action_adv: Any, omega: float) -> Any:
    """ECPO final advantage ``A^GRPO_i + omega * rho_VG(s_{i,t}) * A_act(s_{i,t}, a_{i,t})`` (eq. ecpo_adv)."""
    return trajectory_adv + omega * rho * action_adv


def verl_agent_episode_advantage(
    returns: Any, traj: Any, row_group: Any, n_groups: int, eps: float, normalize_std: bool
) -> Any:
    """verl-agent's GiGPO episode term (``episode_norm_reward`` with its default cross-step statistics).

    Differences from :func:`grpo_advantage`, all of them verl-agent's:

    * every step row carries its trajectory's ``R_i`` and the group mean/std are taken over the group's
      step rows, so a trajectory weighs by its length;
    * a group with a single step row uses mean 0 and std 1 (its advantage is ``R_i`` or ``R_i/(1+eps)``);
    * with ``normalize_std=False`` (verl-agent ``mode="mean_norm"``, used by our ``"gigpo"``) the episode
      term is ``R_i - mean`` without std scaling; ``mode="mean_std_norm"`` maps to ``"gigpo_std"``.

    The std is unbiased, as ``torch.std``. Where verl-agent computes in float32 we use float64, and a group
    of several equal rows gets exactly 0 (verl-agent: 0 up to float32 rounding). Returns one value per row.
    """
    ops = ops_of(returns)
    row_returns = returns[traj]
    m = moments(row_returns, row_group, n_groups, ops)
    single = m.count == 1
    mean = ops.where(single, 0.0, m.mean)
    std = ops.where(single, 1.0, unbiased_std(m, ops))
    centered = row_returns - mean[row_group]
    if normalize_std:
        centered = centered / (std[row_group] + eps)
    return ops.where(m.constant[row_group] & ~single[row_group], 0.0, centered)


def gae_advantage(rewards: Any, values: Any, traj: Any, position: Any, n_trajs: int, horizon: int, gamma: float,
                  lam: float) -> Any:
    """Generalised advantage estimation (eq. gae, the PPO baseline's credit), one advantage per row:
    ``delta_t = r_t + gamma V(s_{t+1}) - V(s_t)``, ``A_t = sum_k (gamma lam)^k delta_{t+k}``.

    The value after a trajectory's last step is 0: an episode that hits the step limit counts as ended, the step
    limit being part of the task. A loop over time, vectorised over trajectories (dense trajectory x step
    matrices, one column of padding). The value target of row t is ``A_t + V(s_t)`` (the lambda-return).
    """
    ops = ops_of(rewards)
    width = horizon + 1
    flat = traj * width + position
    dense_reward, dense_value = ops.zeros(n_trajs * width), ops.zeros(n_trajs * width)
    dense_reward[flat] = rewards
    dense_value[flat] = values
    r, v = dense_reward.reshape(n_trajs, width), dense_value.reshape(n_trajs, width)
    adv = ops.zeros(n_trajs * width).reshape(n_trajs, width)
    for t in range(horizon - 1, -1, -1):
        delta = r[:, t] + gamma * v[:, t + 1] - v[:, t]
        adv[:, t] = delta + gamma * lam * adv[:, t + 1]
    return adv.reshape(-1)[flat]


# --------------------------------------------------------------------------------------------------------
# Other papers' step credit (docs/paper_notes.md: each source and our reading of its loose points). The
# structural ones (history groups, the state graph) work on host numpy arrays of integer codes.
# --------------------------------------------------------------------------------------------------------
def trajectory_success(last_reward: Any) -> Any:
    """A trajectory succeeded when its last step's reward is positive (the success reward, 10 in ALFWorld and
    WebShop, comes on the last step; a failure's is 0 and an invalid action's -0.1): PGPO's ``p_succ`` and
    GraphGPO's success node read it."""
    return last_reward > 0


def anchor_potential(future_returns: Any, anchor: Any, n_anchors: int) -> Any:
    """PGPO eq. 6: the anchor's potential ``Phi(s) = mean of G over the anchor group's occurrences``, per anchor."""
    ops = ops_of(future_returns)
    return moments(future_returns, anchor, n_anchors, ops).mean


def potential_difference(potential_here: Any, potential_next: Any, last_reward: Any, is_last: Any,
                         gamma: float) -> Any:
    """PGPO's TD-style transition score ``delta_t = gamma Phi(s_{t+1}) - Phi(s_t)``, per row; at a trajectory's
    last step the final reward stands in for ``Phi(s_{t+1})`` (``delta_T = gamma r_T - Phi(s_T)``)."""
    ops = ops_of(potential_here)
    return gamma * ops.where(is_last, last_reward, potential_next) - potential_here


def pgpo_weight(success_rate: Any, alpha: float, beta: float) -> Any:
    """PGPO's task weight ``w(x) = beta (1 - p_succ)^alpha`` on the potential term: large where the group
    rarely succeeds."""
    return beta * (1.0 - success_rate) ** alpha


def pgpo_advantage(step_adv: Any, weight: Any, potential_adv: Any) -> Any:
    """PGPO's final advantage ``A^S + w(x) A^phi`` (no episode term): GiGPO_w/std's anchor term plus the
    z-scored potential difference, weighted by the task's ``w(x)``."""
    return step_adv + weight * potential_adv


def history_groups(anchor: np.ndarray, traj: np.ndarray, position: np.ndarray, n_trajs: int, horizon: int,
                   k: int) -> np.ndarray:
    """HGPO's hierarchy level k: the code of the rows that share their last k anchors (the current one and the
    k - 1 before it, in the same group, since anchor codes are per group), -1 for a row with fewer than k
    steps behind it. Level 1 is GiGPO's anchor group."""
    dense = np.full((n_trajs, horizon), -1, dtype=np.int64)
    dense[traj, position] = anchor
    window = np.stack([dense[traj, position - j] if j else anchor for j in range(k)], axis=1)
    has_history = position >= k - 1
    codes = np.full(len(anchor), -1, dtype=np.int64)
    if has_history.any():
        codes[has_history] = np.unique(window[has_history], axis=0, return_inverse=True)[1].reshape(-1)
    return codes


def hgpo_level_advantage(future_returns: np.ndarray, codes: np.ndarray, eps: float, normalize_std: bool
                         ) -> tuple[np.ndarray, np.ndarray]:
    """HGPO's advantage within each group of one level: ``G - mean`` over the group, divided by its population
    std + eps with ``normalize_std`` (its ``mean_std_norm``). Returned: the value per row and whether the row
    is in a group of at least 2 (a singleton group or a row without the history gives no item)."""
    member = codes >= 0
    n = int(codes.max()) + 1 if member.any() else 0
    ops = ops_of(future_returns)
    m = moments(future_returns[member], codes[member], n, ops)
    centered = np.zeros_like(future_returns)
    centered[member] = future_returns[member] - m.mean[codes[member]]
    if normalize_std:
        centered[member] /= population_std(m, ops)[codes[member]] + eps
    in_group = member.copy()
    in_group[member] = m.count[codes[member]] >= 2
    return np.where(in_group, centered, 0.0), in_group


def hgpo_aggregate(level_adv: np.ndarray, level_in: np.ndarray, levels: np.ndarray, alpha: float, eps: float
                   ) -> np.ndarray:
    """HGPO's adaptive aggregation: per row, the weighted mean of its levels' advantages with weights
    ``(k + 1)^alpha / (sum + eps)``, over the levels where the row's advantage is nonzero (a level whose
    advantage is exactly 0 carries no weight; none nonzero gives 0). ``level_adv``/``level_in`` are
    (levels, rows), ``levels`` the k of each."""
    active = level_in & (level_adv != 0)
    weight = np.where(active, (levels[:, None] + 1.0) ** alpha, 0.0)
    return (weight * level_adv).sum(axis=0) / (weight.sum(axis=0) + eps)


def transition_targets(anchor: np.ndarray, traj: np.ndarray, position: np.ndarray, traj_length: np.ndarray,
                       traj_group: np.ndarray, success: np.ndarray, n_anchors: int, n_groups: int, horizon: int
                       ) -> np.ndarray:
    """GraphGPO's edges: the node each row's transition reaches. Nodes are the anchors (codes ``0..n_anchors-1``,
    one set per group), one success node per group (``n_anchors + group``) and one dead end per trajectory
    (``n_anchors + n_groups + traj``): a step reaches the next step's anchor, a successful trajectory's last
    step its group's success node, a failed one's last step its own dead end (the state it ended in is not a
    row, so it links to nothing)."""
    n_trajs = len(traj_length)
    dense = np.zeros((n_trajs, horizon + 1), dtype=np.int64)
    dense[traj, position] = anchor
    is_last = position == traj_length[traj] - 1
    end = np.where(success[traj], n_anchors + traj_group[traj], n_anchors + n_groups + traj)
    return np.where(is_last, end, dense[traj, np.minimum(position + 1, horizon)])


def distance_to_success(source: np.ndarray, target: np.ndarray, node_group: np.ndarray, goals: np.ndarray
                        ) -> np.ndarray:
    """GraphGPO's distance of every node to its group's success node (``goals``): the shortest path over the
    observed transitions ``source -> target`` (unit costs), searched backwards from the success nodes. A node
    with no path gets its group's largest finite distance + 1 (``node_group`` names each node's group)."""
    dist = np.full(len(node_group), -1, dtype=np.int64)
    predecessors: dict[int, list[int]] = {}
    for s, t in zip(source.tolist(), target.tolist()):
        predecessors.setdefault(t, []).append(s)
    frontier, depth = [int(g) for g in goals], 0
    dist[goals] = 0
    while frontier:
        depth += 1
        reached = []
        for node in frontier:
            for pred in predecessors.get(node, ()):
                if dist[pred] < 0:
                    dist[pred] = depth
                    reached.append(pred)
        frontier = reached
    farthest = np.full(int(node_group.max()) + 1, 0, dtype=np.int64)
    np.maximum.at(farthest, node_group, dist)
    return np.where(dist >= 0, dist, farthest[node_group] + 1)


def graph_step_return(distance: Any, gamma: float, success_return: float) -> Any:
    """GraphGPO's return of a transition: ``success_return * gamma^d`` with d the distance to success of the
    state it reaches (10 * 0.1^d by default: 10 for the step that succeeds, 1 one step short)."""
    return success_return * gamma**distance


def graphgpo_advantage(episode_adv: Any, graph_adv: Any) -> Any:
    """GraphGPO's final advantage: the episode (GRPO) term plus the graph term, the step returns z-scored among
    the transitions that leave the same state of the group's graph."""
    return episode_adv + graph_adv


def action_value_gap(future_returns: Any, action: Any, n_actions: int, action_anchor: Any, anchor: Any,
                     n_anchors: int) -> Any:
    """PACE's ``Q^(s, a) - V^(s)`` per row: the mean return of the row's action at its anchor (or cluster) minus
    the anchor's mean return over all its occurrences (BiPACE, arXiv 2606.25556)."""
    ops = ops_of(future_returns)
    q = moments(future_returns, action, n_actions, ops).mean
    v = moments(future_returns, anchor, n_anchors, ops).mean
    return q[action] - v[anchor]


def cosine_clusters(hidden: np.ndarray, group: np.ndarray, threshold: float) -> np.ndarray:
    """BiPACE's hidden-state clustering (its state-side option to identity keys): within each group, rows in
    order join the first cluster whose first member's hidden state has cosine similarity >= ``threshold`` with
    theirs, else open a new one. Returned: one cluster label per row, unique across groups."""
    unit = hidden / np.maximum(np.linalg.norm(hidden, axis=1, keepdims=True), 1e-12)
    labels = np.empty(len(hidden), dtype=np.int64)
    leaders: dict[int, list[int]] = {}
    next_label = 0
    for row in range(len(hidden)):
        group_leaders = leaders.setdefault(int(group[row]), [])
        match = next((lead for lead in group_leaders if float(unit[lead] @ unit[row]) >= threshold), None)
        if match is None:
            group_leaders.append(row)
            labels[row] = next_label
            next_label += 1
        else:
            labels[row] = labels[match]
    return labels


def cross_temporal_advantage(scores: np.ndarray, reference: np.ndarray, eps: float) -> np.ndarray:
    """TIGPO's cross-temporal episode advantage of a revisit group (arXiv 2609.03383): its episode scores ``Z_R``
    normalised against ``[Z_E; Z_R]``, the scores of the same task's earlier exploration group (frozen) joined to
    its own, ``(z - mean) / (std + eps)`` over the joined set (unbiased std, as :func:`grpo_advantage`; a joined
    set of equal scores gives 0)."""
    pool = np.concatenate([np.asarray(reference, dtype=np.float64), np.asarray(scores, dtype=np.float64)])
    if len(pool) < 2 or np.all(pool == pool[0]):
        return np.zeros(len(scores))
    # one pool, not segments: numpy's pairwise mean and std (moments' segment sums would move the last bits)
    return (np.asarray(scores, dtype=np.float64) - pool.mean()) / (pool.std(ddof=1) + eps)


def tigpo_advantage(episode_adv: Any, graph_adv: Any, step_weight: float = 1.0, episode_weight: float = 1.0) -> Any:
    """TIGPO's final advantage: ``lambda_step A^TG + lambda_ep A^ep``, the temporal-graph step term plus the
    episode term (the cross-temporal one for a revisit group, GRPO's for an exploration group); the paper's
    ``lambda_step = lambda_ep = 1``."""
    return step_weight * graph_adv + episode_weight * episode_adv
