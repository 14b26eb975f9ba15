"""ReAct and Reflexion agents over any ``ChatModel``.

**ReAct** (reason, then act): the model sees a system message with the environment's action format and a few
worked episodes written for these environments (``REACT_EXAMPLES``), then the episode so far as a chat: each
observation (with the admissible actions) is a user turn and each of its own earlier replies, thoughts
included, an assistant turn (the last ``max_context_steps`` of them). Every reply is ``<think>...</think>``
followed by the action block of the environment family, parsed with ``ecpo_train.policies.parsing``.

**Reflexion**: ReAct plus a memory of self-reflections. After a failed trial the model is shown the trial and
asked what went wrong and what to do differently; the reflection is kept (the last ``max_reflections``) and
shown in the system message of the next trial of the same task. The runner replays a failed task up to
``trials`` times; the task counts as solved when any trial wins.
"""

from __future__ import annotations

from typing import Any

from ecpo_train.evaluation.agents import Agent, Trial
from ecpo_train.evaluation.chat import ChatModel, Message
from ecpo_train.policies.base import StepContext
from ecpo_train.policies.parsing import parse_action
from ecpo_train.policies.prompting import format_admissible_actions, template_name
from ecpo_train.runtime import VALIDATION_TEMPERATURE

ACTION_FORMAT = {
    "alfworld": "Reply with your reasoning in <think> </think> tags, then exactly one admissible action in "
                "<action> </action> tags.",
    "webshop": "Reply with your reasoning in <think> </think> tags, then exactly one action in <action> </action> "
               "tags: search[your query] on a page with a search bar, or click[an item shown on the page].",
    "searchqa": "Reply with your reasoning in <think> </think> tags, then either <search> query </search> to "
                "look something up (results come back in <information> </information>) or <answer> short "
                "answer </answer> when you know it.",
    "default": "Reply with your reasoning in <think> </think> tags, then exactly one admissible action in "
               "<action> </action> tags.",
}

# Worked episodes, one per family: (task, [(observation, reply), ...]).
REACT_EXAMPLES: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "alfworld": (
        "put a clean mug in coffeemachine.",
        [
            (("You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a coffeemachine 1, "
             "a countertop 1, a countertop 2, a fridge 1 and a sinkbasin 1."),
             ("<think>I need a mug, then clean it at the sinkbasin, then put it in the coffeemachine. Mugs are "
             "usually on a countertop.</think><action>go to countertop 1</action>")),
            ("You arrive at countertop 1. On the countertop 1, you see a bread 1 and a knife 2.",
             "<think>No mug here. Try the other countertop.</think><action>go to countertop 2</action>"),
            ("You arrive at countertop 2. On the countertop 2, you see a mug 3 and a spoon 1.",
             "<think>Found mug 3. Take it.</think><action>take mug 3 from countertop 2</action>"),
            ("You pick up the mug 3 from the countertop 2.",
             "<think>Now clean it with the sinkbasin.</think><action>go to sinkbasin 1</action>"),
            ("You arrive at sinkbasin 1. On the sinkbasin 1, you see nothing.",
             "<think>Clean the mug here.</think><action>clean mug 3 with sinkbasin 1</action>"),
            ("You clean the mug 3 using the sinkbasin 1.",
             "<think>The mug is clean; bring it to the coffeemachine.</think><action>go to coffeemachine 1</action>"),
            ("You arrive at coffeemachine 1. On the coffeemachine 1, you see nothing.",
             ("<think>Put the clean mug in the coffeemachine to finish.</think>"
             "<action>move mug 3 to coffeemachine 1</action>")),
        ],
    ),
    "webshop": (
        "i need a pair of blue running shoes in size 9, and price lower than 60.00 dollars",
        [
            ("Search",
             "<think>Search for the product with its key words.</think><action>search[blue running shoes]</action>"),
            (("[Back to Search] Page 1 (Total results: 50) [Next >] [B0A1] Trail Runner Sneaker, Blue $45.99 "
             "[B0A2] Leather Boot $89.00"),
             "<think>B0A1 is a blue running shoe under 60 dollars.</think><action>click[b0a1]</action>"),
            (("[Back to Search] [< Prev] size [8] [9] [10] color [blue] [black] Trail Runner Sneaker, Blue "
             "Price: $45.99 [Description] [Features] [Reviews] [Buy Now]"),
             "<think>Pick size 9 first.</think><action>click[9]</action>"),
            ("You have clicked 9.",
             "<think>Pick the blue color.</think><action>click[blue]</action>"),
            ("You have clicked blue.",
             ("<think>Size and color match and the price is below 60, so buy it.</think>"
             "<action>click[buy now]</action>")),
        ],
    ),
    "searchqa": (
        "In which country was the founder of Lumen Works born?",
        [
            ("In which country was the founder of Lumen Works born?",
             "<think>First find who founded Lumen Works.</think><search>Lumen Works founder</search>"),
            (("<information>Doc 1(Title: Lumen Works) Lumen Works is a lamp maker founded in 1921 by Ada "
             "Marsh.</information>"),
             "<think>The founder is Ada Marsh. Now find her birthplace.</think><search>Ada Marsh born</search>"),
            (("<information>Doc 1(Title: Ada Marsh) Ada Marsh was an engineer born in Tallinn, Estonia."
             "</information>"),
             "<think>She was born in Estonia.</think><answer>Estonia</answer>"),
        ],
    ),
}
REACT_EXAMPLES["default"] = REACT_EXAMPLES["alfworld"]


