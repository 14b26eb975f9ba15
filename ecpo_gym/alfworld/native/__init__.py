"""A native ALFWorld engine: TextWorld's observable behaviour (texts, admissible commands, state facts,
``won``) computed directly from a game's PDDL and grammar, without the planner library."""

from ecpo_gym.alfworld.native.engine import NativeEngine, NativeState, load_game
from ecpo_gym.alfworld.native.game import Game, GameLoadError

__all__ = ["Game", "GameLoadError", "NativeEngine", "NativeState", "load_game"]
