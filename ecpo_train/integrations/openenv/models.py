"""The wire types of an ``ecpo serve`` server, one set for every environment family.

The action is the agent's text (a reply or an action string: the environment's own parser and canonicaliser
read it, as in process). The observation carries what the Gymnasium env's ``reset``/``step`` return: the text,
reward and done, and the ``info`` fields a trainer needs by name (admissible actions, the state key, the
canonical action of the step, the task id and the seed of the episode); the rest of ``info`` rides in ``info``.
"""

from __future__ import annotations

from typing import Any

from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

MAX_ACTION_CHARS = 1 << 16
"""Longest action text a server takes (64 Ki characters); longer is a validation error, not an env step."""


class TextAction(Action):
    """The agent's text for one step (read by the environment's parser, as ``env.step(text)`` in process)."""

    action: str = Field(..., max_length=MAX_ACTION_CHARS, description="the agent's reply or action text")


class TextObservation(Observation):
    """One ``reset`` or ``step`` of a text environment (``reward`` is ``None`` on reset)."""

    text: str = Field(default="", description="the observation text")
    admissible_actions: list[str] = Field(default_factory=list, description="the actions valid in this state")
    state_key: str = Field(default="", description="the canonical key of the state reached (ECPO's anchor key)")
    action_key: str | None = Field(default=None, description="the canonical action of this step ('<invalid>' for "
                                                             "text matching no admissible action; None on reset)")
    task_id: str | None = Field(default=None, description="the episode's task")
    seed: int | None = Field(default=None, description="the seed the episode was reset with")
    step: int = Field(default=0, description="steps taken in the episode")
    terminated: bool = Field(default=False)
    truncated: bool = Field(default=False)
    won: bool = Field(default=False)
    is_action_valid: bool | None = Field(default=None, description="None on reset")
    info: dict[str, Any] = Field(default_factory=dict, description="the env's other info fields")


class EpisodeState(State):
    """``state()``: the session's environment and episode (``episode_id``, ``step_count`` from OpenEnv)."""

    env_id: str = ""
    task_id: str | None = None
    seed: int | None = None
    done: bool = False


__all__ = ["MAX_ACTION_CHARS", "EpisodeState", "TextAction", "TextObservation"]
