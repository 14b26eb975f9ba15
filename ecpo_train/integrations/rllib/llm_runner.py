"""The LLM path's sampler: whole groups played by the project's one episode loop, returned as RLlib episodes.

RLlib's env runners step one numeric action per timestep and their spaces corrupt text, so LLM rollouts
run outside them. ``LLMGroupRunner`` plays its groups with ``rollout.collect_rollout`` and the native
trainer's ``TransformersPolicy`` (prompt rendering, batched KV-cache sampling or vLLM, ``parse_action``,
a malformed reply sent as ``INVALID_ACTION``), then turns the rollout's ``TrajectoryBatch`` into one
``SingleAgentEpisode`` per trajectory, one timestep per env step:

- observation ``t``: the prompt's token ids, left-padded to ``max_prompt_tokens`` (``prompt_mask`` marks
  real tokens);
- action ``t``: the reply's token ids, right-padded to ``max_new_tokens`` (``response_mask`` marks them,
  EOS included);
- extra model outputs: ``prompt_mask``, ``response_mask``, ``token_logp`` (the sampling log-probs the
  policy returned) and, with a reference model, ``ref_token_logp``;
- infos: the env's ``state_key`` and ``observation_key`` before each step (both: the learner's
  ``anchor_key`` picks one), ``action_key``, ``is_action_valid`` and the raw ``response`` after it, the
  final env info after the last step, and ``group_key`` everywhere.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import torch
from ray.rllib.env.single_agent_env_runner import SingleAgentEpisode

from ecpo_gym.canonical import INVALID_ACTION
from ecpo_train.core.rollout import Rollout, collect_rollout
from ecpo_train.integrations.rllib.connector import GROUP_KEY
from ecpo_train.integrations.rllib.module import (
    PROMPT_MASK,
    REF_TOKEN_LOGP,
    RESPONSE_MASK,
    TOKEN_LOGP,
    CausalLMRLModule,
    token_spaces,
)


class LLMGroupRunner:
    """Plays ``num_groups`` groups of ``group_size`` copies with a causal LM; returns ``SingleAgentEpisode``s.

    Usable in-process or as a Ray actor (``ray.remote(LLMGroupRunner).remote(...)``). The policy is
    ``self.module.policy`` (a ``TransformersPolicy`` inside the ``CausalLMRLModule`` the learner trains), so
    the learner's weights load by name; ``backend="vllm"`` samples with vLLM (GPU) while log-probs stay on
    transformers. ``reference_model_path`` (optional) adds the frozen reference's token log-probs for the KL
    term. Weights come in through ``set_weights`` (the learner group's ``get_weights()[module_id]``).

    LoRA: ``lora={...}`` here, or ``configure_lora`` (``LLMTrainer`` calls it with ``ECPOConfig.lora``), gives the
    policy the learner's adapter; ``set_weights`` then receives and loads the adapter tensors only, and a vLLM
    engine gets the merged weights (``TransformersPolicy.sync_generation_weights``). The KL reference under
    LoRA is this runner's own model with its adapter off (``lora.AdapterOffReference``, no second copy): pass
    ``reference_model_path=model_path`` (the base model) to turn it on.
    """

    def __init__(
        self,
        env_id: str,
        model_path: str | Path,
        *,
        env_name: str | None = None,
        env_kwargs: dict[str, Any] | None = None,
        group_size: int = 4,
        num_groups: int = 1,
        max_prompt_tokens: int = 512,
        max_new_tokens: int = 64,
        temperature: float = 1.0,
        history_length: int | None = None,
        reference_model_path: str | Path | None = None,
        runner_id: int = 0,
        seed: int = 0,
        backend: str = "transformers",
        vllm_kwargs: dict[str, Any] | None = None,
        device: str | None = None,
        dtype: str = "float32",
        lora: dict[str, Any] | None = None,
    ) -> None:
        from ecpo_gym.group import GroupVectorEnv
        from ecpo_train.policies.llm import GENERATION_BACKENDS
        from ecpo_train.policies.lora import check_lora_settings

        # a wrong backend or a missing engine is reported before any weights load
        if backend not in GENERATION_BACKENDS:
            raise ValueError(f"backend={backend!r}; valid: {', '.join(GENERATION_BACKENDS)}")
        if backend == "vllm":
            from ecpo_train.policies.vllm_backend import import_vllm

            import_vllm()
        self.env_name = env_name or env_id
        self.group_size = int(group_size)
        self.num_groups = int(num_groups)
        self.max_prompt_tokens = int(max_prompt_tokens)
        self.max_new_tokens = int(max_new_tokens)
        self.temperature = float(temperature)
        self.history_length = history_length
        self.runner_id = int(runner_id)
        self.seed = int(seed)
        self.dtype = str(dtype)
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self._calls = itertools.count()
        self.lora = check_lora_settings(lora)
        self.reference_model_path = None if reference_model_path is None else str(reference_model_path)
        self.module = CausalLMRLModule(
            observation_space=None, action_space=None, inference_only=True,
            model_config={"model_path": str(model_path), "dtype": self.dtype, "temperature": self.temperature,
                          "env_name": self.env_name, "max_prompt_tokens": self.max_prompt_tokens,
                          "max_new_tokens": self.max_new_tokens, "history_length": history_length,
                          "generation_backend": backend, "vllm_kwargs": vllm_kwargs, "seed": self.seed,
                          "device": str(self.device), "lora": self.lora or None})
        self.module.eval()
        self.policy = self.module.policy
        self.reference = self._build_reference()
        self.pad_token_id = self.policy.pad_token_id
        self.envs = GroupVectorEnv(env_id, self.num_groups, self.group_size, env_kwargs=env_kwargs)
        self.observation_space, self.action_space = token_spaces(
            len(self.policy.tokenizer), self.max_prompt_tokens, self.max_new_tokens)

    def describe(self) -> dict[str, Any]:
        """What a learner group needs to build the matching module."""
        return {"model_path": self.module.model_config["model_path"], "dtype": self.dtype,
                "temperature": self.temperature, "vocab_size": len(self.policy.tokenizer),
                "max_prompt_tokens": self.max_prompt_tokens, "max_new_tokens": self.max_new_tokens,
                "lora": dict(self.lora)}

    def _build_reference(self) -> Any:
        """The frozen KL reference: a second model from ``reference_model_path``, or under LoRA the policy's
        own model with its adapter off."""
        if self.reference_model_path is None:
            return None
        if self.lora:
            if Path(self.reference_model_path).expanduser().resolve() != Path(
                    self.module.model_config["model_path"]).expanduser().resolve():
                raise ValueError(
                    "under LoRA the KL reference is the runner's base model with its adapter off: give "
                    f"reference_model_path={self.module.model_config['model_path']!r} (got {self.reference_model_path!r})")
            return self.policy.frozen_copy()  # lora.AdapterOffReference: no weight copy
        from ecpo_train.policies.llm import TransformersPolicy

        reference = TransformersPolicy(self.reference_model_path, env_name=self.env_name, device=str(self.device),
                                       dtype=self.dtype)
        reference.requires_grad_(False)
        reference.eval()
        return reference

    def configure_lora(self, lora: dict[str, Any] | None) -> None:
        """Give the policy the learner's LoRA adapter (``ECPOConfig.lora``; ``{}``/``None`` = none).

        A runner without an adapter gets one (B = 0: its outputs are unchanged until ``set_weights``) and its
        KL reference becomes the adapter-off model; settings that differ from the runner's own are an error.
        """
        from ecpo_train.policies.lora import check_lora_settings

        settings = check_lora_settings(lora)
        if settings == self.lora:
            return
        if self.lora:
            raise ValueError(f"this runner was built with LoRA {self.lora}; the trainer's config asks for "
                             f"{settings or 'none'}")
        self.policy.add_lora(settings)
        self.policy.eval()
        self.lora = settings
        self.module.model_config["lora"] = settings
        self.reference = None
        self.reference = self._build_reference()

    # ------------------------------------------------------------------ weights
    def set_weights(self, weights: dict[str, Any]) -> None:
        self.module.set_state(weights)
        self.policy.sync_generation_weights()  # vLLM: the next groups sample from the new weights

    def get_weights(self) -> dict[str, Any]:
        return self.module.get_state()

    # ------------------------------------------------------------------ sampling
    def sample(self, task_ids: list[str] | None = None) -> list[SingleAgentEpisode]:
        """Play one batch of groups to the end; one ``SingleAgentEpisode`` per trajectory, groups contiguous.

        ``task_ids``: one per group; ``None`` draws them from the env's tasks. Call ``c`` of runner seed
        ``s`` resets the envs with ``s + 7919 c`` and samples from a torch RNG seeded the same way (the
        caller's RNG state is left as it was).
        """
        call = next(self._calls)
        seed = self.seed + 7919 * call
        if task_ids is None:
            pool = self.envs.task_ids
            task_ids = [pool[int(k)] for k in np.random.default_rng(seed).integers(len(pool), size=self.num_groups)]
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            rollout = collect_rollout(self.envs, self.policy, task_ids, env_name=self.env_name,
                                      temperature=self.temperature, seed=seed, history_length=self.history_length)
        return self._episodes(rollout, call)

    def _episodes(self, rollout: Rollout, call: int) -> list[SingleAgentEpisode]:
        rows = rollout.batch.credit_arrays()
        extras = rollout.batch.extras
        ref_logps = self._reference_logps(extras["prompt_ids"], extras["response_ids"])
        traj_ids = np.asarray(rows["traj_ids"], dtype=np.int64)
        outcome = {episode.traj_id: episode for episode in rollout.episodes}
        episodes = []
        for traj in np.unique(traj_ids):  # collect_rollout's traj_id is the env copy's index
            at = np.flatnonzero(traj_ids == traj)
            group_key = f"r{self.runner_id}c{call}g{rows['group_ids'][at[0]]}"
            before = [{GROUP_KEY: group_key, "state_key": extras["state_key"][r],
                       "observation_key": extras["observation_key"][r]} for r in at]
            after = [{"action_key": rows["action_keys"][r], "is_action_valid": rows["action_keys"][r] != INVALID_ACTION,
                      "response": extras["response"][r]} for r in at]
            last = outcome[int(traj)]
            end_info = dict(last.final_info)
            infos = [before[0], *({**a, **b} for a, b in zip(after, before[1:])),
                     {**end_info, **after[-1], GROUP_KEY: group_key}]
            prompts = [self._left_pad(extras["prompt_ids"][r]) for r in at]
            replies = [self._right_pad(extras["response_ids"][r], self.pad_token_id) for r in at]
            extra = {PROMPT_MASK: [mask for _, mask in prompts], RESPONSE_MASK: [mask for _, mask in replies],
                     TOKEN_LOGP: [self._right_pad(extras["old_logprobs"][r], 0.0, np.float32)[0] for r in at]}
            if ref_logps is not None:
                extra[REF_TOKEN_LOGP] = [self._right_pad(ref_logps[r], 0.0, np.float32)[0] for r in at]
            final_obs = np.full(self.max_prompt_tokens, self.pad_token_id, dtype=np.int64)
            episodes.append(SingleAgentEpisode(
                observations=[*(ids for ids, _ in prompts), final_obs], actions=[ids for ids, _ in replies],
                rewards=[float(rows["rewards"][r]) for r in at], infos=infos, terminated=last.terminated,
                truncated=not last.terminated, extra_model_outputs=extra,
                len_lookback_buffer=0,
            ))
        return episodes

    @torch.no_grad()
    def _reference_logps(self, prompt_ids: list, response_ids: list) -> list[list[float]] | None:
        """The frozen reference's per-token log-probs of every row (chunks of one step's worth of rows)."""
        if self.reference is None:
            return None
        out: list[list[float]] = []
        chunk = self.envs.num_envs
        for start in range(0, len(prompt_ids), chunk):
            responses = response_ids[start:start + chunk]
            logp, _, _ = self.reference.logprobs(prompt_ids[start:start + chunk], responses,
                                                 temperature=self.temperature)
            out += [row[: len(response)].tolist() for row, response in zip(logp.cpu(), responses)]
        return out

    def _left_pad(self, ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """(ids, mask) of a prompt left-padded to ``max_prompt_tokens`` (the policy already kept its last tokens)."""
        padded = np.full(self.max_prompt_tokens, self.pad_token_id, dtype=np.int64)
        mask = np.zeros(self.max_prompt_tokens, dtype=np.float32)
        if ids:
            padded[-len(ids):] = ids
            mask[-len(ids):] = 1.0
        return padded, mask

    def _right_pad(self, values: list, fill: float, dtype: type = np.int64) -> tuple[np.ndarray, np.ndarray]:
        """(values, mask) of a reply row right-padded to ``max_new_tokens``."""
        padded = np.full(self.max_new_tokens, fill, dtype=dtype)
        mask = np.zeros(self.max_new_tokens, dtype=np.float32)
        padded[: len(values)] = values
        mask[: len(values)] = 1.0
        return padded, mask

    def close(self) -> None:
        self.envs.close()
