"""ecpo_gym: Gymnasium text-agent environments exposing canonical state keys and canonical actions.

Importing the package registers every environment id, so after ``import ecpo_gym``
``gymnasium.make("ecpo/ALFWorld-v0")`` works; ``gymnasium.make("ecpo_gym:ecpo/ALFWorld-v0")`` imports it for
you (gymnasium 1.x has no plugin auto-loading). Each id is declared once, in :mod:`ecpo_gym.families`, through
``register_env``, the call a user's own environment is declared with too (``docs/environments.md``). Entry
points are strings, so registration imports no engine: textworld, bm25s and friends load only when an
environment is made.
"""

from gymnasium.envs.registration import register, registry

from ecpo_gym.canonical import INVALID_ACTION, ActionCanonicalizer, normalize_text
from ecpo_gym.core import AnyText, TaskStart, TextAgentEnv, Transition, UnknownTaskError
from ecpo_gym.families import (
    ENV_DECLARATIONS,
    ENV_ENTRY_POINTS,
    ENV_FAMILIES,
    EnvDeclaration,
    EnvFamily,
    declaration_of,
    family_of,
    register_env,
    unregister_env,
)


def register_envs() -> None:
    """Register again with gymnasium every declared id its registry lost (idempotent; ``register_env`` registers
    each id as it is declared). ``family_of(env_id)`` gives an id's :class:`EnvFamily`; no ``max_episode_steps``:
    each environment truncates itself at its declared step limit (no ``TimeLimit`` wrapper)."""
    for env_id, declared in ENV_DECLARATIONS.items():
        if env_id not in registry:
            register(id=env_id, entry_point=declared.entry_point, kwargs=dict(declared.kwargs))


register_envs()

__all__ = [
    "ENV_DECLARATIONS",
    "ENV_ENTRY_POINTS",
    "ENV_FAMILIES",
    "INVALID_ACTION",
    "ActionCanonicalizer",
    "AnyText",
    "EnvDeclaration",
    "EnvFamily",
    "TaskStart",
    "TextAgentEnv",
    "Transition",
    "UnknownTaskError",
    "declaration_of",
    "family_of",
    "normalize_text",
    "register_env",
    "register_envs",
    "unregister_env",
]
