"""A safetensors file kept as its difference from a base file, losslessly: the rows (first dimension) of each tensor
whose bytes differ from the base's (the base cast to the tensor's dtype), with their indices.

A study keeps its final text policies this way (``benchmarks/study_keep.py``): RL moves some 2,000 of the 18,610 rows
of the policy's word table away from its warm start, so a float16 policy's difference is about a fifth of its 2.6 MB.
:func:`rebuild` gives back the very bytes :func:`difference` read, given the same base (safetensors writes a set of
tensors the same way in any order); the names, shapes and dtypes come from the base and the kept rows, so the
difference holds nothing else, and the caller compares the rebuilt bytes' sha256 with the one recorded beside them.
"""

from __future__ import annotations

from typing import Any

ROWS = "::rows"  # the suffix of a tensor's changed-row indices in a difference


def _flat(tensor: Any) -> Any:
    """``tensor`` as a (rows, values) view: a 0-d tensor is one row."""
    rows = tensor.shape[0] if tensor.dim() else 1
    return tensor.contiguous().reshape(rows, tensor.numel() // rows if rows else 0)


def difference(weights: bytes, base: bytes) -> bytes:
    """The safetensors bytes of ``weights``' difference from ``base`` (both safetensors files' bytes, with the same
    tensor names and shapes; a mismatch is a ``ValueError``). Rows are compared byte for byte (-0.0 is not 0.0)."""
    import torch
    from safetensors.torch import load, save

    target, reference = load(weights), load(base)
    if set(target) != set(reference):
        raise ValueError(f"the weights and their base hold different tensors ({sorted(set(target) ^ set(reference))[:4]})")
    kept: dict[str, torch.Tensor] = {}
    for name, tensor in target.items():
        if tensor.shape != reference[name].shape or ROWS in name:
            raise ValueError(f"tensor {name[:80]!r}: shape {tuple(tensor.shape)} against the base's "
                             f"{tuple(reference[name].shape)}")
        rows = _flat(tensor)
        changed = (rows.view(torch.uint8) != _flat(reference[name].to(tensor.dtype)).view(torch.uint8)).any(dim=1)
        index = torch.nonzero(changed).flatten()
        kept[name], kept[name + ROWS] = rows[index].contiguous(), index.to(torch.int64)
    return save(kept)


def rebuild(delta: bytes, base: bytes) -> bytes:
    """The safetensors bytes :func:`difference` was given: ``base`` (cast to each tensor's dtype) with the changed rows
    put back. A difference that does not fit ``base`` (a name, a row's size or a row index) is a ``ValueError``."""
    from safetensors.torch import load, save

    kept, reference = load(delta), load(base)
    if set(kept) != set(reference) | {name + ROWS for name in reference}:
        raise ValueError("the difference was not taken from this base (their tensors differ)")
    rebuilt = {}
    for name, tensor in reference.items():
        rows, index = kept[name], kept[name + ROWS]
        flat = _flat(tensor.to(rows.dtype)).clone()
        if (len(index) and (int(index.min()) < 0 or int(index.max()) >= len(flat))
                or tuple(rows.shape) != (len(index), flat.shape[1])):
            raise ValueError(f"tensor {name[:80]!r}: its changed rows do not fit the base")
        flat[index] = rows
        rebuilt[name] = flat.reshape(tensor.shape)
    return save(rebuilt)
