"""ALFWorld environments: real ``game.tw-pddl`` files (``ecpo/ALFWorld-v0``) and generated households
(``ecpo/ALFWorldGen-v0``), played on the native engine (``engine="native"``, the default,
``ecpo_gym.alfworld.native``: ~40x faster steps, ~10x less memory) or on TextWorld's PDDL engine with
alfworld's demangler (``engine="textworld"``). Both give the same texts, commands, rewards and keys: the
differential check (``scripts/alfworld_differential.py``) found no difference on any of the 3693 train and
valid_seen games (``benchmarks/results/alfworld_differential.md``).

Both follow the ``TextAgentEnv`` contract: ``info["task_type"]`` is the subtask (Pick, Look, Clean, Heat,
Cool, Pick2), ``info["state_key"]`` a digest of the positive dynamic PDDL facts (``info["observation_key"]``
is the text-based alternative), ``help`` is hidden from the admissible actions (typed anyway, it runs), and
the episode ends at the first ``won`` because the engine's flag can flip back.
"""

from __future__ import annotations

import os
import re
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any

from ecpo_gym.alfworld.engine import (
    DYNAMIC_PREDICATES,
    HELP_COMMAND,
    SUBTASKS,
    TASK_TYPES,
    entity_names,
    goal_of_intro,
    make_engine,
    release_engine,
    state_key_of_facts,
)
from ecpo_gym.alfworld.game_files import (
    GAME_FILE,
    KNOWN_SPLITS,
    list_games,
    read_game,
    resolve_split_dir,
    subtask_of,
)
from ecpo_gym.alfworld.generator import GeneratedGame, check_generation_args, generate_game, render_plan
from ecpo_gym.alfworld.native import NativeEngine, NativeState
from ecpo_gym.alfworld.native.game import GameLoadError
from ecpo_gym.canonical import INVALID_ACTION, ActionCanonicalizer
from ecpo_gym.core import (
    REWARD_FAILURE,
    REWARD_INVALID,
    REWARD_SUCCESS,
    TaskStart,
    TextAgentEnv,
    Transition,
    UnknownTaskError,
)
from ecpo_gym.families import declared_max_steps
from ecpo_gym.kwargs import check_count, check_nonempty, shown

# Template variants of ALFWorld commands, applied in order to normalised text (and to the admissible set).
ALFWORLD_REWRITES: list[tuple[str, str]] = [
    (r"[,;\"'`()\[\]]", " "),  # inner punctuation carries no identity
    (r"\b([a-z]+)(\d+)\b", r"\1 \2"),  # "desk1" -> "desk 1"
    (r"\b(?:the|a|an|some)\s+", ""),  # articles before object names
    (r"^(?:check\s+)?(?:inventory|inv|i)$", "inventory"),
    (r"^look\s+around$", "look"),
    (r"^(?:goto|(?:walk|navigate|head|travel|move|go)\s+(?:over\s+)?to)\s+", "go to "),
    (r"^(?:put|place|set|drop|move)(?:\s+down)?\s+(.+?)\s+(?:in\s*/\s*on|into|onto|inside|in|on|to)\s+(.+)$",
     r"move \1 to \2"),
    (r"^(?:pick\s+up|pick|take|get|grab|remove|retrieve)\s+(.+?)\s+(?:from|out\s+of|off\s+of|off)\s+(.+)$",
     r"take \1 from \2"),
    (r"^(?:turn\s+on|switch\s+on|toggle|activate|light)\s+(.+)$", r"use \1"),
    (r"^(?:clean|wash|rinse)\s+(.+?)\s+(?:with|using|in|at)\s+(.+)$", r"clean \1 with \2"),
    (r"^(?:heat|warm|microwave)\s+(.+?)\s+(?:with|using|in|at)\s+(.+)$", r"heat \1 with \2"),
    (r"^(?:cool|chill|refrigerate)\s+(.+?)\s+(?:with|using|in|at)\s+(.+)$", r"cool \1 with \2"),
    (r"^(?:inspect|look\s+at|check|x)\s+(.+)$", r"examine \1"),
]

