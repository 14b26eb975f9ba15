"""Memory settings of the LLM learner: gradient checkpointing and bf16 autocast.

``enable_gradient_checkpointing(model)``: transformers' activation checkpointing of every decoder layer
(``use_reentrant=False``). transformers only checkpoints a layer whose ``training`` flag is set, while the
trainer scores in eval mode (dropout off, so the first update's ratio is exactly 1); a pre-forward hook on
each checkpointed layer therefore sets that layer's own flag to "gradients are being recorded" (its
submodules, where dropout lives, stay in eval mode). Sampling and the reference (no gradients) keep the KV
cache and run without recomputation.

On CPU the memory checkpointing saves is only given back if the C allocator returns it: glibc's malloc
raises its mmap threshold (up to 32 MiB) each time a large mmapped block is freed, so a layer's activations
(megabytes each) are soon carved from the heap, and the small tensors that outlive them (LoRA's gradients,
autograd nodes) pin each layer's freed block below the heap top. SmolLM2-135M, 8 x 300 tokens, LoRA r=16 +
checkpointing: 0.45 GB of live tensors but 2.4 GB of freed-and-retained heap, a 3.5 GB peak RSS in one
backward (benchmarks/results/llm_cpu_profile.json). Checkpointing a CPU model therefore manages glibc's mmap threshold
(``limit_cpu_allocator_retention``; a fixed threshold is never raised again): 128 KiB while gradients are
recorded (activations are mmapped and unmapped when freed) and 4 MiB without them (sampling's per-token
logits and KV-cache copies stay in the heap: mmapping them too cost ~40 % of the decoding speed). The pre-forward hook switches it when the grad mode changes. ``MALLOC_MMAP_THRESHOLD_`` in
the environment leaves the allocator alone.
"""

from __future__ import annotations

import ctypes
import os
import platform
from typing import Any

import torch

from ecpo_gym.kwargs import shown

PRECISIONS = ("none", "bf16")


def _checkpointed_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    from transformers.modeling_layers import GradientCheckpointingLayer

    return [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]


CPU_MMAP_THRESHOLD = 128 * 1024  # glibc's initial value: blocks above it are mmapped, unmapped when freed
NO_GRAD_MMAP_THRESHOLD = 4 * 2**20  # decoding's per-token tensors (logits, KV-cache copies) stay in the heap
_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number (malloc.h)
_allocator = {"managed": False, "threshold": None}


def limit_cpu_allocator_retention(threshold: int = CPU_MMAP_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold (process-wide) at ``threshold`` bytes; True if set.

    No-op (False) off glibc, or when the user set ``MALLOC_MMAP_THRESHOLD_`` for the process themselves.
    """
    if _allocator["threshold"] == threshold:
        return True
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") is not None or platform.libc_ver()[0] != "glibc":
        return False
    try:
        done = bool(ctypes.CDLL(None).mallopt(_M_MMAP_THRESHOLD, int(threshold)))
    except (OSError, AttributeError):
        return False
    if done:
        _allocator["threshold"] = threshold
    return done


def _record_grad_mode(module: torch.nn.Module, args: Any) -> None:
    # the layer's own flag only: transformers checkpoints iff it is set; its dropout modules are untouched
    grad = torch.is_grad_enabled()
    module.training = grad
    if _allocator["managed"] and getattr(module, "_ecpo_on_cpu", False):
        limit_cpu_allocator_retention(CPU_MMAP_THRESHOLD if grad else NO_GRAD_MMAP_THRESHOLD)


def enable_gradient_checkpointing(model: torch.nn.Module) -> int:
    """Checkpoint every decoder layer of a transformers model (policy LM or critic backbone); return the count.

    On CPU the layers' hook also sets glibc's mmap threshold by grad mode (module docstring): without it the
    heap keeps what checkpointing frees, most of all under LoRA.
    """
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5 name
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    layers = _checkpointed_layers(model)
    if not layers:
        raise ValueError(f"{type(model).__name__} has no checkpointable decoder layers")
    for layer in layers:
        layer._ecpo_on_cpu = any(p.device.type == "cpu" for p in layer.parameters())
        if not getattr(layer, "_ecpo_grad_mode_hook", False):
            layer.register_forward_pre_hook(_record_grad_mode)
            layer._ecpo_grad_mode_hook = True
    if any(layer._ecpo_on_cpu for layer in layers):
        _allocator["managed"] = limit_cpu_allocator_retention(CPU_MMAP_THRESHOLD)
    return len(layers)


class _AutocastHooks:
    """Enter ``torch.autocast`` before a module's forward and leave it after (deep-copyable, unlike a patch)."""

    def __init__(self, device_type: str, dtype: torch.dtype) -> None:
        self.device_type, self.dtype = device_type, dtype
        self.active: list[Any] = []

    def enter(self, module: torch.nn.Module, args: Any) -> None:
        context = torch.autocast(device_type=self.device_type, dtype=self.dtype)
        context.__enter__()
        self.active.append(context)

    def leave(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        self.active.pop().__exit__(None, None, None)


def enable_autocast(model: torch.nn.Module, precision: str) -> None:
    """Run a causal LM's body and LM head under bf16 autocast, weights kept in float32 (the master copy)."""
    if precision not in PRECISIONS:
        raise ValueError(f"mixed_precision={shown(precision)}; valid: {', '.join(PRECISIONS)}")
    if precision == "none":
        return
    device_type = next(model.parameters()).device.type
    hooks = _AutocastHooks(device_type, torch.bfloat16)
    # the learner calls the body and the head separately (the head only on response positions)
    for module in (model.base_model, model.get_output_embeddings()):
        module.register_forward_pre_hook(hooks.enter)
        module.register_forward_hook(hooks.leave)


def apply_memory_settings(model: torch.nn.Module, *, gradient_checkpointing: bool, mixed_precision: str) -> None:
    """The trainer's ``gradient_checkpointing`` and ``mixed_precision`` keys applied to a causal LM (before
    ``frozen_copy``: the hooks are copied with the model, so the reference computes the same way)."""
    if gradient_checkpointing:
        enable_gradient_checkpointing(model)
    enable_autocast(model, mixed_precision)
