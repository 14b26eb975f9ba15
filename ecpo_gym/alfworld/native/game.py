"""A loaded game, compiled once: objects and names, action schemas with compiled preconditions, the goal,
the grammar. Immutable after construction, so every engine playing the game shares one copy."""

from __future__ import annotations

import functools
from collections import defaultdict

from ecpo_gym.alfworld.native.grammar import Grammar, parse_grammar, parse_symbols
from ecpo_gym.alfworld.native.logic import Conjunction, Formula, State, to_dnf
from ecpo_gym.alfworld.native.names import demangle
from ecpo_gym.alfworld.native.pddl import Domain, parse_domain, parse_problem
from ecpo_gym.kwargs import shown


class GameLoadError(ValueError):
    """A game file the native engine cannot play exactly (damaged JSON, unsupported PDDL or grammar)."""


@functools.lru_cache(maxsize=16)
def _domain(text: str) -> Domain:
    return parse_domain(text)


@functools.lru_cache(maxsize=256)
def _grammar(text: str) -> Grammar:
    return parse_grammar(text)


class Fact:
    """A fact shaped like the reference engine's propositions: ``name`` and ``str()`` agree with them."""

    __slots__ = ("_text", "args", "name")

    def __init__(self, name: str, args: tuple, text: str) -> None:
        self.name, self.args, self._text = name, args, text

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return f"Fact({self._text})"


class CompiledAction:
    """One action schema: parameters, precondition conjunctions (join plans), effects, texts."""

    def __init__(self, schema, members, grammar: Grammar, static: frozenset[str], sizes: dict[str, int]) -> None:
        self.name = schema.name
        self.params = [p for p, _ in schema.params]
        self.placeholders = [(p.lstrip("?"), t) for p, t in schema.params]
        var_types = dict(schema.params)
        types = dict(var_types)
        self.conjunctions = []
        for literals in to_dnf(schema.precondition, types):
            local = {v: t for v, t in types.items() if v in var_types or any(v in lit[2] for lit in literals)}
            self.conjunctions.append(Conjunction(literals, local, members, sizes))
        self.effects = [(None if cond is None else Formula(cond, var_types, members, sizes), positive, pred, args)
                        for cond, positive, pred, args in schema.effects]
        self.conditional = any(cond is not None for cond, *_ in self.effects)
        text = grammar.actions.get(schema.name)
        if text is None:
            raise ValueError(f"the grammar has no command template for action {shown(schema.name)}")
        self.template = text.template
        self.feedback = text.feedback
        preds = _query_predicates(text.template, grammar)
        self.static_template = preds <= static

    def ground_effects(self, binding: dict) -> list[tuple]:
        """The atom changes ``(pred, args, positive)`` of this instance, in the order they apply.

        Unconditional effects: deletes, then adds; an atom both added and deleted is added (PDDL).
        Conditional (``when``) effects follow, all of them whatever their condition, adds before deletes:
        that is what the reference engine's facts show (a used lamp ends with ``not_ison`` and without
        ``ison`` whether it was on or off). No precondition, goal or text of the domain reads those atoms,
        so following it keeps facts and state keys identical without changing play.
        """
        adds, dels, late_adds, late_dels = [], [], [], []
        for cond, positive, pred, args in self.effects:
            fact = (pred, tuple(binding.get(a, a) for a in args))
            if cond is None:
                (adds if positive else dels).append(fact)
            else:
                (late_adds if positive else late_dels).append(fact)
        dels = [f for f in dels if f not in adds]
        return ([(p, a, False) for p, a in dels] + [(p, a, True) for p, a in adds]
                + [(p, a, True) for p, a in late_adds] + [(p, a, False) for p, a in late_dels])


def _query_predicates(symbols: list[tuple], grammar: Grammar, seen: set | None = None) -> frozenset[str]:
    """Predicates any query reachable from ``symbols`` reads (to know which texts never change)."""
    seen = seen if seen is not None else set()
    preds: set[str] = set()
    for symbol in symbols:
        if symbol[0] == "list":
            symbol = symbol[1]
        if symbol[0] == "cond":
            if symbol[2] is not None:
                preds |= {atom[0] for atom in symbol[2].atoms}
            symbol = symbol[1]
        if symbol[0] == "rule" and symbol[1] not in seen:
            seen.add(symbol[1])
            for condition, rhs in grammar.rules.get(symbol[1], []):
                if condition is not None:
                    preds |= {atom[0] for atom in condition.atoms}
                preds |= _query_predicates(rhs, grammar, seen)
    return frozenset(preds)


