"""From a model's response text to the action string an environment steps with.

Every function here takes any ``str`` (CJK, control characters, 100 kB of garbage) and never raises;
each runs in time linear in the response length: only ``str.find``/``str.rfind`` scans and regexes
without nested quantifiers, so no input can trigger catastrophic backtracking.

**Action-tag environments** (ALFWorld, WebShop, the default template). A response is *well-formed* when

1. it holds exactly one opening ``<action>`` and exactly one closing ``</action>`` tag (ASCII
   case-insensitive, no spaces inside the tag), the opening one first;
2. the block is not inside a ``<think>...</think>`` span (an action quoted while reasoning is not taken);
3. its content holds no other protocol tag (``<think>``, ``<action>``, ``<search>``, ``<answer>``,
   ``<information>`` or their closing forms): such nesting means the model lost the format;
4. its content is not blank.

The action is that content with surrounding whitespace stripped; anything else gives ``None`` (the
rollout then steps the environment with an invalid action). The content is not otherwise judged: CJK
or misspelt text is returned as written and the environment's canonicaliser maps it to ``<invalid>``.

**Environments that declare their own reply parser** (``EnvDeclaration.reply_parser`` in
``ecpo_gym.families``; the search-QA ids: Search-R1's turn rule in ``ecpo_gym.searchqa.protocol``) are read by
that parser alone, so the trainer never disagrees with the environment about a reply: ``<SEARCH>q</SEARCH>``
and ``<search>q</search>`` both give ``<search>q</search>``, and a turn the environment calls invalid gives
``None``.

``format_reply`` is the inverse: the well-formed reply that carries a given action (what ``ecpo sft``
teaches), so ``parse_action(format_reply(a, env), env) == a``.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ecpo_gym.families import declaration_of
from ecpo_gym.kwargs import shown

ACTION_OPEN, ACTION_CLOSE = "<action>", "</action>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"

_ACTION_TAG = re.compile(r"</?action>", re.IGNORECASE)
_THINK_TAG = re.compile(r"</?think>", re.IGNORECASE)
_THINK_OPEN_TAG = re.compile(r"<think>", re.IGNORECASE)
_THINK_CLOSE_TAG = re.compile(r"</think>", re.IGNORECASE)
_PROTOCOL_TAG = re.compile(r"</?(?:think|action|search|answer|information)>", re.IGNORECASE)


def parse_action(response_text: str, env_name: str) -> str | None:
    """The action in ``response_text`` for environment ``env_name``, or ``None`` if malformed.

    See the module docstring for what well-formed means in each environment family.
    """
    if not isinstance(response_text, str):
        return None
    own_parser = reply_parser_of(env_name)
    if own_parser is not None:
        return own_parser(response_text)
    return parse_action_block(response_text)


def reply_parser_of(env_name: str) -> Callable[[str], str | None] | None:
    """The environment's own reply parser (its declaration's ``reply_parser``), or ``None`` for the
    ``<action>`` format (every id without one, and any environment that is not an ECPO id)."""
    declared = declaration_of(str(env_name))
    return None if declared is None else declared.load_reply_parser()


def format_reply(action: str, env_name: str) -> str:
    """The well-formed reply whose parsed action is ``action`` (the inverse of ``parse_action``).

    Action-tag families: ``<action>{action}</action>`` (no reasoning: an expert has none to show). An
    environment with its own reply parser (search-QA): the canonical reply that parser reads ``action`` as (an
    expert's text may carry a ``<think>`` prefix). ``ValueError`` when ``action`` cannot be carried: blank,
    holding a protocol tag, or (search-QA) not a valid turn.
    """
    if not isinstance(action, str):
        raise ValueError(f"an action is text, got {type(action).__name__}")  # noqa: TRY004
    own_parser = reply_parser_of(env_name)
    if own_parser is not None:
        reply = own_parser(action)
        if reply is None:
            raise ValueError(f"action {shown(action)} is not a valid turn of {env_name}")
        return reply
    content = action.strip()
    if not content or _PROTOCOL_TAG.search(content):
        raise ValueError(f"action {shown(action)} is blank or holds a protocol tag: no reply carries it")
    return f"{ACTION_OPEN}{content}{ACTION_CLOSE}"


def parse_action_block(text: str) -> str | None:
    """The stripped content of the single well-formed ``<action>`` block of ``text``, else ``None``."""
    tags = [(match.start(), match.end(), match.group(0).startswith("</")) for match in _ACTION_TAG.finditer(text)]
    if len(tags) != 2:
        return None
    (_, open_end, open_is_close), (close_start, _, close_is_close) = tags
    if open_is_close or not close_is_close:
        return None
    if _inside_think(text, tags[0][0]):
        return None
    content = text[open_end:close_start]
    if _PROTOCOL_TAG.search(content):
        return None
    content = content.strip()
    return content or None


def _inside_think(text: str, position: int) -> bool:
    """Whether ``position`` lies after an opening ``<think>`` that is not closed before it."""
    depth = 0
    for match in _THINK_TAG.finditer(text, 0, position):
        depth = max(depth - 1, 0) if match.group(0).startswith("</") else depth + 1
    return depth > 0


def extract_think(response_text: str) -> str | None:
    """The stripped content of the first ``<think>...</think>`` block, or ``None`` when there is none."""
    if not isinstance(response_text, str):
        return None
    opening = _THINK_OPEN_TAG.search(response_text)
    if opening is None:
        return None
    closing = _THINK_CLOSE_TAG.search(response_text, opening.end())
    if closing is None:
        return None
    return response_text[opening.end() : closing.start()].strip()
