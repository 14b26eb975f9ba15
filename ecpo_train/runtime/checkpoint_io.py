"""The native engine's checkpoint file (``checkpoint.pt``; its name and place are ``run_dir.RunFolder``'s):
``save_checkpoint`` writes it whole (``policies/atomic.py``: a crash or a full disk mid-write leaves the previous
checkpoint), ``load_checkpoint`` reads it without running code from it and names a missing, damaged or
old-format file, ``checkpoint_config`` reads the saved config without loading the tensors.

A checkpoint holds only tensors, plain containers, numbers and strings (numpy arrays are saved as tensors), so it
loads with ``torch.load(weights_only=True)``: a planted file cannot run code through ``ecpo eval``,
``ecpo leaderboard --agent checkpoint`` or ``ecpo train --resume``. A file that needs more (written by an older
version, or not a checkpoint of ours) is refused, naming ``scripts/convert_checkpoint.py``, which a user runs
knowingly on a file they trust.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

from ecpo_train.policies.atomic import replaced_file

CONVERTER = "scripts/convert_checkpoint.py"


def plain_state(value: Any) -> Any:
    """``value`` with numpy arrays as tensors and numpy scalars as Python numbers (what ``weights_only`` loads)."""
    import numpy as np
    import torch

    if isinstance(value, np.ndarray):
        return torch.from_numpy(value.copy())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return type(value)((key, plain_state(item)) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return type(value)(plain_state(item) for item in value)
    return value


def save_checkpoint(state: dict[str, Any], path: Path) -> Path:
    """Write ``state`` to ``path`` whole; the run folder is created if a checkpoint comes before the first metrics
    line (``Trainer.save`` called directly). A failed write is one ``ValueError`` naming the file."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    had_one = path.is_file()
    try:
        with replaced_file(path) as partial:
            try:
                torch.save(plain_state(state), partial)
            except RuntimeError as err:  # torch reports a failed write (e.g. a full disk) as RuntimeError
                raise OSError(0, str(err).splitlines()[0] if str(err) else "the write failed") from None
    except OSError as err:
        raise write_failed(path, err, had_one) from None
    return path


def write_failed(path: Path, err: OSError, had_one: bool) -> ValueError:
    """The one line for a checkpoint (either engine's) that could not be written: what failed, and whether a previous
    checkpoint is there to ``--resume`` from."""
    kept = "the previous checkpoint is kept" if had_one else "no checkpoint was written before this one"
    return ValueError(f"checkpoint {path} could not be written ({err.strerror}); {kept}: free space, then --resume")


def _refused(path: Path) -> ValueError:
    return ValueError(f"checkpoint {path} holds Python objects beyond tensors, numbers and strings (an older ECPO "
                      "format, or not an ECPO checkpoint), which loading would run as code: if you wrote it, "
                      f"convert it once with `python {CONVERTER} {path}`")


def load_checkpoint(path: Path) -> dict[str, Any]:
    """The state saved by :func:`save_checkpoint`, loaded without running code; a missing, damaged or old-format
    file is one clear error."""
    if not path.exists():
        raise FileNotFoundError(f"checkpoint {path} not found (runs write it every checkpoint_every iterations)")
    if path.is_dir():
        raise ValueError(f"checkpoint {path} is a folder, not a checkpoint file")
    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        if "weights_only" in str(err) or "Weights only" in str(err):
            raise _refused(path) from None
        raise _damaged(path, err) from None
    except Exception as err:  # noqa: BLE001 -- torch raises RuntimeError, EOFError, ... for a bad file
        raise _damaged(path, err) from None


def _damaged(path: Path, err: BaseException) -> ValueError:
    return ValueError(f"checkpoint {path} is damaged and cannot be read ({type(err).__name__}); delete it to "
                      "start over, or restore it from a copy")


def _mapped(path: Path) -> dict[str, Any] | None:
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # noqa: BLE001 -- a damaged, old-format or foreign file: the full read refuses it
        return None
    return state if isinstance(state, dict) else None


def checkpoint_config(path: Path) -> dict[str, Any] | None:
    """The config a checkpoint was saved with, read without loading its tensors (memory-mapped) and without running
    code, or ``None`` when it cannot be read that way (:func:`load_checkpoint` then names what is wrong)."""
    config = (_mapped(path) or {}).get("config")
    return dict(config) if isinstance(config, dict) else None


def checkpoint_iteration(path: Path) -> int:
    """The iterations a checkpoint holds, read like :func:`checkpoint_config`; a file that cannot be read so is
    :func:`load_checkpoint`'s one-line error."""
    iteration = (_mapped(path) or {}).get("iteration")
    if not isinstance(iteration, int) or isinstance(iteration, bool):
        load_checkpoint(path)  # names what is wrong
        raise ValueError(f"checkpoint {path} holds no iteration count: it is not an ECPO trainer checkpoint")  # noqa: TRY004
    return iteration


def checkpoint_size(path: Path) -> str:
    size = path.stat().st_size
    return f"{size / 2**20:.1f} MiB" if size < 2**30 else f"{size / 2**30:.2f} GiB"
