"""The Search-R1 turn protocol: parsing one model turn, formatting retrieved documents (``docs/environments.md``).

A turn is raw model text. It is cut right after the first ``</search>`` (else after the first ``</answer>``)
and the first ``<search>…</search>`` or ``<answer>…</answer>`` block of the cut text is its action. Beyond
Search-R1's rule, the verl-agent validity checks apply to the whole turn: a turn holding both tag kinds
(in either order), or the same opening tag twice, is ambiguous and invalid, and so is a turn without a
complete block or with an empty one. Complete ``<think>…</think>`` blocks are removed first so that
reasoning which mentions a tag does not spoil the action. Tags match case-insensitively (as verl-agent
does). Nothing here raises on any string.

This is the one reading of a search-QA reply: the environment steps with it, and the trainer, the SFT
demonstrations and the ReAct agent read replies through :func:`reply_action` (the declared ``reply_parser`` of
the search-QA ids), so ``<SEARCH>q</SEARCH>`` and ``<search>q</search>`` are the same step everywhere.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

SEARCH_TEMPLATE = "<search>{query}</search>"
ANSWER_TEMPLATE = "<answer>{answer}</answer>"
ACTION_TEMPLATES = [SEARCH_TEMPLATE, ANSWER_TEMPLATE]

INVALID_TURN_FEEDBACK = (
    "\nThe previous turn had no valid action. To search, write one query as <search> query </search>; "
    "to finish, write the final answer as <answer> answer </answer>.\n"
)

_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)
_SEARCH_CLOSE = re.compile(r"</search>", re.IGNORECASE)
_ANSWER_CLOSE = re.compile(r"</answer>", re.IGNORECASE)
_SEARCH_OPEN = re.compile(r"<search>", re.IGNORECASE)
_ANSWER_OPEN = re.compile(r"<answer>", re.IGNORECASE)
_ACTION_BLOCK = re.compile(r"<(search|answer)>(.*?)</\1>", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class ParsedTurn:
    """One parsed turn: ``kind`` is ``"search"``, ``"answer"`` or ``"invalid"`` (then ``reason`` says why)."""

    kind: str
    content: str = ""
    reason: str = ""

    @property
    def is_valid(self) -> bool:
        return self.kind != "invalid"


def drop_think_blocks(text: str) -> str:
    """``text`` with every complete ``<think>…</think>`` block replaced by a space (linear time)."""
    pieces, position = [], 0
    while (opening := _THINK_OPEN.search(text, position)) is not None:
        closing = _THINK_CLOSE.search(text, opening.end())
        if closing is None:
            break
        pieces.append(text[position: opening.start()] + " ")
        position = closing.end()
    pieces.append(text[position:])
    return "".join(pieces)


def cut_turn(text: str) -> str:
    """The text up to and including the first ``</search>``, else the first ``</answer>``, else all of it."""
    close = _SEARCH_CLOSE.search(text) or _ANSWER_CLOSE.search(text)
    return text[: close.end()] if close else text


def parse_turn(text: object) -> ParsedTurn:
    """Parse one model turn into a search, an answer or an invalid action (never raises)."""
    if not isinstance(text, str):
        return ParsedTurn("invalid", reason=f"the action must be a str, got {type(text).__name__}")
    text = drop_think_blocks(text)
    search_tags = len(_SEARCH_OPEN.findall(text))
    answer_tags = len(_ANSWER_OPEN.findall(text))
    if search_tags and answer_tags:
        return ParsedTurn("invalid", reason="the turn holds both a <search> and an <answer> tag")
    if search_tags > 1 or answer_tags > 1:
        return ParsedTurn("invalid", reason="the turn repeats an action tag")
    block = _ACTION_BLOCK.search(cut_turn(text))
    if block is None:
        return ParsedTurn("invalid", reason="no complete <search>...</search> or <answer>...</answer> block")
    kind, content = block.group(1).lower(), block.group(2).strip()
    if not content:
        return ParsedTurn("invalid", reason=f"the <{kind}> block is empty")
    return ParsedTurn(kind, content)


def reply_action(text: object) -> str | None:
    """The action a model reply stands for, in its canonical spelling (``<search>q</search>`` or
    ``<answer>a</answer>``, content stripped), or ``None`` when :func:`parse_turn` calls the turn invalid.
    Stepping the environment with the result is the same step as stepping it with ``text``."""
    turn = parse_turn(text)
    if not turn.is_valid:
        return None
    template = SEARCH_TEMPLATE if turn.kind == "search" else ANSWER_TEMPLATE
    return template.format(query=turn.content, answer=turn.content)


def split_contents(contents: str) -> tuple[str, str]:
    """``(title, text)`` of a corpus ``contents`` string: the first line and the remaining lines."""
    title, _, text = contents.partition("\n")
    return title, text


def format_documents(contents: Iterable[str]) -> str:
    """Search-R1's document list: ``Doc i(Title: T) X`` per document, one per line, ``i`` from 1."""
    lines = []
    for rank, doc in enumerate(contents, start=1):
        title, text = split_contents(doc)
        lines.append(f"Doc {rank}(Title: {title}) {text}\n")
    return "".join(lines)


def information_block(documents_text: str) -> str:
    """The observation appended after a search: the documents between ``<information>`` tags."""
    return "\n\n<information>" + documents_text.strip() + "</information>\n\n"
