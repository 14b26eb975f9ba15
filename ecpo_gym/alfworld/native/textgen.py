"""Expanding grammar symbols into text against the current facts.

A context is the mapping of bound placeholders ``(name, type) -> object id``. A rule expands to its first
alternative whose condition has an answer in the context; ``{x | query}`` expands once per answer of the
query; ``[...]`` joins those expansions as an English list (``list_separator`` / ``list_last_separator``,
``list_empty`` when there are none). Query answers come in the reference order: atoms are matched left to
right, each over its facts sorted by argument ids, and a new placeholder never takes an object another
placeholder of the context already holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from ecpo_gym.alfworld.native.grammar import Expr, Grammar, Query
from ecpo_gym.alfworld.native.logic import State
from ecpo_gym.kwargs import shown


class TextGenerator:
    """Derives texts of one loaded game; ``entity`` maps an id to its attribute dict."""

    def __init__(self, grammar: Grammar, entity: dict[str, dict], type_of: dict[str, str],
                 is_subtype: Callable[[str, str], bool]) -> None:
        self.grammar = grammar
        self.entity = entity
        self.type_of = type_of
        self.is_subtype = is_subtype
        self.state: State | None = None

    def answers(self, query: Query, mapping: dict) -> Iterator[dict]:
        """Extensions of ``mapping`` that satisfy ``query`` in the current state."""
        yield from self._answers(query.atoms, 0, dict(mapping), set(mapping.values()))

    def _answers(self, atoms: tuple, depth: int, mapping: dict, used: set) -> Iterator[dict]:
        if depth == len(atoms):
            yield dict(mapping)
            return
        pred, placeholders = atoms[depth]
        state = self.state
        key = next(((pred, pos, mapping[ph]) for pos, ph in enumerate(placeholders) if ph in mapping), None)
        facts = state.index.get(key, ()) if key is not None else state.by_pred.get(pred, ())
        type_of, is_subtype = self.type_of, self.is_subtype
        for fact in sorted(facts):
            if len(fact) != len(placeholders):
                continue
            added = []
            for ph, value in zip(placeholders, fact):
                if not is_subtype(type_of.get(value, "object"), ph[1]):
                    break
                existing = mapping.get(ph)
                if existing is None:
                    if value in used:
                        break
                    mapping[ph] = value
                    used.add(value)
                    added.append(ph)
                elif existing != value:
                    break
            else:
                yield from self._answers(atoms, depth + 1, mapping, used)
            for ph in added:
                used.discard(mapping.pop(ph))

    def derive(self, symbols: list[tuple], mapping: dict) -> str:
        return "".join(self._symbol(symbol, mapping) for symbol in symbols)

    def rule(self, name: str, mapping: dict) -> str:
        for condition, symbols in self.grammar.rules[name]:
            if condition is None or next(self.answers(condition, mapping), None) is not None:
                return self.derive(symbols, mapping)
        raise RuntimeError(f"no alternative of grammar rule {shown(name)} applies")

    def _contexts(self, symbol: tuple, mapping: dict) -> list[dict]:
        _, _, query = symbol
        return [mapping] if query is None else list(self.answers(query, mapping))

    def _symbol(self, symbol: tuple, mapping: dict) -> str:
        kind = symbol[0]
        if kind == "text":
            return symbol[1]
        if kind == "rule":
            return self.rule(symbol[1], mapping)
        if kind == "expr":
            return self._expr(symbol[1], mapping)
        if kind == "cond":
            return "".join(self._symbol(symbol[1], ctx) for ctx in self._contexts(symbol, mapping))
        contexts = self._contexts(symbol[1], mapping)  # list
        items = [self._symbol(symbol[1][1], ctx) for ctx in contexts]
        if not items:
            return self.rule("list_empty", mapping)
        if len(items) == 1:
            return items[0]
        sep = self.rule("list_separator", mapping)
        return sep.join(items[:-1]) + self.rule("list_last_separator", mapping) + items[-1]

    def _expr(self, expr: Expr, mapping: dict) -> str:
        variables = {ph[0]: value for ph, value in mapping.items()}
        value = ""
        for terms in expr.alternatives:
            value = ""
            for term in terms:
                if term[0] == "lit":
                    value += term[1]
                else:
                    ident = variables.get(term[1])
                    if ident is None:
                        raise RuntimeError(f"grammar expression names unbound variable {shown(term[1])}")
                    value += self.entity[ident][term[2]]
            if value:
                return value
        return value
