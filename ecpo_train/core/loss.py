"""Step E: the policy update that optimises eq. ecpo_objective (``core/objective.py``) over a rollout's step rows.

``policy_update`` runs the mini-batch / micro-batch loop (gradient accumulation, grad-norm clipping, one
optimizer step per mini-batch). Micro-batches hold a fixed number of rows, or as many rows as fit a token budget
(``core/micro_batches.py``); under data parallelism (``ecpo_train/runtime/distributed.py``) every process runs
the same number of collective passes. A step's advantage is broadcast to every token of its action, as the
paper's Algorithm 1 step E says.

Rows sampled by older weights (a pipelined driver) can use ``behaviour_correction: truncated_is``: pi_prox's
log-probs are computed once before the first optimizer step (``proximal_logprobs``) and the micro-batch loss is
``objective.decoupled_clipped_surrogate``'s.

No compute goes to rows that carry no gradient: with no KL and no entropy term a row whose advantage is 0 has
a surrogate of exactly 0 (``min(q * 0, clip(q) * 0)``), so it is left out of the forward and backward, while its
tokens still count in the mini-batch's token mean (the gradient is the one of the full mini-batch). A
mini-batch left with no row takes no optimizer step: AdamW would otherwise move the weights on momentum and
weight decay alone, with a zero gradient. Rows that score the same context (``row_keys``: the scoring policy's
identical (prompt, candidates)) go into the same micro-batch, where the policy computes that context once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from ecpo_gym.kwargs import shown
from ecpo_train.core.micro_batches import pack_micro_batches
from ecpo_train.core.objective import assign_step_advantage, ecpo_objective_loss


@dataclass
class UpdateSettings:
    """The optimisation knobs of one policy update. Their defaults are the one home of ``TrainConfig``'s
    (``runtime.config`` reads them; ``runtime.builders.update_settings`` builds this from a config)."""

    clip_eps: float = 0.2
    kl_coef: float = 0.01
    entropy_coef: float = 0.0
    mini_batch_size: int = 256
    micro_batch_size: int = 8
    num_epochs: int = 1
    max_grad_norm: float = 1.0
    max_tokens_per_micro_batch: int = 0  # > 0: pack micro-batches by padded token count instead of row count
    # rows sampled by lagged weights: "none" = the ratio against the recorded sampling log-probs (the paper);
    # "truncated_is" = the clip around pi_prox (the weights when the update starts), each token weighted by
    # min(pi_prox / mu, is_weight_cap) (decoupled_clipped_surrogate)
    behaviour_correction: str = "none"
    is_weight_cap: float = 2.0


BEHAVIOUR_CORRECTIONS = ("none", "truncated_is")


def rows_with_gradient(step_advantages: torch.Tensor, settings: UpdateSettings, has_reference: bool) -> np.ndarray:
    """Which rows can move the policy: all of them when a KL or entropy term is on, else those whose advantage
    is nonzero (the others have a surrogate of exactly 0: module docstring)."""
    if (has_reference and settings.kl_coef > 0) or settings.entropy_coef > 0:
        return np.ones(len(step_advantages), dtype=bool)
    return (step_advantages != 0).cpu().numpy()


def equal_return_rows(group_id: Sequence, traj_id: Sequence, reward: np.ndarray) -> np.ndarray:
    """Rows of groups whose episodes all have the same return (DAPO's zero-variance groups), as a mask.

    Under step credit (GiGPO, ECPO) such a group can still carry nonzero step advantages: two episodes that
    both succeed pass through the same anchor state and take different actions there, with different
    discounted returns. Filtering them (``filter_equal_return_groups``) drops that step-level signal on
    purpose, as DAPO drops the group; it is off by default, and rows with a zero advantage are skipped anyway.
    """
    returns: dict = {}
    for traj, r in zip(traj_id, np.asarray(reward, dtype=np.float64)):
        returns[traj] = returns.get(traj, 0.0) + float(r)
    by_group: dict = {}
    for group, traj in zip(group_id, traj_id):
        by_group.setdefault(group, {})[traj] = returns[traj]
    flat = {g for g, trajs in by_group.items() if len(trajs) > 1 and np.ptp(list(trajs.values())) < 1e-12}
    return np.asarray([g in flat for g in group_id], dtype=bool)


def trajectory_mean_weights(traj_id: Sequence) -> np.ndarray:
    """Per-row weights that make every trajectory count equally in the update (``loss_agg: trajectory-mean``).

    Token-mean aggregation (eq. ecpo_objective) weighs an episode by its length: under sparse rewards the long
    failures outnumber the short successes row for row, so a group's update pushes down more than it pushes
    up. A row of a trajectory of ``L`` rows gets ``L_mean / L`` (``L_mean`` the mean over the table's
    trajectories; under data parallelism, over a process's own whole groups): every trajectory then carries the
    same total weight, and the weights still average 1 over the rows, so the update's scale is token-mean's.
    The surrogate is ``min(q A, clip(q) A)``, positively homogeneous in ``A``, so a row's weight can be applied
    to its advantage: the update multiplies the step advantages by these weights and is otherwise unchanged
    (zero-advantage rows stay skipped).
    """
    lengths: dict = {}
    for traj in traj_id:
        lengths[traj] = lengths.get(traj, 0) + 1
    if not lengths:
        return np.zeros(0)
    mean_length = len(traj_id) / len(lengths)
    return np.asarray([mean_length / lengths[traj] for traj in traj_id], dtype=np.float64)


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
    row_keys: Sequence | None = None,
    keep: np.ndarray | None = None,
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

    Rows without gradient are not computed (``rows_with_gradient``; module docstring); ``row_keys`` groups
    rows of one context into one micro-batch (``pack_micro_batches``); ``keep`` (a row mask) leaves the other
    rows out of the update entirely (``equal_return_rows``). The reference's log-probs are computed once per
    row and reused by later epochs (one process; under data parallelism every call is a collective).
    ``settings.behaviour_correction == "truncated_is"`` first computes pi_prox's log-probs of the rows
    (``proximal_logprobs``) and optimises ``decoupled_clipped_surrogate`` with ``old_logp`` as the behaviour's.
    """
    if settings.behaviour_correction not in BEHAVIOUR_CORRECTIONS:
        raise ValueError(f"behaviour_correction={shown(settings.behaviour_correction)}; valid: "
                         f"{', '.join(BEHAVIOUR_CORRECTIONS)}")
    n_rows = int(old_logp.shape[0])
    world = reducer.world_size if reducer is not None else 1
    kept = np.arange(n_rows) if keep is None else np.flatnonzero(np.asarray(keep, dtype=bool))
    carries = rows_with_gradient(step_advantages, settings, ref_logprob_fn is not None)
    ref_cache: dict[int, torch.Tensor] = {}
    computed_rows = skipped_rows = computed_tokens = 0
    if row_tokens is None:
        row_tokens = old_mask.sum(dim=1).numpy().astype(np.int64)
    prox_logp = None
    if settings.behaviour_correction == "truncated_is":
        prox_logp = proximal_logprobs(logprob_fn, kept[carries[kept]], old_logp, row_tokens, settings, reducer,
                                      row_keys)
    totals: dict[str, float] = {}
    grad_norms: list[float] = []
    n_steps = 0
    for _ in range(settings.num_epochs):
        order = kept[generator.permutation(len(kept))]
        if reducer is None:
            minis = [order[start : start + settings.mini_batch_size]
                     for start in range(0, len(order), settings.mini_batch_size)]
        else:
            n_minis = int(np.ceil(reducer.sum(float(len(order))) / settings.mini_batch_size))
            minis = np.array_split(order, max(n_minis, 1))
        for mini in minis:
            local_tokens = float(old_mask[mini].sum())
            token_count = local_tokens if reducer is None else reducer.sum(local_tokens) / world
            if token_count <= 0:
                continue
            active = mini[carries[mini]]
            n_active = len(active) if reducer is None else int(reducer.sum(float(len(active))))
            skipped_rows += len(mini) - len(active)
            if n_active == 0:  # no row can move the policy: no forward, no backward, no optimizer step
                continue
            computed_rows += len(active)
            computed_tokens += int(np.asarray(row_tokens)[active].sum())
            # the statistics' denominator: the tokens of rows with gradient, over every process (as one process)
            active_tokens = float(old_mask[active].sum())
            if reducer is not None:
                active_tokens = reducer.sum(active_tokens) / world
            optimizer.zero_grad(set_to_none=True)
            micros = pack_micro_batches(active, row_tokens, settings.micro_batch_size,
                                        settings.max_tokens_per_micro_batch, row_keys)
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
                ref = None
                if ref_logprob_fn is not None:
                    ref = _reference_logprobs(ref_logprob_fn, rows, width, ref_cache if reducer is None else None)
                    ref = ref.to(logp.device)
                adv = assign_step_advantage(step_advantages[rows].to(logp.device), mask)
                loss, stats = ecpo_objective_loss(
                    logp, old, ref, adv, mask, clip_eps=settings.clip_eps, kl_coef=settings.kl_coef,
                    entropy=entropy, entropy_coef=settings.entropy_coef, token_count=token_count,
                    stats_token_count=active_tokens,
                    prox_logp=None if prox_logp is None else prox_logp[rows, :width].to(logp.device),
                    is_weight_cap=settings.is_weight_cap,
                )
                (loss * weight if weight != 1.0 else loss).backward()
                if weight == 0.0:  # a filler pass: this process holds no row with gradient; its sums are 0
                    for key in stats:
                        totals.setdefault(key, 0.0)
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
    result["rows_computed"] = float(computed_rows)
    # the tokens the forward and backward passes computed (each computed row's sequence, every epoch), all processes
    result["tokens_computed"] = float(computed_tokens if reducer is None else reducer.sum(float(computed_tokens)))
    result["rows_skipped"] = float(skipped_rows + (n_rows - len(kept)) * settings.num_epochs)
    return result


def proximal_logprobs(logprob_fn: LogprobFn, rows: np.ndarray, old_logp: torch.Tensor, row_tokens: np.ndarray,
                      settings: UpdateSettings, reducer: Reducer | None = None,
                      row_keys: Sequence | None = None) -> torch.Tensor:
    """pi_prox's ``[rows, L]`` log-probs (``behaviour_correction: truncated_is``): the current weights' log-probs
    of ``rows``, computed once, without gradient, before the update's first optimizer step (other rows read 0).

    Packed as the update packs its micro-batches; under data parallelism every process runs the same number of
    forward passes (each is a collective), repeating one of its rows where it has fewer."""
    prox = torch.zeros_like(old_logp)
    micros = pack_micro_batches(np.asarray(rows, dtype=np.int64), row_tokens, settings.micro_batch_size,
                                settings.max_tokens_per_micro_batch, row_keys)
    if reducer is not None:
        filler = np.asarray(rows[:1] if len(rows) else np.arange(min(1, len(old_logp))), dtype=np.int64)
        micros += [filler] * (int(reducer.max(float(len(micros)))) - len(micros))
    with torch.no_grad():
        for micro in micros:
            logp = logprob_fn(micro)[0]
            prox[micro, : logp.shape[1]] = logp.detach().to(device=prox.device, dtype=prox.dtype)
    return prox


def _reference_logprobs(ref_logprob_fn: Callable[[np.ndarray], torch.Tensor], rows: np.ndarray, width: int,
                        cache: dict[int, torch.Tensor] | None) -> torch.Tensor:
    """pi_ref's ``[rows, width]`` log-probs; with a ``cache`` each row is computed once over all epochs."""
    if cache is None:
        return ref_logprob_fn(rows)[:, :width]
    missing = np.asarray([r for r in rows if int(r) not in cache], dtype=np.int64)
    if len(missing):
        for row, values in zip(missing, ref_logprob_fn(missing)):
            cache[int(row)] = values.detach()
    out = torch.zeros(len(rows), width, dtype=cache[int(rows[0])].dtype)
    for i, row in enumerate(rows):
        values = cache[int(row)][:width]
        out[i, : len(values)] = values
    return out