def _check_rules(grammar: Grammar) -> None:
    """Every ``#rule#`` any text can reach must exist (the reference engine fails only when it gets there)."""
    needed = {"list_empty", "list_separator", "list_last_separator", "intro"}

    def walk(symbols):
        for symbol in symbols:
            if symbol[0] == "list":
                symbol = symbol[1]
            if symbol[0] == "cond":
                symbol = symbol[1]
            if symbol[0] == "rule":
                needed.add(symbol[1])

    for rules in grammar.rules.values():
        for _, rhs in rules:
            walk(rhs)
    for text in grammar.actions.values():
        walk(text.template)
        walk(text.feedback)
    missing = sorted(n for n in needed if n not in grammar.rules)
    if missing:
        raise ValueError(f"the grammar uses undefined rules {missing}")


class Game:
    """Everything about one game that does not change while playing it."""

    def __init__(self, data: dict) -> None:
        for key in ("pddl_domain", "grammar", "pddl_problem"):
            if not isinstance(data.get(key), str):
                raise TypeError(f"the game has no {shown(key)} text")
        self.domain = _domain(data["pddl_domain"])
        self.problem = parse_problem(data["pddl_problem"], self.domain)
        self.grammar = _grammar(data["grammar"])
        _check_rules(self.grammar)
        self.walkthrough = data.get("walkthrough")
        objects = self.problem.objects
        self.type_of = dict(objects)
        types = set(self.domain.supertypes) | set(objects.values()) | {"object"}
        # a type no object has (the domain writes "?l - location," in examineObject) has no members
        members = defaultdict(frozenset, {t: frozenset(o for o, ot in objects.items()
                                                        if self.domain.is_subtype(ot, t)) for t in types})
        changed = {pred for schema in self.domain.actions.values() for *_, pred, _ in schema.effects}
        self.static = frozenset(set(self.domain.predicates) - changed)
        sizes: dict[str, int] = {}
        for fact in self.problem.init:
            sizes[fact[0]] = sizes.get(fact[0], 0) + 1
        self.actions = [CompiledAction(self.domain.actions[name], members, self.grammar, self.static, sizes)
                        for name in self.domain.order]
        self.goal = Formula(self.problem.goal, {}, members, sizes)
        entity_ids = sorted({arg for fact in self.problem.init for arg in fact[1:]})
        names = demangle(entity_ids)
        self.entity = {i: {"name": names[i], "id": i, "indefinite": "a", "definite": "the",
                           "type": objects[i]} for i in entity_ids}
        self.names = names
        self.intro = parse_symbols("#intro#")
        self.static_state = State.frozen([f for f in self.problem.init if f[0] in self.static])
        self.static_facts: dict[str, frozenset] = dict(self.static_state.by_pred)
        self.dynamic_init = [f for f in self.problem.init if f[0] not in self.static]
        # pure functions of the game, filled while playing and shared by every engine on it
        self.command_cache: dict[tuple, str] = {}
        self.noop_cache: dict[tuple, bool] = {}
        self._facts: dict[tuple, object] = {}

    def facts_of(self, dynamic: tuple, predicates=None) -> list:
        """Static facts plus ``dynamic`` (``(pred, args set)`` pairs) as reference-shaped propositions
        (``atlocation(agent1: agent, ...)``); only those of ``predicates`` when given."""
        buckets = [(p, b) for p, b in self.static_facts.items() if predicates is None or p in predicates]
        buckets += dynamic
        fact = self.fact
        return [fact(pred, args) for pred, bucket in buckets
                if predicates is None or pred in predicates for args in bucket]

    def fact(self, pred: str, args: tuple):
        """The reference-shaped proposition of one fact (cached)."""
        key = (pred, args)
        made = self._facts.get(key)
        if made is None:
            text = "{}({})".format(pred, ", ".join(f"{a}: {self.type_of.get(a, 'object')}" for a in args))
            made = self._facts[key] = Fact(pred, args, text)
        return made
