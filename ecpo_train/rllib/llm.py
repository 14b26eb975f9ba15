"""The LLM path through RLlib: own generation in a group runner, token-level learner, weight sync.

RLlib's env runners step one numeric action per timestep, and their spaces corrupt text, so LLM rollouts
run outside them. ``LLMGroupRunner`` plays whole groups of a text env with a causal LM (transformers
``generate``), renders prompts with ``ecpo_train.prompting``, parses replies with
``ecpo_train.policies.parsing`` and returns RLlib ``SingleAgentEpisode``s, one per trajectory, one
timestep per env step:

- observation ``t``: the prompt's token ids, left-padded to ``max_prompt_tokens`` (``prompt_mask`` marks
  real tokens);
- action ``t``: the reply's token ids, right-padded to ``max_new_tokens`` (``response_mask`` marks them,
  EOS included);
- extra model outputs: ``prompt_mask``, ``response_mask``, ``token_logp`` (per-token log-probabilities
  under the sampling weights) and, with a reference model, ``ref_token_logp``;
- infos: the text env's (``state_key``, ``action_key``, ...) plus ``group_key``.

``LearnerGroup.update(episodes=...)`` then runs the ``ECPOAdvantages`` connector (credit.py) and
``TokenLevelECPOLearner``'s loss, which is ``ecpo_train.loss.ecpo_objective_loss`` on per-token advantages
(eq. ecpo_objective; the step advantage is broadcast to the step's reply tokens). ``LLMTrainer`` ties it
together: sample groups on every runner (in-process or Ray actors) -> update -> push the learner's
weights into the runners.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.env.single_agent_env_runner import SingleAgentEpisode
from ray.rllib.evaluation.postprocessing import Postprocessing
from ray.rllib.utils.metrics import ALL_MODULES

from ecpo_train.rllib.learner import install_ecpo_connector

TOKEN_LOGP = "token_logp"
REF_TOKEN_LOGP = "ref_token_logp"
TOKEN_ENTROPY = "token_entropy"
PROMPT_MASK = "prompt_mask"
RESPONSE_MASK = "response_mask"
MODULE_ID = "default_policy"


def token_spaces(vocab_size: int, max_prompt_tokens: int, max_new_tokens: int) -> tuple[spaces.Box, spaces.Box]:
    """(observation space, action space): fixed-shape token-id Boxes for prompts and replies."""
    high = int(vocab_size) - 1
    return (spaces.Box(0, high, shape=(int(max_prompt_tokens),), dtype=np.int64),
            spaces.Box(0, high, shape=(int(max_new_tokens),), dtype=np.int64))


class CausalLMRLModule(TorchRLModule):
    """A transformers causal LM as an RLModule; its forward gives per-token log-probs of the reply.

    ``model_config``: ``model_path`` (a ``save_pretrained`` directory), optional ``pad_token_id`` and
    ``dtype`` (a torch dtype name, default ``float32``; log-probs are always computed in float32).
    """

    def setup(self) -> None:
        from transformers import AutoModelForCausalLM

        cfg = self.model_config or {}
        if "model_path" not in cfg:
            raise ValueError("CausalLMRLModule needs model_config['model_path'] (a save_pretrained directory)")
        dtype = getattr(torch, str(cfg.get("dtype", "float32")))
        self.model = AutoModelForCausalLM.from_pretrained(cfg["model_path"], dtype=dtype)
        pad = cfg.get("pad_token_id", self.model.config.pad_token_id)
        self.pad_token_id = int(pad if pad is not None else 0)

    def reply_logp(self, prompt_ids, prompt_mask, reply_ids, reply_mask, *, with_entropy: bool = False):
        """``log pi(y_l | prompt, y_<l)`` for every reply position ``[B, R]`` (and the entropies)."""
        ids = torch.cat([prompt_ids, reply_ids], dim=1).long()
        attention = torch.cat([prompt_mask, reply_mask], dim=1).long()
        positions = torch.clamp(attention.cumsum(dim=1) - 1, min=0)
        # Only the positions that predict reply tokens get logits (a full-vocabulary logit tensor over the
        # prompt would dominate memory for 150k-token vocabularies).
        reply_len = reply_ids.shape[1]
        logits = self.model(input_ids=ids, attention_mask=attention, position_ids=positions,
                            logits_to_keep=reply_len + 1).logits
        reply_logits = logits[:, :reply_len].float()
        log_probs = torch.log_softmax(reply_logits, dim=-1)
        logp = log_probs.gather(-1, reply_ids.long().unsqueeze(-1)).squeeze(-1)
        if not with_entropy:
            return logp, None
        return logp, -(log_probs.exp() * log_probs).sum(-1)

    def _forward(self, batch, **kwargs):
        logp, entropy = self.reply_logp(batch[Columns.OBS], batch[PROMPT_MASK], batch[Columns.ACTIONS],
                                        batch[RESPONSE_MASK], with_entropy=True)
        return {TOKEN_LOGP: logp, TOKEN_ENTROPY: entropy}


class TokenLevelECPOLearner(TorchLearner):
    """Token-level clipped objective (``loss.ecpo_objective_loss``) on credit.py's step advantages."""

    def build(self) -> None:
        super().build()
        install_ecpo_connector(self)

    def compute_loss_for_module(self, *, module_id, config, batch, fwd_out):
        from ecpo_train.loss import assign_step_advantage, ecpo_objective_loss

        mask = batch[RESPONSE_MASK].float()
        advantages = assign_step_advantage(batch[Postprocessing.ADVANTAGES], mask)
        ref_logp = batch.get(REF_TOKEN_LOGP) if config.use_kl_loss else None
        loss, stats = ecpo_objective_loss(
            fwd_out[TOKEN_LOGP], batch[TOKEN_LOGP].float(), ref_logp, advantages, mask,
            clip_eps=config.clip_param, kl_coef=config.kl_coeff,
            entropy=fwd_out[TOKEN_ENTROPY], entropy_coef=float(config.entropy_coeff),
        )
        self.metrics.log_dict({k: float(v) for k, v in stats.items()}, key=module_id, window=1)
        return loss

    @classmethod
    def rl_module_required_apis(cls) -> list[type]:
        return []