ENGINES = ("native", "textworld")
DEFAULT_ENGINE = "native"


# the generated task list is built up front: a bound that keeps making the env under a second
MAX_GENERATED_TASKS = 1_000_000


def normalize_task_types(task_types: Iterable[str] | None) -> tuple[str, ...]:
    """Accept subtask names (``Heat``, any case) or folder prefixes; ``None`` means all six."""
    if task_types is None:
        return SUBTASKS
    if isinstance(task_types, str):
        task_types = [task_types]
    by_lower = {s.lower(): s for s in SUBTASKS}
    chosen = []
    for t in task_types:
        name = TASK_TYPES.get(t) or by_lower.get(str(t).lower())
        if name is None:
            raise ValueError(f"task_types: unknown ALFWorld task type {shown(t)}; choose from {list(SUBTASKS)} or {sorted(TASK_TYPES)}")
        if name not in chosen:
            chosen.append(name)
    check_nonempty("task_types", chosen, f"give at least one of {list(SUBTASKS)} (or leave it out for all six)")
    return tuple(s for s in SUBTASKS if s in chosen)


class _MemoCanonicalizer(ActionCanonicalizer):
    """The ALFWorld canonicaliser with its (pure) text -> key function memoised: the same admissible
    strings come back every step, and rewriting them dominated a native-engine step."""

    def __init__(self, rewrites, max_entries: int = 1 << 16) -> None:
        super().__init__(rewrites)
        self._keys: dict[str, str] = {}
        self._max_entries = max_entries

    def key(self, text: Any) -> str:
        if not isinstance(text, str):
            return super().key(text)
        found = self._keys.get(text)
        if found is None:
            if len(self._keys) >= self._max_entries:
                self._keys.clear()
            found = self._keys[text] = super().key(text)
        return found


