"""The native engine's checkpoint file (``checkpoint.pt``; its name and place are ``run_dir.RunFolder``'s):
``save_checkpoint`` writes it whole (``files/atomic.py``: a crash or a full disk mid-write leaves the previous
checkpoint), ``load_checkpoint`` reads it without running code from it and names a missing, damaged or
old-format file, ``checkpoint_config`` reads the saved config without loading the tensors.

A checkpoint holds only tensors, plain containers, numbers and strings (numpy arrays are saved as tensors), so it
loads with ``torch.load(weights_only=True)``: a planted file cannot run code through ``ecpo eval``,
``ecpo leaderboard --agent checkpoint`` or ``ecpo train --resume``. A file that needs more (written by an older
version, or not a checkpoint of ours) is refused, naming ``scripts/convert_checkpoint.py``, which a user runs
knowingly on a file they trust.

A checkpoint carries the sha256 of its own state (``state_sha256``: every tensor's dtype, shape and bytes, every
other value and the tree's shape, in order), computed when it is saved and compared when it is loaded, inside the
one file, so the two can never be out of step (the file is replaced whole). Flipped bytes in the tensors, which
torch's loader does not notice, are one line (``... does not match its sha256``) instead of weights off by 1e28.
A checkpoint saved before this (no ``state_sha256``) loads as it is.
"""

from __future__ import annotations

import contextlib
import hashlib
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ecpo_gym.kwargs import shown
from ecpo_train.files.atomic import replaced_file

CONVERTER = "scripts/convert_checkpoint.py"
DIGEST_KEY = "state_sha256"  # the checkpoint's sha256 of the rest of its state (module docstring)


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


def _digest_into(digest: Any, value: Any) -> None:
    import torch

    if isinstance(value, torch.Tensor):
        tensor = value.detach().to("cpu").contiguous()
        digest.update(f"T{tensor.dtype}{tuple(tensor.shape)};".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    elif isinstance(value, dict):
        digest.update(f"D{len(value)};".encode())
        for key, item in value.items():
            _digest_into(digest, key)
            _digest_into(digest, item)
    elif isinstance(value, (list, tuple)):
        digest.update(f"{'L' if isinstance(value, list) else 'U'}{len(value)};".encode())
        for item in value:
            _digest_into(digest, item)
    else:  # numbers, strings, bytes, None (what weights_only loads); repr is exact for floats
        digest.update(f"{type(value).__name__}:{value!r};".encode())


def state_sha256(state: dict[str, Any]) -> str:
    """The sha256 of a checkpoint's state, its own ``state_sha256`` left out (module docstring)."""
    digest = hashlib.sha256()
    _digest_into(digest, {key: value for key, value in state.items() if key != DIGEST_KEY})
    return digest.hexdigest()


def save_checkpoint(state: dict[str, Any], path: Path) -> Path:
    """Write ``state`` to ``path`` whole, with its ``state_sha256``; the run folder is created if a checkpoint comes
    before the first metrics line (``Trainer.save`` called directly). A failed write is one ``ValueError`` naming
    the file."""
    import torch

    state = plain_state({key: value for key, value in state.items() if key != DIGEST_KEY})
    state[DIGEST_KEY] = state_sha256(state)

    path.parent.mkdir(parents=True, exist_ok=True)
    had_one = path.is_file()
    try:
        with replaced_file(path) as partial:
            try:
                torch.save(state, partial)
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
    """The state saved by :func:`save_checkpoint`, loaded without running code and compared with its
    ``state_sha256``; a missing, damaged or old-format file is one clear error."""
    if not path.exists():
        raise FileNotFoundError(f"checkpoint {path} not found (runs write it every checkpoint_every iterations)")
    if path.is_dir():
        raise ValueError(f"checkpoint {path} is a folder, not a checkpoint file")
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        if "weights_only" in str(err) or "Weights only" in str(err):
            raise _refused(path) from None
        raise _damaged(path, err) from None
    except Exception as err:  # noqa: BLE001 -- torch raises RuntimeError, EOFError, ... for a bad file
        raise _damaged(path, err) from None
    if isinstance(state, dict) and DIGEST_KEY in state:  # (a checkpoint saved before checksums has none)
        if not isinstance(state[DIGEST_KEY], str) or state_sha256(state) != state[DIGEST_KEY]:
            raise ValueError(f"checkpoint {path} does not match its sha256 (it was damaged after it was saved): "
                             "restore it from a copy, or delete it to start over")
    return state


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


def load_policy_state(policy: Any, state: Any, path: Path, part: str = "policy") -> None:
    """A checkpoint's ``part`` state (``policy``; ``reference`` for the tabular one) into ``policy``: a state that is
    not a mapping, holds a nan or infinite weight, or does not fit the policy the checkpoint's config builds (other
    names or shapes, a vocabulary or sampling stream that cannot be restored) is one ``ValueError`` naming the
    checkpoint (``ecpo eval``, ``ecpo leaderboard --agent checkpoint``, ``--resume``)."""
    check_policy_state(state, path, part)
    with state_fits(path, part):
        policy.load_state_dict(state)


def check_policy_state(state: Any, path: Path, part: str = "policy") -> None:
    """:func:`load_policy_state`'s checks of the state itself (a non-empty mapping of finite weights), for a loader
    that puts it in place another way (FSDP's sharded ``set_state_dict``)."""
    import torch

    if not isinstance(state, dict) or not state:
        what = "empty" if isinstance(state, dict) else "not a mapping"
        raise ValueError(f"checkpoint {path}: its {part} state is {what}: restore the checkpoint from a copy, or "
                         "delete it to start over")
    for name, value in state.items():
        if isinstance(value, torch.Tensor) and value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise ValueError(f"checkpoint {path}: its {part} weight {shown(name)} holds nan or infinite values: "
                             "restore the checkpoint from a copy, or delete it to start over")


@contextlib.contextmanager
def state_fits(path: Path, part: str = "policy") -> Iterator[None]:
    """Loading ``part``'s state inside this block: a state that does not fit the policy (other names or shapes, a
    vocabulary or stream that cannot be restored) is one ``ValueError`` naming the checkpoint."""
    try:
        yield
    except (RuntimeError, ValueError, KeyError, TypeError, IndexError, AttributeError) as err:
        why = " ".join(str(err).split())[:160]
        raise ValueError(f"checkpoint {path}: its {part} state does not fit the policy its config builds ({why}): "
                         "restore the checkpoint from a copy, or delete it to start over") from None
