"""Every file or folder the project rewrites is replaced whole: the new version is written beside the old one
(``NAME.partial-<token>``, same folder, so the rename never crosses a filesystem; the token is made by this writer),
flushed to the disk (``fsync``), then renamed over it. A crash, a ``kill -9`` or a full disk at any instant leaves the
previous version (or, for a folder swapped in two renames, ``NAME.previous-<token>``: :func:`current_folder` finds
it). A failed write removes its partial file and raises an ``OSError`` naming the file it was writing (``error:
PATH: No space left on device``). The temporary names are the writer's own: a sibling the user made (``NAME.partial``,
``NAME.previous``) is never read, replaced or deleted; what a killed writer left (the token's form,
:func:`leftovers`) is deleted by the next write of ``NAME``.

Nothing is written through a link: :func:`refuse_links` refuses a file that is a symlink or a hard link (another
name of a file elsewhere) and any folder below the one the user named that is a symlink, and :func:`open_no_follow`
opens a file to append or lock without following one; every writer of a run folder, a leaderboard folder, an sft
output or a study's kept folder goes through them.

The module sits in ``ecpo_train/files``, the lowest layer of the library, below every layer that rewrites a file: the
policies (a LoRA run's merged model, ``policies/lora.py``), the checkpoints of both engines, the run folder's logs,
the leaderboard's files, the studies' kept folders and the reports.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

PARTIAL_SUFFIX = ".partial"  # a new version being written beside NAME (NAME.partial-<token>)
PREVIOUS_SUFFIX = ".previous"  # a folder's old version, between the two renames that swap the new one in
_TOKEN = re.compile(r"-[0-9a-f]{16}")  # what a writer appends to its temporary names (``secrets.token_hex(8)``)
LINK_REFUSED = "it is a link (a symlink, or a hard link to a file elsewhere): nothing is written through a link; delete it"


def _token() -> str:
    return "-" + secrets.token_hex(8)


def partial_path(path: str | os.PathLike) -> Path:
    """A new name for the version of ``path`` being written (``NAME.partial-<token>``), this writer's own."""
    path = Path(path)
    return path.with_name(path.name + PARTIAL_SUFFIX + _token())


def previous_path(path: str | os.PathLike) -> Path:
    """A new name for a folder's old version during a swap (``NAME.previous-<token>``)."""
    path = Path(path)
    return path.with_name(path.name + PREVIOUS_SUFFIX + _token())


def is_leftover(name: str, entry: str, suffix: str | None = None) -> bool:
    """Whether ``entry`` (a name in the same folder) is what a writer of ``name`` made (``NAME.partial-<token>``
    or ``NAME.previous-<token>``; ``suffix``: only that kind)."""
    kinds = (suffix,) if suffix else (PARTIAL_SUFFIX, PREVIOUS_SUFFIX)
    return any(entry.startswith(name + kind) and _TOKEN.fullmatch(entry[len(name + kind):]) for kind in kinds)


def leftovers(path: str | os.PathLike, suffix: str | None = None) -> list[Path]:
    """What interrupted replacements of ``path`` left beside it (newest first; ``--overwrite`` deletes these too)."""
    path = Path(path)
    try:
        entries = [path.parent / entry for entry in os.listdir(path.parent) if is_leftover(path.name, entry, suffix)]
    except OSError:
        return []
    return sorted(entries, key=lambda p: p.lstat().st_mtime_ns if p.exists() or p.is_symlink() else 0, reverse=True)


def refuse_links(path: str | os.PathLike, below: str | os.PathLike | None = None) -> Path:
    """``path``, or an ``OSError`` naming it when it is a symlink or a file with another name elsewhere (a hard link),
    or naming the folder between ``below`` (the folder the user named, which may itself be a link) and ``path`` that
    is a symlink: writing there would write into a file or folder outside."""
    path = Path(path)
    if below is not None:
        with contextlib.suppress(ValueError):
            parts = path.relative_to(below).parts
            for depth in range(1, len(parts)):
                folder = Path(below).joinpath(*parts[:depth])
                if folder.is_symlink():
                    raise OSError(errno.ELOOP, f"it is a symlink to a folder: {LINK_REFUSED}", str(folder))
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return path
    except OSError as err:
        raise OSError(err.errno, err.strerror, str(path)) from None
    if stat.S_ISLNK(info.st_mode) or (not stat.S_ISDIR(info.st_mode) and info.st_nlink > 1):
        raise OSError(errno.ELOOP, LINK_REFUSED, str(path))
    return path


