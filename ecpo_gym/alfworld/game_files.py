"""Where the real ALFWorld games are on disk and how one is read: the split folder (found from ``data_dir``,
``$ALFWORLD_DATA`` or ``$ECPO_DATA_DIR/alfworld``), the games of chosen subtasks in it, and a game file loaded as
one clear error when it is damaged.

A split shipped only as its archive (``json_2.1.1-train.tar.gz`` beside ``json_2.1.1``) is extracted once, on
first use, into ``$ECPO_CACHE_DIR/alfworld/`` (default ``~/.cache/ecpo``): into a temporary folder renamed into
place when complete, so a concurrent or interrupted extraction never leaves a half-written split (a folder a
killed extraction left is removed by the next one), with every member checked to be a plain file or folder
under ``json_2.1.1/`` (no absolute path, no ``..``, no link) before it is written. The archive is read to its
end (its gzip CRC checked, nothing after the tar's last member) and the split must hold the release's number of
games (``SPLIT_GAMES``): a cut or damaged archive is one line naming it, never a smaller split. The folder's name
holds the archive's size and modification time: a replaced archive is extracted afresh."""

from __future__ import annotations

import glob
import gzip
import json
import os
import shutil
import tarfile
import zlib
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from ecpo_gym.alfworld.engine import TASK_TYPES
from ecpo_gym.alfworld.native.game import GameLoadError
from ecpo_gym.cache import cache_root, staging_folder
from ecpo_gym.kwargs import shown

DOWNLOAD_HINT = (
    "Get the games with `pip install alfworld && alfworld-download` (creates $ALFWORLD_DATA/json_2.1.1/"
    "{train,valid_seen,valid_unseen}), or put json_2.1.1-train.tar.gz there (extracted on first use), then pass "
    "data_dir=... or set ALFWORLD_DATA. No download needed for ecpo/ALFWorldGen-v0."
)
GAME_FILE = "game.tw-pddl"
KNOWN_SPLITS = ("train", "valid_seen", "valid_unseen", "valid_train")
RELEASE = "json_2.1.1"  # the folder every split lies in, and the archives' name prefix
SPLIT_GAMES = {"train": 3553, "valid_seen": 140, "valid_unseen": 134}  # the games of each split of the release


def subtask_of(name: str) -> str:
    """Subtask of a task folder name (``pick_heat_then_place_in_recep-Apple-...`` -> ``Heat``)."""
    prefix = name.split("/", 1)[0].split("-", 1)[0]
    if prefix not in TASK_TYPES:
        raise ValueError(f"{shown(name)} does not start with an ALFWorld task prefix {sorted(TASK_TYPES)}")
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
        for candidate in (root / RELEASE / split, root / split, root):
            tried.append(str(candidate))
            if _has_games(candidate):
                return candidate
    for root in roots:  # no folder: the split's archive, extracted once into the cache (module docstring)
        archive = root / split_archive_name(split)
        if archive.is_file():
            folder = extracted_archive(archive, split=split) / RELEASE / split
            if not _has_games(folder):
                raise FileNotFoundError(f"{archive} holds no {RELEASE}/{split}/*/*/{GAME_FILE}: not an ALFWorld "
                                        f"{shown(split)} archive. {DOWNLOAD_HINT}")
            return folder
        tried.append(str(archive))
    where = ", ".join(tried) if tried else "nothing (data_dir, ALFWORLD_DATA and ECPO_DATA_DIR are all unset)"
    found = sorted({folder.name for root in roots for parent in (root / RELEASE, root)
                    if parent.is_dir() for folder in parent.iterdir() if _has_games(folder)}
                   | {name.removeprefix(f"{RELEASE}-").removesuffix(".tar.gz") for root in roots if root.is_dir()
                      for name in os.listdir(root) if name.startswith(f"{RELEASE}-") and name.endswith(".tar.gz")})
    existing = f" Splits that exist there: {', '.join(found)}." if found else ""
    raise FileNotFoundError(f"ALFWorld split {shown(split)} not found: looked in {where}.{existing} {DOWNLOAD_HINT}")


