"""Agents a leaderboard evaluates: one interface over trained policies, prompted chat models and rule-based play.

The runner drives an agent through ``begin_task`` (once per task and seed: clear per-task memory),
``begin_episode`` (after each reset), ``act`` (one ``StepContext`` in, the action text out) and
``end_episode`` (the finished trial). ``max_trials > 1`` (Reflexion) makes the runner replay a failed task.
Episodes are played by ``ecpo_train.core.rollout.collect_rollout``, the loop training uses, through ``AgentPolicy``;
an agent that produces no action returns ``None`` (or ``""``) and the rollout sends ``INVALID_ACTION``.

- ``PolicyAgent``: a project ``Policy`` (a trained checkpoint via ``load_checkpoint_policy``, LLM or tabular);
- ``PromptingAgent``: the paper's prompt template as one user turn to any ``ChatModel`` ("Prompting" rows,
  local transformers models and OpenAI-compatible endpoints alike);
- ``ReActAgent`` / ``ReflexionAgent`` live in ``react.py``;
- ``ExpertAgent``: rule-based upper bound reading the environment (ALFWorld walkthrough / generator plan,
  the corridors' good doors, WebShop target product, search-QA gold evidence); ``RandomAgent``: uniform
  admissible actions.
"""

from __future__ import annotations

import abc
import hashlib
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ecpo_train.evaluation.chat import ChatModel
from ecpo_train.policies.base import Policy, PolicyOutput, StepContext
from ecpo_train.policies.choose import seed_sampling
from ecpo_train.policies.parsing import parse_action
from ecpo_train.policies.prompting import render_prompt, template_name
from ecpo_train.runtime import VALIDATION_TEMPERATURE


