"""vLLM generation backend for the LLM policy (GPU only, optional extra ``pip install 'ecpo[vllm]'``).

**Untested here.** The development machine and CI have no GPU and no vLLM, so this module has never
run; only its import-time behaviour (no vLLM import, a clear error when vLLM is missing) is tested.
It follows vLLM's documented offline-inference and RLHF weight-update pattern (``LLM.generate`` with
``SamplingParams(logprobs=0)``; a worker extension class named by ``worker_extension_cls`` whose method
calls the model's ``load_weights`` and is reached through ``LLM.collective_rpc``), which has moved
between vLLM releases: check it against the vLLM version you install before a long run.

The backend offers the same sampling call as ``TransformersPolicy.sample``: prompt token ids in,
``(response_ids, response_logprobs)`` out, each response cut after (and including) its end-of-sequence
token, log-probs taken from the distribution the token was sampled from (``logprobs_mode=
"processed_logprobs"``: logits after temperature; no top-k/top-p is set). The training model stays in
transformers; after each optimizer step ``sync_weights(model)`` copies its parameters into vLLM.

The engine runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so ``collective_rpc`` hands
the worker the trainer's own tensors with no serialisation; that suits one GPU shared by trainer and
generator. ``enable_sleep_mode=True`` lets ``sleep()``/``wake_up()`` free the KV cache during updates.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from ecpo_gym.kwargs import shown

VLLM_INSTALL_HINT = (
    "the vLLM backend needs the optional `vllm` package and a CUDA GPU: pip install 'ecpo[vllm]' "
    "(or use the transformers backend, which runs on CPU)"
)
WORKER_EXTENSION = f"{__name__}.WeightLoaderExtension"
# vllm.LLM arguments the backend sets itself, from the run's own settings or fixed (a vllm_kwargs entry would clash)
OWN_ARGUMENTS = ("model", "dtype", "seed", "max_response_length", "worker_extension_cls", "logprobs_mode")


def check_vllm_kwargs(kwargs: Any) -> None:
    """A run's ``vllm_kwargs``, checked when the config is built whichever backend it chooses (a typo is not left
    for the day vLLM is switched on): a mapping of argument names, none the backend sets itself, and the
    arguments it names in its own signature in range. ``ValueError`` in one line otherwise."""
    if not isinstance(kwargs, Mapping):
        raise ValueError(f"vllm_kwargs must be a mapping of vllm.LLM arguments, got {type(kwargs).__name__}")  # noqa: TRY004
    for key in kwargs:
        if not isinstance(key, str) or not key.isidentifier():
            raise ValueError(f"vllm_kwargs key {shown(key)} is not an argument name")
        if key in OWN_ARGUMENTS:
            raise ValueError(f"vllm_kwargs.{key} is set by the backend from the run (model, dtype, seed, "
                             "max_response_length): set the run's own key instead")
    share = kwargs.get("gpu_memory_utilization", 0.4)
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
        raise ValueError(f"vllm_kwargs.gpu_memory_utilization={str(share)[:80]} is invalid: it must be a number in "
                         "(0, 1]")
    length = kwargs.get("max_model_len")
    if length is not None and (isinstance(length, bool) or not isinstance(length, int) or length < 1):
        raise ValueError(f"vllm_kwargs.max_model_len={str(length)[:80]} is invalid: it must be an integer >= 1")
    if not isinstance(kwargs.get("enable_sleep_mode", False), bool):
        raise ValueError("vllm_kwargs.enable_sleep_mode must be true or false")  # noqa: TRY004


class Generation(NamedTuple):
    """One sampled response."""

    response_ids: list[int]
    response_logprobs: list[float]
    text: str


class GenerationBackend(Protocol):
    """What a policy needs from a fast generator whose weights follow the trained model."""

    def sample(self, prompts: Sequence[Sequence[int]], temperature: float) -> tuple[list[list[int]], list[list[float]]]:
        """Response token ids and their per-token log-probs, one per prompt (token ids)."""

    def generate(self, prompts: Sequence[str], temperature: float, max_new_tokens: int) -> list[Generation]:
        """The same for text prompts, with the decoded response text."""

    def sync_weights(self, model_or_state_dict: Any) -> None:
        """Load the trained weights (an ``nn.Module`` or a state dict) into the generator."""


def import_vllm() -> Any:
    """``vllm``, or an ``ImportError`` saying how to get it."""
    try:
        import vllm
    except ImportError as error:
        raise ImportError(f"{VLLM_INSTALL_HINT} (import failed: {error})") from error
    return vllm


class WeightLoaderExtension:
    """Mixed into vLLM's GPU worker (``worker_extension_cls``); called via ``LLM.collective_rpc``.

    ``self.model_runner`` is the worker's; each vLLM model class maps Hugging Face parameter names
    (including fused q/k/v and gate/up projections) in its own ``load_weights``.
    """

    def ecpo_load_weights(self, named_tensors: list[tuple[str, Any]]) -> int:
        self.model_runner.model.load_weights(weights=named_tensors)  # type: ignore[attr-defined]
        return len(named_tensors)


def named_tensors(model_or_state_dict: Any) -> list[tuple[str, Any]]:
    """(name, detached tensor) pairs of an ``nn.Module`` or a state dict, in Hugging Face naming."""
    state: Mapping[str, Any] | Iterable[tuple[str, Any]]
    if hasattr(model_or_state_dict, "state_dict"):
        state = model_or_state_dict.state_dict()
    else:
        state = model_or_state_dict
    items = state.items() if isinstance(state, Mapping) else state
    return [(name, tensor.detach()) for name, tensor in items]


class VLLMBackend:
    """Sampling with vLLM, weights synchronised from the transformers model after each update.

    Untested here (no GPU, no vLLM on the development machine); see the module docstring.
    """

    def __init__(
        self,
        model_path: str,
        *,
        max_response_length: int = 512,
        max_model_len: int | None = None,
        dtype: str = "bfloat16",
        gpu_memory_utilization: float = 0.4,
        seed: int = 0,
        enable_sleep_mode: bool = False,
        **engine_kwargs: Any,
    ) -> None:
        vllm = import_vllm()
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        self._vllm = vllm
        self.max_response_length = int(max_response_length)
        self.llm = vllm.LLM(
            model=str(model_path),
            dtype=dtype,
            seed=seed,
            max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization,
            enable_sleep_mode=enable_sleep_mode,
            worker_extension_cls=WORKER_EXTENSION,
            logprobs_mode="processed_logprobs",
            **engine_kwargs,
        )

    def _sampling_params(self, temperature: float, max_new_tokens: int) -> Any:
        return self._vllm.SamplingParams(
            temperature=max(float(temperature), 0.0), max_tokens=int(max_new_tokens), logprobs=0
        )

    def _run(self, inputs: list[Any], temperature: float, max_new_tokens: int) -> list[Generation]:
        outputs = self.llm.generate(inputs, self._sampling_params(temperature, max_new_tokens), use_tqdm=False)
        generations = []
        for request in outputs:
            completion = request.outputs[0]
            ids = [int(token) for token in completion.token_ids]
            steps = completion.logprobs or []
            logps = [float(step[token].logprob) for step, token in zip(steps, ids)]
            if len(logps) != len(ids):
                raise RuntimeError(f"vLLM returned {len(logps)} log-probs for {len(ids)} tokens")
            generations.append(Generation(ids, logps, completion.text))
        return generations

    def sample(self, prompts: Sequence[Sequence[int]], temperature: float) -> tuple[list[list[int]], list[list[float]]]:
        inputs = [{"prompt_token_ids": [int(t) for t in prompt]} for prompt in prompts]
        generations = self._run(inputs, temperature, self.max_response_length)
        return [g.response_ids for g in generations], [g.response_logprobs for g in generations]

    def generate(self, prompts: Sequence[str], temperature: float, max_new_tokens: int) -> list[Generation]:
        return self._run(list(prompts), temperature, max_new_tokens)

    def sync_weights(self, model_or_state_dict: Any) -> None:
        """Copy the trained weights into every vLLM worker, then drop cached prefixes (stale KV)."""
        self.llm.collective_rpc("ecpo_load_weights", args=(named_tensors(model_or_state_dict),))
        self.llm.reset_prefix_cache()

    def sleep(self) -> None:
        """Free vLLM's GPU memory (weights and KV cache) while the trainer updates (sleep mode only)."""
        self.llm.sleep(level=1)

    def wake_up(self) -> None:
        self.llm.wake_up()
