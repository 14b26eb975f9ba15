"""Every environment id, declared once: entry point, kwargs, step limit, prompt template, history length, reply
parser, and the family facts the leaderboard reads (benchmark, manifest, data argument).

``register_env(EnvDeclaration(...))`` is the one public way in: it records the declaration and registers the id
with gymnasium. The built-in families are declared through it below, and a user's own environment is declared
the same way from the user's own module (``docs/environments.md``, "Add an environment"). The constructors'
step-limit defaults, prompting, reply parsing, ReAct, the trainer's config and the leaderboard all look an id up
here instead of keeping their own table or guessing from the id's spelling. ``declaration_of`` / ``family_of``
answer for an id (also ``"module:id"``, gymnasium's spelling that imports ``module`` first), a spec or a made
environment.

This module imports nothing from the environments (the built-in entry points and parsers are ``"module:attr"``
strings, loaded on use) and nothing from ``ecpo_train``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from types import MappingProxyType
from typing import Any

import gymnasium as gym

from ecpo_gym.kwargs import shown

FAMILIES = ("alfworld", "webshop", "searchqa", "diagnostic")  # the built-in families (a user's may be any name)
# (observation, action) pairs a prompt shows unless the run says otherwise, for an id declared without its own
# (and for a user's own environment).
DEFAULT_HISTORY_LENGTH = 2


@dataclass(frozen=True)
class EnvFamily:
    """``family``: its name (one of ``FAMILIES`` for the built-in ones); ``prompt``: a template name under
    ``prompts/`` (``"default"``: the generic ``<action>`` template) or the path of the family's own template file
    (``*.txt``, ``ecpo_train/policies/prompting.py`` describes its two sections); ``benchmark``: the leaderboard
    benchmark it is reported under (default: the family's name); ``manifest``: its committed evaluation manifest
    (None if it has none); ``data_kwarg``: the constructor argument naming its data folder (``"data_dir"``; None
    when it needs no data); ``open_commands``: ``"module:function"`` of the family's open command set (the commands
    a policy that picks among candidates may send beyond the admissible ones, invalid ones included:
    ``function(admissible, history, observation) -> list[str]``, admissible first; None: the family has none)."""

    family: str
    prompt: str = "default"
    benchmark: str | None = None
    manifest: str | None = None
    data_kwarg: str | None = None
    open_commands: str | None = None

    def __post_init__(self) -> None:
        if self.benchmark is None:
            object.__setattr__(self, "benchmark", self.family)

    @property
    def needs_data(self) -> bool:
        return self.data_kwarg is not None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class EnvDeclaration:
    """One registered id.

    ``entry_point``: ``"module:Class"`` or the class (any callable returning the environment); ``kwargs``: constructor arguments the registration adds;
    ``max_steps``: the step limit (the constructor's default; each environment truncates itself, so there is no
    ``TimeLimit`` wrapper); ``None`` when the environment derives it from its other arguments (the diagnostic
    corridors: twice their depth). ``history_length``: the (observation, action) pairs a prompt shows by
    default. ``reply_parser``: ``"module:function"`` of the environment's own parser from a model reply to the
    action string it steps with (``str | None``); ``None``: the policy's ``<action>...</action>`` format.
    """

    env_id: str
    entry_point: str | Callable[..., gym.Env]
    family: EnvFamily
    max_steps: int | None
    history_length: int = DEFAULT_HISTORY_LENGTH
    reply_parser: str | None = None
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def prompt(self) -> str:
        return self.family.prompt

    def load_reply_parser(self) -> Callable[[str], str | None] | None:
        """The environment's own reply parser (imported on first use), or ``None`` for the ``<action>`` format."""
        return _load(self.reply_parser) if self.reply_parser else None


def _load(entry: str) -> Any:
    module, _, attr = entry.partition(":")
    return getattr(importlib.import_module(module), attr)


_SEARCHQA_PARSER = "ecpo_gym.searchqa.protocol:reply_action"
_ALFWORLD_OPEN = "ecpo_gym.alfworld.commands:open_commands"


