"""The built-in policy kinds, declared in the policy registry (``policies/registry.py``): ``llm`` (a transformers
causal LM that writes its action, or with ``policy_mode=score`` scores the admissible ones), ``text`` (the small
text policy, ``policies/text.py``) and ``tabular`` (``policies/tabular.py``).

The run config imports this module, so every run, the RLlib engine and the leaderboard see the three; the library
looks kinds up through the names re-exported here (``policy_spec``, ``available_policies``, ``kinds_with``), which
then always include them. Each function imports its policy class when called; none imports the run config (they
take it as an argument), so the config can import them.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from ecpo_train.policies.registry import (  # noqa: F401  (the registry's API, with the built-in kinds in it)
    Imitation,
    PolicySpec,
    available_policies,
    kinds_with,
    policy_spec,
    register_policy,
)
from ecpo_train.policies.text import CONFIG_FILE as TEXT_FOLDER_FILE
from ecpo_train.runtime.models import check_model_folder, model_folder

TEXT_MAX_TOKENS = 1 << 30  # the text policy's sft forward: no bound (a batch of its rows holds a few MB)

# The settings each built-in kind reads beyond those every kind reads (the run, the environment, the credit and the
# update); a new setting of one kind is one more name in its tuple
LLM_SETTINGS = ("model", "policy_mode", "dtype", "prompt_style", "max_prompt_length", "max_response_length",
                "generation_backend", "vllm_kwargs", "decoding", "lora", "gradient_checkpointing", "mixed_precision",
                "explore_epsilon")
TEXT_SETTINGS = ("model", "command_set")


# ------------------------------------------------------------------------------------------------------------ llm
def build_llm(config: Any, *, device: str | None = None, transformers_weights: bool = True,
              generation_backend: str | None = None) -> Any:
    """A ``TransformersPolicy`` (``policy_mode=generate``) or ``ScoringPolicy`` (``score``) of ``config.model``,
    with the run's memory settings (``runtime.builders.build_policy`` says what the keywords place)."""
    import torch

    from ecpo_train.policies.llm import TransformersPolicy
    from ecpo_train.policies.scaling import apply_memory_settings
    from ecpo_train.policies.scoring import ScoringPolicy

    check_model_folder(config.model)  # (its checksums: a damaged folder is one line, not a model of noise)
    policy_class = ScoringPolicy if config.policy_mode == "score" else TransformersPolicy
    policy = policy_class(
        model_folder(config.model), env_name=config.env_id, max_prompt_length=config.max_prompt_length,
        max_response_length=config.max_response_length, device=device or config.resolved_device(), dtype=config.dtype,
        history_length=config.history_length, generation_backend=generation_backend or config.generation_backend,
        vllm_kwargs=config.vllm_kwargs, seed=config.seed, prompt_style=config.prompt_style, lora=config.lora or None,
        transformers_weights=transformers_weights, decoding="eager" if config.fsdp else config.decoding,
    )
    if policy.model is not None:
        apply_memory_settings(policy.model, gradient_checkpointing=config.gradient_checkpointing,
                              mixed_precision="none" if config.fsdp else config.mixed_precision)
        # autocast casts every weight at every decoding step: static/graphed CUDA sampling uses a bf16 copy instead
        policy.set_sampling_dtype(torch.bfloat16 if config.mixed_precision == "bf16" else None)
    if config.policy_mode == "score":
        policy.explore_epsilon = config.explore_epsilon
    return policy


def llm_critic(config: Any, policy: Any) -> Any:
    """The value head of PPO: a copy of the model's backbone with a scalar head (``policies/critic.py``)."""
    import torch

    from ecpo_train.policies.critic import LLMValueCritic

    critic = LLMValueCritic(config.model, pad_token_id=policy.pad_token_id, dtype=getattr(torch, config.dtype),
                            device=config.resolved_device())
    if config.gradient_checkpointing:
        from ecpo_train.policies.scaling import enable_gradient_checkpointing

        enable_gradient_checkpointing(critic.backbone)
    return critic


def save_causal_lm(policy: Any, folder: Path) -> None:
    """The model and its tokenizer, as ``model=DIR`` loads them."""
    policy.model.save_pretrained(folder)
    policy.tokenizer.save_pretrained(folder)


def llm_imitation(config: Any, checkpointing: bool) -> Imitation:
    """``ecpo sft`` of an LLM: full fine-tuning (no LoRA, one process) of the free-generation policy's reply tokens,
    or with ``policy_mode=score`` of the scoring policy's choice among the admissible actions, its exploration
    mixture left out (``runtime/sft.py``). The policy is built now, before the expert plays."""
    from ecpo_train.policies.imitation import candidate_rows, reply_rows

    memory = {"lora": {}, "fsdp": False, "gradient_checkpointing": checkpointing}
    if config.policy_mode == "score":
        scorer = build_llm(dataclasses.replace(config, explore_epsilon=0.0, **memory))
        return Imitation("expert candidate cross-entropy, nats per step (policy_mode=score)",
                         lambda demonstrations: (scorer, *candidate_rows(scorer, demonstrations)), save_causal_lm)
    writer = build_llm(dataclasses.replace(config, policy_mode="generate", generation_backend="transformers",
                                           **memory))
    return Imitation("reply-token cross-entropy, nats per token",
                     lambda demonstrations: (writer, *reply_rows(writer, demonstrations), 0), save_causal_lm)