class _ALFWorldBase(TextAgentEnv):
    """Shared engine handling of the real and generated ALFWorld environments."""

    canonicalizer = _MemoCanonicalizer(ALFWORLD_REWRITES)

    def __init__(
        self,
        *,
        max_steps: int = declared_max_steps("ecpo/ALFWorld-v0"),
        hide_help: bool = True,
        reward_success: float = REWARD_SUCCESS,
        reward_failure: float = REWARD_FAILURE,
        reward_invalid: float = REWARD_INVALID,
        render_mode: str | None = None,
        engine: str = DEFAULT_ENGINE,
    ) -> None:
        if engine not in ENGINES:
            raise ValueError(f"unknown ALFWorld engine {shown(engine)}; choose from {list(ENGINES)}")
        super().__init__(max_steps=max_steps, reward_success=reward_success, reward_failure=reward_failure,
                         reward_invalid=reward_invalid, render_mode=render_mode)
        self.engine = engine
        self.hide_help = bool(hide_help)
        self._engine: Any = None
        self._loaded_task: str | None = None
        self._game_state: Any = None
        self._state_key_value: str | None = None  # computed once per engine state

    # ------------------------------------------------------------------ per-source hooks
    def _game_data(self, task_id: str) -> dict:
        """The game dict (``pddl_domain``, ``grammar``, ``pddl_problem``, ...) of ``task_id``."""
        raise KeyError(task_id)

    def _task_type_of(self, task_id: str) -> str:
        raise KeyError(task_id)

    def expert_plan(self) -> list[str]:
        """Commands that win the current game from its reset state."""
        return []

    # ------------------------------------------------------------------ TextAgentEnv hooks
    def _load_task(self, task_id: str) -> TaskStart:
        task_type = self._task_type_of(task_id)
        if self._engine is None:
            self._engine = NativeEngine() if self.engine == "native" else make_engine()
        if self._loaded_task != task_id:
            self._loaded_task = None
            try:
                self._engine.load(self._game_data(task_id))
            except GameLoadError as error:  # (the engine compiles a game dict: say which task it was)
                raise GameLoadError(str(error) if task_id in str(error) else f"task {shown(task_id)}: {error}") from None
            self._loaded_task = task_id
        self._game_state = self._engine.reset()
        self._state_key_value = None
        intro = self._game_state["feedback"]
        return TaskStart(observation=intro, task=goal_of_intro(intro), task_type=task_type)

    def _admissible_actions(self) -> list[str]:
        commands = self._game_state["admissible_commands"]
        if self.hide_help:
            return [c for c in commands if c != HELP_COMMAND]
        return list(commands)

    def _state_key(self) -> str:
        if self._state_key_value is None:
            state = self._game_state
            # the native state hands out just the dynamic facts; the digest is the same either way
            facts = state.facts_of_predicates(DYNAMIC_PREDICATES) if isinstance(state, NativeState) \
                else state["_facts"]
            self._state_key_value = state_key_of_facts(facts, scope=self._loaded_task or "")
        return self._state_key_value

    def parse_action(self, action: Any) -> tuple[str, Any]:
        key, command = super().parse_action(action)
        if (key == INVALID_ACTION and self.hide_help and self.canonicalizer.key(action) == HELP_COMMAND
                and HELP_COMMAND in self._game_state["admissible_commands"]):
            return HELP_COMMAND, HELP_COMMAND
        return key, command

    def _execute(self, command: str) -> Transition:
        state, _, _ = self._engine.step(command)
        self._game_state = state
        self._state_key_value = None
        won = bool(state["won"])
        return Transition(observation=state["feedback"], terminated=won, won=won)

    def _release(self) -> None:
        release_engine(self._engine)
        self._engine = None
        self._loaded_task = None

    # ------------------------------------------------------------------ helpers
    @property
    def game_state(self) -> Any:
        """The engine's current ``GameState`` (``_facts``, ``admissible_commands``, ``won``, ...)."""
        return self._game_state

    def entity_names(self) -> dict[str, str]:
        """Raw PDDL id (lowercased) -> displayed name of the loaded game."""
        return entity_names(self._engine)


class ALFWorldEnv(_ALFWorldBase):
    """The real ALFWorld games of one split (``ecpo/ALFWorld-v0``).

    Task ids are game paths relative to the split folder
    (``pick_heat_then_place_in_recep-Apple-None-DiningTable-26/trial_.../game.tw-pddl``).
    ``split="valid_seen"`` is the evaluation default; use ``split="train"`` for training. ``data_dir`` is the
    benchmark data folder, the ALFWorld folder, ``json_2.1.1`` or the split folder (``data_path``: its old name);
    ``split`` then defaults to the name of the folder the games are in.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike | None = None,
        split: str | None = None,
        task_types: Iterable[str] | None = None,
        *,
        data_path: str | os.PathLike | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        # old name data_path kept; with no split given, valid_seen is looked up and the folder found names it
        self.split_dir = resolve_split_dir(data_dir if data_dir is not None else data_path, split or "valid_seen")
        found = self.split_dir.name
        if split is not None and found in KNOWN_SPLITS and found != split:
            raise ValueError(f"split={shown(split)} but {self.split_dir} is the {shown(found)} split")
        self.split = split if split is not None else found
        self.task_types = normalize_task_types(task_types)
        self._task_ids = list_games(self.split_dir, self.task_types)
        self._known = set(self._task_ids)
        self._walkthrough: list[str] = []

    @property
    def task_ids(self) -> Sequence[str]:
        return self._task_ids

    def _resolve_task_id(self, task_id: str) -> str:
        """A game path relative to the split folder, with or without its trailing ``/game.tw-pddl``."""
        task_id = task_id.strip().strip("/")
        if not task_id.endswith(GAME_FILE):
            task_id = f"{task_id}/{GAME_FILE}"
        if task_id not in self._known:
            raise UnknownTaskError(f"unknown ALFWorld task id {shown(task_id)} in {self.split_dir} "
                                   f"({len(self._task_ids)} games)")
        return task_id

    def _task_type_of(self, task_id: str) -> str:
        return subtask_of(task_id)

    def _game_data(self, task_id: str) -> dict:
        data = read_game(self.split_dir / task_id)
        self._walkthrough = list(data.get("walkthrough") or [])
        return data

    def expert_plan(self) -> list[str]:
        """The game's stored walkthrough (wins on its last command in all 140 valid_seen games)."""
        return list(self._walkthrough)


