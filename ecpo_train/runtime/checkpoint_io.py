"""The native engine's checkpoint file (``checkpoint.pt``; its name and place are ``run_dir.RunFolder``'s):
``save_checkpoint`` writes atomically (a crash or a full disk mid-write leaves the previous checkpoint),
``load_checkpoint`` names a missing or damaged file instead of failing inside torch's unpickler,
``checkpoint_config`` reads the saved config without loading the tensors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ecpo_train.runtime.run_dir import TEMP_SUFFIX


def save_checkpoint(state: dict[str, Any], path: Path) -> Path:
    """Write ``state`` to ``path`` atomically (temp file, then rename); the run folder is created if a checkpoint
    comes before the first metrics line (``Trainer.save_checkpoint`` called directly)."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(TEMP_SUFFIX)
    try:
        torch.save(state, tmp)
        tmp.replace(path)
    except (OSError, RuntimeError) as err:  # (torch reports a failed write, e.g. a full disk, as RuntimeError)
        tmp.unlink(missing_ok=True)
        cause = err.strerror if isinstance(err, OSError) and err.strerror else type(err).__name__
        raise ValueError(f"checkpoint {path} could not be written ({cause}); the previous checkpoint is kept: "
                         "free space, then --resume") from None
    return path


def load_checkpoint(path: Path) -> dict[str, Any]:
    """The state saved by :func:`save_checkpoint`; a missing or damaged file is one clear error."""
    if not path.exists():
        raise FileNotFoundError(f"checkpoint {path} not found (runs write it every checkpoint_every iterations)")
    if path.is_dir():
        raise ValueError(f"checkpoint {path} is a folder, not a checkpoint file")
    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # noqa: BLE001 -- torch raises RuntimeError, EOFError, UnpicklingError, ... for a bad file
        raise ValueError(f"checkpoint {path} is damaged and cannot be read ({type(err).__name__}); delete it to "
                         "start over, or restore it from a copy") from None


def checkpoint_config(path: Path) -> dict[str, Any] | None:
    """The config a checkpoint was saved with, read without loading its tensors (memory-mapped), or ``None`` when
    it cannot be read that way (:func:`load_checkpoint` then names what is wrong)."""
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    except Exception:  # noqa: BLE001 -- a damaged file, or an old non-zip format: the full read decides
        return None
    config = state.get("config") if isinstance(state, dict) else None
    return dict(config) if isinstance(config, dict) else None


def checkpoint_size(path: Path) -> str:
    size = path.stat().st_size
    return f"{size / 2**20:.1f} MiB" if size < 2**30 else f"{size / 2**30:.2f} GiB"
