"""The game's text grammar (the ``grammar`` field, TextWorld's twl2 format), parsed into rules.

A twl2 document holds ``grammar :: \"\"\"{json}\"\"\";`` blocks of production rules and
``action NAME { template :: "..."; feedback :: "..."; grammar :: \"\"\"{json}\"\"\"; }`` blocks. Rule
right-hand sides are symbol strings: plain text, ``#rule#`` (expand the first rule whose condition holds),
``{expr}`` (an attribute of a bound entity: ``o.name``, ``o.indefinite + ' ' + o.name``, ``r.name or r.id``),
``{expr | query}`` (one copy per query answer) and ``[{...}]`` (those copies as an English list). Only
these forms are accepted; the expansion itself lives in ``textgen``.
"""

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import dataclass, field

from ecpo_gym.kwargs import shown

_DOC_TOKEN = re.compile(r'\s+|#[^\n]*|"""(?:.|\n)*?"""|"[^"]*"|::|[;{}]|[\w/-]+', re.DOTALL)
_TAG = re.compile(r"[\w()/!<>\-\s,.]+")
_GIVEN = re.compile(r"[^;|{}\n\[\]#]+")
_STATEMENT = re.compile(r"[^|\[\]{}\n<>]+")
_LITERAL = re.compile(r'[^;|"<>\[\]#{}]+')
_BAR = re.compile(r"\s*\|\s*")
_COMMENT_AT_LINE_START = re.compile(r"(//[^\n]*|\s*)\n?")
_ATOM = re.compile(r"\s*(\w+)\(([^()]*)\)\s*")
_EXPR_TOKEN = re.compile(r"\s*(?:'([^']*)'|\"([^\"]*)\"|(\w+)\.(\w+)|(\w+)|(\+)|(or)\b)")
ATTRIBUTES = frozenset({"name", "id", "indefinite", "definite", "type"})


@dataclass(frozen=True)
class Query:
    """A conjunctive query: ``[(predicate, ((var, type), ...)), ...]`` in written order."""

    atoms: tuple

    @staticmethod
    def parse(text: str) -> Query:
        atoms = []
        for part in text.split("&"):
            match = _ATOM.fullmatch(part)
            if match is None:
                raise ValueError(f"cannot read the grammar condition {shown(text)}")
            args = []
            for arg in match.group(2).split(","):
                name, _, typ = arg.strip().partition(":")
                if not name or not typ:
                    raise ValueError(f"untyped placeholder {shown(arg.strip())} in {shown(text)}")
                args.append((name.strip(), typ.strip()))
            atoms.append((match.group(1), tuple(args)))
        return Query(tuple(atoms))


@dataclass(frozen=True)
class Expr:
    """An attribute expression: terms (``("lit", s)`` or ``("attr", var, attribute)``) joined by ``+``,
    alternatives joined by ``or`` (the first non-empty wins)."""

    alternatives: tuple

    @staticmethod
    def parse(text: str) -> Expr:
        alternatives, terms, pos, expect_term = [], [], 0, True
        text = text.rstrip()
        while pos < len(text):
            match = _EXPR_TOKEN.match(text, pos)
            if match is None or match.end() == pos:
                raise ValueError(f"unsupported grammar expression {shown(text)}")
            pos = match.end()
            lit1, lit2, var, attr, bare, plus, alt = match.groups()
            if expect_term and (lit1 is not None or lit2 is not None):
                terms.append(("lit", lit1 if lit1 is not None else lit2))
            elif expect_term and var is not None:
                if attr not in ATTRIBUTES:
                    raise ValueError(f"unknown attribute {shown(attr)} in {shown(text)}")
                terms.append(("attr", var, attr))
            elif expect_term and bare is not None and bare != "or":
                terms.append(("attr", bare, "name"))
            elif not expect_term and plus:
                expect_term = True
                continue
            elif not expect_term and (alt or bare == "or"):
                alternatives.append(tuple(terms))
                terms, expect_term = [], True
                continue
            else:
                raise ValueError(f"unsupported grammar expression {shown(text)}")
            expect_term = False
        if expect_term:
            raise ValueError(f"incomplete grammar expression {shown(text)}")
        alternatives.append(tuple(terms))
        return Expr(tuple(alternatives))


# Symbols: ("text", s) | ("rule", name) | ("cond", inner symbol, Query or None) | ("list", cond symbol)
# where the inner symbol of a cond is ("rule", name) or ("expr", Expr).


