"""The step-row table's token columns: prompt ids, response ids and the sampling (old) log-probs.

``token_columns`` validates them once, when a ``TrajectoryBatch`` is built, and pads the old log-probs once
into the ``[rows, L]`` float32 array and mask that ``core.loss.policy_update`` takes (``L`` = the longest
response, at least 1; a row's log-probs sit left-aligned, zeros and mask 0 after its response). A batch made
from another batch's rows (``select``, ``concat``) hands over the padded array, which is trimmed or widened,
never rebuilt from per-row lists.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from typing import Any, NamedTuple

import numpy as np

from ecpo_gym.kwargs import shown

TOKEN_COLUMNS = ("prompt_ids", "response_ids", "old_logprobs")


class TokenColumns(NamedTuple):
    prompt_ids: np.ndarray  # object array: one int sequence per row
    response_ids: np.ndarray  # object array: one int sequence per row
    old_logprobs: np.ndarray  # float32 [rows, L]
    old_logprob_mask: np.ndarray  # float32 [rows, L]: 1 on each row's response tokens


def _id_rows(name: str, values: Any, n: int, traj_id: np.ndarray) -> np.ndarray:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence | np.ndarray) or len(values) != n:
        got = len(values) if isinstance(values, Sequence | np.ndarray) else type(values).__name__
        raise ValueError(f"{name} needs one token sequence per step row ({n}); got {got}")
    out = np.empty(n, dtype=object)
    for row, ids in enumerate(values):  # element by element: numpy would turn equal-length rows into a 2-D array
        if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence | np.ndarray):
            what = f"{name} of row {row} (traj_id={shown(traj_id[row])})"
            raise ValueError(f"{what} must be a sequence of token ids, got {type(ids).__name__}")  # noqa: TRY004
        out[row] = ids
    # one pass over every token in C; the per-row search below runs only when something is wrong
    if not np.issubdtype(np.asarray(list(chain.from_iterable(out)) or [0]).dtype, np.integer):
        row = next(r for r, ids in enumerate(out) if len(ids) and not np.issubdtype(np.asarray(ids).dtype, np.integer))
        raise ValueError(f"{name} of row {row} (traj_id={shown(traj_id[row])}) must be integer token ids")
    return out


def _mask(lengths: np.ndarray, width: int) -> np.ndarray:
    return (np.arange(width)[None, :] < lengths[:, None]).astype(np.float32)


def _padded(values: Any, lengths: np.ndarray, traj_id: np.ndarray) -> np.ndarray:
    """The ``[rows, L]`` array from per-row lists (each as long as its response), or from another batch's
    padded array (trimmed to this batch's longest response)."""
    n, width = len(lengths), int(lengths.max(initial=0)) or 1
    if isinstance(values, np.ndarray) and values.ndim == 2 and values.dtype.kind == "f":
        if values.shape[0] != n:
            raise ValueError(f"old_logprobs has {values.shape[0]} rows for {n} step rows")
        if values.shape[1] < width:
            raise ValueError(f"old_logprobs is {values.shape[1]} tokens wide; the longest response has {width}")
        values = np.asarray(values[:, :width], dtype=np.float32)
        return np.where(_mask(lengths, width) > 0, values, np.float32(0.0))  # zeros past each response
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence | np.ndarray) or len(values) != n:
        got = len(values) if isinstance(values, Sequence | np.ndarray) else type(values).__name__
        raise ValueError(f"old_logprobs needs one log-prob sequence per step row ({n}); got {got}")
    for row, logp in enumerate(values):
        if isinstance(logp, (str, bytes)) or not isinstance(logp, Sequence | np.ndarray):
            what = f"old_logprobs of row {row} (traj_id={shown(traj_id[row])})"
            raise ValueError(f"{what} must be a sequence of numbers, got {type(logp).__name__}")  # noqa: TRY004
        if len(logp) != lengths[row]:
            raise ValueError(f"old_logprobs of row {row} (traj_id={shown(traj_id[row])}) has {len(logp)} values; "
                             f"its response has {lengths[row]} tokens")
    out = np.zeros((n, width), dtype=np.float32)
    try:  # row-major boolean assignment: the flattened rows fill each row's first len(response) slots in order
        out[_mask(lengths, width).astype(bool)] = np.fromiter(chain.from_iterable(values), np.float64,
                                                            count=int(lengths.sum()))
    except (TypeError, ValueError):
        row = next((r for r, logp in enumerate(values) if np.asarray(logp).dtype.kind not in "fiu"), 0)
        raise ValueError(f"old_logprobs of row {row} (traj_id={shown(traj_id[row])}) must be numbers") from None
    return out


def token_columns(prompt_ids: Any, response_ids: Any, old_logprobs: Any, traj_id: np.ndarray) -> TokenColumns | None:
    """The validated token columns (``None`` when the batch has none: a credit-only table).

    The three come together; each holds one entry per row; each row's old log-probs are as many as its
    response's tokens and finite (as float32). One ``ValueError`` naming the row otherwise.
    """
    given = {"prompt_ids": prompt_ids, "response_ids": response_ids, "old_logprobs": old_logprobs}
    missing = [name for name, value in given.items() if value is None]
    if len(missing) == len(given):
        return None
    if missing:
        raise ValueError(f"the token columns {', '.join(TOKEN_COLUMNS)} come together; {missing} missing")
    n = len(traj_id)
    prompts = _id_rows("prompt_ids", prompt_ids, n, traj_id)
    responses = _id_rows("response_ids", response_ids, n, traj_id)
    lengths = np.fromiter((len(r) for r in responses), np.int64, count=n)
    logp = _padded(old_logprobs, lengths, traj_id)
    mask = _mask(lengths, logp.shape[1])
    bad = ~np.isfinite(logp) & (mask > 0)
    if bad.any():
        row, token = (int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"old_logprobs of row {row} (traj_id={shown(traj_id[row])}) is {logp[row, token]} at token "
                         f"{token}, not finite")
    return TokenColumns(prompts, responses, logp, mask)


def joined_logprobs(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """Several batches' padded old log-probs as one array, as wide as the widest."""
    width = max(a.shape[1] for a in arrays)
    out = np.zeros((sum(a.shape[0] for a in arrays), width), dtype=np.float32)
    start = 0
    for a in arrays:
        out[start : start + a.shape[0], : a.shape[1]] = a
        start += a.shape[0]
    return out
