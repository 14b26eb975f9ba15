"""``CausalLMRLModule``: the LLM policy of the native trainer (generating or scoring, built by
``runtime.builders.build_policy``) as an RLModule; its forward is the policy's own ``logprobs`` of stored rows.

No value head: ECPO's baseline is the group (``credit.py``), not a critic.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from gymnasium import spaces

from ecpo_train.integrations.rllib.base_module import GroupCreditModule

# The LLM module's forward: rows in (the step-row table's token columns), per-token log-probs out.
PROMPT_IDS = "prompt_ids"
RESPONSE_IDS = "response_ids"
WITH_ENTROPY = "with_entropy"
RESPONSE_MASK = "response_mask"
TOKEN_LOGP = "token_logp"
TOKEN_ENTROPY = "token_entropy"
TRAIN_CONFIG = "train_config"  # model_config's key: the run's TrainConfig, the object ECPOConfig holds
LEARNER_DEVICE = "learner_device"  # model_config's key: "cuda" where num_gpus_per_learner asks for a GPU, else "cpu"
# The module's state names a weight ``policy.model.<the Hugging Face name>`` (module -> policy -> model).
MODEL_PREFIX = "policy.model."


def token_spaces(vocab_size: int, max_prompt_tokens: int, max_new_tokens: int) -> tuple[spaces.Box, spaces.Box]:
    """(observation space, action space): fixed-shape token-id Boxes for prompts and replies. The LLM path's
    rows never pass through them (they travel as a ``TrajectoryBatch``); RLlib asks every module for spaces."""
    high = int(vocab_size) - 1
    return (spaces.Box(0, high, shape=(int(max_prompt_tokens),), dtype=np.int64),
            spaces.Box(0, high, shape=(int(max_new_tokens),), dtype=np.int64))


class CausalLMRLModule(GroupCreditModule):
    """The native trainer's LLM policy as an RLModule (``self.policy``); forward = ``policy.logprobs``.

    ``model_config["train_config"]`` (the run's ``TrainConfig``, the object ``ECPOConfig.to_train_config`` holds:
    RLlib hands a module only its ``model_config``, so the config puts it there, with the learner's device,
    ``model_config["learner_device"]``, from ``num_gpus_per_learner``) builds the
    policy with ``runtime.builders.build_policy``, exactly as the native trainer does: the generating
    ``TransformersPolicy`` or the ``ScoringPolicy`` (``policy_mode``), its prompts, LoRA adapter and memory
    settings. The forward takes a batch of stored rows, ``{PROMPT_IDS: [...], RESPONSE_IDS: [...]}``, and returns
    their per-token log-probs and entropies under the sampling temperature (the distribution the rollout drew
    from), so a learner's ratio is 1 at theta_old.

    A learner's module (``inference_only=False``) is built with the transformers backend whatever
    ``generation_backend`` says: only a runner generates, so only a runner starts a vLLM engine.

    A runner's module (``inference_only=True``) never trains: its weights take no gradients (the learner holds
    the optimizer and the KL reference). A vLLM runner without LoRA builds no transformers copy at all: its
    engine samples the responses and their log-probs (the rows' old log-probs), the learner recomputes the
    current ones on its own module, and ``set_state`` loads the learner's weights straight into the engine.
    Under LoRA the runner keeps the transformers model: the learner sends the adapter only, which is merged
    into the base weights there for the engine (``LLMEnvRunner`` says so when it starts).

    Under LoRA the module's state (``get_state``: weight sync, checkpoints) is the adapter's tensors only, and
    ``set_state`` loads them into a module built on the same base model.
    """

    def setup(self) -> None:
        from ecpo_train.runtime.builders import build_policy
        from ecpo_train.runtime.config import TrainConfig

        cfg = self.model_config or {}
        tc = cfg.get(TRAIN_CONFIG)
        if not isinstance(tc, TrainConfig):
            raise ValueError("CausalLMRLModule needs model_config['train_config'], the run's TrainConfig "
                             "(ECPOConfig.get_default_rl_module_spec puts it there)")
        self.train_config = tc
        if self.inference_only:  # a runner samples and scores, never trains; its device: the TrainConfig's
            engine_only = tc.generation_backend == "vllm" and not tc.lora
            self.policy = build_policy(tc, transformers_weights=not engine_only)
            self.policy.requires_grad_(False)
        else:  # a learner scores stored rows and never generates (no vLLM engine for it), on the device RLlib
            # placed it on (num_gpus_per_learner), not wherever device=auto finds a GPU
            self.policy = build_policy(tc, cfg.get(LEARNER_DEVICE), generation_backend="transformers")
        self.policy.eval()  # no dropout: the learner scores the very distribution the runner sampled from
        self.temperature = float(self.train_config.rollout_temperature)

    @property
    def has_lora(self) -> bool:
        return bool(self.train_config.lora)

    def get_state(self, *args, **kwargs):
        """RLlib's state (weight sync, checkpoints), each weight in its own dtype (``transport_array``); under
        LoRA only the adapter's tensors (the base weights never change)."""
        from ecpo_train.policies.lora import is_adapter_key

        # only tensors travel: a policy's extra state (the text policy's vocabulary and sampling stream) is built with
        # it from the same config on every learner and runner
        state = {name: transport_array(value) for name, value in self.state_dict().items() if torch.is_tensor(value)}
        if self.has_lora:
            state = {name: value for name, value in state.items() if is_adapter_key(name)}
        return state

    def state_shapes(self) -> dict[str, tuple[int, ...]]:
        """The shape of each tensor :meth:`get_state` gives, without copying any: what a restored state must
        match (``state_files.check_learner_state``, on the driver before the state reaches a learner actor)."""
        from ecpo_train.policies.lora import is_adapter_key

        return {name: tuple(value.shape) for name, value in self.state_dict().items()
                if torch.is_tensor(value) and (is_adapter_key(name) or not self.has_lora)}

    def set_state(self, state) -> None:
        """Load a state by name; every given tensor must be one of this module's (a LoRA/full mismatch is an
        error, not a silent no-op) and every trainable one must be given."""
        from ecpo_train.policies.lora import is_adapter_key

        tensors = {name: as_tensor(value) for name, value in dict(state).items()}
        if self.policy.model is None:  # a vLLM runner without a transformers copy: straight into its engine
            self.policy.weights_to_engine({name.removeprefix(MODEL_PREFIX): t for name, t in tensors.items()})
            return
        bad = next((name for name, t in tensors.items() if t.is_floating_point() and not bool(torch.isfinite(t).all())),
                   None)
        if bad is not None:
            raise ValueError(f"weight {bad[:80]} holds nan or infinite values: restore the checkpoint from a copy")
        try:
            missing, unexpected = self.load_state_dict(tensors, strict=False)
        except RuntimeError as err:  # (shapes that do not fit: torch's multi-line report, cut to one line)
            raise ValueError(f"weights do not fit this CausalLMRLModule ({' '.join(str(err).split())[:200]}); the "
                             "learner and the runners must be built from the same ECPOConfig") from None
        needed = [name for name in missing if (is_adapter_key(name) or not self.has_lora)
                  and not name.endswith("_extra_state")]
        if unexpected or needed:
            raise ValueError(
                f"weights do not fit this CausalLMRLModule (LoRA {'on' if self.has_lora else 'off'}): "
                f"unexpected {sorted(unexpected)[:4]}, missing {sorted(needed)[:4]}; the learner and the runners "
                "must be built from the same ECPOConfig")

    def _forward(self, batch, **kwargs):
        if self.policy.model is None:
            raise TypeError("this runner's module has no transformers model (vLLM holds its weights): only a "
                            "learner's module computes log-probs of stored rows")
        # RLlib moves the module after setup; the policy computes wherever its weights now are.
        self.policy.device = next(self.policy.model.parameters()).device
        logp, mask, entropy = self.policy.logprobs(
            batch[PROMPT_IDS], batch[RESPONSE_IDS], temperature=self.temperature,
            with_entropy=bool(batch.get(WITH_ENTROPY, False)))
        return {TOKEN_LOGP: logp, RESPONSE_MASK: mask, TOKEN_ENTROPY: entropy}


def transport_array(tensor: torch.Tensor):
    """A weight as the module's state ships it: a numpy view on the CPU where numpy has the dtype (Ray's object
    store then holds it without a pickled copy), else the CPU tensor itself (bfloat16, which numpy lacks: RLlib's
    own ``convert_to_numpy`` raises on it)."""
    tensor = tensor.detach().cpu()
    return tensor if tensor.dtype == torch.bfloat16 else tensor.numpy()


def as_tensor(value) -> torch.Tensor:
    """A received weight as a tensor of its own dtype, sharing its memory: RLlib's ``convert_to_torch_tensor``
    would cast a bfloat16 weight to a float32 copy, twice its size, before it is loaded."""
    if torch.is_tensor(value):
        return value
    with warnings.catch_warnings():  # Ray's object store hands read-only arrays; they are only read from
        warnings.simplefilter("ignore")
        return torch.from_numpy(np.asarray(value))
