"""Every file or folder the project rewrites is replaced whole: the new version is written beside the old one
(``NAME.partial``, same folder, so the rename never crosses a filesystem), flushed to the disk (``fsync``), then
renamed over it. A crash, a ``kill -9`` or a full disk at any instant leaves the previous version (or, for a
folder swapped in two renames, ``NAME.previous``: :func:`current_folder` finds it). A failed write removes its
partial file and raises an ``OSError`` naming the file it was writing (``error: PATH: No space left on device``).

The module sits in the lowest layer that rewrites a file (a LoRA run's merged model, ``policies/lora.py``); the
checkpoints of both engines, the run folder's logs, the leaderboard's files and the reports use it too.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

PARTIAL_SUFFIX = ".partial"  # a new version being written beside NAME
PREVIOUS_SUFFIX = ".previous"  # a folder's old version, between the two renames that swap the new one in


def partial_path(path: str | os.PathLike) -> Path:
    path = Path(path)
    return path.with_name(path.name + PARTIAL_SUFFIX)


def previous_path(path: str | os.PathLike) -> Path:
    path = Path(path)
    return path.with_name(path.name + PREVIOUS_SUFFIX)


def leftover_names(name: str) -> tuple[str, str]:
    """What an interrupted replacement of ``name`` may leave beside it (``--overwrite`` deletes these too)."""
    return name + PARTIAL_SUFFIX, name + PREVIOUS_SUFFIX


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        with contextlib.suppress(OSError):
            path.unlink()


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as err:
        if err.errno not in (errno.EINVAL, errno.EBADF):  # (a folder on a filesystem that cannot sync one)
            raise
    finally:
        os.close(fd)


def _fsync_tree(folder: Path) -> None:
    for item in sorted(folder.rglob("*")):
        if item.is_file() and not item.is_symlink():
            _fsync(item)
    _fsync(folder)


def _named(err: OSError, path: Path) -> OSError:
    """``err`` as an ``OSError`` naming ``path`` (a failed ``write`` carries no file name of its own)."""
    code = err.errno if err.errno is not None else errno.EIO
    return OSError(code, err.strerror or os.strerror(code), str(path))


@contextlib.contextmanager
def _removed_on_failure(partial: Path, path: Path) -> Iterator[None]:
    """Any failure inside removes ``partial``; an ``OSError`` is raised again naming ``path``."""
    try:
        yield
    except OSError as err:
        _remove(partial)
        raise _named(err, path) from None
    except BaseException:
        _remove(partial)
        raise


@contextlib.contextmanager
def replaced_file(path: str | os.PathLike) -> Iterator[Path]:
    """``with replaced_file(path) as partial:`` write the new version to ``partial``; on leaving the block it is
    synced and renamed over ``path``. An exception inside the block removes ``partial`` and leaves ``path`` as it
    was (an ``OSError`` is raised again naming ``path``)."""
    path = Path(path)
    partial = partial_path(path)
    _remove(partial)  # a leftover of a killed writer
    with _removed_on_failure(partial, path):
        yield partial
        _fsync(partial)
        os.replace(partial, path)
        _fsync(path.parent)


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Replace ``path`` with ``text`` (UTF-8) whole."""
    with replaced_file(path) as partial, open(partial, "w", encoding="utf-8") as handle:
        handle.write(text)
    return Path(path)


def current_folder(path: str | os.PathLike) -> Path:
    """The whole version of a folder written by :func:`replaced_folder`: ``path``, or ``NAME.previous`` when a crash
    came between the two renames of a swap (the new version was not yet in place)."""
    path = Path(path)
    previous = previous_path(path)
    return previous if not path.exists() and previous.is_dir() else path


@contextlib.contextmanager
def replaced_folder(path: str | os.PathLike) -> Iterator[Path]:
    """``with replaced_folder(path) as partial:`` write the new folder into ``partial`` (created empty); on leaving
    the block every file in it is synced and it is swapped in: the old folder is renamed to ``NAME.previous``, the
    new one to ``NAME``, then the old one deleted. Until the new folder is whole and synced the old one stays
    untouched; an exception inside the block removes ``partial``."""
    path = Path(path)
    partial, previous = partial_path(path), previous_path(path)
    _remove(partial)
    if previous.is_dir():
        if path.exists():
            _remove(previous)  # the swap before this one finished: the old folder is no longer needed
        else:
            os.replace(previous, path)  # a crash between the renames: the old version is the whole one
    with _removed_on_failure(partial, path):
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.mkdir()
        yield partial
        _fsync_tree(partial)
        if path.exists():
            os.replace(path, previous)
        os.replace(partial, path)
        _fsync(path.parent)
    _remove(previous)


@contextlib.contextmanager
def library_write_errors(path: str | os.PathLike) -> Iterator[None]:
    """A failed write inside a library that reports it in its own type (safetensors' ``SafetensorError``, whose
    text carries the OS error's code) as the ``OSError`` it was, naming ``path``."""
    try:
        yield
    except OSError:
        raise
    except Exception as err:
        if type(err).__name__ != "SafetensorError":
            raise
        found = re.search(r"os error (\d+)|code: (\d+)", str(err))  # ("I/O error: ... (os error 28)")
        code = int(found.group(1) or found.group(2)) if found else errno.EIO
        raise OSError(code, os.strerror(code), str(path)) from None
