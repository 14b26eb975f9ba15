"""The estimator registry, one function per estimator, and the public entry point :func:`compute_advantages`."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ecpo_gym.kwargs import shown
from ecpo_train.core.batch import TrajectoryBatch
from ecpo_train.core.credit.config import CreditConfig
from ecpo_train.core.credit.equations import (
    action_value_gap,
    anchor_potential,
    between_action_variance,
    cosine_clusters,
    cross_temporal_advantage,
    distance_to_success,
    eca_action_std,
    eca_advantage,
    eca_shrinkage,
    ecpo_advantage,
    future_return,
    gae_advantage,
    gigpo_advantage,
    gigpo_anchor_advantage,
    graph_step_return,
    graphgpo_advantage,
    grpo_advantage,
    hgpo_aggregate,
    hgpo_level_advantage,
    history_groups,
    moments,
    pgpo_advantage,
    pgpo_weight,
    potential_difference,
    reliability_weight,
    rloo_advantage,
    strict_valid,
    tigpo_advantage,
    trajectory_return,
    trajectory_success,
    transition_targets,
    unbiased_std,
    vargate_reliability,
    verl_agent_episode_advantage,
    within_action_variance,
)
from ecpo_train.core.credit.history import SUCCESS, TaskHistory, group_histories
from ecpo_train.core.credit.registry import available_estimators, estimator_spec, register_estimator
from ecpo_train.core.rows import CreditRows, host_values, prepare_rows


class AdvantageOverflow(ValueError):
    """Finite input whose advantages overflow float64; :func:`compute_advantages` names the cause (a credit value or
    the rewards' scale)."""

    def __init__(self, what: str, reward_peak: float) -> None:
        super().__init__(what)
        self.what, self.reward_peak = what, reward_peak


# a credit value this large is what overflows (the rewards are bounded far below it, core.rows.MAX_RETURN_MAGNITUDE)
_HUGE_CREDIT_VALUE = 1e100


def _overflow_cause(error: AdvantageOverflow, config: CreditConfig, name: str) -> str:
    """The one line naming why the advantages overflowed: the credit values the estimator reads that are huge
    (kappa=1e308 is not blamed on omega), else the rewards' scale."""
    spec = estimator_spec(name)
    huge = [f"credit.{f.name}={getattr(config, f.name):g}" for f in dataclasses.fields(config)
            if spec.reads_credit_key(f.name) and isinstance(getattr(config, f.name), float)
            and abs(getattr(config, f.name)) >= _HUGE_CREDIT_VALUE]
    if huge:
        return (f"{error.what}: {', '.join(huge)} {'takes' if len(huge) == 1 else 'take'} the {name} advantages "
                "past float64's range (~1.8e308); lower it")
    return (f"{error.what}: rewards as large as |r| = {error.reward_peak:.3g} make the returns, or their squared "
            f"deviations, exceed float64's range (~1.8e308) once weighted by omega={config.omega:g}; rescale the "
            "rewards or lower omega")


@dataclass(frozen=True, eq=False)
class _Returns:
    future: Any  # G per row
    trajectory: Any  # R per trajectory


def _returns(rows: CreditRows, config: CreditConfig) -> _Returns:
    dev = rows.dev
    g = future_return(rows.reward, dev["traj"], rows.ops.index(rows.position), rows.n_trajs, rows.horizon, config.gamma)
    return _Returns(future=g, trajectory=trajectory_return(rows.reward, dev["traj"], rows.n_trajs))


def _grpo_rows(rows: CreditRows, ret: _Returns, config: CreditConfig) -> Any:
    dev = rows.dev
    return grpo_advantage(ret.trajectory, dev["traj_group"], rows.n_groups, config.eps)[dev["traj"]]


@dataclass(frozen=True, eq=False)
class _AnchorEvidence:
    """ECA and VarGate quantities of every anchor / canonical action (Sec. 4.1-4.2)."""

    action_adv: Any  # A_act per row
    rho_vg: Any  # per anchor
    rho: Any  # per anchor, after StrictValid and the floor
    strict: Any  # per anchor
    between: Any  # B_s per anchor (eq. between_var)
    within: Any  # W_s per anchor (eq. within_var)


def _anchor_evidence(rows: CreditRows, ret: _Returns, config: CreditConfig, anchor_scale: bool = False) -> _AnchorEvidence:
    """ECA (eqs. eca_shrinkage, eca_adv) and VarGate + StrictValid (eqs. between_var .. vargate, App. A).

    ``anchor_scale`` swaps eq. eca_adv's denominator ``sigma^act_s`` for the anchor's occurrence-level std
    ``sigma_s`` (the ``ecpo_anchor_scale`` reading); nothing else changes.
    """
    ops, dev = rows.ops, rows.dev
    g = ret.future
    anchor_stats = moments(g, dev["anchor"], rows.n_anchors, ops)
    action_count = ops.asarray(rows.action_counts)
    action_mean = ops.segment_sum(g, dev["action"], rows.n_actions) / action_count
    mu_s = anchor_stats.mean
    calibrated = eca_shrinkage(action_mean, action_count, mu_s[dev["action_anchor"]], config.kappa)
    if anchor_scale:  # the very std GiGPO_w/std divides by (gigpo_anchor_advantage)
        scale = unbiased_std(anchor_stats, ops)
    else:
        scale = eca_action_std(calibrated, mu_s, dev["action_anchor"], rows.n_anchors)
    per_action_adv = eca_advantage(calibrated, mu_s, dev["action_anchor"], scale, config.eps)
    # Exactly 0 where the equation is 0 in exact arithmetic: one canonical action, or all returns equal.
    comparable = ops.mask(rows.anchor_action_counts >= 2) & ~anchor_stats.constant
    action_adv = ops.where(comparable[dev["anchor"]], per_action_adv[dev["action"]], 0.0)

    anchor_size = anchor_stats.count
    between = between_action_variance(action_mean, action_count, mu_s, dev["action_anchor"], anchor_size, rows.n_anchors)
    within = within_action_variance(
        g, dev["action"], action_mean, action_count, dev["action_anchor"], anchor_size, rows.n_anchors
    )
    rho_vg = vargate_reliability(between, within, anchor_size, config.tau, config.eps)
    strict = strict_valid(
        ops.index(rows.anchor_depth), anchor_size, ops.index(rows.anchor_action_counts), between, within,
        config.d_min, config.eps,
    )
    rho = reliability_weight(rho_vg, strict, config.rho_min)
    return _AnchorEvidence(action_adv=action_adv, rho_vg=rho_vg, rho=rho, strict=strict, between=between, within=within)


def ecpo_gate(rows: CreditRows, config: CreditConfig) -> _AnchorEvidence:
    """ECPO's evidence on ``rows`` whatever estimator a run trains with: per anchor its ``rho`` (eq. ecpo_adv's
    weight, 0 unless StrictValid), StrictValid and ``B_s``, ``W_s`` (the same for every ECPO variant: the scale
    reading changes only ``A_act``). ``credit.diagnostics`` reports ECPO's gate from it for every run."""
    return _anchor_evidence(rows, _returns(rows, config), config)


def _structure_diagnostics(rows: CreditRows) -> dict[str, float]:
    is_anchor = rows.anchor_sizes >= 2
    n_anchors = int(is_anchor.sum())
    fewest = np.full(rows.n_anchors, np.iinfo(np.int64).max)
    np.minimum.at(fewest, rows.action_anchor, rows.action_counts)
    divergent = is_anchor & (rows.anchor_top_action_count >= 2) & (fewest == 1)
    return {
        "num_rows": float(rows.n_rows),
        "num_trajectories": float(rows.n_trajs),
        "num_groups": float(rows.n_groups),
        "num_anchors": float(n_anchors),
        "anchor_hit_rate": float(is_anchor[rows.anchor].mean()),
        "divergent_anchor_fraction": float(divergent.sum() / n_anchors) if n_anchors else 0.0,
    }


def _advantage_diagnostics(rows: CreditRows, adv: Any) -> dict[str, float]:
    values = rows.ops.host(adv)
    if not np.isfinite(values).all():
        rewards = rows.ops.host(rows.reward)
        raise AdvantageOverflow(f"advantages overflow float64 (row {int(np.argmin(np.isfinite(values)))} is "
                                f"{values[~np.isfinite(values)][0]})", float(np.abs(rewards).max()))
    peak = float(np.abs(values).max())
    # squaring advantages beyond ~1e154 overflows: take their std on a rescaled copy then
    std = peak * float((values / peak).std()) if peak > 1e150 else float(values.std())
    return {
        "advantage_std": std,
        "advantage_min": float(values.min()),
        "advantage_max": float(values.max()),
    }


def gate_diagnostics(rows: CreditRows, evidence: _AnchorEvidence) -> dict[str, float]:
    """ECPO's gate over the anchors (states visited >= 2 times in their group): mean rho, over StrictValid anchors
    too, and the shares gated to 0 and passing StrictValid."""
    is_anchor = rows.anchor_sizes >= 2
    if not is_anchor.any():
        return {"mean_rho": 0.0, "mean_rho_strict_valid": 0.0, "gated_fraction": 0.0, "strict_valid_fraction": 0.0}
    rho = rows.ops.host(evidence.rho)[is_anchor]
    strict = rows.ops.host(evidence.strict)[is_anchor]
    # over StrictValid anchors alone: mean_rho mixes VarGate's reliability with how many anchors StrictValid shuts
    return {
        "mean_rho": float(rho.mean()),
        "mean_rho_strict_valid": float(rho[strict].mean()) if strict.any() else 0.0,
        "gated_fraction": float((rho == 0.0).mean()),
        "strict_valid_fraction": float(strict.mean()),
    }


def _lucky_singletons(rows: CreditRows, ret: _Returns) -> int:
    """Lucky singletons in the batch: the situation ECA and VarGate exist for (the paper's fig. 1). One per
    canonical action taken exactly once at a divergent anchor (another action there was taken at least twice)
    whose one visit returned more than the anchor's mean return ``mu_s``: a rare action that got lucky, whose
    single return GiGPO credits at face value."""
    g = np.asarray(rows.ops.host(ret.future), dtype=np.float64)
    mu = np.bincount(rows.anchor, weights=g, minlength=rows.n_anchors) / np.maximum(rows.anchor_sizes, 1)
    lucky = ((rows.action_counts[rows.action] == 1) & (rows.anchor_top_action_count[rows.anchor] >= 2)
             & (g > mu[rows.anchor] + 1e-12))
    return int(lucky.sum())


def _finish(rows: CreditRows, ret: _Returns, adv: Any, extra: dict[str, float] | None = None
            ) -> tuple[Any, dict[str, float]]:
    diagnostics = _structure_diagnostics(rows) | {"num_lucky_singletons": float(_lucky_singletons(rows, ret))}
    diagnostics |= (extra or {}) | _advantage_diagnostics(rows, adv)
    return adv, diagnostics


@register_estimator("grpo", credit_keys=(), grpo_trajectory=True)
def grpo_estimator(rows: CreditRows, config: CreditConfig) -> tuple[Any, dict[str, float]]:
    """GRPO: every row of trajectory i gets ``A^GRPO_i`` (eq. grpo_adv)."""
    ret = _returns(rows, config)
    return _finish(rows, ret, _grpo_rows(rows, ret, config))


@register_estimator("rloo", credit_keys=())
def rloo_estimator(rows: CreditRows, config: CreditConfig) -> tuple[Any, dict[str, float]]:
    """RLOO: every row of trajectory i gets ``R_i - mean_{j != i} R_j`` over its group."""
    ret = _returns(rows, config)
    adv = rloo_advantage(ret.trajectory, rows.dev["traj_group"], rows.n_groups)[rows.dev["traj"]]
    return _finish(rows, ret, adv)


def _episode_rows(rows: CreditRows, ret: Any, config: CreditConfig, normalize_std: bool) -> Any:
    """Each row's episode term: GRPO's (once per trajectory), or under ``compat="verl-agent"`` verl-agent's GiGPO
    episode normalisation (statistics over the group's step rows, :func:`verl_agent_episode_advantage`), which its
    GiGPO and its GraphGPO recipe both use."""
    if config.compat == "verl-agent":
        return verl_agent_episode_advantage(
            ret.trajectory, rows.dev["traj"], rows.dev["row_group"], rows.n_groups, config.eps, normalize_std
        )
    return _grpo_rows(rows, ret, config)


def _gigpo(rows: CreditRows, config: CreditConfig, normalize_std: bool) -> tuple[Any, dict[str, float]]:
    ret = _returns(rows, config)
    trajectory_adv = _episode_rows(rows, ret, config, normalize_std)
    anchor_adv = gigpo_anchor_advantage(ret.future, rows.dev["anchor"], rows.n_anchors, config.eps, normalize_std)
    return _finish(rows, ret, gigpo_advantage(trajectory_adv, anchor_adv, config.omega))


@register_estimator("gigpo", credit_keys=("compat",), grpo_trajectory=True)
def gigpo_estimator(rows: CreditRows, config: CreditConfig) -> tuple[Any, dict[str, float]]:
    """GiGPO without std: ``A^GRPO_i + omega (G_{i,t} - mu_s)``.

    ``compat="verl-agent"`` gives verl-agent's ``mode="mean_norm"`` numbers (episode term unscaled too)."""
    return _gigpo(rows, config, normalize_std=False)


@register_estimator("gigpo_std", credit_keys=("compat",), grpo_trajectory=True)
def gigpo_std_estimator(rows: CreditRows, config: CreditConfig) -> tuple[Any, dict[str, float]]:
    """GiGPO_w/std: ``A^GRPO_i + omega (G_{i,t} - mu_s) / (sigma_s + eps)`` (the paper's GiGPO baseline).

    ``compat="verl-agent"`` gives verl-agent's ``mode="mean_std_norm"`` numbers."""
    return _gigpo(rows, config, normalize_std=True)


def _ecpo(rows: CreditRows, config: CreditConfig, gated: bool, anchor_scale: bool) -> tuple[Any, dict[str, float]]:
    """eq. ecpo_adv with ``rho`` (``gated``) or without it (ECA-only), on either scale of eq. eca_adv."""
    ret = _returns(rows, config)
    evidence = _anchor_evidence(rows, ret, config, anchor_scale=anchor_scale)
    rho_rows = evidence.rho[rows.dev["anchor"]] if gated else 1.0
    adv = ecpo_advantage(_grpo_rows(rows, ret, config), rho_rows, evidence.action_adv, config.omega)
    return _finish(rows, ret, adv, gate_diagnostics(rows, evidence) if gated else None)


@register_estimator("ecpo", credit_keys=(), grpo_trajectory=True)
def ecpo_estimator(rows: CreditRows, config: CreditConfig) -> tuple[Any, dict[str, float]]:
    """ECPO: ``A^GRPO_i + omega rho(s) A_act(s, a)`` (eq. ecpo_adv) with ECA and VarGate + StrictValid.

    ``A_act`` is eq. eca_adv as written: normalised by ``sigma^act_s``, the spread of the calibrated action
    means over the anchor's actions (with two actions that spread undoes the shrinkage: fig. 1's B gets
    ``3/sqrt(5)`` for every kappa). :func:`ecpo_anchor_scale_estimator` is the reading App. C analyses."""
    return _ecpo(rows, config, gated=True, anchor_scale=False)


@register_estimator("ecpo_eca_only", credit_keys=(), grpo_trajectory=True)
def ecpo_eca_only_estimator(rows: CreditRows, config: CreditConfig) -> tuple[Any, dict[str, float]]:
    """Ablation +ECA (Sec. 5.2): ``A^GRPO_i + omega A_act(s, a)`` -- ECA replaces GiGPO's anchor credit, no rho."""
    return _ecpo(rows, config, gated=False, anchor_scale=False)


@register_estimator("ecpo_anchor_scale", credit_keys=(), grpo_trajectory=True)
def ecpo_anchor_scale_estimator(rows: CreditRows, config: CreditConfig) -> tuple[Any, dict[str, float]]:
    """ECPO as App. C analyses it: eq. ecpo_adv with eq. eca_adv's denominator ``sigma^act_s`` replaced by the
    anchor's occurrence-level std ``sigma_s`` of G -- the std (and eps) GiGPO_w/std divides by at that anchor.

    On that scale ("the same local normalization scale" of eq. ecpo_bad_bound) ECA's term for action u is
    GiGPO_w/std's mean term for u times ``n_{s,u} / (n_{s,u} + kappa)``, so a singleton's is GiGPO's over
    ``1 + kappa`` (eq. bad_shrinkage), and VarGate multiplies it by ``rho``. Everything else is ``ecpo``'s."""
    return _ecpo(rows, config, gated=True, anchor_scale=True)


@register_estimator("ecpo_anchor_scale_eca_only", credit_keys=(), grpo_trajectory=True)
def ecpo_anchor_scale_eca_only_estimator(rows: CreditRows, config: CreditConfig) -> tuple[Any, dict[str, float]]:
    """ECA-only ablation of ``ecpo_anchor_scale``: ``A^GRPO_i + omega A_act(s, a)`` with eq. eca_adv on the
    anchor's occurrence-level std ``sigma_s`` (no rho)."""
    return _ecpo(rows, config, gated=False, anchor_scale=True)


@register_estimator("ecpo_vargate_only", credit_keys=(), grpo_trajectory=True)
def ecpo_vargate_only_estimator(rows: CreditRows, config: CreditConfig) -> tuple[Any, dict[str, float]]:
    """Ablation +VarGate (Sec. 5.2): ``A^GRPO_i + omega rho(s) A^anchor_{i,t}`` on GiGPO_w/std's anchor credit."""
    ret = _returns(rows, config)
    evidence = _anchor_evidence(rows, ret, config)
    anchor_adv = gigpo_anchor_advantage(ret.future, rows.dev["anchor"], rows.n_anchors, config.eps, True)
    adv = ecpo_advantage(_grpo_rows(rows, ret, config), evidence.rho[rows.dev["anchor"]], anchor_adv, config.omega)
    return _finish(rows, ret, adv, gate_diagnostics(rows, evidence))


# --------------------------------------------------------------------------------------------------------
# Other papers' step credit: PGPO, HGPO, GraphGPO, PACE (docs/paper_notes.md, "Other step-credit estimators")
# --------------------------------------------------------------------------------------------------------
def _last_rows(rows: CreditRows) -> tuple[np.ndarray, np.ndarray]:
    """``(whether each row is its trajectory's last step, each trajectory's length)``, host arrays."""
    length = np.zeros(rows.n_trajs, dtype=np.int64)
    np.maximum.at(length, rows.traj, rows.position + 1)
    return rows.position == length[rows.traj] - 1, length


def _success(rows: CreditRows) -> np.ndarray:
    """Success per trajectory (eq. trajectory_success on its last step's reward), host bool array."""
    is_last, _ = _last_rows(rows)
    last_reward = np.zeros(rows.n_trajs)
    last_reward[rows.traj[is_last]] = np.asarray(rows.ops.host(rows.reward), dtype=np.float64)[is_last]
    return trajectory_success(last_reward)


@register_estimator("pgpo", credit_keys=("pgpo_alpha", "pgpo_beta", "pgpo_gamma"))
def pgpo_estimator(rows: CreditRows, config: CreditConfig) -> tuple[Any, dict[str, float]]:
    """PGPO (arXiv 2609.02236): ``A^S + w(x) A^phi`` with no episode term. ``A^S`` is GiGPO_w/std's anchor term;
    ``A^phi`` the TD-style ``delta_t = gamma_phi Phi(s_{t+1}) - Phi(s_t)`` of the anchor potentials ``Phi``
    (eq. 6, the anchor's mean return; the final reward after the last step), z-scored within the row's anchor
    group; ``w(x) = beta (1 - p_succ)^alpha`` from the group's success rate. Diagnostic: the mean ``w(x)``."""
    ret = _returns(rows, config)
    ops, dev = rows.ops, rows.dev
    phi = anchor_potential(ret.future, dev["anchor"], rows.n_anchors)
    is_last, _ = _last_rows(rows)
    dense = ops.zeros(rows.n_trajs * (rows.horizon + 1))
    flat_next = ops.index(rows.traj * (rows.horizon + 1) + rows.position + 1)
    dense[ops.index(rows.traj * (rows.horizon + 1) + rows.position)] = phi[dev["anchor"]]
    delta = potential_difference(phi[dev["anchor"]], dense[flat_next], rows.reward, ops.mask(is_last), config.pgpo_gamma)
    potential_adv = gigpo_anchor_advantage(delta, dev["anchor"], rows.n_anchors, config.eps, True)
    step_adv = gigpo_anchor_advantage(ret.future, dev["anchor"], rows.n_anchors, config.eps, True)
    success_rate = np.bincount(rows.traj_group, weights=_success(rows), minlength=rows.n_groups) / np.maximum(
        np.bincount(rows.traj_group, minlength=rows.n_groups), 1)
    weight = pgpo_weight(success_rate, config.pgpo_alpha, config.pgpo_beta)
    adv = pgpo_advantage(step_adv, ops.asarray(weight)[dev["row_group"]], potential_adv)
    return _finish(rows, ret, adv, {"pgpo_mean_weight": float(weight.mean())})


@register_estimator("hgpo", credit_keys=("hgpo_history", "hgpo_alpha", "hgpo_std", "hgpo_base_group"))
def hgpo_estimator(rows: CreditRows, config: CreditConfig) -> tuple[Any, dict[str, float]]:
    """HGPO (arXiv 2602.22817): for k = 1..K+1 the rows that share their last k anchors form a group of level k
    (eq. history_groups; k = 1 is GiGPO's anchor group); each level z-scores G within its groups (population
    std, or only centres it with ``hgpo_std=False``); a row's advantage is the ``(k + 1)^alpha``-weighted mean
    of its nonzero levels (eq. hgpo_aggregate). No episode term unless ``hgpo_base_group``: then the episode
    advantage over the group's step rows (verl-agent's, eq. verl_agent_episode_advantage) joins as level k = 0. Diagnostic: the share of rows with no level to compare in."""
    ret = _returns(rows, config)
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
    return _finish(rows, ret, rows.ops.asarray(adv), {"hgpo_no_group_fraction": alone})


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
    _, length = _last_rows(rows)
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


@register_estimator("graphgpo", credit_keys=("compat", "graph_gamma", "graph_success_return"), grpo_trajectory=True)
def graphgpo_estimator(rows: CreditRows, config: CreditConfig) -> tuple[Any, dict[str, float]]:
    """GraphGPO (arXiv 2605.26684): per group, the graph term of its rollouts' state graph (:func:`_graph_term`:
    each transition's return ``10 gamma^d``, gamma 0.1, z-scored among the transitions leaving the same state)
    added to the GRPO episode term. A group with no success gets no graph term. Diagnostic: the share of groups
    whose graph reaches a success.

    ``compat="verl-agent"`` gives the authors' recipe's numbers (verl-agent ``recipe/GraphGPO``, ``mode=
    "mean_std_norm"``): its episode term is GiGPO's there, over step rows (:func:`_episode_rows`)."""
    ret = _returns(rows, config)
    graph_adv, reaches = _graph_term(rows, config, _success(rows))
    adv = graphgpo_advantage(_episode_rows(rows, ret, config, normalize_std=True), rows.ops.asarray(graph_adv))
    return _finish(rows, ret, adv, {"graph_success_group_fraction": float(reaches.mean())})


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


@register_estimator("tigpo", keeps_state=True, credit_keys=("graph_gamma", "graph_success_return"))
def tigpo_estimator(rows: CreditRows, config: CreditConfig, history: Sequence[TaskHistory], anchor_keys: Any
                    ) -> tuple[Any, dict[str, float]]:
    """TIGPO (arXiv 2609.03383), its credit: GraphGPO's graph term on the temporal graph ``H_x + G_x``, the task's
    persistent transitions from earlier updates (``history``, one :class:`TaskHistory` per row) joined to this
    group's own, so a state's distance to success counts paths found by earlier policies; each transition's
    return ``10 gamma^d`` z-scored among this update's transitions leaving the same state; plus the episode term:
    for a revisit group (its history has a ``reference``) the cross-temporal advantage against the frozen scores of
    the task's earlier exploration group, else GRPO's (eq. tigpo_advantage, both weights 1). A group whose temporal
    graph reaches no success gets no graph term. Only this update's rows get advantages: the history shapes their
    credit, never the loss. Diagnostics: the share of groups that reach success only through their history, the
    share of revisit groups and the persistent edges read."""
    ret = _returns(rows, config)
    success = _success(rows)
    histories = group_histories(history, rows.traj_group[rows.traj], rows.n_groups)
    first_node = rows.n_anchors + rows.n_groups + rows.n_trajs
    earlier = _history_edges(rows, np.asarray(anchor_keys, dtype=object), histories, first_node)
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
    return _finish(rows, ret, rows.ops.asarray(adv), {
        "tigpo_success_from_history_fraction": float((won_before & ~won_now).mean()),
        "tigpo_revisit_group_fraction": float(revisit.mean()),
        "tigpo_history_edges": float(len(earlier[0]))})


@register_estimator("pace", hidden_states="optional", credit_keys=("pace_cosine",), grpo_trajectory=True)
def pace_estimator(rows: CreditRows, config: CreditConfig, hidden_states: Any = None) -> tuple[Any, dict[str, float]]:
    """PACE, BiPACE's action-counterfactual term (arXiv 2606.25556): ``A^GRPO_i + omega (Q^(s, a) - V^(s))``,
    ``Q^`` the mean return of the row's canonical action at its anchor and ``V^`` the anchor's mean return
    (eq. action_value_gap). Anchors are identity keys; with ``hidden_states`` (one vector per row) the rows of a
    group are clustered by cosine similarity >= ``pace_cosine`` instead (eq. cosine_clusters, BiGPO's state
    side). Diagnostic: the number of states (anchors or clusters) compared in."""
    ret = _returns(rows, config)
    anchor, action, action_anchor = rows.anchor, rows.action, rows.action_anchor
    n_anchors, n_actions = rows.n_anchors, rows.n_actions
    if hidden_states is not None:
        hidden = np.asarray(host_values(hidden_states, "hidden_states"), dtype=np.float64)
        if hidden.ndim != 2 or hidden.shape[0] != rows.n_rows or not np.isfinite(hidden).all():
            raise ValueError(f"hidden_states has shape {hidden.shape}, expected ({rows.n_rows}, d) finite: one vector "
                             "per step row")
        anchor = cosine_clusters(hidden, rows.traj_group[rows.traj], config.pace_cosine)
        n_anchors = int(anchor.max()) + 1
        pairs, action = np.unique(np.stack([anchor, rows.action_key], axis=1), axis=0, return_inverse=True)
        action, action_anchor, n_actions = action.reshape(-1), pairs[:, 0], len(pairs)
    ops = rows.ops
    gap = action_value_gap(ret.future, ops.index(action), n_actions, ops.index(action_anchor), ops.index(anchor),
                           n_anchors)
    adv = gigpo_advantage(_grpo_rows(rows, ret, config), gap, config.omega)
    return _finish(rows, ret, adv, {"pace_states": float(n_anchors)})


def _gae_rows(rows: CreditRows, values: Any, config: CreditConfig, gae_lambda: float) -> tuple[np.ndarray, np.ndarray]:
    """eq. gae on the host (values come from a critic on any device): ``(advantages, values)`` per row, float64."""
    if not 0.0 <= float(gae_lambda) <= 1.0:
        raise ValueError(f"gae_lambda={shown(gae_lambda)} is invalid: it must be a number in [0, 1]")
    values = np.asarray(host_values(values, "values"), dtype=np.float64)
    if values.shape != (rows.n_rows,):
        raise ValueError(f"values has shape {values.shape}, expected ({rows.n_rows},): one V(s) per step row")
    rewards = np.asarray(rows.ops.host(rows.reward), dtype=np.float64)
    adv = gae_advantage(rewards, values, rows.traj, rows.position, rows.n_trajs, rows.horizon, config.gamma,
                        float(gae_lambda))
    return adv, values


def gae_targets(rows: CreditRows, values: Any, config: CreditConfig, gae_lambda: float = 0.95
                ) -> tuple[np.ndarray, np.ndarray]:
    """``(advantages, value targets)`` per row of eq. gae: the raw GAE advantages and the critic's regression
    targets, the lambda-returns ``A_t + V(s_t)`` (what the ``ppo`` estimator's critic is fitted to)."""
    adv, values = _gae_rows(rows, values, config, gae_lambda)
    return adv, adv + values


@register_estimator("ppo", needs_values=True, group_relative=False, options={"gae_lambda": 0.95},
                    credit_keys=())
def ppo_estimator(rows: CreditRows, config: CreditConfig, values: Any, gae_lambda: float = 0.95
                  ) -> tuple[Any, dict[str, float]]:
    """PPO's baseline (the paper's actor-critic comparison): eq. gae on a learned critic's ``values``, whitened
    over the batch. ``gamma`` is the credit config's; ``gae_lambda`` is PPO's own. Diagnostics: the mean value
    and the std of the advantages before whitening."""
    adv, _ = _gae_rows(rows, values, config, gae_lambda)
    whitened = (adv - adv.mean()) / (adv.std() + 1e-8)
    value_mean = float(np.asarray(host_values(values, "values")).mean())  # in the critic's own dtype
    return rows.ops.asarray(whitened), {"value_mean": value_mean, "advantage_std": float(adv.std())}


# --------------------------------------------------------------------------------------------------------
# Public entry point
# --------------------------------------------------------------------------------------------------------
def compute_advantages(
    name: str,
    group_ids: Sequence[Any] | Any = None,
    traj_ids: Sequence[Any] | Any = None,
    steps: Sequence[int] | Any = None,
    anchor_keys: Sequence[Any] | Any = None,
    action_keys: Sequence[Any] | Any = None,
    rewards: Sequence[float] | Any = None,
    *,
    rows: CreditRows | None = None,
    values: Any = None,
    hidden_states: Any = None,
    history: Sequence[TaskHistory] | None = None,
    credit: CreditConfig | None = None,
    **hyperparameters: Any,
) -> tuple[Any, dict[str, float]]:
    """Per-row advantages of estimator ``name`` and its diagnostics, from plain arrays (one entry per step row).

    ``name``: one of ``grpo, rloo, gigpo, gigpo_std, ecpo, ecpo_eca_only, ecpo_anchor_scale,
    ecpo_anchor_scale_eca_only, ecpo_vargate_only, pgpo, hgpo, graphgpo, pace, tigpo``, or ``ppo`` (GAE on a learned
    critic: pass ``values=``, one ``V(s)`` per row, and optionally ``gae_lambda``). ``hidden_states=`` (one vector
    per row) goes to an estimator that reads them (``pace``'s clustering); the others refuse it. ``history=`` (one
    :class:`~ecpo_train.core.credit.history.TaskHistory` per row: the row's task as earlier updates left it) goes
    to an estimator that keeps state across updates (``tigpo``), which needs it and the rows' state keys (the
    columns, or ``rows=`` a ``TrajectoryBatch``); the others refuse it. Ids and keys
    are sequences (or arrays/tensors) of str or int; a trajectory is identified by ``(group_id, traj_id)``
    and its ``steps`` must be exactly ``1..T``; rows may come in any order. ``anchor_keys`` are the anchor
    keys (an anchor is ``(group_id, anchor_key)``; see the module docstring on the name). ``rewards`` are
    floats: a torch tensor gives a float64 tensor on its device, anything else a float64 numpy array.
    Instead of the six columns, ``rows`` may pass a ``TrajectoryBatch`` (or the ``CreditRows`` of
    :func:`prepare_rows`): rows validated and coded once, when the table was built.
    Hyperparameters (defaults = paper): gamma, omega, kappa, tau, d_min, rho_min, eps, compat
    ("native" | "verl-agent") and the other estimators' (``pgpo_*``, ``hgpo_*``, ``graph_*``, ``pace_cosine``),
    one by one or as ``credit=`` a ``CreditConfig`` (the object the configs carry).
    Bad input raises ``ValueError``: a hyperparameter of the wrong type or out of its range (named, with the
    range), and finite rewards so large that float64 arithmetic on them overflows (rejected rather than
    returned as inf/NaN: finite input gives finite advantages or this error).
    """
    spec = estimator_spec(name)
    options = {key: hyperparameters.pop(key, default) for key, default in spec.options}
    if credit is not None and (hyperparameters or not isinstance(credit, CreditConfig)):
        raise ValueError(f"credit= takes one CreditConfig and no separate hyperparameters (got {type(credit).__name__}"
                         f"{' and ' + ', '.join(sorted(hyperparameters)) if hyperparameters else ''})")
    config = credit if credit is not None else CreditConfig.from_kwargs(**hyperparameters)
    if config.compat != "native" and "compat" not in (spec.credit_keys or ()):
        aware = sorted(n for n in available_estimators() if "compat" in (estimator_spec(n).credit_keys or ()))
        raise ValueError(f"compat={shown(config.compat)} applies only to {aware}, not {shown(name)}")
    if spec.needs_values and values is None:
        raise ValueError(f"estimator {name!r} needs values=: one critic value V(s) per step row")
    if not spec.needs_values and values is not None:
        raise ValueError(f"estimator {name!r} is critic-free: it takes no values=")
    if spec.hidden_states == "none" and hidden_states is not None:
        raise ValueError(f"estimator {name!r} reads no hidden states: it takes no hidden_states=")
    if spec.keeps_state and history is None:
        raise ValueError(f"estimator {name!r} keeps state across updates: it needs history=, one TaskHistory per step "
                         "row (a TaskGraphMemory gives them; TaskHistory() is a task with no history yet)")
    if not spec.keeps_state and history is not None:
        raise ValueError(f"estimator {name!r} keeps no state across updates: it takes no history=")
    columns = {"group_ids": group_ids, "traj_ids": traj_ids, "steps": steps, "anchor_keys": anchor_keys,
               "action_keys": action_keys, "rewards": rewards}
    given = [column for column, column_values in columns.items() if column_values is not None]
    keys = anchor_keys if rows is None else getattr(rows, "anchor_key", None)  # a TrajectoryBatch's state keys
    if spec.keeps_state and keys is None and rows is not None:
        raise ValueError(f"estimator {name!r} reads the rows' state keys: pass rows= a TrajectoryBatch, or the columns")
    if rows is not None:
        if given:
            raise ValueError(f"pass either rows= or the step columns, not both (got rows and {', '.join(given)})")
        if isinstance(rows, TrajectoryBatch):  # the table's rows, validated and coded when it was built
            rows = rows.credit_rows()
        if not isinstance(rows, CreditRows):
            raise TypeError(f"rows must be a TrajectoryBatch or CreditRows (from prepare_rows), got {type(rows).__name__}")
    else:
        missing = [column for column in columns if column not in given]
        if missing:
            raise TypeError(f"compute_advantages needs the step columns {', '.join(missing)} (or rows=)")
        rows = prepare_rows(group_ids, traj_ids, steps, anchor_keys, action_keys, rewards)
    try:
        with np.errstate(over="ignore", invalid="ignore"):  # an overflow raises AdvantageOverflow in _finish instead
            if spec.needs_values:
                return spec.fn(rows, config, values, **options)
            if spec.hidden_states != "none":
                return spec.fn(rows, config, hidden_states=hidden_states)
            if spec.keeps_state:
                state_keys = np.asarray(host_values(keys, "anchor_keys"), dtype=object)
                return spec.fn(rows, config, history=history, anchor_keys=state_keys)
            return spec.fn(rows, config)
    except AdvantageOverflow as error:
        raise ValueError(_overflow_cause(error, config, name)) from None