# ----------------------------------------------------------------------------------------------------------- text
def text_policy(model: str = "", *, seed: int = 0, env_name: str = "", command_set: str | None = None,
                vocabulary: Any = None) -> Any:
    """The one constructor of the text policy: the folder ``model`` (``ecpo sft policy=text`` wrote it; its command
    set unless ``command_set`` is given), or fresh weights of ``seed`` over ``vocabulary`` (default: hashed words
    only)."""
    from ecpo_train.policies.text import TextPolicy

    if model:
        return TextPolicy.from_pretrained(model, seed=seed, env_name=env_name, command_set=command_set)
    return TextPolicy(vocabulary, seed=seed, env_name=env_name, command_set=command_set or "admissible")


def build_text(config: Any, **_placement: Any) -> Any:
    """The run's text policy: ``config.model``'s folder, or random weights of ``config.seed``."""
    return text_policy(config.model, seed=config.seed, env_name=config.env_id, command_set=config.command_set)


def load_text(folder: str) -> Any:
    """A text-policy folder as it was saved (its own command set)."""
    return text_policy(str(folder))


def check_text(config: Any) -> None:
    """Refused in one line: free-text actions (search-QA lists no admissible ones), an open command set the env
    family does not declare."""
    from ecpo_gym import family_of
    from ecpo_train.policies.text import candidate_rule

    if getattr(family_of(config.env_id), "family", None) == "searchqa":
        raise ValueError(f"policy={config.policy} picks among admissible actions, but {config.env_id} lists none "
                         f"(search-QA's actions are free text): use {kinds_with(chooses=False)}")
    candidate_rule(config.command_set, config.env_id)


def check_text_folder(folder: str) -> Any:
    from ecpo_train.policies.text import check_text_policy_folder

    return check_text_policy_folder(folder)


def demonstration_texts(demonstrations: Any) -> Any:
    """Every goal, observation and admissible command the expert saw: the words a fresh text policy knows."""
    for demo in demonstrations:
        yield demo.context.task
        yield demo.context.observation
        yield from demo.context.admissible_actions


def text_policy_for(config: Any, demonstrations: Any) -> Any:
    """The text policy an sft run starts from: ``config.model``'s folder when given, else random weights
    (``config.seed``) over a vocabulary built from the demonstrations' goals, observations and commands."""
    from ecpo_train.policies.text_vocabulary import Vocabulary

    vocabulary = None if config.model else Vocabulary.build(demonstration_texts(demonstrations))
    return text_policy(config.model, seed=config.seed, env_name=config.env_id, command_set=config.command_set,
                       vocabulary=vocabulary)


def text_imitation(config: Any, checkpointing: bool) -> Imitation:
    """``ecpo sft`` of the text policy (:func:`text_policy_for`), trained on the expert's command among its
    candidates (``policies/imitation.text_rows``)."""
    from ecpo_train.policies.imitation import text_rows

    def rows(demonstrations: Any) -> tuple[Any, list, list, int]:
        policy = text_policy_for(config, demonstrations)
        return (policy, *text_rows(policy, demonstrations))

    return Imitation(f"expert command cross-entropy, nats per step (policy={config.policy})", rows,
                     lambda policy, folder: policy.save_pretrained(folder), max_tokens=TEXT_MAX_TOKENS)


# -------------------------------------------------------------------------------------------------------- tabular
def build_tabular(config: Any, **_placement: Any) -> Any:
    from ecpo_train.policies.tabular import TabularSoftmaxPolicy

    return TabularSoftmaxPolicy(seed=config.seed)


def tabular_critic(config: Any, policy: Any) -> Any:
    from ecpo_train.policies.critic import TabularCritic

    return TabularCritic()


register_policy("llm", PolicySpec(
    build_llm, settings=LLM_SETTINGS, model="causal-lm", chooses=False, imitation=llm_imitation, critic=llm_critic,
    lora=True, fsdp=True, vllm=True, rllib=True))
register_policy("tabular", PolicySpec(build_tabular, critic=tabular_critic, saves_reference=True))
register_policy("text", PolicySpec(
    build_text, settings=TEXT_SETTINGS, model="own", check_folder=check_text_folder, load=load_text,
    folder_file=TEXT_FOLDER_FILE, imitation=text_imitation, check=check_text, rllib=True))
