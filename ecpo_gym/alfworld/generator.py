"""Procedurally generated ALFWorld households: PDDL problems in ALFWorld's own domain, with an expert plan.

Domain, grammar, goal templates and the object/receptacle tables come from the installed ``alfworld``
package (``alfworld/data/alfred.pddl``, ``alfred.twl2``, ``alfworld.gen.goal_library``,
``alfworld.gen.constants``); this module only decides which household to build (``docs/environments.md``):

- a room kind allowed for the task type (``constants.GOALS_VALID``), receptacles drawn from that room's
  furniture (openable classes start closed), objects placed where ``VAL_RECEPTACLE_OBJECTS`` allows,
  desk lamps (some already on) for Look tasks;
- a goal in the same logical form as the real games, never true at reset (the target class is never placed
  in the destination class);
- a constructive expert plan kept as raw-id steps and rendered to commands with the demangled names of the
  loaded engine (``render_plan``), so it always uses exactly the names the agent sees.

``generate_game(task_type, seed)`` is deterministic: the same arguments give the same game dict.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from importlib import resources

import numpy as np

from ecpo_gym.alfworld.engine import SUBTASKS, TASK_TYPES
from ecpo_gym.kwargs import check_count, check_int_pair, shown

SUBTASK_PREFIX = {subtask: prefix for prefix, subtask in TASK_TYPES.items()}

# Furniture per room kind (receptacle classes of ALFRED scenes; movable receptacles such as Bowl left out).
ROOM_RECEPTACLES: dict[str, tuple[str, ...]] = {
    "Kitchen": ("Cabinet", "Drawer", "CounterTop", "Fridge", "Microwave", "SinkBasin", "StoveBurner",
                "Toaster", "CoffeeMachine", "DiningTable", "GarbageCan", "Shelf"),
    "LivingRoom": ("Sofa", "ArmChair", "CoffeeTable", "SideTable", "TVStand", "Drawer", "Cabinet", "Dresser",
                   "Shelf", "GarbageCan", "Ottoman", "DiningTable", "Safe"),
    "Bedroom": ("Bed", "Desk", "Drawer", "Dresser", "SideTable", "Shelf", "GarbageCan", "Safe",
                "LaundryHamper", "ArmChair"),
    "Bathroom": ("Toilet", "SinkBasin", "BathtubBasin", "CounterTop", "Cabinet", "Drawer", "TowelHolder",
                 "HandTowelHolder", "ToiletPaperHanger", "GarbageCan", "Shelf", "Dresser", "Cart"),
}
# Scenery of each room kind: not pickupable; the first group sits in receptacles (visible on arrival), the
# second only at a location, as windows and paintings do in the real problems.
ROOM_DECOR: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "Kitchen": (("HousePlant", "PaperTowelRoll"), ("Window", "Chair", "LightSwitch", "StoveKnob", "Blinds")),
    "LivingRoom": (("HousePlant", "Television"), ("Window", "Painting", "Chair", "Curtains", "LightSwitch",
                                                 "FloorLamp", "Boots")),
    "Bedroom": (("HousePlant", "TeddyBear"), ("Window", "Painting", "Mirror", "Blinds", "Chair", "LightSwitch",
                                              "Curtains", "Poster", "Boots")),
    "Bathroom": (("ScrubBrush", "HousePlant"), ("Mirror", "ShowerDoor", "ShowerGlass", "LightSwitch", "Window",
                                                "Curtains", "LaundryHamperLid")),
}
DECOR_RECEPTACLES = ("CounterTop", "DiningTable", "CoffeeTable", "SideTable", "TVStand", "Dresser", "Desk",
                     "Shelf", "Toilet", "Bed")
# Classes that come in many copies in real scenes get a higher draw weight.
MANY_COPIES = {"Cabinet": 4.0, "Drawer": 4.0, "StoveBurner": 2.0, "Shelf": 2.0, "CounterTop": 1.5}
LAMP_CLASS = "DeskLamp"
LAMP_RECEPTACLES = ("Desk", "SideTable", "Dresser")
# The appliance each transform task needs, in the domain's action preconditions.
APPLIANCE = {"Clean": "SinkBasin", "Heat": "Microwave", "Cool": "Fridge"}
ABILITY = {"Clean": "Cleanable", "Heat": "Heatable", "Cool": "Coolable"}
STATE_PREDICATE = {"Cleanable": "cleanable", "Heatable": "heatable", "Coolable": "coolable",
                   "Toggleable": "toggleable", "Sliceable": "sliceable"}


@dataclass(frozen=True)
class _Tables:
    domain: str
    grammar: str
    goal_pddl: dict[str, str]
    goal_templates: dict[str, list[str]]
    can_contain: dict[str, frozenset[str]]
    abilities: dict[str, frozenset[str]]
    openable: frozenset[str]
    valid_rooms: dict[str, frozenset[str]]
    pickupable: frozenset[str]


@functools.cache
def alfworld_tables() -> _Tables:
    """Read ALFWorld's domain, grammar, goal library and object tables from the installed package."""
    from alfworld.gen import constants, goal_library

    data = resources.files("alfworld") / "data"
    domain = (data / "alfred.pddl").read_text()
    grammar = (data / "alfred.twl2").read_text()
    can_contain = {
        r: frozenset(o for o in objs if "Sliced" not in o)
        for r, objs in constants.VAL_RECEPTACLE_OBJECTS.items()
    }
    pickupable = frozenset().union(*can_contain.values()) - {LAMP_CLASS, "FloorLamp"}
    prefixes = {SUBTASK_PREFIX[s] for s in SUBTASKS}
    return _Tables(
        domain=domain,
        grammar=grammar,
        goal_pddl={p: goal_library.gdict[p]["pddl"] for p in prefixes},
        goal_templates={p: list(goal_library.gdict[p]["templates"]) for p in prefixes},
        can_contain=can_contain,
        abilities={k: frozenset(v) for k, v in constants.VAL_ACTION_OBJECTS.items()},
        openable=frozenset(constants.OPENABLE_CLASS_LIST),
        valid_rooms={p: frozenset(constants.GOALS_VALID[p]) for p in prefixes},
        pickupable=pickupable,
    )


