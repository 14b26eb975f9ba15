"""The one cache folder of the environments' derived files (search indexes, extracted game archives)."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV_VAR = "ECPO_CACHE_DIR"


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """``cache_dir``, else ``$ECPO_CACHE_DIR``, else ``~/.cache/ecpo``."""
    if cache_dir is not None:
        return Path(cache_dir)
    env = os.environ.get(CACHE_ENV_VAR)
    return Path(env) if env else Path.home() / ".cache" / "ecpo"
