"""The token-level clipped objective with KL to a frozen reference (paper eq. ecpo_objective) and its update.

One function per term: the token probability ratio, the clipped surrogate, the low-variance (k3) KL
estimator, token-mean aggregation, and ``policy_update`` which runs the mini-batch / micro-batch loop
(gradient accumulation, grad-norm clipping, one optimizer step per mini-batch). Micro-batches hold a fixed
number of rows, or as many rows as fit a token budget (``pack_micro_batches``); under data parallelism
(``ecpo_train/distributed.py``) every process runs the same number of collective passes. A step's advantage is
broadcast to every token of its action (``assign_step_advantage``), as the paper's Algorithm 1 step E says.

Shapes: ``[rows, tokens]`` tensors with a float ``mask`` (1 = a response token of the action).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
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
) -> tuple[torch.Tensor, dict[str, float]]:
    """Loss = -J_ECPO(theta) (eq. ecpo_objective) with token-mean aggregation, minus an optional entropy bonus.

    ``advantages`` is per token (see ``assign_step_advantage``). Returns the scalar loss and statistics
    (``pg_loss``, ``kl``, ``clip_frac``, ``ratio_mean``, ``ratio_max_dev``, ``entropy``) as token means.
    """
    mask = mask.to(logp.dtype)
    surrogate = clipped_surrogate(logp, old_logp, advantages, clip_eps)
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
        ratio = token_ratio(logp, old_logp)
        clipped = ((ratio < 1.0 - clip_eps) & (advantages < 0)) | ((ratio > 1.0 + clip_eps) & (advantages > 0))
        stats["pg_loss"] = float(pg_loss.detach())
        stats["clip_frac"] = float(masked_token_mean(clipped.to(mask.dtype), mask, token_count))
        stats["ratio_mean"] = float(masked_token_mean(ratio, mask, token_count))
        active = mask > 0
        stats["ratio_max_dev"] = float((ratio[active] - 1.0).abs().max()) if bool(active.any()) else 0.0
    return loss, stats


def assign_step_advantage(step_advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Broadcast each step's advantage to every token of its action (Algorithm 1, step E)."""
    return step_advantages.to(mask.dtype).unsqueeze(-1) * mask


# ---------------------------------------------------------------------------------------------- update loop
@dataclass
class UpdateSettings:
    """The optimisation knobs of one policy update (a view of the trainer's config)."""

    clip_eps: float = 0.2
    kl_coef: float = 0.01
    entropy_coef: float = 0.0
    mini_batch_size: int = 256
    micro_batch_size: int = 16
    epochs: int = 1
    max_grad_norm: float = 1.0
    max_tokens_per_micro_batch: int = 0  # > 0: pack micro-batches by padded token count instead of row count


def pack_micro_batches(rows: np.ndarray, row_tokens: np.ndarray, micro_batch_size: int,
                       max_tokens: int = 0) -> list[np.ndarray]:
    """Cut one mini-batch's ``rows`` into micro-batches.

    ``max_tokens <= 0``: consecutive runs of ``micro_batch_size`` rows (the fixed-size path). Otherwise rows
    are taken shortest first and a micro-batch grows while its padded size (rows x longest row, what the
    forward pass allocates) stays within ``max_tokens``; a row longer than the budget goes alone. Memory is
    then bounded by tokens, not rows. ``row_tokens[i]`` is row i's sequence length (prompt + response).
    """
    rows = np.asarray(rows)
    if max_tokens <= 0:
        return [rows[i : i + micro_batch_size] for i in range(0, len(rows), micro_batch_size)]
    lengths = np.asarray(row_tokens)[rows]
    ordered = rows[np.argsort(lengths, kind="stable")]
    batches: list[np.ndarray] = []
    current: list[int] = []
    longest = 0
    for row in ordered:
        length = int(row_tokens[row])
        if current and (len(current) + 1) * max(longest, length) > max_tokens:
            batches.append(np.asarray(current))
            current, longest = [], 0
        current.append(int(row))
        longest = max(longest, length)
    if current:
        batches.append(np.asarray(current))
    return batches


class Reducer(Protocol):
    """What ``policy_update`` needs from a data-parallel group (``ecpo_train.runtime.distributed.DataParallel``)."""

    world_size: int

    def sum(self, value: float) -> float: ...

    def max(self, value: float) -> float: ...

    def mean_stats(self, stats: dict[str, float]) -> dict[str, float]: ...


LogprobFn = Callable[[np.ndarray], tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]]


