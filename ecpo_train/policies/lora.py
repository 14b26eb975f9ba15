"""LoRA adapters on the LLM policy through ``peft``; the KL reference is the same model with its adapter off.

``lora: {r, alpha, dropout, target_modules}`` in the training config turns it on (empty = full fine-tuning).
``attach_lora`` injects the adapter layers into the causal LM in place and returns peft's wrapper: the
policy keeps using the causal LM it already held (now with LoRA layers, base weights frozen), and the
wrapper gives ``disable_adapter()`` for pi_ref and ``save_pretrained`` for the adapter.

pi_ref of eq. ecpo_objective is the initial policy. Under LoRA that is exactly the base model (the adapter's
B matrix starts at zero), so ``AdapterOffReference`` scores log-probs through the trained model inside
``disable_adapter()``: no second copy of the weights.

A checkpoint writes the adapter (``save_adapter``, megabytes) and a merged plain transformers folder
(``merge_adapter``: base weights + B A, loaded fresh from the base model's folder so the training model is
untouched), which the leaderboard's checkpoint agent and vLLM load like any causal LM. The adapter folder carries
its ``checksums.sha256`` (``files/checksums.py``), compared before peft reads it (``check_adapter_folder``).

A generation engine that loads plain weights (vLLM; ``TransformersPolicy.sync_generation_weights``) gets
``merged_state_dict``: the base model's key names, each adapted weight computed on the fly as W + scale B A
(peft's ``get_delta_weight``, what ``merge_and_unload`` adds). The training model is only read, never merged
and unmerged in place, so its base weights stay bit-exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ecpo_gym.kwargs import shown
from ecpo_train.files.atomic import library_write_errors, replaced_folder
from ecpo_train.files.checksums import check_folder_checksums, write_folder_checksums
from ecpo_train.policies.base import Policy, PolicyOutput, StepContext

LORA_KEYS = ("r", "alpha", "dropout", "target_modules")
# every linear map of a Llama/Qwen2 decoder layer (attention and MLP), the usual choice for RL fine-tuning
DEFAULT_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def require_peft() -> Any:
    """The ``peft`` module, or one clear error naming the fix."""
    try:
        import peft
    except ImportError:
        raise ImportError("lora needs the peft package: pip install 'ecpo[peft]' (or pip install 'peft>=0.13')") from None
    return peft


def check_lora_settings(lora: dict | None) -> dict[str, Any]:
    """Validated settings with defaults filled in (``{}`` when LoRA is off); unknown keys are errors."""
    if not lora:
        return {}
    unknown = sorted(set(lora) - set(LORA_KEYS))
    if unknown:
        raise ValueError(f"unknown lora key(s) {shown(unknown)}; valid: {', '.join(LORA_KEYS)}")
    settings = {"r": 16, "alpha": 32, "dropout": 0.0, "target_modules": list(DEFAULT_TARGET_MODULES)} | dict(lora)
    if not isinstance(settings["r"], int) or settings["r"] < 1:
        raise ValueError(f"lora.r must be a positive integer, got {shown(settings['r'])}")
    if isinstance(settings["target_modules"], str):
        settings["target_modules"] = [settings["target_modules"]]
    return settings


def attach_lora(model: torch.nn.Module, lora: dict) -> Any:
    """Inject LoRA layers into ``model`` (in place; base weights frozen) and return peft's ``PeftModel``."""
    peft = require_peft()
    settings = check_lora_settings(lora)
    config = peft.LoraConfig(r=int(settings["r"]), lora_alpha=float(settings["alpha"]),
                             lora_dropout=float(settings["dropout"]),
                             target_modules=list(settings["target_modules"]), bias="none", task_type="CAUSAL_LM")
    return peft.get_peft_model(model, config)


class AdapterOffReference(Policy):
    """pi_ref under LoRA: the policy's own model scored with its adapter disabled (no weight copy).

    The policy is held outside the module registry, so this reference has no parameters of its own and
    freezing it (``requires_grad_(False)``) cannot freeze the policy.
    """

    def __init__(self, policy: Any) -> None:
        super().__init__()
        self.__dict__["policy"] = policy

    @property
    def model(self) -> torch.nn.Module:
        """The policy's causal LM (shared, adapter included)."""
        return self.policy.model

    def act(self, contexts: Sequence[StepContext], temperature: float = 1.0) -> PolicyOutput:
        raise NotImplementedError("the reference only scores log-probs; sample from the policy")

    def logprobs(self, prompt_ids, response_ids, *, temperature: float = 1.0, with_entropy: bool = False):
        with self.policy.lora_model.disable_adapter():
            return self.policy.logprobs(prompt_ids, response_ids, temperature=temperature, with_entropy=with_entropy)

    def frozen_copy(self) -> AdapterOffReference:
        return self


def is_adapter_key(name: str) -> bool:
    """True for a LoRA tensor's state-dict name (``...q_proj.lora_A.default.weight``)."""
    return any(part.startswith("lora_") for part in name.split("."))