def split_archive_name(split: str) -> str:
    """The file name ALFWorld's release gives a split's archive (``json_2.1.1-train.tar.gz``)."""
    return f"{RELEASE}-{split}.tar.gz"


def _check_member(archive: Path, member: tarfile.TarInfo) -> None:
    parts = PurePosixPath(member.name).parts
    if (member.name.startswith("/") or ".." in parts or not parts or parts[0] != RELEASE
            or not (member.isfile() or member.isdir())):
        raise ValueError(f"{archive} is not a safe ALFWorld archive: member {shown(member.name)} is not a plain "
                         f"file or folder under {RELEASE}/")


def _count_games(folder: Path) -> int:
    return sum(1 for _ in glob.iglob(str(folder / "*" / "*" / GAME_FILE)))


def extracted_archive(archive: Path, cache_dir: str | os.PathLike | None = None, split: str | None = None) -> Path:
    """The folder ``archive`` is extracted into (holding ``json_2.1.1/<split>``), extracting it on first use
    (module docstring). ``ValueError`` (one line naming the archive, nothing cached) for an archive with an unsafe
    member, one that is cut or damaged (read to its end: the gzip CRC, and nothing but the tar's end blocks after
    its last member), or one whose ``split`` holds another number of games than the release's
    (``SPLIT_GAMES``). A cached folder with the wrong number of games (cut by an older version) is extracted
    afresh."""
    stat = archive.stat()
    target = cache_root(cache_dir) / "alfworld" / (f"{archive.name.removesuffix('.tar.gz')}-{stat.st_size}-"
                                                   f"{stat.st_mtime_ns}")
    expected = SPLIT_GAMES.get(split) if split is not None else None
    if target.is_dir():
        if expected is None or _count_games(target / RELEASE / split) == expected:
            return target
        shutil.rmtree(target, ignore_errors=True)  # a partial split an older version took as whole
    with staging_folder(target.parent, prefix=".extracting-") as staging:
        try:
            _extract_whole(archive, staging)
        except (tarfile.TarError, EOFError, OSError, zlib.error) as error:
            why = " ".join(f"{type(error).__name__}: {error}".split())[:200]
            raise ValueError(f"cannot extract {archive}: it is cut or damaged ({why}); download it again") from None
        if expected is not None and (found := _count_games(staging / RELEASE / split)) != expected:
            raise ValueError(f"{archive} holds {found} {split} games, the release's split has {expected}: it is cut "
                             f"or not ALFWorld's {shown(split)} archive; download it again")
        try:
            os.rename(staging, target)
        except OSError:  # another process renamed its own complete copy into place first
            if not target.is_dir():
                raise
    return target


class _ArchiveStream(gzip.GzipFile):
    """The archive's tar stream, keeping the last block ``tarfile`` read (the header it stopped at)."""

    last = b""

    def read(self, size: int | None = -1) -> bytes:
        self.last = super().read(size)
        return self.last


def _extract_whole(archive: Path, into: Path) -> None:
    """Every member of ``archive`` into ``into``, each checked first (``_check_member``), and the archive read to
    its end: ``tarfile`` stops silently at a damaged header, so the block it stopped at and all that follows must
    be the tar's zero end blocks, and reading the gzip stream to its end checks its CRC and length."""
    with _ArchiveStream(archive, "rb") as stream, tarfile.open(fileobj=stream, mode="r:") as handle:
        for member in handle:
            _check_member(archive, member)
            handle.extract(member, into, filter="data")
        if len(stream.last) != tarfile.BLOCKSIZE or stream.last.strip(b"\0"):
            raise tarfile.ReadError(f"the tar stops at byte {handle.offset} without its end blocks")
        while chunk := stream.read(1 << 20):
            if chunk.strip(b"\0"):
                raise tarfile.ReadError(f"the tar's members stop at byte {handle.offset} and data follows")


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