def _diagnostic() -> EnvFamily:
    return EnvFamily("diagnostic")  # the generic <action> template; reported as the "diagnostic" benchmark


_DECLARED: dict[str, EnvDeclaration] = {}
ENV_DECLARATIONS: Mapping[str, EnvDeclaration] = MappingProxyType(_DECLARED)  # a read-only live view


def register_env(declared: EnvDeclaration) -> EnvDeclaration:
    """Declare an environment id and register it with gymnasium (``gymnasium.make(env_id)`` then builds it; no
    ``TimeLimit`` wrapper: each environment truncates itself at its step limit). Declaring the same id again with
    an equal declaration does nothing; with another one it is a ``ValueError`` (a registry that rejects
    duplicates: two declarations of an id would drift)."""
    if not isinstance(declared, EnvDeclaration):
        raise TypeError(f"register_env takes an EnvDeclaration, got {type(declared).__name__}")
    before = _DECLARED.get(declared.env_id)
    if before is not None and before != declared:
        raise ValueError(f"{declared.env_id} is already declared ({before.entry_point}): pick another id")
    _DECLARED[declared.env_id] = declared
    if declared.env_id not in gym.registry:
        gym.register(id=declared.env_id, entry_point=declared.entry_point, kwargs=dict(declared.kwargs))
    return declared


def unregister_env(env_id: str) -> None:
    """Remove a declared id and its gymnasium registration (a test's or a notebook's throwaway environment)."""
    _DECLARED.pop(env_id, None)
    gym.registry.pop(env_id, None)


class _View(Mapping):
    """A read-only live view of one attribute of every declaration (not a second table)."""

    def __init__(self, read: Callable[[EnvDeclaration], Any]) -> None:
        self._read = read

    def __getitem__(self, env_id: str) -> Any:
        return self._read(_DECLARED[env_id])

    def __iter__(self) -> Iterator[str]:
        return iter(_DECLARED)

    def __len__(self) -> int:
        return len(_DECLARED)


ENV_ENTRY_POINTS: Mapping[str, Any] = _View(lambda d: d.entry_point)
ENV_FAMILIES: Mapping[str, EnvFamily] = _View(lambda d: d.family)

for _declared in (
    # ALFWorld: 50 steps (the paper's App. A)
    EnvDeclaration("ecpo/ALFWorld-v0", "ecpo_gym.alfworld.env:ALFWorldEnv",
             EnvFamily("alfworld", "alfworld", "alfworld", "alfworld_valid_seen", "data_dir", _ALFWORLD_OPEN), 50),
    EnvDeclaration("ecpo/ALFWorldGen-v0", "ecpo_gym.alfworld.env:ALFWorldGenEnv",
             EnvFamily("alfworld", "alfworld", "alfworld", "alfworld_gen", open_commands=_ALFWORLD_OPEN), 50),
    # WebShop: 15 steps (App. A)
    EnvDeclaration("ecpo/WebShop-v0", "ecpo_gym.webshop.env:WebShopEnv",
             EnvFamily("webshop", "webshop", "webshop", "webshop_test", "data_dir"), 15),
    EnvDeclaration("ecpo/WebShopGen-v0", "ecpo_gym.webshop.env:WebShopGenEnv",
             EnvFamily("webshop", "webshop", "webshop", "webshop_gen"), 15),
    # Search-QA: 4 turns, and the prompt keeps all 4 (verl-agent's search baseline); replies are read by the
    # environment's own Search-R1 protocol, so the trainer and the environment never disagree about a turn
    EnvDeclaration("ecpo/SearchQA-v0", "ecpo_gym.searchqa.env:SearchQAEnv",
             EnvFamily("searchqa", "searchqa", "searchqa", "searchqa", "data_dir"), 4,
             history_length=4, reply_parser=_SEARCHQA_PARSER),
    EnvDeclaration("ecpo/SearchQAGen-v0", "ecpo_gym.searchqa.env:SearchQAGenEnv",
             EnvFamily("searchqa", "searchqa", "searchqa", "searchqa_gen"), 4,
             history_length=4, reply_parser=_SEARCHQA_PARSER),
    # diagnostic MDPs of the credit study (ecpo_gym/diagnostic/)
    EnvDeclaration("ecpo/DivergentAnchor-v0", "ecpo_gym.diagnostic.env:DivergentAnchorEnv", _diagnostic(), None),
    EnvDeclaration("ecpo/DivergentAnchorNoisy-v0", "ecpo_gym.diagnostic.env:DivergentAnchorNoisyEnv", _diagnostic(), None),
    EnvDeclaration("ecpo/DivergentAnchorWide-v0", "ecpo_gym.diagnostic.env:DivergentAnchorWideEnv", _diagnostic(), None),
):
    register_env(_declared)