def episode_seed(seed: int, task_id: str, trial: int = 0) -> int:
    """A 31-bit seed from ``(seed, task_id, trial)``: an episode's randomness never depends on run order."""
    digest = hashlib.sha256(f"{seed}|{task_id}|{trial}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


@dataclass
class Trial:
    """A finished episode as the agent sees it: (observation, action, response) per step and the outcome."""

    task: str
    steps: list[tuple[str, str, str]]
    won: bool
    final_observation: str


class Agent(abc.ABC):
    """See the module docstring for the call order."""

    name: str = "agent"
    max_trials: int = 1
    temperature: float = 0.0  # sampling temperature of the agent's model (rule-based agents: 0)

    def describe(self) -> dict[str, Any]:
        """Settings that identify this agent's results (a resumed run must match them)."""
        return {"agent": type(self).__name__, "name": self.name}

    def begin_task(self, env: Any, task_id: str, seed: int) -> None:
        """Called once per (task, seed) before its first trial."""

    def begin_episode(self, env: Any, observation: str, info: dict[str, Any], seed: int) -> None:
        """Called after each reset with that episode's seed."""

    @abc.abstractmethod
    def act(self, ctx: StepContext) -> str | None:
        """The action text for the current step (``None`` when the agent produced none)."""

    def last_response(self) -> str:
        """The raw text behind the last action (the action itself for non-LLM agents)."""
        return ""

    def end_episode(self, trial: Trial) -> None:
        """Called after each trial (Reflexion reflects on failures here)."""


class AgentPolicy:
    """An ``Agent`` as the batched ``act`` that ``collect_rollout`` calls, on one environment copy.

    ``env`` is the environment the copy plays (the expert reads it); ``begin_episode`` is the rollout's
    ``on_reset`` hook. The agent samples at its own ``temperature``, so ``act``'s argument is not used.
    Agents have no token ids: those columns stay empty.
    """

    def __init__(self, agent: Agent, env: Any) -> None:
        self.agent = agent
        self.env = env

    def begin_episode(self, starts: list[tuple[str, dict[str, Any]]], *, seed: int) -> None:
        ((observation, info),) = starts
        self.agent.begin_episode(self.env, observation, info, seed)

    def act(self, contexts: Sequence[StepContext], temperature: float = 1.0) -> PolicyOutput:
        actions, responses = [], []
        for ctx in contexts:
            actions.append(self.agent.act(ctx))
            responses.append(self.agent.last_response())
        return PolicyOutput(actions=actions, responses=responses, prompt_ids=[[] for _ in contexts],
                            response_ids=[[] for _ in contexts], logprobs=[[] for _ in contexts])


class PolicyAgent(Agent):
    """A project ``Policy`` at a fixed temperature (``<= 0``: greedy, ``policies.choose``)."""

    def __init__(self, policy: Policy, *, temperature: float = VALIDATION_TEMPERATURE,
                 name: str = "policy", weights: dict[str, Any] | None = None) -> None:
        self.policy = policy
        self.temperature = float(temperature)
        self.name = name
        self.weights = weights  # which weights (a checkpoint file's path, size and time): results are theirs
        self._response = ""

    def describe(self) -> dict[str, Any]:
        described = {**super().describe(), "policy": type(self.policy).__name__, "temperature": self.temperature}
        return described | ({"weights": self.weights} if self.weights else {})

    def begin_episode(self, env: Any, observation: str, info: dict[str, Any], seed: int) -> None:
        seed_sampling(self.policy, seed)

    def act(self, ctx: StepContext) -> str | None:
        output = self.policy.act([ctx], temperature=self.temperature)
        self._response = output.responses[0]
        return output.actions[0]

    def last_response(self) -> str:
        return self._response


def warm_start_folder(path: str | Path) -> tuple[str, Path] | None:
    """``(kind, folder)`` when ``path`` is a folder a policy kind saved itself (``ecpo sft policy=text`` output: the
    warm start; ``PolicySpec.load`` and its ``folder_file``) and holds no training run's checkpoint, else None. The
    kind is the one its ``sft.json`` records where that kind loads folders, else the first whose file it holds."""
    import json

    from ecpo_train.files.atomic import refuse_links
    from ecpo_train.runtime.policy_kinds import available_policies, policy_spec
    from ecpo_train.runtime.run_dir import checkpoint_file
    from ecpo_train.runtime.sft import SFT_SUMMARY

    folder = Path(path).expanduser()
    if not folder.is_dir() or checkpoint_file(folder).is_file():
        return None
    kinds = [name for name in available_policies()
             if policy_spec(name).load is not None and (folder / policy_spec(name).folder_file).is_file()]
    try:
        refuse_links(folder / SFT_SUMMARY)
        recorded = json.loads((folder / SFT_SUMMARY).read_text(encoding="utf-8")).get("policy")
    except (OSError, ValueError, UnicodeDecodeError, AttributeError):
        recorded = None
    if recorded in kinds:
        return recorded, folder
    return (kinds[0], folder) if kinds else None


def text_policy_folder(path: str | Path) -> Path | None:
    """The folder of :func:`warm_start_folder`, or None."""
    found = warm_start_folder(path)
    return found[1] if found is not None else None


def load_checkpoint_policy(path: str | Path, *, device: str = "cpu") -> tuple[Policy, dict[str, Any]]:
    """The policy saved by ``Trainer.save`` (a ``checkpoint.pt`` or the run folder holding it), or a folder its
    policy kind saved itself (:func:`warm_start_folder`: the text policy ``ecpo sft`` wrote, evaluated as it is).

    Returns the policy and the run's config dict. An LLM run rebuilds its model from the config's ``model``
    path before loading the trained weights, so that path must exist here too.
    """
    from ecpo_gym.families import recorded_env_id
    from ecpo_train.runtime.builders import build_policy
    from ecpo_train.runtime.checkpoint_io import load_checkpoint, load_policy_state
    from ecpo_train.runtime.config import make_config, upgraded
    from ecpo_train.runtime.run_dir import checkpoint_file

    warm_start = warm_start_folder(path)
    if warm_start is not None:
        from ecpo_train.runtime.policy_kinds import policy_spec

        kind, folder = warm_start
        policy = policy_spec(kind).load(str(folder))
        policy.eval()
        return policy, {"policy": kind, "model": str(path), "estimator": "warm-start"}
    path = checkpoint_file(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} not found (a training run writes <run_dir>/checkpoint.pt)")
    state = load_checkpoint(path)  # a damaged file is one ValueError naming it
    if not isinstance(state, dict) or "policy" not in state or "config" not in state:
        raise ValueError(f"{path} is not an ECPO trainer checkpoint (no 'policy'/'config' entries)")
    values = upgraded(state["config"])  # a run recorded before a key was renamed still evaluates
    # the recorded id only names the environment here (its prompt, its history): its id part, nothing imported
    values["env_id"] = recorded_env_id(values.get("env_id"), str(path), name_only=True)
    values["device"] = device
    # evaluation samples with transformers: a run trained with vLLM generation must not start vLLM here
    if "generation_backend" in values:
        values["generation_backend"] = "transformers"
    config = make_config(values)
    policy = build_policy(config)
    load_policy_state(policy, state["policy"], path)  # a damaged state is one line naming the checkpoint
    policy.eval()
    return policy, upgraded(state["config"])


class PromptingAgent(Agent):
    """The paper's template (``prompts/<env>.txt``) as a single user turn to a chat model."""

    def __init__(self, chat: ChatModel, *, temperature: float = VALIDATION_TEMPERATURE,
                 history_length: int | None = None, max_tokens: int | None = None, name: str | None = None) -> None:
        self.chat = chat
        self.temperature = float(temperature)
        self.history_length = history_length
        self.max_tokens = max_tokens
        self.name = name or f"prompting:{chat.name}"
        self._seed = 0
        self._response = ""

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "model": self.chat.name, "temperature": self.temperature,
                "history_length": self.history_length}

    def begin_episode(self, env: Any, observation: str, info: dict[str, Any], seed: int) -> None:
        self._seed = seed

    def act(self, ctx: StepContext) -> str | None:
        prompt = render_prompt(ctx.env_name, task=ctx.task, step_count=ctx.step_count, history=ctx.history,
                               observation=ctx.observation, admissible_actions=ctx.admissible_actions,
                               history_length=self.history_length)
        self._response = self.chat.complete([{"role": "user", "content": prompt}], temperature=self.temperature,
                                            max_tokens=self.max_tokens, seed=self._seed + ctx.step_count)
        return parse_action(self._response, ctx.env_name)

    def last_response(self) -> str:
        return self._response


