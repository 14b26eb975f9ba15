"""Cutting one mini-batch of step rows into micro-batches for the update (``core/loss.py``'s ``policy_update``).

A micro-batch is what one forward and backward pass holds: a fixed number of rows, or as many as fit a token
budget, with the rows that score one shared context (the scoring policy) kept together.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def pack_micro_batches(rows: np.ndarray, row_tokens: np.ndarray, micro_batch_size: int,
                       max_tokens: int = 0, row_keys: Sequence | None = None) -> list[np.ndarray]:
    """Cut one mini-batch's ``rows`` into micro-batches.

    ``max_tokens <= 0``: consecutive runs of ``micro_batch_size`` rows (the fixed-size path). Otherwise rows
    are taken shortest first and a micro-batch grows while its padded size (rows x longest row, what the
    forward pass allocates) stays within ``max_tokens``; a row longer than the budget goes alone. Memory is
    then bounded by tokens, not rows. ``row_tokens[i]`` is row i's sequence length (prompt + response).

    ``row_keys`` (the scoring policy): rows with equal keys share one forward, so they are kept together and a
    micro-batch is measured in *distinct* contexts: at most ``micro_batch_size`` of them, or (``max_tokens``)
    as many as fit the budget counting each distinct context's tokens once (that forward packs contexts
    without padding).
    """
    rows = np.asarray(rows)
    if row_keys is not None:
        return _pack_by_context(rows, row_tokens, micro_batch_size, max_tokens, row_keys)
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


def _pack_by_context(rows: np.ndarray, row_tokens: np.ndarray, micro_batch_size: int, max_tokens: int,
                     row_keys: Sequence) -> list[np.ndarray]:
    members: dict = {}
    for row in rows:  # distinct contexts in order of first appearance (the shuffle still decides the order)
        members.setdefault(row_keys[int(row)], []).append(int(row))
    batches: list[np.ndarray] = []
    current: list[int] = []
    contexts = tokens = 0
    for group in members.values():
        length = int(row_tokens[group[0]])
        full = contexts >= micro_batch_size if max_tokens <= 0 else tokens + length > max_tokens
        if current and full:
            batches.append(np.asarray(current))
            current, contexts, tokens = [], 0, 0
        current.extend(group)
        contexts += 1
        tokens += length
    if current:
        batches.append(np.asarray(current))
    return batches