def _env_id(env: Any) -> str | None:
    if isinstance(env, str):
        return env.split(":", 1)[-1]
    spec = getattr(env, "spec", None) if not hasattr(env, "entry_point") else env
    if spec is None and hasattr(env, "unwrapped"):
        spec = getattr(env.unwrapped, "spec", None)
    env_id = getattr(spec, "id", None)
    return None if env_id is None else str(env_id).split(":", 1)[-1]


def recorded_env_id(env_id: Any, source: str, *, name_only: bool = False) -> str:
    """``env_id`` read from a file (a manifest, a run folder's ``config.yaml``, a checkpoint's or an RLlib
    checkpoint's config), refused unless it imports nothing: gymnasium's ``"module:id"`` spelling imports ``module``
    when the id is made, and a file is data, never code to run. The module form is for the command line and a config
    file the user names (``docs/environments.md``); ``source`` names the file in the one-line ``ValueError``.
    ``name_only``: nothing is made from the id, it only names the environment (a checkpoint's config, read to rebuild
    its policy's prompts): its id part is returned, the module left unimported."""
    if not isinstance(env_id, str) or not env_id.strip():
        raise ValueError(f"{source}: env_id must be an environment id (ecpo/...), got {shown(env_id)}")
    if ":" in env_id and name_only:
        return env_id.split(":", 1)[1]
    if ":" in env_id:
        raise ValueError(f"{source}: env_id {shown(env_id)} names a module to import, which an id read from a file "
                         "never does; give a registered id (ecpo/...), or name your module on the command line")
    return env_id


def declaration_of(env: Any) -> EnvDeclaration | None:
    """The :class:`EnvDeclaration` of an ECPO environment: ``env`` is an id (``"ecpo/ALFWorld-v0"``, also with
    the ``"ecpo_gym:"`` module prefix), a gymnasium ``EnvSpec``, or a made environment (wrapped or not).
    ``None`` for anything that is not a registered ECPO id (a user's own environment)."""
    env_id = _env_id(env)
    return None if env_id is None else ENV_DECLARATIONS.get(env_id)


def family_of(env: Any) -> EnvFamily | None:
    """The :class:`EnvFamily` of an ECPO environment (see :func:`declaration_of`); ``None`` for any other."""
    declared = declaration_of(env)
    return None if declared is None else declared.family


def open_command_rule(family: str) -> Callable[..., list[str]] | None:
    """The open command set of the environment family named ``family`` (``EnvFamily.open_commands``, imported on
    first use), or ``None`` when no declared id of that family has one."""
    for declared in _DECLARED.values():
        if declared.family.family == family and declared.family.open_commands:
            return _load(declared.family.open_commands)
    return None


def declared_max_steps(env_id: str) -> int:
    """The declared step limit of ``env_id`` (what its constructor defaults to)."""
    limit = ENV_DECLARATIONS[env_id].max_steps
    if limit is None:
        raise ValueError(f"{env_id} derives its step limit from its other arguments")
    return limit


def declared_history_length(env: Any) -> int:
    """The default prompt history of ``env`` (an id, spec or environment); ``DEFAULT_HISTORY_LENGTH`` for an id
    that is not declared here."""
    declared = declaration_of(env)
    return DEFAULT_HISTORY_LENGTH if declared is None else declared.history_length