def plain_key(name: str) -> str:
    """A LoRA-wrapped model's key under the plain model's name (``q_proj.base_layer.weight`` -> ``q_proj.weight``)."""
    return ".".join(part for part in name.split(".") if part != "base_layer")


@torch.no_grad()
def merged_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The weights of ``merge_and_unload()`` under the plain model's key names, without touching ``model``.

    ``model``: the causal LM with LoRA layers injected (``TransformersPolicy.model``) or peft's wrapper.
    Unadapted tensors are the model's own (detached, not copied); each adapted weight is a new tensor
    W + sum over active, not-yet-merged adapters of ``get_delta_weight``. Sharded (DTensor) parameters are
    gathered with ``full_tensor()``. Variants (DoRA) are refused: their merge is not W + B A.
    """
    from peft.tuners.lora import LoraLayer

    if hasattr(model, "get_base_model"):
        model = model.get_base_model()

    def full(tensor: torch.Tensor) -> torch.Tensor:
        return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor

    merged = {plain_key(name): full(value.detach()) for name, value in model.state_dict().items()
              if not is_adapter_key(name)}
    for name, layer in model.named_modules():
        if not isinstance(layer, LoraLayer):
            continue
        adapters = [a for a in layer.active_adapters
                    if (a in layer.lora_A or a in layer.lora_embedding_A) and a not in layer.merged_adapters]
        if not adapters:
            continue
        variants = [a for a in adapters if a in getattr(layer, "lora_variant", {})]
        if variants:
            raise NotImplementedError(f"{name}: merging LoRA variants (DoRA, ...) on the fly is not supported")
        key = plain_key(f"{name}.weight")
        weight = merged[key].clone()
        for adapter in adapters:
            weight += full(layer.get_delta_weight(adapter)).to(weight.dtype)
        merged[key] = weight
    return merged


def adapter_state_dict(lora_model: Any, full_state: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """The adapter's tensors, named as ``PeftModel.save_pretrained`` writes them.

    ``full_state``: the wrapper's state dict gathered beforehand (under FSDP every process must take part in
    the gather, so the caller does it; ``ecpo_train.runtime.distributed.DataParallel.full_state_dict``).
    """
    from peft import get_peft_model_state_dict

    return get_peft_model_state_dict(lora_model, state_dict=full_state)


def save_adapter(lora_model: Any, out_dir: str | Path, full_state: dict[str, torch.Tensor] | None = None) -> Path:
    """Write the adapter folder (``adapter_config.json`` + ``adapter_model.safetensors``)."""
    out = Path(out_dir)
    state = full_state if full_state is None else {k: v.detach().cpu() for k, v in full_state.items()}
    with replaced_folder(out) as partial, library_write_errors(out):
        lora_model.save_pretrained(str(partial), state_dict=state)
        write_folder_checksums(partial)
    return out


def check_adapter_folder(adapter_dir: str | Path) -> None:
    """``ValueError`` (one line naming the file) when a file of the adapter folder differs from the
    ``checksums.sha256`` :func:`save_adapter` wrote beside it; a folder without one (saved before checksums, or by
    another program) is read as it is."""
    check_folder_checksums(adapter_dir, f"LoRA adapter {adapter_dir}",
                           "restore it from a copy, or save the adapter again (a checkpoint writes it)")


def merge_adapter(base_model: str | Path, adapter_dir: str | Path, out_dir: str | Path, *,
                  dtype: str = "float32") -> Path:
    """Base model + adapter -> one plain transformers folder (weights W + B A, tokenizer copied).

    The base is read again from its folder, so the training model (and its optimizer state) is untouched.
    """
    peft = require_peft()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    check_adapter_folder(adapter_dir)
    base = AutoModelForCausalLM.from_pretrained(str(base_model), dtype=getattr(torch, dtype))
    merged = peft.PeftModel.from_pretrained(base, str(adapter_dir)).merge_and_unload()
    out = Path(out_dir)
    with replaced_folder(out) as partial, library_write_errors(out):
        merged.save_pretrained(str(partial))
        AutoTokenizer.from_pretrained(str(base_model)).save_pretrained(str(partial))
        write_folder_checksums(partial)  # (checked where the merged model is loaded: runtime/models.py)
    return out


def save_lora_checkpoint(policy: Any, base_model: str | Path, adapter_dir: str | Path, merged_dir: str | Path, *,
                         dtype: str = "float32", full_state: dict[str, torch.Tensor] | None = None,
                         write: bool = True) -> Path | None:
    """A LoRA policy's adapter folder and merged model (a run writes them to its folder's ``adapter/`` and
    ``merged/``, ``ecpo_train.runtime.run_dir``); ``write=False`` on non-zero ranks."""
    if not write:
        return None
    adapter = save_adapter(policy.lora_model, adapter_dir, full_state)
    return merge_adapter(base_model, adapter, merged_dir, dtype=dtype)
