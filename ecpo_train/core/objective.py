"""The token-level clipped objective with KL to a frozen reference (paper eq. ecpo_objective), one function per term.

The token probability ratio, the clipped surrogate, the low-variance (k3) KL estimator, token-mean aggregation,
the step advantage broadcast to its action's tokens (Algorithm 1, step E), and ``ecpo_objective_loss``, the
scalar loss of one micro-batch. ``core/loss.py`` runs the update loop that calls it.

The ratio's denominator is the rows' recorded sampling log-probs: on-policy (the paper), these are the weights
the update starts from. Rows sampled by older weights (a pipelined driver) can use ``behaviour_correction:
truncated_is`` instead: the clip around the weights the update starts from (pi_prox) and a truncated importance
weight from the sampling policy to pi_prox (``decoupled_clipped_surrogate``).

Shapes: ``[rows, tokens]`` tensors with a float ``mask`` (1 = a response token of the action).
"""

from __future__ import annotations

import torch


def token_ratio(logp: torch.Tensor, old_logp: torch.Tensor) -> torch.Tensor:
    """q_{i,t,l}(theta) = pi_theta(y|c) / pi_old(y|c) (paper, the ratio defined above eq. ecpo_objective)."""
    return torch.exp(logp - old_logp)


def masked_token_mean(values: torch.Tensor, mask: torch.Tensor, denominator: float | None = None) -> torch.Tensor:
    """Token-mean aggregation: sum over response tokens / number of response tokens (E_{i,t,l}).

    ``denominator`` lets a micro-batch divide by the whole mini-batch's token count, so accumulated
    gradients equal the gradient of the mini-batch's token mean.
    """
    total = mask.sum() if denominator is None else torch.as_tensor(denominator, dtype=values.dtype)
    return (values * mask).sum() / torch.clamp(total, min=1.0)


def clipped_surrogate(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, clip_eps: float
) -> torch.Tensor:
    """Per-token min(q A, clip(q, 1-eps, 1+eps) A) of eq. ecpo_objective (to be maximised)."""
    ratio = token_ratio(logp, old_logp)
    return torch.minimum(ratio * advantages, torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages)


def truncated_is_weight(prox_logp: torch.Tensor, behaviour_logp: torch.Tensor, cap: float) -> torch.Tensor:
    """Per-token w = min(pi_prox(y|c) / mu(y|c), cap), without gradient: the importance weight from the behaviour
    policy mu that sampled the token (its recorded log-prob) to the proximal policy pi_prox, truncated at ``cap``
    so one token sampled by stale weights cannot dominate the mini-batch."""
    return torch.clamp(torch.exp(prox_logp - behaviour_logp), max=cap).detach()


def decoupled_clipped_surrogate(logp: torch.Tensor, prox_logp: torch.Tensor, behaviour_logp: torch.Tensor,
                                advantages: torch.Tensor, clip_eps: float, cap: float) -> torch.Tensor:
    """Per-token w min(r A, clip(r, 1-eps, 1+eps) A) with r = pi_theta / pi_prox and w = ``truncated_is_weight``:
    the clipped surrogate for rows sampled by a lagged behaviour policy mu. The trust region is taken around
    pi_prox (the learner's weights when the update starts), not around mu, and w corrects the sampling
    distribution; with pi_prox == mu, w = 1 and this is ``clipped_surrogate`` of eq. ecpo_objective."""
    weight = truncated_is_weight(prox_logp, behaviour_logp, cap)
    return weight * clipped_surrogate(logp, prox_logp, advantages, clip_eps)


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token low-variance estimate of D_KL(pi_theta || pi_ref) in eq. ecpo_objective (Schulman's k3).

    k3 = exp(log r) - log r - 1 with log r = log pi_ref - log pi_theta; non-negative, unbiased under
    samples from pi_theta. The log-ratio is clamped to [-20, 20] so one wild token cannot overflow.
    """
    log_ratio = torch.clamp(ref_logp - logp, -20.0, 20.0)
    return torch.exp(log_ratio) - log_ratio - 1.0


def ecpo_objective_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_eps: float = 0.2,
    kl_coef: float = 0.01,
    entropy: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
    token_count: float | None = None,
    stats_token_count: float | None = None,
    prox_logp: torch.Tensor | None = None,
    is_weight_cap: float = 2.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Loss = -J_ECPO(theta) (eq. ecpo_objective) with token-mean aggregation, minus an optional entropy bonus.

    ``advantages`` is per token (see ``assign_step_advantage``). Returns the scalar loss and statistics
    (``pg_loss``, ``kl``, ``clip_frac``, ``ratio_mean``, ``ratio_max_dev``, ``entropy``) as token means;
    ``clip_frac`` and ``ratio_mean`` divide by ``stats_token_count`` when given (the tokens actually computed,
    when rows without gradient were left out). ``prox_logp`` (``behaviour_correction: truncated_is``): the
    proximal policy's log-probs; the surrogate is then ``decoupled_clipped_surrogate`` with ``old_logp`` as the
    behaviour policy's, the ratio statistics are taken against pi_prox, and ``is_weight_mean`` /
    ``is_weight_capped_frac`` say how far the behaviour policy lagged.
    """
    mask = mask.to(logp.dtype)
    if prox_logp is None:
        surrogate = clipped_surrogate(logp, old_logp, advantages, clip_eps)
    else:
        surrogate = decoupled_clipped_surrogate(logp, prox_logp, old_logp, advantages, clip_eps, is_weight_cap)
    pg_loss = -masked_token_mean(surrogate, mask, token_count)
    loss = pg_loss
    stats: dict[str, float] = {}
    if ref_logp is not None:
        kl = masked_token_mean(kl_k3(logp, ref_logp), mask, token_count)
        loss = loss + kl_coef * kl
        stats["kl"] = float(kl.detach())
    if entropy is not None:
        mean_entropy = masked_token_mean(entropy, mask, token_count)
        loss = loss - entropy_coef * mean_entropy
        stats["entropy"] = float(mean_entropy.detach())
    with torch.no_grad():
        ratio = token_ratio(logp, old_logp if prox_logp is None else prox_logp)
        clipped = ((ratio < 1.0 - clip_eps) & (advantages < 0)) | ((ratio > 1.0 + clip_eps) & (advantages > 0))
        stats["pg_loss"] = float(pg_loss.detach())
        seen = token_count if stats_token_count is None else stats_token_count
        if prox_logp is not None:
            raw_weight = torch.exp(prox_logp - old_logp)
            stats["is_weight_mean"] = float(masked_token_mean(torch.clamp(raw_weight, max=is_weight_cap), mask, seen))
            stats["is_weight_capped_frac"] = float(masked_token_mean((raw_weight > is_weight_cap).to(mask.dtype),
                                                                     mask, seen))
        stats["clip_frac"] = float(masked_token_mean(clipped.to(mask.dtype), mask, seen))
        stats["ratio_mean"] = float(masked_token_mean(ratio, mask, seen))
        active = mask > 0
        stats["ratio_max_dev"] = float((ratio[active] - 1.0).abs().max()) if bool(active.any()) else 0.0
    return loss, stats


def assign_step_advantage(step_advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Broadcast each step's advantage to every token of its action (Algorithm 1, step E)."""
    return step_advantages.to(mask.dtype).unsqueeze(-1) * mask