_GEN_ID = re.compile(r"gen/([A-Za-z0-9]+)/([0-9]+)\Z")
_SUBTASK_NAMES = {s.lower() for s in SUBTASKS}


class ALFWorldGenEnv(_ALFWorldBase):
    """Procedurally generated ALFWorld households (``ecpo/ALFWorldGen-v0``); needs no download.

    ``task_ids`` are ``gen/<task_type>/<seed>`` for ``num_tasks`` seeds, cycling over ``task_types``; any
    well-formed id resets (also seeds beyond ``num_tasks``). Games are generated lazily on reset.
    """

    def __init__(
        self,
        num_tasks: int = 300,
        task_types: Iterable[str] | None = None,
        num_receptacles: tuple[int, int] = (12, 20),
        max_objects_per_receptacle: int = 3,
        first_seed: int = 0,
        cache_size: int = 64,
        **kwargs: Any,
    ) -> None:
        self.num_receptacles, self.max_objects_per_receptacle = check_generation_args(num_receptacles,
                                                                                      max_objects_per_receptacle)
        self._cache_size = check_count("cache_size", cache_size, 1)
        super().__init__(**kwargs)
        num_tasks = check_count("num_tasks", num_tasks, 1, MAX_GENERATED_TASKS)
        first_seed = check_count("first_seed", first_seed, 0)  # 2.5 or nan: refused here, not at the first reset
        self.task_types = normalize_task_types(task_types)
        self._task_ids = [
            f"gen/{self.task_types[k % len(self.task_types)]}/{first_seed + k}" for k in range(num_tasks)
        ]
        self._games: OrderedDict[str, GeneratedGame] = OrderedDict()

    @property
    def task_ids(self) -> Sequence[str]:
        return self._task_ids

    def _parse_id(self, task_id: str) -> tuple[str, int]:
        match = _GEN_ID.match(task_id)
        if match is None or match.group(1).lower() not in _SUBTASK_NAMES:
            raise UnknownTaskError(f"generated ALFWorld task ids look like 'gen/Heat/17' (task types "
                                   f"{list(SUBTASKS)}), got {shown(task_id)}")
        return normalize_task_types([match.group(1)])[0], int(match.group(2))

    def _resolve_task_id(self, task_id: str) -> str:
        self._parse_id(task_id)  # any well-formed id resets, also seeds beyond num_tasks
        return task_id

    def game(self, task_id: str) -> GeneratedGame:
        """The generated game of ``task_id`` (cached)."""
        game = self._games.get(task_id)
        if game is None:
            task_type, seed = self._parse_id(task_id)
            game = generate_game(task_type, seed, num_receptacles=self.num_receptacles,
                                 max_objects_per_receptacle=self.max_objects_per_receptacle)
            self._games[task_id] = game
            while len(self._games) > self._cache_size:
                self._games.popitem(last=False)
        else:
            self._games.move_to_end(task_id)
        return game

    def _task_type_of(self, task_id: str) -> str:
        return self._parse_id(task_id)[0]

    def _game_data(self, task_id: str) -> dict:
        return self.game(task_id).game

    def expert_plan(self) -> list[str]:
        """The generator's constructive plan with this game's displayed names."""
        if self._task_id is None or self._engine is None:
            return []
        return render_plan(self.game(self._task_id).plan, self.entity_names())
