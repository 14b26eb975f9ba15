"""S-expressions of PDDL text: the tokenizer and nested-list reader the domain and problem parsers share.

PDDL is case-insensitive, so every symbol is lowercased here, once; ``;`` starts a comment to the end of the
line. A malformed text raises ``ValueError`` with a short reason; the loader turns it into a
``GameLoadError`` that names the file.
"""

from __future__ import annotations

import re

from ecpo_gym.kwargs import shown

_TOKEN = re.compile(r";[^\n]*|\(|\)|[^\s();]+")


def read_sexprs(text: str) -> list:
    """All top-level expressions of ``text`` as nested lists of lowercased strings."""
    stack: list[list] = [[]]
    for match in _TOKEN.finditer(text):
        token = match.group(0)
        if token[0] == ";":
            continue
        if token == "(":
            stack.append([])
        elif token == ")":
            if len(stack) == 1:
                raise ValueError(f"unbalanced ')' at character {match.start()}")
            done = stack.pop()
            stack[-1].append(done)
        else:
            stack[-1].append(token.lower())
    if len(stack) != 1:
        raise ValueError(f"{len(stack) - 1} unclosed '(' at the end of the text")
    return stack[0]


def read_one(text: str) -> list:
    """The single top-level expression of ``text`` (a domain or a problem)."""
    exprs = read_sexprs(text)
    if len(exprs) != 1 or not isinstance(exprs[0], list):
        raise ValueError(f"expected one parenthesised definition, found {len(exprs)} top-level expressions")
    return exprs[0]


def typed_list(items: list) -> list[tuple[str, str]]:
    """``a b - t c - u d`` -> ``[(a, t), (b, t), (c, u), (d, object)]`` (PDDL's typed-list rule)."""
    out: list[tuple[str, str]] = []
    pending: list[str] = []
    k = 0
    while k < len(items):
        item = items[k]
        if not isinstance(item, str):
            raise TypeError(f"unexpected nested list {shown(item)} in a typed list")
        if item == "-":
            if k + 1 >= len(items) or not isinstance(items[k + 1], str) or not pending:
                raise ValueError("'-' without a type name in a typed list")
            out += [(name, items[k + 1]) for name in pending]
            pending = []
            k += 2
            continue
        pending.append(item)
        k += 1
    out += [(name, "object") for name in pending]
    return out