class ExpertAgent(Agent):
    """Rule-based play with privileged access to the environment (an upper bound; ``ecpo_gym.experts``)."""

    name = "expert"

    def __init__(self) -> None:
        self.expert: Any = None

    def begin_episode(self, env: Any, observation: str, info: dict[str, Any], seed: int) -> None:
        from ecpo_gym.experts import episode_expert

        self.expert = None
        self.expert = episode_expert(env, str(info.get("task_id", "")))  # TypeError naming the env: no expert

    def act(self, ctx: StepContext) -> str | None:
        return self.expert(ctx.step_count) if self.expert is not None else None


_WORD = re.compile(r"[A-Za-z0-9]+")


class RandomAgent(Agent):
    """Uniform over the admissible actions; search templates get random words of the task and observation."""

    name = "random"

    def __init__(self) -> None:
        self.rng = random.Random(0)

    def begin_episode(self, env: Any, observation: str, info: dict[str, Any], seed: int) -> None:
        self.rng = random.Random(seed)

    def _words(self, text: str, k: int) -> str:
        words = _WORD.findall(text) or ["nothing"]
        return " ".join(self.rng.choice(words) for _ in range(k))

    def act(self, ctx: StepContext) -> str | None:
        source = f"{ctx.task} {ctx.observation}"
        if template_name(ctx.env_name) == "searchqa":
            if self.rng.random() < 0.5:
                return f"<search>{self._words(source, 3)}</search>"
            return f"<answer>{self._words(ctx.observation, 1)}</answer>"
        if not ctx.admissible_actions:
            return None
        action = self.rng.choice(ctx.admissible_actions)
        return action.replace("<query>", self._words(source, 3))
