"""ALFWorld's open command set: the commands an agent that writes its action could form, not only the admissible ones.

An LLM agent writes its command; some of what it writes is not admissible (an object it saw elsewhere, an appliance
it is not at, a receptacle already open). The environment answers such a command as an invalid action (reward
``reward_invalid``, canonical action ``<invalid>``, state unchanged). A policy that only picks among admissible
commands never does that. :func:`open_commands` gives such a policy ALFWorld's command templates filled with what the
episode has named so far, so it can send an invalid command the way an LLM does (``command_set: open``,
docs/cpu_training.md).

The rule, fixed and bounded (every name is "<word> <number>", as ALFWorld writes objects and receptacles):

- the admissible commands, first and in their order;
- receptacles: the targets of the admissible ``go to`` commands and the agent's location (the target of the last
  ``go to`` it sent); objects: every other name in the observations of the history given and the current one;
- at the location ``r``: ``go to r``, ``open r``, ``close r``, ``examine r``;
- for every object ``o``: ``take o from r`` and ``move o to r`` (``r`` the location; none before the first
  ``go to``), ``examine o``; ``use o`` for a lamp; at an appliance, its verb: ``heat o with r`` at a microwave,
  ``cool o with r`` at a fridge, ``clean o with r`` at a sink basin;
- ``inventory`` and ``look``.

The verbs are tied to their appliances and ``use`` to lamps, as a writer who knows the game's commands would use
them, which also keeps the set near twice the admissible one (measured on expert play of ``valid_seen``).

Commands are listed once (the first occurrence wins). "Named so far" is what the history the policy is shown holds
(the text policy's ``history_length``: the whole episode in the ``alfworld_text`` presets).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

NAME = re.compile(r"\b([a-z]+) (\d+)\b")  # "apple 1", "countertop 2": ALFWorld's object and receptacle names
GO_TO = "go to "
AT_LOCATION = ("go to {r}", "open {r}", "close {r}", "examine {r}")
WITH_OBJECT_AT_LOCATION = ("take {o} from {r}", "move {o} to {r}")
WITH_OBJECT = ("examine {o}",)
APPLIANCE_VERBS = {"microwave": "heat", "fridge": "cool", "sinkbasin": "clean"}  # the appliance each verb needs
LAMPS = ("desklamp", "floorlamp")
ALWAYS = ("inventory", "look")


def location_of(history: Sequence[tuple[str, str]]) -> str | None:
    """The receptacle the agent last went to (the target of its last ``go to``), or ``None`` before any."""
    for _, action in reversed(history):
        if action.startswith(GO_TO):
            return action[len(GO_TO):].strip()
    return None


def named(texts: Sequence[str]) -> list[str]:
    """Every "<word> <number>" name in ``texts``, in first-seen order."""
    return list(dict.fromkeys(match.group(0) for text in texts for match in NAME.finditer(text.lower())))


def open_commands(admissible: Sequence[str], history: Sequence[tuple[str, str]], observation: str) -> list[str]:
    """The open command set of one step (module docstring): the admissible commands, then the templates filled with
    the receptacles and objects named so far."""
    location = location_of(history)
    receptacles = {command[len(GO_TO):] for command in admissible if command.startswith(GO_TO)}
    if location is not None:
        receptacles.add(location)
    objects = [name for name in named([*(seen for seen, _ in history), observation]) if name not in receptacles]
    formed: list[str] = []
    if location is not None:
        formed += [template.format(r=location) for template in AT_LOCATION]
    verb = None if location is None else APPLIANCE_VERBS.get(location.split(" ")[0])
    for obj in objects:
        if location is not None:
            formed += [template.format(o=obj, r=location) for template in WITH_OBJECT_AT_LOCATION]
        if verb is not None:
            formed.append(f"{verb} {obj} with {location}")
        formed += [template.format(o=obj) for template in WITH_OBJECT]
        if obj.split(" ")[0] in LAMPS:
            formed.append(f"use {obj}")
    formed += ALWAYS
    return list(dict.fromkeys([*admissible, *formed]))