def observation_turn(ctx: StepContext, family: str, observation: str | None = None) -> str:
    """A user turn: the observation, plus the admissible actions for action-tag families."""
    text = ctx.observation if observation is None else observation
    if family == "searchqa":
        return text
    return f"Observation: {text}\nAdmissible actions: [{format_admissible_actions(ctx.admissible_actions)}]"


def example_text(family: str) -> str:
    task, steps = REACT_EXAMPLES[family]
    lines = [f"Task: {task}"]
    for observation, reply in steps:
        lines += [f"Observation: {observation}", f"You: {reply}"]
    return "\n".join(lines)


class ReActAgent(Agent):
    """Reason-then-act with in-context examples (see the module docstring)."""

    def __init__(self, chat: ChatModel, *, temperature: float = VALIDATION_TEMPERATURE,
                 max_context_steps: int = 12, max_tokens: int | None = 256, name: str | None = None) -> None:
        self.chat = chat
        self.temperature = float(temperature)
        self.max_context_steps = int(max_context_steps)
        self.max_tokens = max_tokens
        self.name = name or f"react:{chat.name}"
        self.reflections: list[str] = []
        self._turns: list[tuple[str, str]] = []  # (user turn, assistant reply) of this episode
        self._seed = 0
        self._response = ""

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "model": self.chat.name, "temperature": self.temperature,
                "max_context_steps": self.max_context_steps}

    def begin_task(self, env: Any, task_id: str, seed: int) -> None:
        self.reflections = []

    def begin_episode(self, env: Any, observation: str, info: dict[str, Any], seed: int) -> None:
        self._turns = []
        self._seed = seed

    def system_message(self, family: str, task: str) -> str:
        parts = [
            "You are an agent solving a task step by step in a text environment. "
            + ACTION_FORMAT[family],
            "Here is an example episode:\n" + example_text(family),
        ]
        if self.reflections:
            notes = "\n".join(f"- {r}" for r in self.reflections)
            parts.append(f"Your reflections from earlier failed attempts at this task:\n{notes}")
        parts.append(f"Now your task is: {task}")
        return "\n\n".join(parts)

    def messages(self, ctx: StepContext) -> list[Message]:
        family = template_name(ctx.env_name)
        messages: list[Message] = [{"role": "system", "content": self.system_message(family, ctx.task)}]
        for user, reply in self._turns[-self.max_context_steps :]:
            messages += [{"role": "user", "content": user}, {"role": "assistant", "content": reply}]
        messages.append({"role": "user", "content": observation_turn(ctx, family)})
        return messages

    def act(self, ctx: StepContext) -> str | None:
        family = template_name(ctx.env_name)
        self._response = self.chat.complete(self.messages(ctx), temperature=self.temperature,
                                            max_tokens=self.max_tokens, seed=self._seed + ctx.step_count)
        self._turns.append((observation_turn(ctx, family), self._response))
        return parse_action(self._response, ctx.env_name)

    def last_response(self) -> str:
        return self._response


class ReflexionAgent(ReActAgent):
    """ReAct with self-reflection memory across ``trials`` attempts of the same task."""

    def __init__(self, chat: ChatModel, *, trials: int = 3, max_reflections: int = 3, max_reflection_tokens: int = 128,
                 name: str | None = None, **react_kwargs: Any) -> None:
        super().__init__(chat, name=name or f"reflexion:{chat.name}", **react_kwargs)
        if trials < 1:
            raise ValueError(f"trials must be >= 1, got {trials}")
        self.max_trials = int(trials)
        self.max_reflections = int(max_reflections)
        self.max_reflection_tokens = int(max_reflection_tokens)
        self._trials_done = 0

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "trials": self.max_trials, "max_reflections": self.max_reflections}

    def reflection_prompt(self, trial: Trial) -> str:
        steps = trial.steps[-self.max_context_steps :]
        lines = [f"Observation: {obs[:400]}\nAction: {action}" for obs, action, _ in steps]
        lines.append(f"Final observation: {trial.final_observation[:400]}")
        return (f"You tried this task and failed: {trial.task}\nYour last steps:\n" + "\n".join(lines)
                + "\n\nIn two or three sentences, say what went wrong and what you will do differently next time.")

    def begin_task(self, env: Any, task_id: str, seed: int) -> None:
        super().begin_task(env, task_id, seed)
        self._trials_done = 0

    def end_episode(self, trial: Trial) -> None:
        self._trials_done += 1
        if trial.won or self._trials_done >= self.max_trials:
            return  # solved, or no trial left to use a reflection
        reply = self.chat.complete([{"role": "user", "content": self.reflection_prompt(trial)}],
                                   temperature=self.temperature, max_tokens=self.max_reflection_tokens,
                                   seed=self._seed + 7919)
        reflection = " ".join(reply.split())[:600]
        if reflection:
            self.reflections = (self.reflections + [reflection])[-self.max_reflections :]
