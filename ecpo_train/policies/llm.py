"""The LLM policy on transformers: any causal LM by local path or hub id.

Each step's prompt is the environment's template (``prompts/<env>.txt`` via ``ecpo_train.policies.prompting``)
wrapped in the model's chat template. Sampling is batched over every live environment copy with left
padding and a KV cache, one token at a time, so the per-token log-prob of each sampled token is taken
from exactly the distribution it was drawn from (raw logits / temperature; no top-k/top-p), which is
what the learner's ``logprobs`` recomputes: at the first update the ratio of eq. ecpo_objective is 1.

Identical prompts are prefilled once (``share_prefix=True``, the default): at a group's first step all N
copies hold the same prompt, so the model runs on the distinct prompts only and the KV cache rows are then
expanded to every copy (``Cache.reorder_cache`` with a row map). The decode steps are unchanged and the
first token's logits are the shared row's, so the sampled tokens and log-probs are the ones the unshared
path draws from the same random stream; ``share_prefix=False`` prefills every row (for comparison).

The one-token decoding steps after the prefill run as ``decoding`` says (``ecpo_train/policies/decoding.py``):
``eager`` grows transformers' dynamic cache (the CPU default); ``static`` writes into a KV cache sized once per
call; ``graph`` (the CUDA default) replays that step as a CUDA graph, on a bf16 copy of the weights under
``mixed_precision=bf16``. The draws stay here, so every path samples from the same random stream.

A response is cut after its first end-of-sequence token (kept: it is part of the action's tokens). The
action is parsed with ``ecpo_train.policies.parsing.parse_action``; a response without a well-formed
action block is sent to the environment as ``"<invalid>"``, which it answers with its invalid-action
outcome.

Generation can run on vLLM instead (``generation_backend="vllm"``, GPU only; ``policies/vllm_backend.py``):
the backend samples with the same arguments and returns the same ``(response_ids, logprobs)``, the
learner's ``logprobs`` stay on the transformers model, and ``sync_generation_weights`` copies the trained
weights into vLLM after every update (under LoRA the merged weights, base + adapter delta, under the plain
model's key names: ``generation_weights``). A process that only samples (an RLlib vLLM env runner without
LoRA) builds the policy with ``transformers_weights=False``: no transformers copy of the weights, which go
straight into the engine (``weights_to_engine``); such a policy cannot score rows (``logprobs``).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch

from ecpo_gym.canonical import INVALID_ACTION
from ecpo_gym.kwargs import shown
from ecpo_train.policies.base import Policy, PolicyOutput, StepContext
from ecpo_train.policies.decoding import EagerDecode, SamplingCopy, StaticDecoder, resolve_decoding
from ecpo_train.policies.parsing import parse_action
from ecpo_train.policies.prompting import render_prompt, to_chat

GENERATION_BACKENDS = ("transformers", "vllm")


class TransformersPolicy(Policy):
    """A ``transformers`` causal LM as a policy (see the module docstring)."""

    def __init__(
        self,
        model_name_or_path: str,
        *,
        env_name: str,
        max_prompt_length: int = 2048,
        max_response_length: int = 512,
        device: str = "cpu",
        dtype: str = "float32",
        history_length: int | None = None,
        generation_backend: str = "transformers",
        vllm_kwargs: dict | None = None,
        seed: int = 0,
        lora: dict | None = None,
        prompt_style: str = "paper",
        share_prefix: bool = True,
        transformers_weights: bool = True,
        decoding: str = "auto",
    ) -> None:
        super().__init__()
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if not transformers_weights and (generation_backend != "vllm" or lora):
            raise ValueError("transformers_weights=False needs generation_backend='vllm' and no LoRA: the weights "
                             "then live in the vLLM engine only (a LoRA adapter is merged into a local base copy)")
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(model_name_or_path)
            if transformers_weights:
                self.model = AutoModelForCausalLM.from_pretrained(model_name_or_path, dtype=getattr(torch, dtype))
                generation_config = self.model.generation_config
            else:  # a vLLM sampler only: the engine holds the one copy of the weights (weights_to_engine)
                self.model = None
                generation_config = generation_config_of(model_name_or_path)
        except OSError as err:
            from ecpo_train.policies import DEMO_MODEL

            raise OSError(
                f"could not load the causal LM {shown(model_name_or_path)}: {err}\nGive a local folder with "
                f"config.json, weights and tokenizer files (e.g. `ecpo models pull {DEMO_MODEL}` or "
                "`ecpo models tiny DIR`) or a Hugging Face hub id on a machine with internet access."
            ) from err
        # LoRA (ecpo_train/policies/lora.py): adapter layers injected into self.model in place; peft's wrapper is kept
        # outside the module registry (its parameters are self.model's), for disable_adapter / save_pretrained
        self.__dict__["lora_model"] = None
        if lora:
            self.add_lora(lora)
        if self.model is not None:
            self.model.to(device)
        self.device = torch.device(device)
        self.env_name = env_name
        self.max_prompt_length = int(max_prompt_length)
        self.max_response_length = int(max_response_length)
        self.history_length = history_length
        self.prompt_style = prompt_style
        self.share_prefix = bool(share_prefix)  # prefill identical prompts once (module docstring)
        # eager | static | graph: how the decoding steps run (policies/decoding.py)
        self.decoding = resolve_decoding(decoding, self.device, self.model.config if self.model is not None else None)
        self.__dict__["decoder"] = None  # a StaticDecoder, built at the first static call (outside the module tree)
        self.__dict__["sampling_copy"] = None  # a SamplingCopy when sampling runs in another dtype (set_sampling_dtype)
        eos = generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if self.tokenizer.eos_token_id is not None:
            eos_ids.add(int(self.tokenizer.eos_token_id))
        if not eos_ids:
            raise ValueError(f"{shown(model_name_or_path)} defines no end-of-sequence token")
        self.eos_token_ids = torch.as_tensor(sorted(eos_ids), device=self.device)
        pad = self.tokenizer.pad_token_id
        self.pad_token_id = int(pad if pad is not None else min(eos_ids))
        if generation_backend not in GENERATION_BACKENDS:
            raise ValueError(f"generation_backend={shown(generation_backend)}; valid: {', '.join(GENERATION_BACKENDS)}")
        self.generation_backend = generation_backend
        self.backend = None  # a GenerationBackend when sampling runs outside transformers
        if generation_backend == "vllm":
            from ecpo_train.policies.vllm_backend import VLLMBackend

            self.backend = VLLMBackend(str(model_name_or_path), max_response_length=self.max_response_length,
                                       dtype=dtype, seed=seed, **(vllm_kwargs or {}))

    def add_lora(self, lora: dict) -> None:
        """Inject LoRA layers (``lora.attach_lora``) into the model in place; base weights are then frozen.

        Safe after construction too (the RLlib runner does so when the trainer's config asks for LoRA): a
        fresh adapter's B is zero, so the policy's outputs are unchanged until adapter weights are loaded.
        """
        if self.lora_model is not None:
            raise ValueError("this policy already has a LoRA adapter")
        from ecpo_train.policies.lora import attach_lora

        self.__dict__["lora_model"] = attach_lora(self.model, lora)

    # ------------------------------------------------------------------ prompts
    def prompt_text(self, ctx: StepContext) -> str:
        """The chat-formatted prompt of one step."""
        user = render_prompt(ctx.env_name or self.env_name, task=ctx.task, step_count=ctx.step_count,
                             history=ctx.history, observation=ctx.observation,
                             admissible_actions=ctx.admissible_actions, history_length=self.history_length,
                             style=self.prompt_style)
        return to_chat(self.tokenizer, user)

    def encode_prompts(self, contexts: Sequence[StepContext]) -> list[list[int]]:
        """Token ids of each prompt; a prompt over ``max_prompt_length`` keeps its last tokens."""
        encoded = self.tokenizer([self.prompt_text(c) for c in contexts], add_special_tokens=False)["input_ids"]
        return [list(ids[-self.max_prompt_length :]) for ids in encoded]

    # ------------------------------------------------------------------ sampling
    @torch.no_grad()
    def act(self, contexts: Sequence[StepContext], temperature: float = 1.0) -> PolicyOutput:
        out = PolicyOutput(actions=[], responses=[])
        if not contexts:
            return out
        prompts = self.encode_prompts(contexts)
        sample = self.backend.sample if self.backend is not None else self.sample
        responses, logprobs = sample(prompts, temperature)
        for ctx, prompt, response, logp in zip(contexts, prompts, responses, logprobs):
            text = self.tokenizer.decode(response, skip_special_tokens=True)
            action = parse_action(text, ctx.env_name or self.env_name)
            out.actions.append(action if action is not None else INVALID_ACTION)
            out.responses.append(text)
            out.prompt_ids.append(prompt)
            out.response_ids.append(response)
            out.logprobs.append(logp)
        return out

    @torch.no_grad()
    def sample(self, prompts: Sequence[Sequence[int]], temperature: float) -> tuple[list[list[int]], list[list[float]]]:
        """Left-padded batched sampling with a KV cache; returns response ids and their log-probs.

        ``temperature <= 0`` decodes greedily (log-probs are then those of the untempered softmax).
        With ``share_prefix`` identical prompts are prefilled once and their cache rows copied to each
        duplicate (``row_map``); padding width and decode steps are those of the unshared path. The decoding
        steps run as ``self.decoding`` says (``policies/decoding.py``): eagerly, or on a static cache, graphed on
        CUDA; the tokens are drawn here either way, from the same random stream.
        """
        self.model.eval()
        model = self.sampling_model()
        rows, width = len(prompts), max(len(p) for p in prompts)
        keys = [tuple(p) for p in prompts]
        distinct = list(dict.fromkeys(keys)) if self.share_prefix else keys
        row_of = {key: k for k, key in enumerate(distinct)}
        row_map = torch.as_tensor([row_of[key] for key in keys], device=self.device)
        ids = torch.full((len(distinct), width), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros(len(distinct), width, dtype=torch.long)
        for row, prompt in enumerate(distinct):
            ids[row, width - len(prompt) :] = torch.as_tensor(list(prompt), dtype=torch.long)
            attention[row, width - len(prompt) :] = 1
        ids, attention = ids.to(self.device), attention.to(self.device)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        result = model(input_ids=ids, attention_mask=attention, position_ids=positions, use_cache=True,
                       logits_to_keep=1)
        logits = result.logits[:, -1, :]
        if len(distinct) < rows:  # expand the prefilled rows to every copy
            result.past_key_values.reorder_cache(row_map)
            logits, attention, positions = logits[row_map], attention[row_map], positions[row_map]
        next_position = positions[:, -1:] + 1
        if self.decoding == "eager":
            decode = EagerDecode(model, result.past_key_values, attention, next_position)
        else:
            if self.decoder is None:
                self.__dict__["decoder"] = StaticDecoder(graphs=self.decoding == "graph")
            decode = self.decoder.start(model, result.past_key_values, attention, next_position,
                                        self.max_response_length)
        finished = torch.zeros(rows, dtype=torch.bool, device=self.device)
        tokens, token_logps = [], []
        for _ in range(self.max_response_length):
            logits = logits.float()
            if temperature > 0:
                logp = torch.log_softmax(logits / temperature, dim=-1)
                # exponential race (= Gumbel-max): argmax p / E with E ~ Exp(1) is a draw from p, and much
                # faster than multinomial over a 150k vocabulary
                token = (logp.exp() / torch.empty_like(logp).exponential_()).argmax(-1)
            else:
                logp = torch.log_softmax(logits, dim=-1)
                token = logits.argmax(-1)
            token = torch.where(finished, torch.full_like(token, self.pad_token_id), token)
            tokens.append(token)
            token_logps.append(logp.gather(-1, token.unsqueeze(-1)).squeeze(-1))
            finished = finished | torch.isin(token, self.eos_token_ids)
            if bool(finished.all()):
                break
            logits = decode(token)
        return cut_at_first_eos(torch.stack(tokens, dim=1), torch.stack(token_logps, dim=1), self.eos_token_ids)

    # ------------------------------------------------------------------ learner side
    def logprobs(
        self,
        prompt_ids: Sequence[Sequence[int]],
        response_ids: Sequence[Sequence[int]],
        *,
        temperature: float = 1.0,
        with_entropy: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        rows = len(prompt_ids)
        lengths = [len(p) + len(r) for p, r in zip(prompt_ids, response_ids)]
        width = max(lengths)
        resp_width = max((len(r) for r in response_ids), default=1) or 1
        ids = torch.full((rows, width), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros(rows, width, dtype=torch.long)
        targets = torch.zeros(rows, resp_width, dtype=torch.long)
        gather_at = torch.zeros(rows, resp_width, dtype=torch.long)
        mask = torch.zeros(rows, resp_width)
        for row, (prompt, response) in enumerate(zip(prompt_ids, response_ids)):
            seq = list(prompt) + list(response)
            ids[row, : len(seq)] = torch.as_tensor(seq, dtype=torch.long)
            attention[row, : len(seq)] = 1
            n = len(response)
            if n:
                targets[row, :n] = torch.as_tensor(list(response), dtype=torch.long)
                # the token at position len(prompt)+j is predicted by the logits at len(prompt)+j-1
                gather_at[row, :n] = torch.arange(len(prompt) - 1, len(prompt) - 1 + n)
                mask[row, :n] = 1.0
        ids, attention = ids.to(self.device), attention.to(self.device)
        positions = torch.arange(width, device=self.device).unsqueeze(0).expand(rows, -1)
        picked = response_logits(self.model, ids, attention, positions, gather_at.to(self.device)).float()
        scale = temperature if temperature > 0 else 1.0
        logp_all = torch.log_softmax(picked / scale, dim=-1)
        token_logp = logp_all.gather(-1, targets.to(self.device).unsqueeze(-1)).squeeze(-1)
        mask = mask.to(self.device)
        token_logp = token_logp * mask
        entropy = None
        if with_entropy:
            entropy = -(logp_all.exp() * logp_all).sum(-1) * mask
        return token_logp, mask, entropy

    def set_sampling_dtype(self, dtype: torch.dtype | None) -> None:
        """Sample from a copy of the weights in ``dtype`` (``decoding.SamplingCopy``): bf16 on CUDA under
        ``mixed_precision=bf16`` with static or graphed decoding, where autocast would cast every weight per
        step. ``None``, the eager path, the CPU, or the model's own dtype: the model samples itself."""
        use = (dtype is not None and self.decoding != "eager" and self.device.type == "cuda"
               and self.model is not None and dtype != next(self.model.parameters()).dtype)
        self.__dict__["sampling_copy"] = SamplingCopy(dtype) if use else None

    def sampling_model(self) -> torch.nn.Module:
        """The module that samples: the model, or its copy in the sampling dtype (refreshed when stale)."""
        return self.model if self.sampling_copy is None else self.sampling_copy.of(self)

    def generation_weights(self) -> dict[str, torch.Tensor]:
        """What a generation engine loads: the model's state dict under the plain model's key names.

        Under LoRA that is ``lora.merged_state_dict``: base + scaled adapter delta, computed on the fly (the
        engine knows no ``base_layer`` / ``lora_A`` names; the training model is left untouched).
        """
        if self.lora_model is not None:
            from ecpo_train.policies.lora import merged_state_dict

            return merged_state_dict(self.model)
        return self.model.state_dict()

    def sync_generation_weights(self) -> None:
        """After an update: copy the trained weights into the generation backend (no-op for transformers, and
        for a policy without transformers weights, whose engine gets them through ``weights_to_engine``)."""
        if self.backend is not None and self.model is not None:
            self.backend.sync_weights(self.generation_weights())
        if self.sampling_copy is not None:
            self.sampling_copy.mark_stale()

    def weights_to_engine(self, state: dict[str, torch.Tensor]) -> None:
        """Load trained weights (a full state dict under the plain model's names) straight into the generation
        engine: the path of a policy built with ``transformers_weights=False``."""
        if self.backend is None:
            raise ValueError("weights_to_engine needs a generation backend (generation_backend='vllm')")
        self.backend.sync_weights(state)

    @property
    def vocab_size(self) -> int:
        """Token ids this policy's rows hold (RLlib's spaces)."""
        return len(self.tokenizer)

    def frozen_copy(self) -> Policy:
        """A frozen copy of the model for pi_ref; it samples with transformers (it only scores log-probs).

        Under LoRA pi_ref is this very model with its adapter disabled: no copy (``lora.AdapterOffReference``).
        """
        if self.lora_model is not None:
            from ecpo_train.policies.lora import AdapterOffReference

            return AdapterOffReference(self)
        backend, self.backend = self.backend, None
        helpers = {name: self.__dict__[name] for name in ("decoder", "sampling_copy")}
        self.__dict__.update(decoder=None, sampling_copy=None)  # a copy that only scores needs neither
        try:
            ref = copy.deepcopy(self)
        finally:
            self.backend = backend
            self.__dict__.update(helpers)
        ref.generation_backend, ref.decoding = "transformers", "eager"
        ref.requires_grad_(False)
        ref.eval()
        return ref


def generation_config_of(model_name_or_path: str) -> Any:
    """The model's generation config (its end-of-sequence ids) without loading its weights: the folder's
    ``generation_config.json``, else the one transformers derives from ``config.json``."""
    from transformers import AutoConfig, GenerationConfig

    try:
        return GenerationConfig.from_pretrained(model_name_or_path)
    except OSError:
        return GenerationConfig.from_model_config(AutoConfig.from_pretrained(model_name_or_path))


def cut_at_first_eos(tokens: torch.Tensor, logps: torch.Tensor, eos_token_ids: torch.Tensor
                     ) -> tuple[list[list[int]], list[list[float]]]:
    """Each row of ``[rows, steps]`` sampled tokens and their log-probs, cut after its first end-of-sequence token
    (kept), or whole when it has none; one vectorised search, then one copy to Python lists (an element-wise loop
    cost seconds per step at 128 rows x 512 tokens)."""
    is_eos = torch.isin(tokens, eos_token_ids.to(tokens.device))
    lengths = torch.where(is_eos.any(dim=1), is_eos.int().argmax(dim=1) + 1, tokens.shape[1]).tolist()
    token_rows, logp_rows = tokens.cpu().tolist(), logps.cpu().tolist()
    return ([row[:n] for row, n in zip(token_rows, lengths)], [row[:n] for row, n in zip(logp_rows, lengths)])


def response_logits(model: torch.nn.Module, ids: torch.Tensor, attention: torch.Tensor, positions: torch.Tensor,
                    gather_at: torch.Tensor) -> torch.Tensor:
    """Logits ``[rows, L, vocab]`` at the positions ``gather_at`` that predict the response tokens.

    The LM head only runs on those positions: the vocabulary projection dominates small models. A model
    sharded by ``ecpo_train.runtime.distributed`` carries ``compute_response_logits`` as an FSDP forward method
    (``sharded_response_logits``: its weights are gathered around the call) and that is used instead.
    """
    sharded = model.__dict__.get("sharded_response_logits")
    if sharded is not None:
        return sharded(ids, attention, positions, gather_at)
    return compute_response_logits(model, ids, attention, positions, gather_at)


def compute_response_logits(model: torch.nn.Module, ids: torch.Tensor, attention: torch.Tensor,
                            positions: torch.Tensor, gather_at: torch.Tensor) -> torch.Tensor:
    # use_cache=False: a KV cache of the whole sequence is memory the learner never reads
    hidden = model.base_model(input_ids=ids, attention_mask=attention, position_ids=positions,
                              use_cache=False).last_hidden_state
    picked_hidden = hidden[torch.arange(ids.shape[0], device=hidden.device).unsqueeze(-1), gather_at]
    return model.get_output_embeddings()(picked_hidden)
