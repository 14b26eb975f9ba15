"""How ``TransformersPolicy.sample`` runs its one-token decoding steps, and with which weights.

``decoding`` (the config key of the same name):

- ``eager`` (the CPU default): transformers' dynamic KV cache grows by one column per token, and so does the
  attention mask; no two steps have the same shapes.
- ``static``: each token's keys and values are written in place into buffers sized once per call: the rows
  rounded up to a power of two, the prompt width rounded up to a power of two plus ``max_response_length``
  columns. A 4D additive mask opens one column per step, so every step of a call has the same shapes and the
  same tensor addresses. Runs on any device (the CPU tests check it samples what ``eager`` samples).
- ``graph`` (the CUDA default): ``static``, with the step captured once per shape as a CUDA graph and replayed per
  token: one launch instead of the ~1,000 kernel launches per token that kept the GPU 60 % idle
  (``benchmarks/generation_profile.py``). The capture is the only GPU-only part; a capture that fails warns and
  leaves that policy on ``static``. ``torch.cuda.graphs`` directly rather than ``torch.compile(mode=
  "reduce-overhead")``: no compilation (minutes for a 1.5B model, again for every new shape), and the step that
  is captured is the very step ``static`` runs, which the CPU tests check.

The prefill (shared-prefix included) is the eager forward either way; its cache is copied into the buffers.
Tokens are drawn outside the step, from the real rows' logits, so the random stream is the eager path's.

Weights: with ``mixed_precision=bf16`` the trained model keeps float32 master weights under autocast, which casts
every weight to bf16 at every step (a third of the launches). On CUDA, static and graphed sampling therefore run on
a bf16 copy of the weights (``SamplingCopy``), refreshed in place (the graphs keep their addresses) on the first
call after the trained weights changed: an optimizer step or a ``load_state_dict`` bumps a parameter's version
counter, and ``sync_generation_weights`` (after every update) marks the copy stale too. Under LoRA the copy holds
the merged weights. On the CPU the model samples as it is (float32).

Buffers are shared: one flat storage per layer, as large as the largest shape so far, viewed by every shape, and
one CUDA memory pool for every graph. Calls never overlap, so a handful of shapes cost the memory of the largest.
"""

from __future__ import annotations

import copy
import functools
import inspect
import os
import warnings
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch

from ecpo_gym.kwargs import shown

DECODINGS = ("auto", "eager", "static", "graph")
MAX_SHAPES = 8  # captured shapes kept (rows x columns buckets); the oldest is dropped past it


def resolve_decoding(decoding: str, device: torch.device, model_config: Any = None) -> str:
    """``auto`` -> ``graph`` on CUDA, ``eager`` elsewhere; a model with sliding-window layers decodes eagerly (the
    static mask opens every past column). An explicit choice the device or model cannot run is a ``ValueError``."""
    if decoding not in DECODINGS:
        raise ValueError(f"decoding={shown(decoding)}; valid: {', '.join(DECODINGS)}")
    full = model_config is None or full_attention_only(model_config)
    if decoding == "auto":
        return "graph" if device.type == "cuda" and full else "eager"
    if decoding == "graph" and device.type != "cuda":
        raise ValueError(f"decoding=graph captures CUDA graphs: it needs a CUDA device, not {device.type} "
                         "(decoding=static runs the same fixed-shape steps on any device)")
    if decoding != "eager" and not full:
        raise ValueError(f"decoding={decoding} needs a model whose every layer attends to the whole context "
                         "(this one has sliding-window layers): use decoding=eager")
    return decoding


def full_attention_only(config: Any) -> bool:
    """Whether every layer of a transformers config attends to the whole context (no sliding window)."""
    layer_types = getattr(config, "layer_types", None)
    if layer_types:
        return all(kind == "full_attention" for kind in layer_types)
    return not (getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True))


def bucket(n: int) -> int:
    """The power of two at or above ``n`` (shapes rounded so that a run captures a handful of graphs)."""
    return 1 << max(0, int(n) - 1).bit_length()


