"""TextWorld's PDDL engine with alfworld's demangler: building it, speeding up reset, reading its state.

Facts measured on the real games (``docs/environments.md``, ALFWorld); the ones this module acts on:

- every ``reset`` runs the PDDL-to-SAS translation twice; the translation only reads its inputs and its
  result is only read, so memoising it on ``(domain, problem, optimize)`` cuts reset ~7x;
- the translation rewrites ``sys.argv``, swaps ``sys.stdout`` and edits module globals, so one process
  must never translate from two threads (``GroupVectorEnv`` uses processes; the memo holds a lock);
- ``state["won"]`` can flip back to ``False``: callers end the episode at the first ``won``;
- the anchor key is a digest of the positive *dynamic* facts (``checked`` and static facts left out).
"""

from __future__ import annotations

import contextlib
import hashlib
import sys
import threading
from collections import OrderedDict
from typing import Any

# Predicates that change during play; their positive facts identify the world state (docs/environments.md).
DYNAMIC_PREDICATES = frozenset({
    "atlocation", "opened", "inreceptacle", "objectatlocation", "holds", "holdsany",
    "isclean", "ishot", "iscool", "ison", "istoggled", "issliced",
})

# Folder prefix of a real game -> subtask name used in ``info["task_type"]``.
TASK_TYPES: dict[str, str] = {
    "pick_and_place_simple": "Pick",
    "look_at_obj_in_light": "Look",
    "pick_clean_then_place_in_recep": "Clean",
    "pick_heat_then_place_in_recep": "Heat",
    "pick_cool_then_place_in_recep": "Cool",
    "pick_two_obj_and_place": "Pick2",
}
SUBTASKS: tuple[str, ...] = ("Pick", "Look", "Clean", "Heat", "Cool", "Pick2")
TASK_PREFIX = "Your task is to: "
HELP_COMMAND = "help"

_MEMO_SIZE = 128  # ~1.4 MB per real game (one translation each), so ~180 MB per process at most
_memo: OrderedDict[tuple, Any] = OrderedDict()
_memo_lock = threading.Lock()
_memo_installed = False
_share_replan = True


def install_translation_memo(max_entries: int = _MEMO_SIZE, share_replan_translation: bool = True) -> None:
    """Replace ``fast_downward.pddl2sas`` by an LRU-memoised version (idempotent, process-wide).

    ``share_replan_translation``: the engine translates every problem twice, the second time optimised for
    Fast Downward's *planner*, which only ``policy_commands`` / walkthrough replanning use (never requested
    here). Sharing the unoptimised translation for that slot keeps every observation, admissible set and
    ``won`` flag identical and cuts the load of a new game by about a third; plans, if anyone asks for
    them, stay valid (the planner just searches the unpruned task). Pass ``False`` before any engine is
    built to keep the optimised translation.
    """
    global _memo_installed, _MEMO_SIZE, _share_replan
    _MEMO_SIZE = int(max_entries)
    _share_replan = bool(share_replan_translation) if not _memo_installed else _share_replan
    if _memo_installed:
        return
    import fast_downward

    translate = fast_downward.pddl2sas

    def memoised_pddl2sas(domain: str, problem: str, verbose: bool = False, optimize: bool = False):
        optimize = bool(optimize) and not _share_replan
        key = (hash(domain), len(domain), hash(problem), len(problem), optimize)
        with _memo_lock:
            hit = _memo.get(key)
            if hit is not None:
                _memo.move_to_end(key)
                return hit
            argv = list(sys.argv)
            try:
                result = translate(domain, problem, verbose=verbose, optimize=optimize)
            finally:
                sys.argv = argv  # the translator overwrites it
            _memo[key] = result
            while len(_memo) > _MEMO_SIZE:
                _memo.popitem(last=False)
            return result

    memoised_pddl2sas.__wrapped__ = translate  # type: ignore[attr-defined]
    fast_downward.pddl2sas = memoised_pddl2sas
    _memo_installed = True


_parse_memo: dict[tuple, Any] = {}
_parse_memo_installed = False


