"""Where the real ALFWorld games are on disk and how one is read: the split folder (found from ``data_dir``,
``$ALFWORLD_DATA`` or ``$ECPO_DATA_DIR/alfworld``), the games of chosen subtasks in it, and a game file loaded as
one clear error when it is damaged."""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Iterable
from pathlib import Path

from ecpo_gym.alfworld.engine import TASK_TYPES
from ecpo_gym.alfworld.native.game import GameLoadError

DOWNLOAD_HINT = (
    "Get the games with `pip install alfworld && alfworld-download` (creates $ALFWORLD_DATA/json_2.1.1/"
    "{train,valid_seen,valid_unseen}), or extract json_2.1.1-train.tar.gz, then pass data_dir=... or set "
    "ALFWORLD_DATA. No download needed for ecpo/ALFWorldGen-v0."
)
GAME_FILE = "game.tw-pddl"
KNOWN_SPLITS = ("train", "valid_seen", "valid_unseen", "valid_train")


def subtask_of(name: str) -> str:
    """Subtask of a task folder name (``pick_heat_then_place_in_recep-Apple-...`` -> ``Heat``)."""
    prefix = name.split("/", 1)[0].split("-", 1)[0]
    if prefix not in TASK_TYPES:
        raise ValueError(f"{name!r} does not start with an ALFWorld task prefix {sorted(TASK_TYPES)}")
    return TASK_TYPES[prefix]


def _has_games(folder: Path) -> bool:
    return folder.is_dir() and next(iter(glob.iglob(str(folder / "*" / "*" / GAME_FILE))), None) is not None


def resolve_split_dir(data_dir: str | os.PathLike | None, split: str) -> Path:
    """Find the split folder: ``data_dir`` or ``$ALFWORLD_DATA`` or ``$ECPO_DATA_DIR/alfworld``.

    Each root may be the benchmark data folder (holding ``alfworld/``), the ALFWorld data folder (holding
    ``json_2.1.1``), ``json_2.1.1`` itself, or the split folder.
    """
    roots: list[Path] = []
    if data_dir is not None:
        roots += [Path(data_dir), Path(data_dir) / "alfworld"]
    else:
        if os.environ.get("ALFWORLD_DATA"):
            roots.append(Path(os.environ["ALFWORLD_DATA"]))
        if os.environ.get("ECPO_DATA_DIR"):
            roots.append(Path(os.environ["ECPO_DATA_DIR"]) / "alfworld")
    tried = []
    for root in roots:
        for candidate in (root / "json_2.1.1" / split, root / split, root):
            tried.append(str(candidate))
            if _has_games(candidate):
                return candidate
    where = ", ".join(tried) if tried else "nothing (data_dir, ALFWORLD_DATA and ECPO_DATA_DIR are all unset)"
    found = sorted({folder.name for root in roots for parent in (root / "json_2.1.1", root)
                    if parent.is_dir() for folder in parent.iterdir() if _has_games(folder)})
    existing = f" Splits that exist there: {', '.join(found)}." if found else ""
    raise FileNotFoundError(f"ALFWorld split {split!r} not found: looked in {where}.{existing} {DOWNLOAD_HINT}")


def list_games(split_dir: Path, task_types: Iterable[str]) -> list[str]:
    """The split's game paths (relative to ``split_dir``, sorted) of the given subtasks; none is an error."""
    task_types = list(task_types)
    wanted = set(task_types)
    ids = sorted(os.path.relpath(path, split_dir) for path in glob.iglob(str(split_dir / "*" / "*" / GAME_FILE)))
    games = [t for t in ids if t.split("-", 1)[0] in TASK_TYPES and subtask_of(t) in wanted]
    if not games:
        raise FileNotFoundError(f"no {GAME_FILE} of task types {task_types} under {split_dir}. {DOWNLOAD_HINT}")
    return games


def read_game(path: Path) -> dict:
    """A game file's JSON object; a damaged file is one error naming it (not the JSON parser's or the engine's
    own exception)."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
        if not isinstance(data, dict):
            raise TypeError("the file does not hold a JSON object")
    except (OSError, ValueError, TypeError, RecursionError) as error:
        raise GameLoadError(f"cannot load ALFWorld game {path}: {type(error).__name__}: "
                            f"{' '.join(str(error).split())[:200]}") from None
    return data
