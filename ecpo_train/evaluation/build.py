"""Build an agent from command-line style options (shared by ``ecpo leaderboard`` and ``benchmarks/leaderboard.py``)."""

from __future__ import annotations

from typing import Any

from ecpo_train.evaluation.agents import (
    VALIDATION_TEMPERATURE,
    Agent,
    ExpertAgent,
    PolicyAgent,
    PromptingAgent,
    RandomAgent,
    load_checkpoint_policy,
)
from ecpo_train.evaluation.chat import ChatModel, OpenAIChatModel, TransformersChatModel
from ecpo_train.evaluation.react import ReActAgent, ReflexionAgent

AGENT_KINDS = ("checkpoint", "prompting", "react", "reflexion", "expert", "random")
BACKENDS = ("transformers", "openai")


def build_chat_model(backend: str, model: str | None, *, base_url: str | None = None, device: str = "cpu",
                     dtype: str = "float32", max_new_tokens: int = 512) -> ChatModel:
    if backend == "transformers":
        if not model:
            raise ValueError("--model <local folder or hub id> is required with --backend transformers")
        return TransformersChatModel(model, device=device, dtype=dtype, max_new_tokens=max_new_tokens)
    if backend == "openai":
        return OpenAIChatModel(model, base_url=base_url, max_new_tokens=max_new_tokens)
    raise ValueError(f"backend={backend!r}; choose from {', '.join(BACKENDS)}")


def build_agent(kind: str, *, model: str | None = None, checkpoint: str | None = None, backend: str = "transformers",
                base_url: str | None = None, temperature: float = VALIDATION_TEMPERATURE, trials: int = 3,
                device: str = "cpu", dtype: str = "float32", max_new_tokens: int = 512,
                name: str | None = None) -> Agent:
    """An agent of ``kind`` (one of ``AGENT_KINDS``); ``name`` labels its results (default: kind and model)."""
    if kind not in AGENT_KINDS:
        raise ValueError(f"agent={kind!r}; choose from {', '.join(AGENT_KINDS)}")
    agent: Agent
    if kind == "expert":
        agent = ExpertAgent()
    elif kind == "random":
        agent = RandomAgent()
    elif kind == "checkpoint":
        if not checkpoint:
            raise ValueError("--checkpoint <run folder or checkpoint.pt> is required with --agent checkpoint")
        policy, config = load_checkpoint_policy(checkpoint, device=device)
        label = f"checkpoint:{config.get('algorithm', '')}:{checkpoint}"
        agent = PolicyAgent(policy, temperature=temperature, name=label)
    else:
        chat = build_chat_model(backend, model, base_url=base_url, device=device, dtype=dtype,
                                max_new_tokens=max_new_tokens)
        if kind == "prompting":
            agent = PromptingAgent(chat, temperature=temperature)
        elif kind == "react":
            agent = ReActAgent(chat, temperature=temperature)
        else:
            agent = ReflexionAgent(chat, temperature=temperature, trials=trials)
    if name:
        agent.name = name
    return agent


def parse_overrides(pairs: list[str] | None) -> dict[str, Any]:
    """``key=value`` strings to a dict; values are parsed as JSON when they can be (``5``, ``true``, ``[1,2]``)."""
    import json

    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"expected key=value, got {pair!r}")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out