def _memoised_parser(parse: Any, namespace: str, max_entries: int) -> Any:
    import copy

    def memoised_parse(text: str, *args: Any, **kwargs: Any) -> Any:
        if args or set(kwargs) - {"rule_name", "trace"} or kwargs.get("trace") or not isinstance(text, str):
            return parse(text, *args, **kwargs)
        key = (namespace, text, kwargs.get("rule_name"))
        with _memo_lock:
            parsed = _parse_memo.get(key)
            if parsed is None:
                parsed = parse(text, rule_name=kwargs.get("rule_name"))
                if len(_parse_memo) >= max_entries:
                    _parse_memo.clear()
                _parse_memo[key] = parsed
            return copy.deepcopy(parsed)

    memoised_parse.__wrapped__ = parse  # type: ignore[attr-defined]
    return memoised_parse


def install_grammar_parse_memo(max_entries: int = 8192) -> None:
    """Memoise TextWorld's TatSu parses of grammar templates and logic queries (idempotent, process-wide).

    On every step the engine re-parses each command/feedback template (``textworld.envs.pddl.textgen``)
    and each grammar condition (``textworld.logic``) it derives: most of step time. A parse is a pure
    function of its text; callers mutate the parsed objects (contexts are attached), so each call returns a
    deep copy of the cached parse, which costs a fraction of parsing.
    """
    global _parse_memo_installed
    if _parse_memo_installed:
        return
    import textworld.logic
    from textworld.envs.pddl import textgen

    textgen._parse_and_convert = _memoised_parser(textgen._parse_and_convert, "textgen", max_entries)
    textworld.logic._parse_and_convert = _memoised_parser(textworld.logic._parse_and_convert, "logic", max_entries)
    _parse_memo_installed = True


def make_engine() -> Any:
    """A fresh ``AlfredDemangler(PddlEnv)`` with numbered names (``cabinet 3``), no shuffling."""
    install_translation_memo()
    install_grammar_parse_memo()
    import textworld
    import textworld.envs.pddl
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler

    # policy_commands is never requested: it re-runs Fast Downward after every step.
    infos = textworld.EnvInfos(admissible_commands=True, won=True)
    return AlfredDemangler(shuffle=False)(textworld.envs.pddl.PddlEnv(infos))


def release_engine(engine: Any) -> None:
    """Free the planner state held by the engine's private copy of ``libdownward.so``."""
    if engine is None:
        return
    pddl_env = engine.unwrapped if hasattr(engine, "unwrapped") else engine
    lib = getattr(pddl_env, "downward_lib", None)
    if lib is not None:
        pddl_env.downward_lib = None
        with contextlib.suppress(Exception):  # closing must not raise; the state goes with the process anyway
            lib.cleanup()  # frees the planner state; dlclose (close_lib) segfaults at exit with several envs


def state_key_of_facts(facts: Any, scope: str = "") -> str:
    """The anchor key of an ALFWorld state (docs/environments.md): sha1 of ``scope`` (the game) and the sorted
    positive dynamic facts. Negated facts are named ``not_*`` and static ones are not dynamic, so neither
    enters; scoping keeps two games that happen to share a world state from sharing anchors."""
    lines = sorted(str(f) for f in facts if f.name in DYNAMIC_PREDICATES)
    return hashlib.sha1("\n".join([scope, *lines]).encode("utf-8")).hexdigest()


def goal_of_intro(intro: str) -> str:
    """The task sentence of a reset text: what follows ``Your task is to: ``, without the final period."""
    at = intro.rfind(TASK_PREFIX)
    if at < 0:
        return ""
    return intro[at + len(TASK_PREFIX):].strip().rstrip(".").strip()


def entity_names(engine: Any) -> dict[str, str]:
    """Raw PDDL id (lowercased) -> demangled name (``apple 1``) of the loaded game (either engine)."""
    from ecpo_gym.alfworld.native import NativeEngine

    if isinstance(engine, NativeEngine):
        return engine.entity_names()
    pddl_env = engine.unwrapped if hasattr(engine, "unwrapped") else engine
    return {key: info.name for key, info in pddl_env._entity_infos.items()}
