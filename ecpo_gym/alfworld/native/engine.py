"""``NativeEngine``: plays a ``game.tw-pddl`` game with the reference engine's texts, commands and flags.

Same interface as the TextWorld engine the env uses: ``load(path_or_dict)``, ``reset() -> state``,
``step(command) -> (state, reward, done)`` where ``state`` has ``feedback``, ``admissible_commands``
(sorted, deduplicated, ``help`` included), ``won`` and ``_facts`` (every fact, with the ``not_*`` facts
the reference engine accumulates for deleted atoms). A command is matched after
``strip()`` against the commands of the current state, the first instance producing that text wins;
anything else answers ``Nothing happens.`` and changes nothing. ``reward`` is 1 when won, ``done == won``.

Instances whose effects only restate their precondition (``go to`` a receptacle at the agent's own
location) are not offered, as the planner's translation drops such operators.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from typing import Any

from ecpo_gym.alfworld.native.game import Fact, Game, GameLoadError
from ecpo_gym.alfworld.native.logic import State
from ecpo_gym.alfworld.native.textgen import TextGenerator

NOTHING_HAPPENS = "Nothing happens."
_GAMES: OrderedDict[tuple, Game] = OrderedDict()
_GAMES_LOCK = threading.Lock()
_GAMES_MAX = 64


class NativeState(dict):
    """The per-step state dict; ``_facts`` is built only when read."""

    def __init__(self, engine: NativeEngine, **values: Any) -> None:
        super().__init__(values)
        self._game = engine.game  # kept, so an old state still reads right after the engine loads another game
        self._dynamic = engine.dynamic_facts()

    def __missing__(self, key: str) -> Any:
        if key != "_facts":
            raise KeyError(key)
        facts = self._game.facts_of(self._dynamic)
        self["_facts"] = facts
        return facts

    def facts_of_predicates(self, predicates) -> list[Fact]:
        """Only the facts of ``predicates`` (a set of names): what a state key needs, without formatting
        the many static facts of other predicates."""
        return self._game.facts_of(self._dynamic, predicates)


def load_game(source: str | os.PathLike | dict) -> Game:
    """The compiled game of a file path or game dict (cached per process); one ``GameLoadError`` naming the
    file when it cannot be read, parsed or played exactly."""
    where = "<game dict>" if isinstance(source, dict) else os.fspath(source)
    try:
        if isinstance(source, dict):
            data = source
        else:
            with open(source) as handle:
                data = json.load(handle)
        if not isinstance(data, dict):
            raise TypeError("the file does not hold a JSON object")
        key = tuple(str(data.get(k)) for k in ("pddl_domain", "grammar", "pddl_problem", "walkthrough"))
        with _GAMES_LOCK:
            game = _GAMES.get(key)
            if game is not None:
                _GAMES.move_to_end(key)
                return game
        game = Game(data)
    except GameLoadError:
        raise
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError) as error:
        raise GameLoadError(f"cannot load ALFWorld game {where}: {type(error).__name__}: "
                            f"{' '.join(str(error).split())[:200]}") from None
    with _GAMES_LOCK:
        _GAMES[key] = game
        while len(_GAMES) > _GAMES_MAX:
            _GAMES.popitem(last=False)
    return game


class NativeEngine:
    """Plays one game at a time; cheap to create (the compiled game is shared)."""

    def __init__(self) -> None:
        self.game: Game | None = None
        self._state: State | None = None
        self._text: TextGenerator | None = None
        self._commands: dict[str, tuple] = {}
        self.moves = 0

    # ------------------------------------------------------------------ public interface
    def load(self, source: str | os.PathLike | dict) -> None:
        self.game = load_game(source)
        self._text = TextGenerator(self.game.grammar, self.game.entity, self.game.type_of,
                                   self.game.domain.is_subtype)
        self._state = None

    @property
    def walkthrough(self) -> list[str] | None:
        return self.game.walkthrough if self.game is not None else None

    def entity_names(self) -> dict[str, str]:
        """Raw id (lowercased) -> displayed name of the loaded game."""
        return dict(self.game.names)

    def reset(self) -> NativeState:
        if self.game is None:
            raise RuntimeError("load a game before reset")
        self._state = State(self.game.dynamic_init, shared=self.game.static_state)
        self._text.state = self._state
        self.moves = 0
        feedback = self._text.derive(self.game.intro, {})
        return self._snapshot(feedback)

    def step(self, command: str) -> tuple[NativeState, int, bool]:
        if self._state is None:
            raise RuntimeError("reset the engine before step")
        found = self._commands.get(command.strip())
        if found is None:
            feedback = NOTHING_HAPPENS
        else:
            action, binding = found
            for pred, args, positive in action.ground_effects(binding):
                self._apply(pred, args, positive)
            mapping = {ph: binding[p] for ph, p in zip(action.placeholders, action.params)}
            feedback = self._text.derive(action.feedback, mapping)
            self.moves += 1
        state = self._snapshot(feedback)
        won = state["won"]
        return state, int(won), won

    # ------------------------------------------------------------------ internals
    def _apply(self, pred: str, args: tuple, positive: bool) -> None:
        """Make one atom true or false; a false atom leaves a ``not_`` fact, as in the reference facts."""
        state = self._state
        if positive:
            state.remove("not_" + pred, args)
            state.add(pred, args)
        else:
            state.remove(pred, args)
            state.add("not_" + pred, args)

    def _snapshot(self, feedback: str) -> NativeState:
        self._commands = self._valid_commands()
        won = self.game.goal.holds(self._state)
        return NativeState(self, feedback=feedback, admissible_commands=sorted(self._commands), won=won,
                           lost=False, done=won, score=int(won))

    def _valid_commands(self) -> dict[str, tuple]:
        """Command text -> (action, binding) of every applicable instance, first instance per text."""
        commands: dict[str, tuple] = {}
        state = self._state
        for action in self.game.actions:
            seen = set()
            for conjunction in action.conjunctions:
                for binding in conjunction.bindings(state):
                    args = tuple(binding[p] for p in action.params)
                    if args in seen:
                        continue
                    seen.add(args)
                    if not action.conditional and self._is_noop(action, args, conjunction, binding):
                        continue
                    command = self._command(action, args)
                    if command not in commands:
                        commands[command] = (action, {p: binding[p] for p in action.params})
        return commands

    def _is_noop(self, action, args: tuple, conjunction, binding: dict) -> bool:
        key = (action.name, args)
        cached = self.game.noop_cache.get(key)
        if cached is None:
            grounded = {(pos, pred, tuple(binding.get(a, a) for a in lit_args))
                        for pos, pred, lit_args in conjunction.literals}
            cached = all((positive, pred, changed) in grounded
                         for pred, changed, positive in action.ground_effects(binding))
            self.game.noop_cache[key] = cached
        return cached

    def _command(self, action, args: tuple) -> str:
        key = (action.name, args)
        command = self.game.command_cache.get(key)
        if command is None:
            mapping = {ph: value for ph, value in zip(action.placeholders, args)}
            command = self._text.derive(action.template, mapping)
            if action.static_template:
                self.game.command_cache[key] = command
        return command

    def dynamic_facts(self) -> tuple:
        """The facts of predicates actions change (``not_*`` included), frozen: a cheap per-step copy."""
        static = self.game.static
        return tuple((pred, frozenset(bucket)) for pred, bucket in self._state.by_pred.items()
                     if pred not in static and bucket)

    def close(self) -> None:
        self.game = None
        self._state = None
        self._text = None
        self._commands = {}