def open_no_follow(path: str | os.PathLike, flags: int, mode: int = 0o644) -> int:
    """``os.open(path, flags)`` that never follows a symlink and refuses a hard-linked file (an ``OSError`` naming
    ``path``, the descriptor closed)."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW, mode)
    except OSError as err:
        raise OSError(err.errno, LINK_REFUSED if err.errno == errno.ELOOP else err.strerror, str(path)) from None
    try:
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
            raise OSError(errno.EMLINK, LINK_REFUSED, str(path))
    except BaseException:
        os.close(fd)
        raise
    return fd


def no_follow(path: str | os.PathLike, flags: int) -> int:
    """The ``opener`` of a built-in ``open`` that never writes through a link (:func:`open_no_follow`)."""
    return open_no_follow(path, flags)


def append_bytes(path: str | os.PathLike, data: bytes, sync: bool = False) -> None:
    """Append ``data`` to ``path`` (created if missing; ``sync``: fsynced), never through a link; a failed write is
    an ``OSError`` naming the file."""
    with open(path, "ab", opener=no_follow) as handle:
        try:
            handle.write(data)
            handle.flush()
            if sync:
                os.fsync(handle.fileno())
        except OSError as err:
            raise _named(err, Path(path)) from None


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
def replaced_file(path: str | os.PathLike, below: str | os.PathLike | None = None) -> Iterator[Path]:
    """``with replaced_file(path) as partial:`` write the new version to ``partial`` (a new name); on leaving the
    block it is synced and renamed over ``path`` (a link there is replaced, not written through; a folder between
    ``below`` and ``path`` that is a symlink is refused: :func:`refuse_links`). An exception inside the block removes
    ``partial`` and leaves ``path`` as it was (an ``OSError`` is raised again naming ``path``)."""
    path = Path(path)
    refuse_links(path.parent, below)
    for left in leftovers(path, PARTIAL_SUFFIX):
        _remove(left)  # a leftover of a killed writer
    partial = partial_path(path)
    with _removed_on_failure(partial, path):
        yield partial
        _fsync(partial)
        os.replace(partial, path)
        _fsync(path.parent)


def write_text(path: str | os.PathLike, text: str, below: str | os.PathLike | None = None) -> Path:
    """Replace ``path`` with ``text`` (UTF-8) whole (``below``: :func:`replaced_file`)."""
    with replaced_file(path, below) as partial, open(partial, "x", encoding="utf-8", opener=no_follow) as handle:
        handle.write(text)
    return Path(path)


def write_bytes(path: str | os.PathLike, data: bytes, below: str | os.PathLike | None = None) -> Path:
    """Replace ``path`` with ``data`` whole (``below``: :func:`replaced_file`)."""
    with replaced_file(path, below) as partial, open(partial, "xb", opener=no_follow) as handle:
        handle.write(data)
    return Path(path)


def current_folder(path: str | os.PathLike) -> Path:
    """The whole version of a folder written by :func:`replaced_folder`: ``path``, or ``NAME.previous-<token>`` when
    a crash came between the two renames of a swap (the new version was not yet in place)."""
    path = Path(path)
    if os.path.lexists(path):  # (it, or a link: False for a name too long for a path, not an OSError)
        return path
    previous = [p for p in leftovers(path, PREVIOUS_SUFFIX) if p.is_dir() and not p.is_symlink()]
    return previous[0] if previous else path


@contextlib.contextmanager
def replaced_folder(path: str | os.PathLike, carry: tuple[str, ...] = (),
                    below: str | os.PathLike | None = None) -> Iterator[Path]:
    """``with replaced_folder(path) as partial:`` write the new folder into ``partial`` (a new name, created empty);
    on leaving the block every file in it is synced and it is swapped in: the old folder is renamed to
    ``NAME.previous-<token>``, the new one to ``NAME``, then the old one deleted. Until the new folder is whole and
    synced the old one stays untouched; an exception inside the block removes ``partial``. ``carry``: files of the
    old folder that the new one holds too, the same file (a hard link made just before the swap: a lock held on it
    stays held); ``below``: :func:`refuse_links` (``path`` itself must not be a link either)."""
    path = Path(path)
    refuse_links(path, below)
    for left in leftovers(path, PARTIAL_SUFFIX):
        _remove(left)
    for previous in leftovers(path, PREVIOUS_SUFFIX):
        if path.exists() or not previous.is_dir():
            _remove(previous)  # the swap before this one finished: the old folder is no longer needed
        else:
            os.replace(previous, path)  # a crash between the renames: the old version is the whole one
    partial, previous = partial_path(path), previous_path(path)
    with _removed_on_failure(partial, path):
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.mkdir()
        yield partial
        _fsync_tree(partial)
        for name in carry:
            if (path / name).is_file() and not (path / name).is_symlink():
                os.link(path / name, partial / name)
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
