"""One run, two spellings: an LLM ``ECPOConfig`` and the native trainer's ``TrainConfig`` describe the same run.

The RLlib spelling of an LLM run (``docs/rllib.md``):

- ``environment("ecpo/...", env_config={"env_kwargs": {...}})``: the text env and its kwargs;
- ``rl_module(model_config={"model": DIR, "policy_mode": "score" | "generate", ...})``: the policy, with the
  native keys of :data:`MODEL_KEYS` (``model`` is what makes the config an LLM run; ``"policy": "text"`` with
  ``model`` a text-policy folder trains the small text policy instead);
- ``training(group_size=N, groups_per_batch=G, estimator=..., credit={...}, anchor_key=..., lr=...,
  use_kl_loss=..., kl_coeff=..., clip_param=..., entropy_coeff=..., minibatch_size=..., num_epochs=...,
  grad_clip=...)``: the group rollout, credit and update, in RLlib's names where RLlib has one;
- ``training(run_settings={...})``: native keys RLlib has no name for (validation, micro-batching, the
  rollout temperature, ``run_dir``), by their ``TrainConfig`` names.

:func:`native_values` reads an ECPOConfig as the ``TrainConfig`` values the env runners and the learner build
their policy from (``runtime.builders.build_policy``: the native trainer's policy classes, scoring included),
and :func:`apply_train_config` is the inverse, so ``ECPOConfig.from_train_config(load_config("corridor_llm"))``
is the native preset run through RLlib. The ``ECPOConfig`` builds and holds the one ``TrainConfig`` it stands
for (``ECPOConfig.to_train_config``): the actors read that object, none translates again.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ecpo_gym.kwargs import shown
from ecpo_train.runtime.config import TrainConfig, config_dict
from ecpo_train.runtime.policy_kinds import kinds_with, policy_spec

# Native TrainConfig keys that live in rl_module(model_config=...): what the policy is and how it prompts.
MODEL_KEYS = ("model", "policy", "policy_mode", "dtype", "lora", "prompt_style", "history_length", "max_prompt_length",
              "max_response_length", "gradient_checkpointing", "mixed_precision", "generation_backend",
              "vllm_kwargs", "device")
# Native key -> the ECPOConfig attribute RLlib's own methods set (training(), debugging(seed=...)).
RLLIB_NAMES = {"group_size": "group_size", "n_groups": "groups_per_batch", "estimator": "estimator",
               "anchor_key": "anchor_key", "lr": "lr", "clip_eps": "clip_param", "entropy_coef": "entropy_coeff",
               "num_epochs": "num_epochs", "seed": "seed"}
# Native keys spelled neither way: they ride in training(run_settings=...).
RUN_SETTING_KEYS = tuple(
    f.name for f in dataclasses.fields(TrainConfig)
    if f.name not in (*MODEL_KEYS, *RLLIB_NAMES, "env_id", "env_kwargs", "credit", "kl_coef", "mini_batch_size",
                      "max_grad_norm", "policy", "fsdp"))
WHOLE_BATCH = 2**31 - 1  # minibatch_size=None: one mini-batch holds every row
NO_CLIP = 1e30  # grad_clip=None: no gradient-norm clipping (the norm is still measured)


def has_model(config: Any) -> bool:
    """Whether ``rl_module(model_config=...)`` names a ``model`` (what makes an ``ECPOConfig`` an LLM run)."""
    model_config = getattr(config, "_model_config", None)
    return isinstance(model_config, dict) and bool(model_config.get("model"))


def native_values(config: Any) -> dict[str, Any]:
    """The run an LLM ``ECPOConfig`` stands for as ``TrainConfig`` keys and values, not yet checked
    (``ECPOConfig.to_train_config`` builds the ``TrainConfig`` from them)."""
    model_config = dict(config._model_config)
    unknown = sorted(set(model_config) - set(MODEL_KEYS))
    if unknown:
        raise ValueError(f"unknown rl_module model_config key(s) {shown(unknown)}; valid: {', '.join(MODEL_KEYS)}")
    values: dict[str, Any] = {"policy": "llm", "env_id": config.text_env_id,
                              "env_kwargs": dict((config.env_config or {}).get("env_kwargs") or {})}
    values |= dict(getattr(config, "run_settings", {}) or {})
    values |= {name: model_config[name] for name in MODEL_KEYS if name in model_config}
    if "lora" not in model_config and config.lora:
        values["lora"] = dict(config.lora)
    for native, rllib in RLLIB_NAMES.items():
        value = getattr(config, rllib)
        if value is not None:
            values[native] = value
    values["credit"] = dataclasses.asdict(config.credit)
    values["kl_coef"] = float(config.kl_coeff) if config.use_kl_loss else 0.0
    values["mini_batch_size"] = int(config.minibatch_size) if config.minibatch_size else WHOLE_BATCH
    values["max_grad_norm"] = float(config.grad_clip) if config.grad_clip else NO_CLIP
    return values


def apply_train_config(config: Any, train: TrainConfig) -> Any:
    """Set an ``ECPOConfig`` to the run ``train`` describes (the inverse of :func:`native_values`)."""
    if not policy_spec(train.policy).rllib:  # (the kind declares whether the RLlib engine trains it)
        raise ValueError(f"the RLlib engine trains an LLM or text policy ({kinds_with(rllib=True)}); this config has "
                         f"policy={shown(train.policy)}, which trains natively")
    if not train.model:  # what makes an ECPOConfig an LLM run (has_model); a text run starts from its warm start
        raise ValueError(f"the RLlib engine trains policy={train.policy} from a model folder: give model=DIR (for "
                         "policy=text, the folder `ecpo sft` wrote)")
    if train.fsdp:
        raise ValueError("fsdp=true is the native trainer's sharding; through RLlib use learners(num_learners=K)")
    values = config_dict(train)
    config.environment(train.env_id, env_config={"env_kwargs": dict(train.env_kwargs)})
    config.rl_module(model_config={name: values[name] for name in MODEL_KEYS})
    config.training(
        group_size=train.group_size, groups_per_batch=train.n_groups, estimator=train.estimator,
        credit=dataclasses.asdict(train.credit), anchor_key=train.anchor_key, lr=train.lr, clip_param=train.clip_eps,
        entropy_coeff=train.entropy_coef, num_epochs=train.num_epochs, use_kl_loss=train.kl_coef > 0,
        kl_coeff=train.kl_coef, minibatch_size=None if train.mini_batch_size >= WHOLE_BATCH else train.mini_batch_size,
        grad_clip=None if train.max_grad_norm >= NO_CLIP else train.max_grad_norm,
        run_settings={name: values[name] for name in RUN_SETTING_KEYS},
    )
    config.debugging(seed=train.seed)
    return config