@dataclass
class _Trajectory:
    """One copy's rollout while it is being played."""

    prompts: list[np.ndarray] = field(default_factory=list)
    prompt_masks: list[np.ndarray] = field(default_factory=list)
    replies: list[np.ndarray] = field(default_factory=list)
    reply_masks: list[np.ndarray] = field(default_factory=list)
    logps: list[np.ndarray] = field(default_factory=list)
    ref_logps: list[np.ndarray] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    infos: list[dict] = field(default_factory=list)
    history: list[tuple[str, str]] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False


class LLMGroupRunner:
    """Plays ``num_groups`` groups of ``group_size`` copies with a causal LM; returns ``SingleAgentEpisode``s.

    Usable in-process or as a Ray actor (``ray.remote(LLMGroupRunner).remote(...)``). Generation uses
    transformers ``generate`` with sampling, or vLLM with ``backend="vllm"`` (GPU; ``VLLMBackend`` from
    ``ecpo_train.policies.vllm_backend``, untested here: no GPU or vLLM on the development machine). ``reference_model_path`` (optional) adds the frozen
    reference's token log-probs for the KL term. Weights come in through ``set_weights`` (the learner
    group's ``get_weights()[module_id]``).
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
        reference_model_path: str | Path | None = None,
        runner_id: int = 0,
        seed: int = 0,
        backend: str = "transformers",
        vllm_kwargs: dict[str, Any] | None = None,
        device: str | None = None,
        dtype: str = "float32",
    ) -> None:
        from transformers import AutoTokenizer

        if backend not in ("transformers", "vllm"):
            raise ValueError(f"backend must be 'transformers' or 'vllm', got {backend!r}")
        self.vllm = None
        if backend == "vllm":
            from ecpo_train.policies.vllm_backend import VLLMBackend

            self.vllm = VLLMBackend(str(model_path), max_response_length=int(max_new_tokens), seed=int(seed),
                                    **(vllm_kwargs or {}))

        from ecpo_gym.group import GroupVectorEnv

        self.env_id = env_id
        self.env_name = env_name or env_id
        self.group_size = int(group_size)
        self.num_groups = int(num_groups)
        self.max_prompt_tokens = int(max_prompt_tokens)
        self.max_new_tokens = int(max_new_tokens)
        self.temperature = float(temperature)
        self.runner_id = int(runner_id)
        self.seed = int(seed)
        self._calls = itertools.count()
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_path))
        self.tokenizer.padding_side = "left"
        self.tokenizer.truncation_side = "left"
        self.dtype = str(dtype)
        self.module = CausalLMRLModule(observation_space=None, action_space=None, inference_only=True,
                                       model_config={"model_path": str(model_path), "dtype": self.dtype})
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.module.to(self.device).eval()
        self.reference = None
        if reference_model_path is not None:
            self.reference = CausalLMRLModule(observation_space=None, action_space=None, inference_only=True,
                                              model_config={"model_path": str(reference_model_path),
                                                            "dtype": self.dtype})
            self.reference.to(self.device).eval()
        self.eos_token_id = self.module.model.generation_config.eos_token_id
        self.pad_token_id = self.module.pad_token_id
        self.envs = GroupVectorEnv(env_id, self.num_groups, self.group_size, env_kwargs=env_kwargs)
        self.observation_space, self.action_space = token_spaces(
            len(self.tokenizer), self.max_prompt_tokens, self.max_new_tokens)
        self._generator = torch.Generator().manual_seed(self.seed)

    def describe(self) -> dict[str, Any]:
        """What a learner group needs to build the matching module."""
        return {"model_path": self.module.model_config["model_path"], "dtype": self.dtype,
                "vocab_size": len(self.tokenizer),
                "max_prompt_tokens": self.max_prompt_tokens, "max_new_tokens": self.max_new_tokens}

    # ------------------------------------------------------------------ weights
    def set_weights(self, weights: dict[str, Any]) -> None:
        self.module.set_state(weights)
        if self.vllm is not None:
            # the module holds the HF model as `model`: strip that prefix to get Hugging Face names
            self.vllm.sync_weights({name.removeprefix("model."): value
                                    for name, value in self.module.state_dict().items()})

    def get_weights(self) -> dict[str, Any]:
        return self.module.get_state()

    # ------------------------------------------------------------------ sampling
    def sample(self, task_ids: list[str] | None = None) -> list[SingleAgentEpisode]:
        """Play one batch of groups to the end; one ``SingleAgentEpisode`` per trajectory, groups contiguous."""
        from ecpo_train.policies.parsing import parse_action
        from ecpo_train.prompting import render_prompt, to_chat

        call = next(self._calls)
        results = self.envs.reset(task_ids=task_ids, seed=self.seed + 7919 * call)
        trajectories = [_Trajectory() for _ in results]
        observations = [obs for obs, _ in results]
        for traj, (_, info) in zip(trajectories, results):
            traj.infos.append(self._tag(info, call))
        done = [False] * len(trajectories)
        while not all(done):
            active = [i for i, d in enumerate(done) if not d]
            prompts = []
            for i in active:
                info = trajectories[i].infos[-1]
                prompt = render_prompt(self.env_name, task=info.get("task", ""), step_count=int(info.get("step", 0)),
                                       history=trajectories[i].history, observation=observations[i],
                                       admissible_actions=info.get("admissible_actions", []))
                prompts.append(to_chat(self.tokenizer, prompt))
            generated = self._generate(prompts)
            actions: list[str | None] = [None] * len(trajectories)
            for j, i in enumerate(active):
                parsed = parse_action(generated["texts"][j], self.env_name)
                actions[i] = parsed if parsed is not None else ""  # malformed reply -> invalid action
                traj = trajectories[i]
                for store, key in ((traj.prompts, "prompt_ids"), (traj.prompt_masks, "prompt_mask"),
                                   (traj.replies, "reply_ids"), (traj.reply_masks, "reply_mask"),
                                   (traj.logps, "logp"), (traj.ref_logps, "ref_logp")):
                    if generated[key] is not None:
                        store.append(generated[key][j])
            steps = self.envs.step(actions)
            for j, i in enumerate(active):
                step = steps[i]
                traj = trajectories[i]
                traj.history.append((observations[i], actions[i] or generated["texts"][j]))
                traj.rewards.append(float(step.reward))
                traj.infos.append(self._tag(step.info, call))
                observations[i] = step.observation
                if step.terminated or step.truncated:
                    traj.terminated, traj.truncated = bool(step.terminated), bool(step.truncated)
                    done[i] = True
        return [self._episode(traj) for traj in trajectories]

    def _tag(self, info: dict, call: int) -> dict:
        info = dict(info)
        info["group_key"] = f"r{self.runner_id}c{call}g{info.get('group_id', 0)}"
        return info

    @torch.no_grad()
    def _generate(self, chats: list[str]) -> dict[str, Any]:
        """Sample one reply per chat; token ids, masks and the sampling weights' per-token log-probs."""
        enc = self.tokenizer(chats, return_tensors="pt", padding="max_length", truncation=True,
                             max_length=self.max_prompt_tokens)
        prompt_ids, prompt_mask = enc["input_ids"].to(self.device), enc["attention_mask"].to(self.device)
        if self.vllm is not None:
            prompts = [ids[mask.bool()].tolist() for ids, mask in zip(prompt_ids, prompt_mask)]
            replies, _ = self.vllm.sample(prompts, self.temperature)
            reply_ids = torch.full((len(chats), self.max_new_tokens), self.pad_token_id, dtype=torch.long,
                                   device=self.device)
            reply_mask = torch.zeros((len(chats), self.max_new_tokens), device=self.device)
            for row, reply in enumerate(replies):
                reply = reply[: self.max_new_tokens]
                reply_ids[row, : len(reply)] = torch.as_tensor(reply, dtype=torch.long)
                reply_mask[row, : len(reply)] = 1.0
        else:
            out = self.module.model.generate(
                input_ids=prompt_ids, attention_mask=prompt_mask, do_sample=True, temperature=self.temperature,
                top_k=0, top_p=1.0, max_new_tokens=self.max_new_tokens, pad_token_id=self.pad_token_id,
                eos_token_id=self.eos_token_id,
            )
            reply = out[:, prompt_ids.shape[1]:]
            reply_ids = torch.full((len(chats), self.max_new_tokens), self.pad_token_id, dtype=torch.long,
                                   device=self.device)
            reply_ids[:, : reply.shape[1]] = reply
            reply_mask = _reply_mask(reply_ids, self.eos_token_id, reply.shape[1])
            reply_ids = torch.where(reply_mask.bool(), reply_ids, torch.full_like(reply_ids, self.pad_token_id))
        # Old log-probs come from the transformers module, the same computation the learner repeats, so
        # the first ratio is exactly 1 whichever engine sampled.
        logp, _ = self.module.reply_logp(prompt_ids, prompt_mask, reply_ids, reply_mask)
        ref_logp = None
        if self.reference is not None:
            ref_logp, _ = self.reference.reply_logp(prompt_ids, prompt_mask, reply_ids, reply_mask)
            ref_logp = ref_logp.cpu().numpy().astype(np.float32)
        reply_ids, reply_mask, prompt_ids, prompt_mask = (t.cpu() for t in (reply_ids, reply_mask, prompt_ids,
                                                                            prompt_mask))
        texts = [self.tokenizer.decode(ids[mask.bool()], skip_special_tokens=True)
                 for ids, mask in zip(reply_ids, reply_mask)]
        return {"prompt_ids": prompt_ids.numpy().astype(np.int64),
                "prompt_mask": prompt_mask.numpy().astype(np.float32),
                "reply_ids": reply_ids.numpy().astype(np.int64), "reply_mask": reply_mask.numpy().astype(np.float32),
                "logp": (logp.cpu() * reply_mask).numpy().astype(np.float32), "ref_logp": ref_logp, "texts": texts}

    def _episode(self, traj: _Trajectory) -> SingleAgentEpisode:
        final_obs = np.full(self.max_prompt_tokens, self.pad_token_id, dtype=np.int64)
        extra = {PROMPT_MASK: traj.prompt_masks, RESPONSE_MASK: traj.reply_masks, TOKEN_LOGP: traj.logps}
        if traj.ref_logps:
            extra[REF_TOKEN_LOGP] = traj.ref_logps
        return SingleAgentEpisode(
            observations=[*traj.prompts, final_obs], actions=list(traj.replies), rewards=list(traj.rewards),
            infos=list(traj.infos), terminated=traj.terminated, truncated=traj.truncated,
            extra_model_outputs=extra, len_lookback_buffer=0,
        )

    def close(self) -> None:
        self.envs.close()


