"""Checksums (sha256) of what the project saves, written with it and checked where it is read back.

A model folder the project writes (``ecpo sft --out``: a text policy's ``text_policy.safetensors`` and its json,
or an LLM's weights and tokenizer; a LoRA run's merged model; ``ecpo models pull`` and ``write_tiny_model``) holds
``checksums.sha256``: one ``<sha256>  <name>`` line per file beside it (``sha256sum -c`` reads it too). It is
written into the folder before the folder is swapped in whole (``atomic.replaced_folder``), so the folder and its
checksums appear together; :func:`check_folder_checksums` compares them where the folder is loaded (train, sft,
eval, leaderboard, both engines), and a file that differs, is missing, or a listing that is not ours is one
``ValueError`` naming the folder and the file.

A folder without ``checksums.sha256`` (saved before checksums were written, or by another program: a hub
download) is accepted as it is: the committed kept models predate this file, and a model made elsewhere has none.
Such a folder is still checked for what it holds (``text.check_text_policy_folder``).
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from ecpo_gym.kwargs import shown

CHECKSUM_FILE = "checksums.sha256"
MAX_LISTED = 10_000  # files a listing may name (a model folder holds a few dozen)
_LINE = re.compile(r"^([0-9a-f]{64})  ([^/\\\x00]+)$")


def file_sha256(path: str | os.PathLike) -> str:
    """The sha256 of the file at ``path`` (read in 1 MiB chunks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_folder_checksums(folder: str | os.PathLike) -> Path:
    """``folder/checksums.sha256`` over every file directly in ``folder`` (links are not followed: none is listed);
    call it last, inside the ``replaced_folder`` block that writes the folder."""
    from ecpo_train.files.atomic import write_text

    folder = Path(folder)
    files = sorted(p for p in folder.iterdir() if p.name != CHECKSUM_FILE and p.is_file() and not p.is_symlink())
    return write_text(folder / CHECKSUM_FILE, "".join(f"{file_sha256(p)}  {p.name}\n" for p in files))


MODEL_FIX = "restore the folder from a copy, or write it again (`ecpo sft ... --out DIR`)"


def check_folder_checksums(folder: str | os.PathLike, what: str, fix: str = MODEL_FIX) -> bool:
    """Compare ``folder``'s files with its ``checksums.sha256``: ``True`` when they match, ``False`` when the folder
    has none (saved before checksums were written: accepted, module docstring), else one ``ValueError`` naming
    ``what`` (the setting that named the folder: ``model=DIR``) and the first file that differs, ending in
    ``fix``."""
    folder = Path(folder)
    listing = folder / CHECKSUM_FILE
    if not listing.exists() and not listing.is_symlink():
        return False
    try:
        if listing.is_symlink() or not listing.is_file() or listing.stat().st_size > MAX_LISTED * 200:
            raise ValueError("not a plain file of its size")
        lines = listing.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise ValueError(f"{what}: {listing} cannot be read ({' '.join(str(err).split())[:80]}): {fix}") from None
    expected: dict[str, str] = {}
    for line in lines:
        found = _LINE.match(line)
        if found is None or found.group(2) in (".", ".."):
            raise ValueError(f"{what}: {listing} holds a line that is not '<sha256>  <file name>' "
                             f"({shown(line)}): {fix}")
        expected[found.group(2)] = found.group(1)
    for name, digest in expected.items():
        path = folder / name
        if path.is_symlink() or not path.is_file():
            raise ValueError(f"{what}: {name} is listed in {CHECKSUM_FILE} but is not a file in {folder}: {fix}")
        if file_sha256(path) != digest:
            raise ValueError(f"{what}: {path} does not match its sha256 in {CHECKSUM_FILE} (the file was damaged "
                             f"or changed after it was saved): {fix}")
    return True
