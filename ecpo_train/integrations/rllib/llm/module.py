"""``CausalLMRLModule``: the LLM policy of the native trainer (generating or scoring, built by
``runtime.builders.build_policy``) as an RLModule; its forward is the policy's own ``logprobs`` of stored rows.

No value head: ECPO's baseline is the group (``credit.py``), not a critic.
"""

from __future__ import annotations

import numpy as np
import torch
from gymnasium import spaces
from ray.rllib.core.rl_module.torch import TorchRLModule

# The LLM module's forward: rows in (the step-row table's token columns), per-token log-probs out.
PROMPT_IDS = "prompt_ids"
RESPONSE_IDS = "response_ids"
WITH_ENTROPY = "with_entropy"
RESPONSE_MASK = "response_mask"
TOKEN_LOGP = "token_logp"
TOKEN_ENTROPY = "token_entropy"


def token_spaces(vocab_size: int, max_prompt_tokens: int, max_new_tokens: int) -> tuple[spaces.Box, spaces.Box]:
    """(observation space, action space): fixed-shape token-id Boxes for prompts and replies. The LLM path's
    rows never pass through them (they travel as a ``TrajectoryBatch``); RLlib asks every module for spaces."""
    high = int(vocab_size) - 1
    return (spaces.Box(0, high, shape=(int(max_prompt_tokens),), dtype=np.int64),
            spaces.Box(0, high, shape=(int(max_new_tokens),), dtype=np.int64))


class CausalLMRLModule(TorchRLModule):
    """The native trainer's LLM policy as an RLModule (``self.policy``); forward = ``policy.logprobs``.

    ``model_config["train_config"]`` (a ``TrainConfig`` as a dict; ``ECPOConfig`` puts it there) builds the
    policy with ``runtime.builders.build_policy``, exactly as the native trainer does: the generating
    ``TransformersPolicy`` or the ``ScoringPolicy`` (``policy_mode``), its prompts, LoRA adapter and memory
    settings. The forward takes a batch of stored rows, ``{PROMPT_IDS: [...], RESPONSE_IDS: [...]}``, and returns
    their per-token log-probs and entropies under the sampling temperature (the distribution the rollout drew
    from), so a learner's ratio is 1 at theta_old.

    A learner's module (``inference_only=False``) is built with the transformers backend whatever
    ``generation_backend`` says: only a runner generates, so only a runner starts a vLLM engine.

    Under LoRA the module's state (``get_state``: weight sync, checkpoints) is the adapter's tensors only, and
    ``set_state`` loads them into a module built on the same base model.
    """

    def setup(self) -> None:
        from ecpo_train.runtime.builders import build_policy
        from ecpo_train.runtime.config import make_config

        cfg = dict(self.model_config or {})
        if "train_config" not in cfg:
            raise ValueError("CausalLMRLModule needs model_config['train_config'] (ECPOConfig.rl_module(model_config="
                             "{'model': ...}) sets it)")
        train_config = dict(cfg["train_config"])
        if not self.inference_only:  # a learner scores stored rows and never generates: no vLLM engine for it
            train_config["generation_backend"] = "transformers"
            train_config["vllm_kwargs"] = {}
        self.train_config = make_config(train_config)
        self.policy = build_policy(self.train_config)  # its device: the TrainConfig's, resolved (auto -> cuda|cpu)
        self.policy.eval()  # no dropout: the learner scores the very distribution the runner sampled from
        self.temperature = float(self.train_config.rollout_temperature)

    @property
    def has_lora(self) -> bool:
        return getattr(self.policy, "lora_model", None) is not None

    def get_state(self, *args, **kwargs):
        """RLlib's state; under LoRA only the adapter's tensors (the base weights never change)."""
        from ecpo_train.policies.lora import is_adapter_key

        state = super().get_state(*args, **kwargs)
        if self.has_lora:
            state = {name: value for name, value in state.items() if is_adapter_key(name)}
        return state

    def set_state(self, state) -> None:
        """Load a state by name; every given tensor must be one of this module's (a LoRA/full mismatch is an
        error, not a silent no-op) and every trainable one must be given."""
        from ray.rllib.utils.torch_utils import convert_to_torch_tensor

        from ecpo_train.policies.lora import is_adapter_key

        missing, unexpected = self.load_state_dict(convert_to_torch_tensor(dict(state)), strict=False)
        needed = [name for name in missing if is_adapter_key(name) or not self.has_lora]
        if unexpected or needed:
            raise ValueError(
                f"weights do not fit this CausalLMRLModule (LoRA {'on' if self.has_lora else 'off'}): "
                f"unexpected {sorted(unexpected)[:4]}, missing {sorted(needed)[:4]}; the learner and the runners "
                "must be built from the same ECPOConfig")

    def _forward(self, batch, **kwargs):
        # RLlib moves the module after setup; the policy computes wherever its weights now are.
        self.policy.device = next(self.policy.model.parameters()).device
        logp, mask, entropy = self.policy.logprobs(
            batch[PROMPT_IDS], batch[RESPONSE_IDS], temperature=self.temperature,
            with_entropy=bool(batch.get(WITH_ENTROPY, False)))
        return {TOKEN_LOGP: logp, RESPONSE_MASK: mask, TOKEN_ENTROPY: entropy}