def _reply_mask(reply_ids: torch.Tensor, eos_token_id: Any, generated_len: int) -> torch.Tensor:
    """1 for generated tokens up to and including the first EOS, 0 after it and in the padding."""
    eos_ids = eos_token_id if isinstance(eos_token_id, (list, tuple)) else [eos_token_id]
    is_eos = torch.zeros_like(reply_ids, dtype=torch.bool)
    for eos in eos_ids:
        if eos is not None:
            is_eos |= reply_ids == int(eos)
    positions = torch.arange(reply_ids.shape[1], device=reply_ids.device)
    no_eos = torch.full((reply_ids.shape[0],), generated_len, device=reply_ids.device)
    first_eos = torch.where(is_eos.any(1), is_eos.float().argmax(1), no_eos)
    end = torch.clamp(first_eos + 1, max=generated_len)
    return (positions.unsqueeze(0) < end.unsqueeze(1)).float()


def build_llm_learner_group(config, model_path: str | Path, vocab_size: int, max_prompt_tokens: int,
                            max_new_tokens: int, dtype: str = "float32"):
    """A learner group of ``TokenLevelECPOLearner``s over ``CausalLMRLModule`` (``config``: an ``ECPOConfig``)."""
    obs_space, act_space = token_spaces(vocab_size, max_prompt_tokens, max_new_tokens)
    spec = RLModuleSpec(module_class=CausalLMRLModule, observation_space=obs_space, action_space=act_space,
                        model_config={"model_path": str(model_path), "dtype": dtype})
    config = config.copy(copy_frozen=False).training(learner_class=TokenLevelECPOLearner).rl_module(
        rl_module_spec=spec)
    return config.build_learner_group(rl_module_spec=spec)


