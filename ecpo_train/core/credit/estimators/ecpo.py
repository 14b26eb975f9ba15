"""ECPO (Sec. 4) and its ablations: GRPO's episode term plus ``omega rho(s) A_act(s, a)``, ECA's calibrated action
advantage (eqs. eca_shrinkage, eca_adv) gated by VarGate + StrictValid (eqs. between_var .. vargate, App. A); the
gate itself (:func:`ecpo_gate`), which ``core.credit.diagnostics`` reports for every run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ecpo_train.core.credit.equations import (
    between_action_variance,
    eca_action_std,
    eca_advantage,
    eca_shrinkage,
    ecpo_advantage,
    gigpo_anchor_advantage,
    moments,
    reliability_weight,
    strict_valid,
    unbiased_std,
    vargate_reliability,
    within_action_variance,
)
from ecpo_train.core.credit.estimators.base import Returns, finish, grpo_rows, returns_of
from ecpo_train.core.credit.registry import Advantages, EstimatorInputs, register_estimator
from ecpo_train.core.rows import CreditRows

if TYPE_CHECKING:
    from ecpo_train.core.credit import CreditConfig  # the type (the package builds it after these register)


@dataclass(frozen=True, eq=False)
class _AnchorEvidence:
    """ECA and VarGate quantities of every anchor / canonical action (Sec. 4.1-4.2)."""

    action_adv: Any  # A_act per row
    rho_vg: Any  # per anchor
    rho: Any  # per anchor, after StrictValid and the floor
    strict: Any  # per anchor
    between: Any  # B_s per anchor (eq. between_var)
    within: Any  # W_s per anchor (eq. within_var)


def _anchor_evidence(rows: CreditRows, ret: Returns, config: CreditConfig, anchor_scale: bool = False) -> _AnchorEvidence:
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
    return _anchor_evidence(rows, returns_of(rows, config), config)


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


def _ecpo(rows: CreditRows, config: CreditConfig, gated: bool, anchor_scale: bool) -> Advantages:
    """eq. ecpo_adv with ``rho`` (``gated``) or without it (ECA-only), on either scale of eq. eca_adv."""
    ret = returns_of(rows, config)
    evidence = _anchor_evidence(rows, ret, config, anchor_scale=anchor_scale)
    rho_rows = evidence.rho[rows.dev["anchor"]] if gated else 1.0
    adv = ecpo_advantage(grpo_rows(rows, ret, config), rho_rows, evidence.action_adv, config.omega)
    return finish(rows, ret, adv, gate_diagnostics(rows, evidence) if gated else None)


@register_estimator("ecpo", hyperparameters=(), grpo_trajectory=True)
def ecpo_estimator(rows: CreditRows, config: CreditConfig, inputs: EstimatorInputs) -> Advantages:
    """ECPO: ``A^GRPO_i + omega rho(s) A_act(s, a)`` (eq. ecpo_adv) with ECA and VarGate + StrictValid.

    ``A_act`` is eq. eca_adv as written: normalised by ``sigma^act_s``, the spread of the calibrated action
    means over the anchor's actions (with two actions that spread undoes the shrinkage: fig. 1's B gets
    ``3/sqrt(5)`` for every kappa). :func:`ecpo_anchor_scale_estimator` is the reading App. C analyses."""
    return _ecpo(rows, config, gated=True, anchor_scale=False)


@register_estimator("ecpo_eca_only", hyperparameters=(), grpo_trajectory=True)
def ecpo_eca_only_estimator(rows: CreditRows, config: CreditConfig, inputs: EstimatorInputs) -> Advantages:
    """Ablation +ECA (Sec. 5.2): ``A^GRPO_i + omega A_act(s, a)`` -- ECA replaces GiGPO's anchor credit, no rho."""
    return _ecpo(rows, config, gated=False, anchor_scale=False)


@register_estimator("ecpo_anchor_scale", hyperparameters=(), grpo_trajectory=True)
def ecpo_anchor_scale_estimator(rows: CreditRows, config: CreditConfig, inputs: EstimatorInputs) -> Advantages:
    """ECPO as App. C analyses it: eq. ecpo_adv with eq. eca_adv's denominator ``sigma^act_s`` replaced by the
    anchor's occurrence-level std ``sigma_s`` of G -- the std (and eps) GiGPO_w/std divides by at that anchor.

    On that scale ("the same local normalization scale" of eq. ecpo_bad_bound) ECA's term for action u is
    GiGPO_w/std's mean term for u times ``n_{s,u} / (n_{s,u} + kappa)``, so a singleton's is GiGPO's over
    ``1 + kappa`` (eq. bad_shrinkage), and VarGate multiplies it by ``rho``. Everything else is ``ecpo``'s."""
    return _ecpo(rows, config, gated=True, anchor_scale=True)


@register_estimator("ecpo_anchor_scale_eca_only", hyperparameters=(), grpo_trajectory=True)
def ecpo_anchor_scale_eca_only_estimator(rows: CreditRows, config: CreditConfig, inputs: EstimatorInputs) -> Advantages:
    """ECA-only ablation of ``ecpo_anchor_scale``: ``A^GRPO_i + omega A_act(s, a)`` with eq. eca_adv on the
    anchor's occurrence-level std ``sigma_s`` (no rho)."""
    return _ecpo(rows, config, gated=False, anchor_scale=True)


@register_estimator("ecpo_vargate_only", hyperparameters=(), grpo_trajectory=True)
def ecpo_vargate_only_estimator(rows: CreditRows, config: CreditConfig, inputs: EstimatorInputs) -> Advantages:
    """Ablation +VarGate (Sec. 5.2): ``A^GRPO_i + omega rho(s) A^anchor_{i,t}`` on GiGPO_w/std's anchor credit."""
    ret = returns_of(rows, config)
    evidence = _anchor_evidence(rows, ret, config)
    anchor_adv = gigpo_anchor_advantage(ret.future, rows.dev["anchor"], rows.n_anchors, config.eps, True)
    adv = ecpo_advantage(grpo_rows(rows, ret, config), evidence.rho[rows.dev["anchor"]], anchor_adv, config.omega)
    return finish(rows, ret, adv, gate_diagnostics(rows, evidence))