def policy_update(
    logprob_fn: LogprobFn,
    ref_logprob_fn: Callable[[np.ndarray], torch.Tensor] | None,
    parameters: Sequence[torch.nn.Parameter],
    optimizer: torch.optim.Optimizer,
    old_logp: torch.Tensor,
    old_mask: torch.Tensor,
    step_advantages: torch.Tensor,
    settings: UpdateSettings,
    generator: np.random.Generator,
    before_step: Callable[[], None] | None = None,
    row_tokens: np.ndarray | None = None,
    reducer: Reducer | None = None,
) -> dict[str, float]:
    """Optimise eq. ecpo_objective over the rollout's step rows.

    Rows are shuffled and cut into mini-batches of ``mini_batch_size`` steps (one optimizer step each);
    each mini-batch is processed in micro-batches (``pack_micro_batches``: ``micro_batch_size`` steps, or a
    token budget with ``row_tokens`` the rows' sequence lengths) whose losses are scaled by the mini-batch
    token count, so the accumulated gradient is the mini-batch token mean's gradient whatever the packing.

    ``logprob_fn(row_indices) -> (token_logp, mask, entropy_or_None)`` evaluates the current policy on
    those rows with gradients; ``ref_logprob_fn`` the frozen reference (no gradients). ``old_logp`` /
    ``old_mask`` are the rollout's ``[rows, tokens]`` log-probs. ``before_step`` runs after gradients are
    accumulated and before clipping (the tabular policy uses it to grow optimizer state).

    ``reducer`` (data parallelism): this process holds its share of whole groups. All processes cut their
    rows into the same number of mini-batches and run the same number of micro-batch passes (a process out
    of rows repeats one with zero weight), because every sharded forward/backward is a collective. The
    gradient all-reduce *averages* over the K processes, so each divides its token sum by (global mini-batch
    token count / K): the average is then sum over all tokens / global count, the 1-process gradient.
    """
    n_rows = int(old_logp.shape[0])
    world = reducer.world_size if reducer is not None else 1
    if row_tokens is None:
        row_tokens = old_mask.sum(dim=1).numpy().astype(np.int64)
    totals: dict[str, float] = {}
    grad_norms: list[float] = []
    n_steps = 0
    for _ in range(settings.epochs):
        order = generator.permutation(n_rows)
        if reducer is None:
            minis = [order[start : start + settings.mini_batch_size]
                     for start in range(0, n_rows, settings.mini_batch_size)]
        else:
            n_minis = int(np.ceil(reducer.sum(float(n_rows)) / settings.mini_batch_size))
            minis = np.array_split(order, n_minis)
        for mini in minis:
            local_tokens = float(old_mask[mini].sum())
            token_count = local_tokens if reducer is None else reducer.sum(local_tokens) / world
            if token_count <= 0:
                continue
            optimizer.zero_grad(set_to_none=True)
            micros = pack_micro_batches(mini, row_tokens, settings.micro_batch_size,
                                        settings.max_tokens_per_micro_batch)
            weights = [1.0] * len(micros)
            if reducer is not None:
                n_micro = int(reducer.max(float(len(micros))))
                filler = mini[:1] if len(mini) else order[:1]
                weights += [0.0] * (n_micro - len(micros))
                micros += [filler] * (n_micro - len(micros))
            for rows, weight in zip(micros, weights):
                logp, mask, entropy = logprob_fn(rows)
                width = logp.shape[1]
                old = old_logp[rows, :width].to(logp.device)
                mask = mask * old_mask[rows, :width].to(mask.device).to(mask.dtype)
                ref = ref_logprob_fn(rows)[:, :width].to(logp.device) if ref_logprob_fn is not None else None
                adv = assign_step_advantage(step_advantages[rows].to(logp.device), mask)
                loss, stats = ecpo_objective_loss(
                    logp, old, ref, adv, mask, clip_eps=settings.clip_eps, kl_coef=settings.kl_coef,
                    entropy=entropy, entropy_coef=settings.entropy_coef, token_count=token_count,
                )
                (loss * weight if weight != 1.0 else loss).backward()
                if weight == 0.0:
                    continue
                for key, value in stats.items():
                    if key == "ratio_max_dev":
                        totals[key] = max(totals.get(key, 0.0), value)
                    else:
                        # stats are divided by the mini-batch token count: summing micro-batches gives its mean
                        totals[key] = totals.get(key, 0.0) + value
            if before_step is not None:
                before_step()
            grad_norm = torch.nn.utils.clip_grad_norm_(list(parameters), settings.max_grad_norm)
            if hasattr(grad_norm, "full_tensor"):  # a DTensor under FSDP: the norm over every shard
                grad_norm = grad_norm.full_tensor()
            grad_norms.append(float(grad_norm))
            optimizer.step()
            n_steps += 1
    result = {}
    for key, value in totals.items():
        if key == "ratio_max_dev":
            result[key] = value
        else:
            # each mini-batch contributes its token mean; report the mean over mini-batches
            result[key] = value / max(n_steps, 1)
    if reducer is not None:
        # every process's sums are over (global count / K): their average is the global token mean
        result = reducer.mean_stats(result)
    result["grad_norm"] = float(np.mean(grad_norms)) if grad_norms else 0.0
    result["optimizer_steps"] = float(n_steps)
    return result
