"""Build an agent from ``LeaderboardOptions`` (``ecpo leaderboard``, ``ecpo eval``)."""

from __future__ import annotations

from typing import Any

from ecpo_gym.kwargs import shown
from ecpo_train.evaluation.agents import (
    Agent,
    ExpertAgent,
    PolicyAgent,
    PromptingAgent,
    RandomAgent,
    load_checkpoint_policy,
)
from ecpo_train.evaluation.chat import ChatModel, OpenAIChatModel, TransformersChatModel
from ecpo_train.evaluation.options import BACKENDS, LeaderboardOptions
from ecpo_train.evaluation.react import ReActAgent, ReflexionAgent


def build_chat_model(options: LeaderboardOptions) -> ChatModel:
    if options.backend == "transformers":
        if not options.model:
            raise ValueError("--model <local folder or hub id> is required with --backend transformers")
        return TransformersChatModel(options.model, device=options.device, dtype=options.dtype,
                                     max_new_tokens=options.max_new_tokens)
    if options.backend == "openai":
        return OpenAIChatModel(options.model, base_url=options.base_url, max_new_tokens=options.max_new_tokens)
    raise ValueError(f"backend={shown(options.backend)}; choose from {', '.join(BACKENDS)}")


def build_agent_from(options: LeaderboardOptions) -> Agent:
    """The agent ``options`` describe; ``options.name`` labels its results (default: kind and model)."""
    options.check()
    temperature = options.sampling_temperature
    agent: Agent
    if options.agent == "expert":
        agent = ExpertAgent()
    elif options.agent == "random":
        agent = RandomAgent()
    elif options.agent == "checkpoint":
        if not options.checkpoint:
            raise ValueError("--checkpoint <run folder or checkpoint.pt> is required with --agent checkpoint")
        policy, config = load_checkpoint_policy(options.checkpoint, device=options.device)
        label = f"checkpoint:{config.get('estimator', '')}:{options.checkpoint}"
        agent = PolicyAgent(policy, temperature=temperature, name=label, weights=checkpoint_identity(options.checkpoint))
    else:
        chat = build_chat_model(options)
        if options.agent == "prompting":
            agent = PromptingAgent(chat, temperature=temperature)
        elif options.agent == "react":
            agent = ReActAgent(chat, temperature=temperature)
        else:
            agent = ReflexionAgent(chat, temperature=temperature, trials=options.trials)
    if options.name:
        agent.name = options.name
    return agent


def checkpoint_identity(checkpoint: str) -> dict[str, Any]:
    """The checkpoint file a result comes from: its path, size and modification time (a resumed run writes a new
    one, whose results are new results)."""
    from pathlib import Path

    from ecpo_train.evaluation.agents import text_policy_folder
    from ecpo_train.policies.text import WEIGHTS_FILE
    from ecpo_train.runtime.run_dir import checkpoint_file

    folder = text_policy_folder(checkpoint)
    path = folder / WEIGHTS_FILE if folder is not None else checkpoint_file(Path(checkpoint).expanduser())
    if not path.is_file():
        return {}
    stat = path.stat()
    return {"file": str(path.resolve()), "bytes": stat.st_size, "modified_ns": stat.st_mtime_ns}


def build_agent(kind: str, **options: Any) -> Agent:
    """``build_agent_from(LeaderboardOptions(agent=kind, **options))``: keyword arguments are option fields."""
    return build_agent_from(LeaderboardOptions(agent=kind, **options))


def parse_overrides(pairs: list[str] | None) -> dict[str, Any]:
    """``--env-kwarg`` ``key=value`` strings to a dict; values are parsed as JSON when they can be (``5``, ``true``,
    ``[1,2]``). A key given twice is refused (not the last one taken)."""
    import json

    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--env-kwarg {shown(pair)}: expected key=value")
        if key.strip() in out:  # (the first one was dropped: which one was meant?)
            raise ValueError(f"--env-kwarg {shown(key.strip())} is given twice: give it once")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out
