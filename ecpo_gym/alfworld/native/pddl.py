"""PDDL domain and problem of an ALFWorld game, parsed into plain tuples the grounder compiles.

Supported: typed STRIPS with ``and``/``or``/``not``/``exists``/``=`` in preconditions and goals, ``when``
conditional effects, and ``increase`` cost effects (ignored: costs never reach the player). Anything else
(``forall``, ``imply``, derived predicates, numeric conditions) raises ``ValueError`` naming the construct,
so a game the engine cannot reproduce is refused instead of played differently.

Formulas: ``("atom", pred, args)``, ``("not", f)``, ``("and", [f])``, ``("or", [f])``,
``("exists", [(var, type)], f)``; ``=`` is the atom predicate ``"="``. Variables keep their ``?``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ecpo_gym.alfworld.native.sexpr import read_one, typed_list
from ecpo_gym.kwargs import shown

ROOT_TYPE = "object"


@dataclass
class ActionSchema:
    name: str
    params: list[tuple[str, str]]
    precondition: tuple
    effects: list[tuple]  # (condition formula or None, positive, pred, args)


@dataclass
class Domain:
    name: str
    supertypes: dict[str, str]
    predicates: dict[str, int]
    actions: dict[str, ActionSchema]
    order: list[str] = field(default_factory=list)  # action names in file order

    def is_subtype(self, sub: str, sup: str) -> bool:
        """Whether ``sub`` is ``sup`` or below it (every type is below ``object``)."""
        seen = set()
        while sub not in seen:
            if sub == sup or sup == ROOT_TYPE:
                return True
            seen.add(sub)
            sub = self.supertypes.get(sub, ROOT_TYPE)
        return False


@dataclass
class Problem:
    name: str
    objects: dict[str, str]  # name -> type, in declaration order
    init: list[tuple]  # (pred, *args)
    goal: tuple


def _formula(expr, arity: dict[str, int], where: str) -> tuple:
    if not isinstance(expr, list):
        raise TypeError(f"{where}: expected a formula, got {shown(expr)}")
    if not expr:
        return ("and", [])
    head = expr[0]
    if head == "and":
        return ("and", [_formula(e, arity, where) for e in expr[1:]])
    if head == "or":
        return ("or", [_formula(e, arity, where) for e in expr[1:]])
    if head == "not":
        if len(expr) != 2:
            raise ValueError(f"{where}: 'not' takes one formula")
        return ("not", _formula(expr[1], arity, where))
    if head == "exists":
        if len(expr) != 3 or not isinstance(expr[1], list):
            raise ValueError(f"{where}: malformed 'exists'")
        return ("exists", typed_list(expr[1]), _formula(expr[2], arity, where))
    if not isinstance(head, str) or head.startswith(":") or any(isinstance(a, list) for a in expr[1:]):
        raise ValueError(f"{where}: unsupported PDDL construct {_show(expr)}")
    if head in ("forall", "imply", "when"):
        raise ValueError(f"{where}: unsupported PDDL construct {shown(head)}")
    expected = 2 if head == "=" else arity.get(head)
    if expected is None:
        raise ValueError(f"{where}: unknown predicate {shown(head)}")
    if len(expr) - 1 != expected:
        raise ValueError(f"{where}: {shown(head)} takes {expected} arguments, got {len(expr) - 1}")
    return ("atom", head, tuple(expr[1:]))


def _effects(expr, arity: dict[str, int], where: str, condition=None) -> list[tuple]:
    if not isinstance(expr, list) or not expr:
        return []
    head = expr[0]
    if head == "and":
        return [e for sub in expr[1:] for e in _effects(sub, arity, where, condition)]
    if head in ("increase", "decrease"):
        return []  # action costs
    if head == "when":
        if condition is not None or len(expr) != 3:
            raise ValueError(f"{where}: nested or malformed 'when'")
        return _effects(expr[2], arity, where, _formula(expr[1], arity, where))
    positive = head != "not"
    atom = _formula(expr if positive else expr[1], arity, where)
    if atom[0] != "atom" or atom[1] == "=":
        raise ValueError(f"{where}: unsupported effect {_show(expr)}")
    return [(condition, positive, atom[1], atom[2])]


def _show(expr) -> str:
    if isinstance(expr, list):
        return "(" + " ".join(_show(e) for e in expr) + ")"
    return str(expr)


def _sections(body: list, allowed: set[str], what: str) -> list[tuple[str, list]]:
    out = []
    for part in body:
        if not isinstance(part, list) or not part or not isinstance(part[0], str):
            raise ValueError(f"{what}: unexpected item {_show(part)[:80]}")
        if part[0] not in allowed:
            raise ValueError(f"{what}: unsupported section {shown(part[0])}")
        out.append((part[0], part[1:]))
    return out


def parse_domain(text: str) -> Domain:
    """Parse the domain text (types, predicates, actions)."""
    expr = read_one(text)
    if len(expr) < 2 or expr[0] != "define" or not isinstance(expr[1], list) or expr[1][:1] != ["domain"]:
        raise ValueError("the domain does not start with (define (domain ...))")
    name = expr[1][1]
    supertypes: dict[str, str] = {}
    arity: dict[str, int] = {}
    actions: dict[str, ActionSchema] = {}
    order: list[str] = []
    allowed = {":requirements", ":types", ":predicates", ":functions", ":action", ":constants"}
    for head, rest in _sections(expr[2:], allowed, "domain"):
        if head == ":types":
            for sub, sup in typed_list(rest):
                if sub != ROOT_TYPE:
                    supertypes[sub] = sup
        elif head == ":predicates":
            for pred in rest:
                arity[pred[0]] = len(typed_list(pred[1:]))
        elif head == ":constants":
            if rest:
                raise ValueError("domain constants are not supported")
        elif head == ":action":
            action = _action(rest, arity)
            actions[action.name] = action
            order.append(action.name)
    return Domain(name=name, supertypes=supertypes, predicates=arity, actions=actions, order=order)


def _action(rest: list, arity: dict[str, int]) -> ActionSchema:
    name = rest[0]
    fields = {}
    for k in range(1, len(rest) - 1, 2):
        fields[rest[k]] = rest[k + 1]
    unknown = set(fields) - {":parameters", ":precondition", ":effect"}
    if unknown or (len(rest) - 1) % 2:
        raise ValueError(f"action {shown(name)}: unsupported fields {sorted(unknown)}")
    where = f"action {shown(name)}"
    return ActionSchema(
        name=name,
        params=typed_list(fields.get(":parameters", [])),
        precondition=_formula(fields.get(":precondition", []), arity, where),
        effects=_effects(fields.get(":effect", []), arity, where),
    )


def parse_problem(text: str, domain: Domain) -> Problem:
    """Parse the problem text (objects, initial facts, goal) against ``domain``'s predicates."""
    expr = read_one(text)
    if len(expr) < 2 or expr[0] != "define" or not isinstance(expr[1], list) or expr[1][:1] != ["problem"]:
        raise ValueError("the problem does not start with (define (problem ...))")
    objects: dict[str, str] = {}
    init: list[tuple] = []
    goal = None
    for head, rest in _sections(expr[2:], {":domain", ":objects", ":init", ":goal", ":metric"}, "problem"):
        if head == ":domain" and rest != [domain.name]:
            raise ValueError(f"problem is for domain {shown(rest)}, not {shown(domain.name)}")
        if head == ":objects":
            for obj, typ in typed_list(rest):
                if typ != ROOT_TYPE and typ not in domain.supertypes:
                    raise ValueError(f"object {shown(obj)} has unknown type {shown(typ)}")
                objects.setdefault(obj, typ)
        elif head == ":init":
            for fact in rest:
                if isinstance(fact, list) and fact[:1] == ["="]:
                    continue  # numeric fluent values (costs)
                atom = _formula(fact, domain.predicates, "init")
                if atom[0] != "atom":
                    raise ValueError(f"init: expected an atom, got {_show(fact)}")
                init.append((atom[1], *atom[2]))
        elif head == ":goal":
            if len(rest) != 1:
                raise ValueError("problem: ':goal' takes one formula")
            goal = _formula(rest[0], domain.predicates, "goal")
    if goal is None:
        raise ValueError("problem has no ':goal'")
    for fact in init:
        missing = [a for a in fact[1:] if a not in objects]
        if missing:
            raise ValueError(f"init fact {fact} names undeclared objects {missing}")
    return Problem(name=expr[1][1], objects=objects, init=init, goal=goal)
