"""World state and grounding: which action instances apply, what they change, whether the goal holds.

A formula is compiled once into disjunctive normal form: a list of conjunctions of literals
``(positive, predicate, args)``, with ``exists`` variables renamed apart and added to the conjunction's
variables. Grounding a conjunction is a join: positive literals bind variables from an index of the facts
(each literal uses a position already bound, so most lookups touch a handful of facts), negative and ``=``
literals filter as soon as their variables are bound, and variables no positive literal binds range over
the objects of their type. Parameters are not required to be distinct (PDDL semantics).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator


class State:
    """The true facts, indexed by predicate and by (predicate, argument position, value).

    ``shared`` is another state holding facts no action changes: its sets are referenced, not copied, so
    every engine playing a game shares the game's static facts (they are never added to or removed from).
    """

    __slots__ = ("by_pred", "index")

    def __init__(self, facts=(), shared: State | None = None) -> None:
        self.by_pred: dict[str, set[tuple]] = defaultdict(set, shared.by_pred if shared else {})
        self.index: dict[tuple, set[tuple]] = defaultdict(set, shared.index if shared else {})
        for fact in facts:
            self.add(fact[0], tuple(fact[1:]))

    @classmethod
    def frozen(cls, facts) -> State:
        """A read-only state to share: frozensets per predicate and tuples per index entry (a small tuple
        costs a fraction of a set, and a game has thousands of index entries)."""
        state = cls(facts)
        state.by_pred = defaultdict(set, {p: frozenset(b) for p, b in state.by_pred.items()})
        state.index = defaultdict(set, {k: tuple(sorted(b)) for k, b in state.index.items() if b})
        return state

    def holds(self, pred: str, args: tuple) -> bool:
        return args in self.by_pred.get(pred, ())

    def add(self, pred: str, args: tuple) -> None:
        bucket = self.by_pred[pred]
        if args in bucket:
            return
        bucket.add(args)
        for pos, value in enumerate(args):
            self.index[(pred, pos, value)].add(args)

    def remove(self, pred: str, args: tuple) -> None:
        bucket = self.by_pred.get(pred)
        if not bucket or args not in bucket:
            return
        bucket.discard(args)
        for pos, value in enumerate(args):
            self.index[(pred, pos, value)].discard(args)


def to_dnf(formula: tuple, types: dict[str, str], negated: bool = False, counter: list | None = None,
           rename: dict | None = None) -> list[list[tuple]]:
    """Conjunctions (lists of literals) whose disjunction is ``formula``; ``types`` gains the renamed
    ``exists`` variables with their types."""
    counter = counter if counter is not None else [0]
    rename = rename or {}
    kind = formula[0]
    if kind == "atom":
        args = tuple(rename.get(a, a) for a in formula[2])
        return [[(not negated, formula[1], args)]]
    if kind == "not":
        return to_dnf(formula[1], types, not negated, counter, rename)
    if kind == "exists":
        if negated:
            raise ValueError("a negated 'exists' (a universal condition) is not supported")
        inner = dict(rename)
        for var, typ in formula[1]:
            counter[0] += 1
            fresh = f"{var}#{counter[0]}"
            inner[var] = fresh
            types[fresh] = typ
        return to_dnf(formula[2], types, negated, counter, inner)
    parts = [to_dnf(f, types, negated, counter, rename) for f in formula[1]]
    if (kind == "and") != negated:  # conjunction: product of the parts' disjuncts
        result: list[list[tuple]] = [[]]
        for part in parts:
            result = [left + right for left in result for right in part]
        return result
    return [conj for part in parts for conj in part]  # disjunction: concatenation


class Conjunction:
    """One conjunction compiled into a join plan over its variables."""

    def __init__(self, literals: list[tuple], var_types: dict[str, str], members: dict[str, frozenset],
                 sizes: dict[str, int] | None = None) -> None:
        self.literals = literals
        variables = []
        for _, _, args in literals:
            variables += [a for a in args if a.startswith("?") and a not in variables]
        for var in var_types:
            if var not in variables:
                variables.append(var)
        self.allowed = {v: members[var_types[v]] for v in variables}
        bound: set[str] = set()
        plan: list[tuple] = []
        pending = [lit for lit in literals if not lit[0] or lit[1] == "="]
        positives = [lit for lit in literals if lit[0] and lit[1] != "="]
        while positives or pending:
            ready = [lit for lit in pending if all(a in bound for a in lit[2] if a.startswith("?"))]
            for lit in ready:
                plan.append(("check", lit))
                pending.remove(lit)
            if not positives:
                if not pending:
                    break
                free = next(a for lit in pending for a in lit[2] if a.startswith("?") and a not in bound)
                plan.append(("enum", free))
                bound.add(free)
                continue
            # a literal with a bound argument is an index lookup; otherwise the predicate with the fewest
            # facts (in the initial state) goes first
            sizes = sizes or {}
            best = min(positives, key=lambda lit: (
                -any(not a.startswith("?") or a in bound for a in lit[2]), sizes.get(lit[1], 0)))
            positives.remove(best)
            plan.append(("join", best))
            bound.update(a for a in best[2] if a.startswith("?"))
        for var in variables:
            if var not in bound:
                plan.append(("enum", var))
        self.plan = plan
        self.variables = variables

    def bindings(self, state: State, binding: dict | None = None) -> Iterator[dict]:
        """Every assignment of the variables that makes the conjunction true (``binding`` pre-binds)."""
        yield from self._run(state, 0, dict(binding or {}))

    def _run(self, state: State, step: int, binding: dict) -> Iterator[dict]:
        if step == len(self.plan):
            yield binding
            return
        kind, item = self.plan[step]
        if kind == "check":
            positive, pred, args = item
            values = tuple(binding.get(a, a) for a in args)
            true = (values[0] == values[1]) if pred == "=" else state.holds(pred, values)
            if true == positive:
                yield from self._run(state, step + 1, binding)
            return
        if kind == "enum":
            if item in binding:
                if binding[item] in self.allowed[item]:
                    yield from self._run(state, step + 1, binding)
                return
            for value in sorted(self.allowed[item]):
                binding[item] = value
                yield from self._run(state, step + 1, binding)
            del binding[item]
            return
        _, pred, args = item
        key = next(((pred, pos, binding.get(a, a)) for pos, a in enumerate(args)
                    if not a.startswith("?") or a in binding), None)
        candidates = state.index.get(key, ()) if key is not None else state.by_pred.get(pred, ())
        for fact in list(candidates):
            new = []
            for a, value in zip(args, fact):
                if not a.startswith("?"):
                    if a != value:
                        break
                elif a in binding:
                    if binding[a] != value:
                        break
                elif value in self.allowed[a]:
                    binding[a] = value
                    new.append(a)
                else:
                    break
            else:
                yield from self._run(state, step + 1, binding)
            for a in new:
                del binding[a]


class Formula:
    """A compiled formula: true when any of its conjunctions has a satisfying binding."""

    def __init__(self, formula: tuple, var_types: dict[str, str], members: dict[str, frozenset],
                 sizes: dict[str, int] | None = None) -> None:
        types = dict(var_types)
        conjunctions = to_dnf(formula, types)
        self.conjunctions = []
        for literals in conjunctions:
            local = {v: t for v, t in types.items()
                     if v in var_types or any(v in lit[2] for lit in literals)}
            self.conjunctions.append(Conjunction(literals, local, members, sizes))

    def holds(self, state: State, binding: dict | None = None) -> bool:
        return any(next(c.bindings(state, binding), None) is not None for c in self.conjunctions)


def type_members(objects: dict[str, str], is_subtype) -> dict[str, frozenset]:
    """Type name -> the objects of that type or a subtype (``object`` holds them all)."""
    types = set(objects.values()) | {"object"}
    return defaultdict(frozenset, {t: frozenset(o for o, ot in objects.items() if is_subtype(ot, t))
                                   for t in types})
