"""ECPO's critic-free RLModules: a scorer over ``CandidateActionEnv``'s candidates, and a causal LM.

``CandidateScorerModule``: ``logit_k = MLP([c, e_k, c * e_k])`` over learned embeddings ``c`` of the
context and ``e_k`` of candidate ``k``, with absent candidates masked out, so the policy is a softmax over
the state's admissible actions.

``CausalLMRLModule``: the LLM policy of the native trainer (``ecpo_train.policies.llm.TransformersPolicy``)
as an RLModule; its forward is the policy's own ``logprobs`` of the stored replies. Its episodes carry
token ids in fixed-shape Boxes (``token_spaces``), never text.

Neither has a value head: ECPO's baseline is the group (``credit.py``), not a critic.
"""

from __future__ import annotations

import numpy as np
import torch
from gymnasium import spaces
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.torch import TorchRLModule

from ecpo_train.integrations.rllib.candidate_env import layout_from_space, split_observation

# Finite (not -inf) so masked entries give zero probability without NaN entropies or KLs.
MASKED_LOGIT = -1e9

# Columns of the LLM path's episodes and train batches (besides OBS = prompt ids, ACTIONS = reply ids).
PROMPT_MASK = "prompt_mask"
RESPONSE_MASK = "response_mask"
TOKEN_LOGP = "token_logp"
REF_TOKEN_LOGP = "ref_token_logp"
TOKEN_ENTROPY = "token_entropy"


class CandidateScorerModule(TorchRLModule):
    """Policy over ``Discrete(K)`` candidate indices; ``model_config``: ``hidden_dim`` (default 64)."""

    def setup(self) -> None:
        self.feature_dim, self.max_candidates = layout_from_space(
            self.observation_space.shape[0], self.action_space.n
        )
        hidden = int((self.model_config or {}).get("hidden_dim", 64))
        self.context_encoder = torch.nn.Sequential(torch.nn.Linear(self.feature_dim, hidden), torch.nn.Tanh())
        self.candidate_encoder = torch.nn.Sequential(torch.nn.Linear(self.feature_dim, hidden), torch.nn.Tanh())
        # The product term lets a candidate's score depend on the state (hashed buckets of the two
        # texts rarely coincide, so raw features alone would score actions state-independently).
        self.scorer = torch.nn.Sequential(
            torch.nn.Linear(3 * hidden, hidden),
            torch.nn.Tanh(),
            torch.nn.Linear(hidden, 1),
        )

    def _forward(self, batch, **kwargs):
        obs = batch[Columns.OBS].float()
        context, candidates, mask = split_observation(obs, self.feature_dim, self.max_candidates)
        candidate_h = self.candidate_encoder(candidates)
        context_h = self.context_encoder(context).unsqueeze(-2).expand_as(candidate_h)
        joint = torch.cat([context_h, candidate_h, context_h * candidate_h], dim=-1)
        scores = self.scorer(joint).squeeze(-1)
        logits = torch.where(mask > 0.5, scores, torch.full_like(scores, MASKED_LOGIT))
        return {Columns.ACTION_DIST_INPUTS: logits}


def token_spaces(vocab_size: int, max_prompt_tokens: int, max_new_tokens: int) -> tuple[spaces.Box, spaces.Box]:
    """(observation space, action space): fixed-shape token-id Boxes for prompts and replies."""
    high = int(vocab_size) - 1
    return (spaces.Box(0, high, shape=(int(max_prompt_tokens),), dtype=np.int64),
            spaces.Box(0, high, shape=(int(max_new_tokens),), dtype=np.int64))


class CausalLMRLModule(TorchRLModule):
    """``TransformersPolicy`` as an RLModule (the module's ``policy``); forward = ``policy.logprobs``.

    ``model_config``: ``model_path`` (a ``save_pretrained`` directory with its tokenizer), ``dtype``
    (default ``float32``), ``temperature`` (the sampling temperature: log-probs are those of the tempered
    distribution the runner sampled from, as in the native trainer) and optionally the policy's sampling
    settings, which only a runner needs: ``env_name``, ``max_prompt_tokens``, ``max_new_tokens``,
    ``history_length``, ``generation_backend``, ``vllm_kwargs``, ``seed``, ``device``.

    ``lora`` (``{r, alpha, dropout, target_modules}``, optional): the policy's model gets that adapter (base
    frozen). The module's state (``get_state``: weight sync, learner checkpoints) is then the adapter's
    tensors only, and ``set_state`` loads them into a module built on the same base model.
    """

    def setup(self) -> None:
        from ecpo_train.policies.llm import TransformersPolicy

        cfg = dict(self.model_config or {})
        if "model_path" not in cfg:
            raise ValueError("CausalLMRLModule needs model_config['model_path'] (a save_pretrained directory)")
        optional = {"max_prompt_length": cfg.get("max_prompt_tokens"), "max_response_length": cfg.get("max_new_tokens"),
                    "vllm_kwargs": cfg.get("vllm_kwargs"), "seed": cfg.get("seed"), "device": cfg.get("device")}
        self.policy = TransformersPolicy(
            str(cfg["model_path"]), env_name=str(cfg.get("env_name", "")), dtype=str(cfg.get("dtype", "float32")),
            history_length=cfg.get("history_length"),
            generation_backend=str(cfg.get("generation_backend", "transformers")),
            lora=cfg.get("lora") or None,
            **{name: value for name, value in optional.items() if value is not None},
        )
        self.policy.eval()  # no dropout: the learner scores the very distribution the runner sampled from
        self.temperature = float(cfg.get("temperature", 1.0))

    @property
    def has_lora(self) -> bool:
        return self.policy.lora_model is not None

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
                "must agree on LoRA (ECPOConfig.training(lora=...), LLMGroupRunner(lora=...))")

    def _forward(self, batch, **kwargs):
        # RLlib moves the module after setup; the policy computes wherever its weights now are.
        self.policy.device = next(self.policy.model.parameters()).device
        reply_mask = batch[RESPONSE_MASK]
        logp, _, entropy = self.policy.logprobs(
            unpad(batch[Columns.OBS], batch[PROMPT_MASK]), unpad(batch[Columns.ACTIONS], reply_mask),
            temperature=self.temperature, with_entropy=True)
        # logprobs' columns are the longest reply's tokens, left-aligned like the batch's reply Box
        width = reply_mask.shape[1] - logp.shape[1]
        return {TOKEN_LOGP: torch.nn.functional.pad(logp, (0, width)),
                TOKEN_ENTROPY: torch.nn.functional.pad(entropy, (0, width))}


def unpad(token_ids: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
    """The real tokens of each fixed-width row (``mask`` 1 on them), in order."""
    return [row[keep > 0].tolist() for row, keep in zip(token_ids, mask)]