def parse_symbols(text: str) -> list[tuple]:
    """The symbols of one right-hand side (the textgen syntax: tabs and leading blank lines are skipped,
    text from an unreadable symbol on, like a stray ``}``, is dropped)."""
    symbols: list[tuple] = []
    pos = 0

    def skip(pos: int) -> int:
        while True:
            start = pos
            while pos < len(text) and text[pos] == "\t":
                pos += 1
            if pos == 0 or text[pos - 1] == "\n":
                pos = _COMMENT_AT_LINE_START.match(text, pos).end()
            if pos == start:
                return pos

    def conditional(pos: int) -> tuple[tuple, int]:
        pos = skip(pos + 1)
        if text.startswith("#", pos):
            match = _TAG.match(text, pos + 1)
            if match is None or not text.startswith("#", match.end()):
                raise ValueError(f"unterminated '#' in {shown(text)}")
            inner, pos = ("rule", match.group(0)), match.end() + 1
        else:
            match = _STATEMENT.match(text, pos)
            if match is None:
                raise ValueError(f"empty '{{}}' in {shown(text)}")
            inner, pos = ("expr", Expr.parse(match.group(0))), match.end()
        query = None
        bar = _BAR.match(text, pos)
        if bar is not None and bar.end() > pos and "|" in bar.group(0):
            given = _GIVEN.match(text, bar.end())
            if given is None:
                raise ValueError(f"empty query after '|' in {shown(text)}")
            query, pos = Query.parse(given.group(0)), given.end()
        pos = skip(pos)
        if not text.startswith("}", pos):
            raise ValueError(f"expected '}}' at {pos} in {shown(text)}")
        return ("cond", inner, query), pos + 1

    while True:
        pos = skip(pos)
        if pos >= len(text):
            break
        char = text[pos]
        if char == "[":
            pos = skip(pos + 1)
            if not text.startswith("{", pos):
                raise ValueError(f"expected '{{' after '[' in {shown(text)}")
            cond, pos = conditional(pos)
            pos = skip(pos)
            if not text.startswith("]", pos):
                raise ValueError(f"expected ']' in {shown(text)}")
            symbols.append(("list", cond))
            pos += 1
        elif char == "{":
            cond, pos = conditional(pos)
            symbols.append(cond)
        elif char == "#":
            match = _TAG.match(text, pos + 1)
            if match is None or not text.startswith("#", match.end()):
                raise ValueError(f"unterminated '#' in {shown(text)}")
            symbols.append(("rule", match.group(0)))
            pos = match.end() + 1
        elif char == '"':
            end = text.find('"', pos + 1)
            if end < 0:
                raise ValueError(f"unterminated quote in {shown(text)}")
            symbols.append(("text", text[pos + 1:end].replace("\\n", "\n")))
            pos = end + 1
        else:
            match = _LITERAL.match(text, pos)
            if match is None:
                break  # the reference parser stops at the first unreadable symbol and drops the rest
            symbols.append(("text", match.group(0).replace("\\n", "\n")))
            pos = match.end()
    return symbols or [("text", "")]


@dataclass
class ActionText:
    template: list[tuple]
    feedback: list[tuple]
    template_source: str


@dataclass
class Grammar:
    """Rules (name -> [(condition Query or None, symbols)]) and the per-action command/feedback texts."""

    rules: dict[str, list[tuple]] = field(default_factory=dict)
    actions: dict[str, ActionText] = field(default_factory=dict)


def _block(token: str) -> str:
    return textwrap.dedent(token[3:-3])


def parse_grammar(text: str) -> Grammar:
    """Parse a twl2 document; raises ``ValueError`` on anything outside the supported forms."""
    tokens, pos = [], 0
    while pos < len(text):
        match = _DOC_TOKEN.match(text, pos)
        if match is None:
            raise ValueError(f"grammar: cannot read {shown(text[pos:])}")
        token, pos = match.group(0), match.end()
        if not token.isspace() and token[0] != "#":
            tokens.append(token)
    if not tokens:
        raise ValueError("empty grammar")
    raw: dict[str, list] = {}
    actions: dict[str, dict] = {}
    k = 0

    def expect(value: str) -> None:
        nonlocal k
        if k >= len(tokens) or tokens[k] != value:
            found = tokens[k] if k < len(tokens) else "the end"
            raise ValueError(f"grammar: expected {shown(value)}, found {shown(found)}")
        k += 1

    while k < len(tokens):
        if tokens[k] == "grammar":
            k += 1
            expect("::")
            if k >= len(tokens) or not tokens[k].startswith('"""'):
                raise ValueError("grammar: expected a triple-quoted block")
            raw.update(json.loads(_block(tokens[k])))
            k += 1
            expect(";")
        elif tokens[k] == "action":
            name = tokens[k + 1].lower() if k + 1 < len(tokens) else ""
            k += 2
            expect("{")
            fields: dict[str, str] = {}
            while k < len(tokens) and tokens[k] != "}":
                key = tokens[k]
                k += 1
                expect("::")
                fields[key] = tokens[k]
                k += 1
                expect(";")
            expect("}")
            if "grammar" in fields:
                block = "\n".join(line for line in _block(fields["grammar"]).split("\n")
                                  if not line.lstrip().startswith("#"))
                raw.update(json.loads(block))
            if "template" not in fields or "feedback" not in fields:
                raise ValueError(f"grammar: action {shown(name)} needs a template and a feedback")
            actions[name] = {"template": fields["template"][1:-1], "feedback": fields["feedback"][1:-1]}
        else:
            raise ValueError(f"grammar: unexpected {shown(tokens[k])}")
    grammar = Grammar()
    for name, rules in raw.items():
        grammar.rules[name] = [(Query.parse(r["condition"]) if r.get("condition") else None,
                                parse_symbols(r["rhs"])) for r in rules]
    for name, fields in actions.items():
        grammar.actions[name] = ActionText(parse_symbols(fields["template"]), parse_symbols(fields["feedback"]),
                                           fields["template"])
    return grammar
