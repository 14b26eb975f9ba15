"""Faults at a chosen write, for tests/test_faults.py: the first ``write`` call on a file whose name starts with
NAME (so ``NAME`` and its ``NAME.partial`` alike), or the first ``pickle.dump`` by a caller holding such a path,
either fails as a full disk would (``ENOSPC``, after the file
was opened: a file opened with ``"w"`` is already cut) or kills the process (``SIGKILL``: nothing after it runs,
no ``finally``, no cleanup). Python's profiler sees every call of a C function from Python code, which is how each
file of the project is written (``write_text``, ``open(...).write``), so the fault lands inside the real write
window of whatever code is running, old or new.

    with failing_write("metrics.jsonl"): ...                        # in this process
    python tests/fault_injection.py kill metrics.jsonl -- ARGS     # `ecpo ARGS` killed inside that write
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path


def _callers(frame, depth: int):
    while frame is not None and depth > 0:
        yield frame
        frame, depth = frame.f_back, depth - 1


def _hook(name: str, action: str):
    def named(handle) -> bool:
        target = getattr(handle, "name", None)  # (bytes where it was opened by bytes)
        return isinstance(target, (str, bytes)) and Path(os.fsdecode(target)).name.startswith(name)

    def hook(frame, event, arg):  # (the profiler's signature)
        called = getattr(arg, "__name__", "") if event == "c_call" else ""
        if called in ("write", "writelines"):
            hit = named(getattr(arg, "__self__", None))
        elif called == "dump":  # a pickler's dump into a stream opened on a path a caller holds (RLlib's checkpoints:
            hit = any(named(value) or (isinstance(value, os.PathLike) and Path(value).name.startswith(name))
                      for caller in _callers(frame, 4) for value in list(caller.f_locals.values()))  # cloudpickle)
        else:
            return
        if not hit:
            return
        sys.setprofile(None)
        if action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    return hook


@contextlib.contextmanager
def failing_write(name: str) -> Iterator[None]:
    """The first write to a file named ``name*`` inside the block raises ``ENOSPC`` (a full disk), in this thread
    or a thread started inside the block (TensorBoard writes its events from one)."""
    hook = _hook(name, "fail")
    sys.setprofile(hook)
    threading.setprofile(hook)
    try:
        yield
    finally:
        sys.setprofile(None)
        threading.setprofile(None)


if __name__ == "__main__":
    action, name, separator, *argv = sys.argv[1:]
    assert action in ("kill", "fail") and separator == "--", sys.argv
    from ecpo_train.apps.cli import main

    sys.setprofile(_hook(name, action))
    main(argv)