def cache_tensors(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each layer's ``(keys, values)`` of a transformers dynamic cache (per-layer objects since transformers 4.56)."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache))


def cache_keyword(model: torch.nn.Module) -> str:
    """The forward's name for the KV cache argument: ``cache`` in recent transformers 5, ``past_key_values`` before."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


class EagerDecode:
    """One token per call on transformers' dynamic cache: the mask and every layer's cache grow by a column."""

    def __init__(self, model: torch.nn.Module, cache: Any, attention: torch.Tensor, next_position: torch.Tensor):
        self.model, self.cache, self.attention, self.position = model, cache, attention, next_position
        self.cache_name = cache_keyword(model)

    def __call__(self, token: torch.Tensor) -> torch.Tensor:
        ones = torch.ones(len(token), 1, dtype=self.attention.dtype, device=self.attention.device)
        self.attention = torch.cat([self.attention, ones], dim=1)
        result = self.model(input_ids=token.unsqueeze(-1), attention_mask=self.attention, position_ids=self.position,
                            use_cache=True, **{self.cache_name: self.cache})
        self.cache, self.position = result.past_key_values, self.position + 1
        return result.logits[:, -1, :]


@functools.cache
def slot_cache_class() -> type:
    """A transformers ``Cache`` over fixed buffers: each layer's new key and value go to column ``write_at`` (a
    one-element device tensor, so a captured graph reads its current value), and the whole buffers are returned.
    Built on first use (transformers is imported lazily)."""
    from transformers.cache_utils import Cache

    class SlotCache(Cache):
        def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor], write_at: torch.Tensor) -> None:
            # the base's constructor changed across transformers versions (>= 4.56: a list of layer objects); this
            # cache keeps its own buffers and no layer objects
            for arguments in ({"layers": []}, {}):
                try:
                    Cache.__init__(self, **arguments)
                    break
                except TypeError:
                    continue
            else:
                self.layers = []
            self.slot_keys, self.slot_values, self.write_at = keys, values, write_at
            self.columns_written = 0  # host-side count, only read by code paths a 4D mask skips

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any,
                   **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
            keys, values = self.slot_keys[layer_idx], self.slot_values[layer_idx]
            keys.index_copy_(2, self.write_at, key_states)
            values.index_copy_(2, self.write_at, value_states)
            return keys, values

        def get_seq_length(self, layer_idx: int | None = 0) -> int:
            return self.columns_written

    return SlotCache


class DecodeStep:
    """The one-token step of one shape ``(rows, columns)``: fixed input buffers, a slot cache over the shared
    storage, and, once captured, its CUDA graph (the outputs are then the graph's static ``logits``)."""

    def __init__(self, model: torch.nn.Module, kv: list[tuple[torch.Tensor, torch.Tensor]], rows: int,
                 columns: int) -> None:
        device, dtype = kv[0][0].device, kv[0][0].dtype
        self.model, self.rows, self.columns = model, rows, columns
        self.token = torch.zeros(rows, 1, dtype=torch.long, device=device)
        self.position = torch.zeros(rows, 1, dtype=torch.long, device=device)
        self.write_at = torch.zeros(1, dtype=torch.long, device=device)
        self.closed = torch.finfo(dtype).min
        self.mask = torch.full((rows, 1, 1, columns), self.closed, dtype=dtype, device=device)
        self.kv = kv
        self.cache = slot_cache_class()([k for k, _ in kv], [v for _, v in kv], self.write_at)
        self.cache_name = cache_keyword(model)
        with_positions = "cache_position" in inspect.signature(model.forward).parameters  # transformers < 5.2x
        self.extra = {"cache_position": self.write_at} if with_positions else {}
        self.graph: Any = None
        self.logits: torch.Tensor | None = None

    def forward(self) -> torch.Tensor:
        self.mask.index_fill_(3, self.write_at, 0.0)  # the new token's column opens for every row
        result = self.model(input_ids=self.token, attention_mask=self.mask, position_ids=self.position,
                            use_cache=True, **{self.cache_name: self.cache}, **self.extra)
        self.write_at.add_(1)
        self.position.add_(1)
        return result.logits[:, -1, :]

    def capture(self, pool: Any) -> None:
        """Record ``forward`` as a CUDA graph (after two warm-up steps on a side stream, as torch asks)."""
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                self.forward()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            self.logits = self.forward()
        self.graph = graph

    def begin(self, cache: Any, attention: torch.Tensor, next_position: torch.Tensor) -> None:
        """Load one call's prefill: its cache into the first columns, its padding into the mask, its positions."""
        rows, width = attention.shape
        for (key, value), (prefilled_key, prefilled_value) in zip(self.kv, cache_tensors(cache)):
            key[:rows, :, :width].copy_(prefilled_key)
            value[:rows, :, :width].copy_(prefilled_value)
        self.mask.fill_(self.closed)
        self.mask[:rows, 0, 0, :width].masked_fill_(attention.bool(), 0.0)
        self.token.zero_()
        self.position.zero_()
        self.position[:rows].copy_(next_position)
        self.write_at.fill_(width)
        self.cache.columns_written = width

    def __call__(self, token: torch.Tensor) -> torch.Tensor:
        self.token[: len(token), 0].copy_(token)
        self.cache.columns_written += 1
        if self.graph is None:
            return self.forward()[: len(token)]
        self.graph.replay()
        return self.logits[: len(token)]


def device_memory_bytes(device: torch.device) -> int:
    """The memory of ``device``: a CUDA device's total, else the machine's physical memory."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 16 << 30


def check_cache_fits(need: int, device: torch.device, rows: int, columns: int) -> None:
    """``ValueError`` (computed, before any allocation) when the static cache of ``rows`` x ``columns`` needs more
    than ``device`` holds: a reply length of 1e8 tokens asked 409 GB of an allocator and failed mid-run."""
    have = device_memory_bytes(device)
    if need > have:
        raise ValueError(f"decoding=static needs {need / 2**30:,.1f} GiB for its key/value cache ({rows} rows x "
                         f"{columns} columns: the prompt width plus max_response_length) and the {device.type} device "
                         f"has {have / 2**30:,.1f} GiB: lower max_response_length (or max_prompt_length), or use "
                         "decoding=eager")


class StaticDecoder:
    """The fixed-shape steps of one policy (``static``; ``graph`` captures each), by shape, over shared buffers."""

    def __init__(self, graphs: bool) -> None:
        self.graphs = graphs
        self.steps: OrderedDict[tuple[int, int], DecodeStep] = OrderedDict()
        self.model: torch.nn.Module | None = None
        self.storage: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.pool: Any = None

    def start(self, model: torch.nn.Module, cache: Any, attention: torch.Tensor, next_position: torch.Tensor,
              response_length: int) -> Callable[[torch.Tensor], torch.Tensor]:
        """The step function of one call: ``token [rows] -> logits [rows, vocab]`` of the next position."""
        rows, width = attention.shape
        step = self.step_for(model, cache_tensors(cache), bucket(rows), bucket(width) + response_length)
        step.begin(cache, attention, next_position)
        return step

    def step_for(self, model: torch.nn.Module, kv: list[tuple[torch.Tensor, torch.Tensor]], rows: int,
                 columns: int) -> DecodeStep:
        if model is not self.model:
            self.steps.clear()
            self.model = model
        key = (rows, columns)
        if key in self.steps:
            self.steps.move_to_end(key)
            return self.steps[key]
        sizes = [(rows * k.shape[1] * columns * k.shape[3], rows * v.shape[1] * columns * v.shape[3]) for k, v in kv]
        if not self.storage or any(n > s.numel() or m > t.numel() for (n, m), (s, t) in zip(sizes, self.storage)):
            check_cache_fits(sum((n * k.element_size() + m * v.element_size()) for (n, m), (k, v) in zip(sizes, kv)),
                             kv[0][0].device, rows, columns)
            self.steps.clear()  # every step views the storage: a larger one replaces them all
            self.storage = []
            # zeros, not empty: a masked column still enters q.k and p.v, and uninitialised memory may hold NaN
            self.storage = [(torch.zeros(n, dtype=k.dtype, device=k.device), torch.zeros(m, dtype=v.dtype,
                                                                                          device=v.device))
                            for (n, m), (k, v) in zip(sizes, kv)]
        views = [(s[:n].view(rows, k.shape[1], columns, k.shape[3]), t[:m].view(rows, v.shape[1], columns, v.shape[3]))
                 for (n, m), (s, t), (k, v) in zip(sizes, self.storage, kv)]
        step = DecodeStep(model, views, rows, columns)
        if self.graphs:
            try:
                if self.pool is None:
                    self.pool = torch.cuda.graph_pool_handle()
                step.capture(self.pool)
            except RuntimeError as err:  # an operator the capture refuses: this policy decodes without graphs
                warnings.warn(f"decoding=graph: the CUDA graph capture failed ({err}); decoding with the static cache "
                              "and no graphs", RuntimeWarning, stacklevel=2)
                self.graphs = False
                step.graph = None
        self.steps[key] = step
        if len(self.steps) > MAX_SHAPES:
            self.steps.popitem(last=False)
        return step


class SamplingCopy:
    """The trained weights in the sampling dtype, as a plain transformers model (LoRA merged), refreshed in place
    when the trained parameters changed (their version counters) or after ``mark_stale``."""

    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype
        self.model: torch.nn.Module | None = None
        self.versions: tuple | None = None

    def mark_stale(self) -> None:
        self.versions = None

    def of(self, policy: Any) -> torch.nn.Module:
        """The copy of ``policy``'s current weights (``policy.generation_weights()``, cast on copy)."""
        versions = tuple((id(p), p._version) for p in policy.model.parameters())
        if self.model is None:
            from transformers import AutoModelForCausalLM

            config = copy.deepcopy(policy.model.config)
            with torch.device(policy.device):
                model = AutoModelForCausalLM.from_config(config, attn_implementation=config._attn_implementation)
            self.model = model.to(self.dtype).eval().requires_grad_(False)
        if versions != self.versions:
            with torch.no_grad():
                self.model.load_state_dict(policy.generation_weights(), strict=False)
            self.versions = versions
        return self.model