@dataclass
class GeneratedGame:
    """One generated household: the game dict ``PddlEnv.load`` takes and its expert plan in raw ids."""

    task_type: str
    seed: int
    room: str
    goal: str
    game: dict
    plan: list[tuple[str, ...]]
    receptacles: list[str] = field(default_factory=list)
    objects: list[str] = field(default_factory=list)


def _instance_id(cls: str, n: int) -> str:
    # basins are ids like Sink_bar_01_bar_SinkBasin, which the demangler names "sinkbasin N"
    if cls.endswith("Basin"):
        return f"{cls[: -len('Basin')]}_bar_{n:02d}_bar_{cls}"
    return f"{cls}_bar_{n:02d}"


class _Household:
    """Mutable builder of one problem."""

    def __init__(self, rng: np.random.Generator, tables: _Tables) -> None:
        self.rng = rng
        self.tables = tables
        self.receptacles: list[tuple[str, str]] = []  # (id, class)
        self.objects: list[tuple[str, str, str]] = []  # (id, class, receptacle id)
        self.toggled: set[str] = set()
        self.location_only: set[str] = set()  # scenery placed at a receptacle's location, not in it
        self._counts: dict[str, int] = {}

    def new_id(self, cls: str) -> str:
        self._counts[cls] = self._counts.get(cls, 0) + 1
        return _instance_id(cls, self._counts[cls])

    def add_receptacle(self, cls: str) -> str:
        rid = self.new_id(cls)
        self.receptacles.append((rid, cls))
        return rid

    def add_object(self, cls: str, rid: str) -> str:
        oid = self.new_id(cls)
        self.objects.append((oid, cls, rid))
        return oid

    def receptacle_class(self, rid: str) -> str:
        return next(c for r, c in self.receptacles if r == rid)

    def problem(self, goal_pddl: str) -> str:
        t = self.tables
        loc = {rid: f"loc_bar_{k + 1}" for k, (rid, _) in enumerate(self.receptacles)}
        rtypes = sorted({c for _, c in self.receptacles})
        otypes = sorted({c for _, c, _ in self.objects})
        lines = ["(define (problem generated)", "(:domain alfred)", "(:objects", "agent1 - agent",
                 "loc_bar_start - location"]
        lines += [f"{lid} - location" for lid in loc.values()]
        lines += [f"{rid} - receptacle" for rid, _ in self.receptacles]
        lines += [f"{oid} - object" for oid, _, _ in self.objects]
        lines += [f"{c}Type - rtype" for c in rtypes]
        lines += [f"{c}Type - otype" for c in otypes if c not in rtypes]
        lines += [")", "(:init", "(atLocation agent1 loc_bar_start)"]
        for rid, cls in self.receptacles:
            lines.append(f"(receptacleType {rid} {cls}Type)")
            lines.append(f"(receptacleAtLocation {rid} {loc[rid]})")
            if cls in t.openable:
                lines.append(f"(openable {rid})")
        for oid, cls, rid in self.objects:
            lines.append(f"(objectType {oid} {cls}Type)")
            if oid not in self.location_only:
                lines.append(f"(inReceptacle {oid} {rid})")
            lines.append(f"(objectAtLocation {oid} {loc[rid]})")
            if cls in t.pickupable:
                lines.append(f"(pickupable {oid})")
            for ability, members in t.abilities.items():
                if cls in members and ability in STATE_PREDICATE:
                    lines.append(f"({STATE_PREDICATE[ability]} {oid})")
            if oid in self.toggled:
                lines += [f"(isToggled {oid})", f"(isOn {oid})"]
        for rt in rtypes:
            for ot in otypes:
                if ot in t.can_contain.get(rt, ()):
                    lines.append(f"(canContain {rt}Type {ot}Type)")
        lines.append(")")
        return "\n".join(lines) + "\n" + goal_pddl.replace("#", "-")


