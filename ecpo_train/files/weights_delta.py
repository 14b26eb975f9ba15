"""A safetensors file kept as its difference from a base file, losslessly: the rows (first dimension) of each tensor
whose bytes differ from the base's (the base cast to the tensor's dtype), with their indices.

A study keeps its final text policies this way (``benchmarks/study_keep.py``): RL moves some 2,000 of the 18,610 rows
of the policy's word table away from its warm start, so a float16 policy's difference is about a fifth of its 2.6 MB.
:func:`rebuild` gives back the very bytes :func:`difference` read (safetensors writes a set of tensors the same way in
any order; the caller compares its sha256 with the one recorded beside it). The base's name travels in the
difference's metadata (``base``), so a reader knows which file to rebuild from.
"""

from __future__ import annotations

from typing import Any

ROWS = "::rows"  # the suffix of a tensor's changed-row indices in a difference


def _rows(tensor: Any) -> Any:
    """``tensor`` as ``(rows, bytes)``: each row's bytes, so that equal means bitwise equal (-0.0 is not 0.0)."""
    import torch

    flat = tensor.contiguous().reshape(tensor.shape[0] if tensor.dim() else 1, -1)
    return flat.view(torch.uint8) if flat.numel() else flat.to(torch.uint8)


def difference(weights: bytes, base: bytes, base_name: str) -> bytes:
    """The safetensors bytes of ``weights``' difference from ``base`` (both safetensors files' bytes, with the same
    tensor names and shapes; a mismatch is a ``ValueError``); ``base_name`` is recorded in its metadata."""
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
        changed = (_rows(tensor) != _rows(reference[name].to(tensor.dtype))).any(dim=1)
        index = torch.nonzero(changed).flatten()
        kept[name] = tensor.reshape(len(changed), -1)[index].contiguous()
        kept[name + ROWS] = index.to(torch.int64)
    return save(kept, metadata={"base": base_name, "shapes": repr({k: list(v.shape) for k, v in target.items()})})


def base_of(delta: bytes) -> str:
    """The name of the base a difference was taken from (its metadata's ``base``)."""
    base = _metadata(delta).get("base")
    if not isinstance(base, str) or not base:
        raise ValueError("not a weights difference (its metadata names no base)")
    return base


def _metadata(data: bytes) -> dict[str, str]:
    import json
    import struct

    if len(data) < 8:
        raise ValueError("not a safetensors file (shorter than its header's length)")
    (length,) = struct.unpack("<Q", data[:8])
    if length > min(len(data) - 8, 1 << 24):
        raise ValueError("not a safetensors file (its header runs past the file)")
    try:
        meta = json.loads(data[8:8 + length]).get("__metadata__", {})
    except (ValueError, AttributeError):
        raise ValueError("not a safetensors file (its header is not a JSON object)") from None
    return meta if isinstance(meta, dict) else {}


def rebuild(delta: bytes, base: bytes) -> bytes:
    """The safetensors bytes :func:`difference` was given: ``base`` (cast to each tensor's dtype) with the changed rows
    put back. A difference that does not fit ``base`` (a name, a shape or a row index) is a ``ValueError``."""
    import ast

    from safetensors.torch import load, save

    try:
        shapes = ast.literal_eval(_metadata(delta).get("shapes", ""))
    except (ValueError, SyntaxError):
        raise ValueError("not a weights difference (its metadata has no shapes)") from None
    kept, reference = load(delta), load(base)
    if set(shapes) != set(reference) or set(kept) != set(shapes) | {name + ROWS for name in shapes}:
        raise ValueError("the difference was not taken from this base (their tensors differ)")
    rebuilt = {}
    for name, shape in shapes.items():
        if list(reference[name].shape) != shape:
            raise ValueError(f"tensor {name[:80]!r}: the base's shape {tuple(reference[name].shape)} is not {shape}")
        rows, index = kept[name], kept[name + ROWS]
        tensor = reference[name].to(rows.dtype).contiguous().clone()
        flat = tensor.reshape(shape[0] if shape else 1, -1)
        if (len(index) and (int(index.min()) < 0 or int(index.max()) >= len(flat))
                or tuple(rows.shape) != (len(index), flat.shape[1])):
            raise ValueError(f"tensor {name[:80]!r}: its changed rows do not fit the base")
        flat[index] = rows
        rebuilt[name] = flat.reshape(shape)
    return save(rebuilt)
