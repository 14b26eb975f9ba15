"""The append-only results log of an evaluation: one JSON line per finished episode, fsynced.

An interrupted evaluation loses at most the episode in flight: ``load_records`` reads every complete line,
drops a torn last line (and truncates it away so the next append starts on a fresh line; a last record that
is whole but lost its newline is kept and the newline added) and skips lines that are not JSON objects. A log that
is a link (a symlink, or a hard link to a file elsewhere) is never appended to or cut (``atomic.refuse_links``).
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

from ecpo_train.files.atomic import append_bytes, open_no_follow, refuse_links

RECORD_KEY = ("manifest", "group", "task_id", "seed")


def record_key(record: dict[str, Any]) -> tuple[str, str, str, int]:
    return (str(record["manifest"]), str(record["group"]), str(record["task_id"]), int(record["seed"]))


def load_records(path: str | Path, *, repair: bool = True) -> list[dict[str, Any]]:
    """The complete records of ``path`` (first one wins per key); ``repair`` cuts a torn last line."""
    path = Path(path)
    if not path.is_file():
        return []
    if repair:
        refuse_links(path)
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end < len(data) and _is_record(data[end:]):
        # the crash hit between the record and its newline: the record is whole, keep it
        data += b"\n"
        end = len(data)
        if repair:
            append_bytes(path, b"\n", sync=True)
    if repair and end < len(data):
        fd = open_no_follow(path, os.O_WRONLY)
        try:
            os.ftruncate(fd, end)
            os.fsync(fd)
        finally:
            os.close(fd)
    records: dict[tuple, dict[str, Any]] = {}
    skipped = 0
    for line in data[:end].splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            key = record_key(record)
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            skipped += 1
            continue
        records.setdefault(key, record)
    if skipped:
        warnings.warn(f"{path}: skipped {skipped} unreadable line(s)", stacklevel=2)
    return list(records.values())


def _is_record(line: bytes) -> bool:
    try:
        record_key(json.loads(line))
    except (json.JSONDecodeError, KeyError, TypeError, ValueError):
        return False
    return True


def append_record(path: str | Path, record: dict[str, Any]) -> None:
    """Append one record as a JSON line and fsync it (never through a link)."""
    line = json.dumps(record, sort_keys=True, ensure_ascii=False) + "\n"
    append_bytes(path, line.encode("utf-8"), sync=True)