def _weighted_choice(rng: np.random.Generator, items: list[str]) -> str:
    weights = np.array([MANY_COPIES.get(c, 1.0) for c in items])
    return items[int(rng.choice(len(items), p=weights / weights.sum()))]


# ALFWorld's own households hold up to about 40 receptacles and a few objects each
MAX_RECEPTACLES = 64
MAX_OBJECTS = 10


def check_generation_args(num_receptacles, max_objects_per_receptacle) -> tuple[tuple[int, int], int]:
    """The sizes as ints, or a ``ValueError`` for sizes no household can be built with (checked when an env is
    made, so a bad kwarg fails at construction, not inside the first reset)."""
    # the generator needs a source, a destination, an appliance and a lamp holder in one room (4); the upper bound
    # keeps a reset (and its planner) well under a second
    receptacles = check_int_pair("num_receptacles", num_receptacles, 4, MAX_RECEPTACLES)
    return receptacles, check_count("max_objects_per_receptacle", max_objects_per_receptacle, 0, MAX_OBJECTS)


def generate_game(
    task_type: str,
    seed: int,
    *,
    num_receptacles: tuple[int, int] = (12, 20),
    max_objects_per_receptacle: int = 3,
) -> GeneratedGame:
    """Build the household of ``(task_type, seed)``: deterministic, solvable, goal false at reset."""
    if task_type not in SUBTASK_PREFIX:
        raise ValueError(f"unknown task type {shown(task_type)}; choose from {list(SUBTASKS)}")
    check_generation_args(num_receptacles, max_objects_per_receptacle)
    lo, hi = int(num_receptacles[0]), int(num_receptacles[1])
    t = alfworld_tables()
    prefix = SUBTASK_PREFIX[task_type]
    rng = np.random.default_rng([int(seed), SUBTASKS.index(task_type), 0xA1F])
    rooms = sorted(t.valid_rooms[prefix] & set(ROOM_RECEPTACLES))
    room = rooms[int(rng.integers(len(rooms)))]
    furniture = list(ROOM_RECEPTACLES[room])
    appliance = APPLIANCE.get(task_type)

    # target object class and destination receptacle class
    candidates = sorted(t.pickupable & (t.abilities[ABILITY[task_type]] if task_type in ABILITY else t.pickupable))
    pairs = []
    for ot in candidates:
        sources = [r for r in furniture if ot in t.can_contain.get(r, ()) and r != appliance]
        for rt in sources:
            if task_type != "Look" and len([s for s in sources if s != rt]) >= 1:
                pairs.append((ot, rt))
            elif task_type == "Look":
                pairs.append((ot, None))
                break
    obj_cls, dest_cls = pairs[int(rng.integers(len(pairs)))]
    source_classes = [r for r in furniture
                      if obj_cls in t.can_contain.get(r, ()) and r not in (dest_cls, appliance)]

    # furniture: the ones the task needs, then random fill
    house = _Household(rng, t)
    size = int(rng.integers(lo, hi + 1))
    required = [source_classes[int(rng.integers(len(source_classes)))]]
    if dest_cls is not None:
        required.append(dest_cls)
    if appliance is not None:
        required.append(appliance)
    lamp_holder_cls = None
    if task_type == "Look":
        holders = [r for r in LAMP_RECEPTACLES if r in furniture]
        lamp_holder_cls = holders[int(rng.integers(len(holders)))]
        required.append(lamp_holder_cls)
    classes = list(required)
    while len(classes) < size:
        classes.append(_weighted_choice(rng, furniture))
    order = rng.permutation(len(classes))
    for k in order:
        house.add_receptacle(classes[k])
    rids_of = {c: [rid for rid, rc in house.receptacles if rc == c] for c in set(classes)}

    # target instances (Pick2 needs two) in allowed, non-destination receptacles
    source_rids = [rid for rid, c in house.receptacles if c in source_classes]
    n_targets = int(rng.integers(2, 4)) if task_type == "Pick2" else int(rng.integers(1, 4))
    targets = [house.add_object(obj_cls, source_rids[int(rng.integers(len(source_rids)))])
               for _ in range(n_targets)]
    # lamps: the Look task's lamp, plus one on some other desks/side tables; about a third start on
    lamps = []
    lamp_rid = None
    if lamp_holder_cls is not None:
        holders = [rid for rid, c in house.receptacles if c == lamp_holder_cls]
        lamp_rid = holders[int(rng.integers(len(holders)))]
    for rid, c in house.receptacles:
        if rid == lamp_rid or (c in LAMP_RECEPTACLES and rng.random() < 0.3):
            lamp = house.add_object(LAMP_CLASS, rid)
            lamps.append(lamp)
            if rng.random() < 1 / 3:
                house.toggled.add(lamp)
    # distractors: anything the receptacle allows except the target class
    for rid, c in list(house.receptacles):
        allowed = sorted(t.can_contain.get(c, frozenset()) - {obj_cls} & t.pickupable)
        if not allowed:
            continue
        for _ in range(int(rng.integers(0, max_objects_per_receptacle + 1))):
            house.add_object(allowed[int(rng.integers(len(allowed)))], rid)

    # scenery (never pickupable, never a goal class)
    visible, hidden = ROOM_DECOR[room]
    holders = [rid for rid, c in house.receptacles if c in DECOR_RECEPTACLES]
    if holders:
        for _ in range(int(rng.integers(0, 3))):
            house.add_object(visible[int(rng.integers(len(visible)))], holders[int(rng.integers(len(holders)))])
    for _ in range(int(rng.integers(2, 6))):
        rid = house.receptacles[int(rng.integers(len(house.receptacles)))][0]
        house.location_only.add(house.add_object(hidden[int(rng.integers(len(hidden)))], rid))

    # goal
    template = t.goal_templates[prefix][int(rng.integers(len(t.goal_templates[prefix])))]
    fmt = {"obj": obj_cls, "recep": dest_cls or "", "toggle": LAMP_CLASS}
    goal_pddl = t.goal_pddl[prefix].format(**fmt)
    goal = template.format(**{k: v.lower() for k, v in fmt.items()})
    game = {
        "pddl_domain": t.domain,
        "grammar": t.grammar.replace("UNKNOWN GOAL", goal),
        "pddl_problem": house.problem(goal_pddl),
        "solvable": True,
        "walkthrough": None,
    }

    # expert plan (raw ids)
    plan: list[tuple[str, ...]] = []
    state = {"at": None, "opened": set()}
    openable = t.openable

    def visit(rid: str) -> None:
        if state["at"] != rid:
            plan.append(("go to", rid))
            state["at"] = rid
        if house.receptacle_class(rid) in openable and rid not in state["opened"]:
            plan.append(("open", rid))
            state["opened"].add(rid)

    def go(rid: str) -> None:  # appliances are used closed
        if state["at"] != rid:
            plan.append(("go to", rid))
            state["at"] = rid

    source_of = {oid: rid for oid, _, rid in house.objects}
    chosen = sorted(targets, key=lambda o: (source_of[o], o))[: 2 if task_type == "Pick2" else 1]
    dest_rid = rids_of[dest_cls][int(rng.integers(len(rids_of[dest_cls])))] if dest_cls else None
    for oid in chosen:
        visit(source_of[oid])
        plan.append(("take", oid, source_of[oid]))
        if appliance is not None:
            sink = rids_of[appliance][0]
            go(sink)
            plan.append(({"Clean": "clean", "Heat": "heat", "Cool": "cool"}[task_type], oid, sink))
        if task_type == "Look":
            # the goal holds as soon as the agent holds the object next to a lamp that is on
            if any(source_of[lamp] == state["at"] for lamp in house.toggled):
                continue
            lamp = next(lamp for lamp in lamps if source_of[lamp] == lamp_rid)
            go(lamp_rid)
            if lamp not in house.toggled:
                plan.append(("use", lamp))
        else:
            visit(dest_rid)
            plan.append(("move", oid, dest_rid))
    return GeneratedGame(
        task_type=task_type, seed=int(seed), room=room, goal=goal, game=game, plan=plan,
        receptacles=[rid for rid, _ in house.receptacles], objects=[oid for oid, _, _ in house.objects],
    )


def render_plan(plan: list[tuple[str, ...]], names: dict[str, str]) -> list[str]:
    """Turn raw-id plan steps into commands with the engine's demangled names (keys lowercased ids)."""
    def name(raw: str) -> str:
        return names[raw.lower()]

    commands = []
    for verb, *args in plan:
        if verb in ("go to", "open", "use"):
            commands.append(f"{verb} {name(args[0])}")
        elif verb == "take":
            commands.append(f"take {name(args[0])} from {name(args[1])}")
        elif verb == "move":
            commands.append(f"move {name(args[0])} to {name(args[1])}")
        else:  # clean / heat / cool
            commands.append(f"{verb} {name(args[0])} with {name(args[1])}")
    return commands


def game_json(game: GeneratedGame) -> str:
    """The game as a ``game.tw-pddl`` file's text (for saving a generated set)."""
    return json.dumps(game.game)
