"""The one cache folder of the environments' derived files (search indexes, extracted game archives)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

CACHE_ENV_VAR = "ECPO_CACHE_DIR"


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """``cache_dir``, else ``$ECPO_CACHE_DIR``, else ``~/.cache/ecpo``."""
    if cache_dir is not None:
        return Path(cache_dir)
    env = os.environ.get(CACHE_ENV_VAR)
    return Path(env) if env else Path.home() / ".cache" / "ecpo"


STAGING_PREFIX = ".staging-"  # a derived folder being built beside its final name: .staging-HOST-PID-XXXX


@contextlib.contextmanager
def staging_folder(parent: Path, prefix: str = STAGING_PREFIX) -> Iterator[Path]:
    """A fresh folder in ``parent`` to build a derived folder in before it is renamed into place; removed on
    exit (renamed or not). Its name holds this host and process: a folder left by a process of this host that
    is no longer running (killed with ``kill -9``, which runs no cleanup) is removed here first, so a killed
    build never leaves its half for good."""
    parent.mkdir(parents=True, exist_ok=True)
    host = socket.gethostname().replace("-", "_")
    for left in parent.glob(f"{prefix}{host}-*-*"):
        pid = left.name.removeprefix(f"{prefix}{host}-").split("-", 1)[0]
        if pid.isdigit() and not _running(int(pid)):
            shutil.rmtree(left, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{prefix}{host}-{os.getpid()}-", dir=parent))
    try:
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: running
        return True
    return True