class LLMTrainer:
    """ECPO on an LLM through RLlib's learner group: sample groups -> update -> weight sync.

    ``runners``: one or more ``LLMGroupRunner``s, in-process or Ray actors
    (``ray.remote(LLMGroupRunner).remote(..., runner_id=k)``; give each a distinct ``runner_id``). Actors
    sample in parallel; their weights arrive as one object-store copy per update.
    """

    def __init__(self, config, runners: Any) -> None:
        self.config = config
        self.runners = list(runners) if isinstance(runners, (list, tuple)) else [runners]
        shape = self._call_all("describe")[0]
        self.learner_group = build_llm_learner_group(config, **shape)
        self.sync_weights()

    def _call_all(self, method: str, *args: Any) -> list[Any]:
        """``runner.method(*args)`` on every runner; actors first, so they work while local runners do."""
        import ray

        actor_refs = {i: getattr(r, method).remote(*args) for i, r in enumerate(self.runners) if _is_actor(r)}
        local = {i: getattr(r, method)(*args) for i, r in enumerate(self.runners) if not _is_actor(r)}
        fetched = dict(zip(actor_refs, ray.get(list(actor_refs.values())))) if actor_refs else {}
        return [fetched[i] if i in fetched else local[i] for i in range(len(self.runners))]

    def sync_weights(self) -> None:
        """Copy the learner's weights into every runner (the sampling policy)."""
        import ray

        weights = self.learner_group.get_weights()[MODULE_ID]
        if any(_is_actor(r) for r in self.runners):
            ref = ray.put(weights)
            ray.get([r.set_weights.remote(ref) for r in self.runners if _is_actor(r)])
        for runner in self.runners:
            if not _is_actor(runner):
                runner.set_weights(weights)

    def train_iteration(self, task_ids: list[str] | None = None) -> dict[str, Any]:
        from ecpo_train.rllib.algorithm import split_groups, update_on_groups

        episodes = [e for sampled in self._call_all("sample", task_ids) for e in sampled]
        groups = split_groups(episodes, int(self.config.group_size))
        results = update_on_groups(self.learner_group, groups, self.config)
        self.sync_weights()
        reduced = {key: value for key, value in results[0].items() if key != ALL_MODULES}
        return {"episodes": episodes, "learner": reduced}


def _is_actor(obj: Any) -> bool:
    try:
        from ray.actor import ActorHandle
    except ImportError:
        return False
    return isinstance(obj, ActorHandle)
