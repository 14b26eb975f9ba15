"""One owner per run folder: ``run.lock``, held by the process that writes the folder for the whole run.

The lock is an ``flock`` on ``RUN_DIR/run.lock``, whose text names the holder (pid, host, engine, start time).
A second start or ``--resume`` into the folder while the lock is held is refused with one line naming the holder,
so two runs never interleave their metrics. The kernel drops an ``flock`` when its process dies, however it
dies: a lock file left by a killed run is stale, and the next start takes it over. Releasing deletes the file
(and the folder, when taking the lock created it and nothing else was written), so a refused start leaves the
folder as it was.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path

from ecpo_gym.kwargs import shown
from ecpo_train.runtime.run_dir import RunFolder


class RunLock:
    """A held ``run.lock``; :meth:`release` (idempotent) gives it up."""

    def __init__(self, run_dir: Path, fd: int, created: list[Path]) -> None:
        self.run_dir, self._fd, self._created = run_dir, fd, created  # the folders taking the lock made, deepest first

    @property
    def made_folder(self) -> bool:
        """Taking the lock made ``run_dir`` (it did not exist)."""
        return self.run_dir in self._created

    @property
    def held(self) -> bool:
        return self._fd >= 0

    def release(self) -> None:
        if self._fd < 0:
            return
        with contextlib.suppress(OSError):
            RunFolder(self.run_dir).lock.unlink()  # unlinked while still locked: no one can take a doomed file
        os.close(self._fd)  # (closing the descriptor drops the flock)
        self._fd = -1
        for folder in self._created:  # each only if empty: the run wrote nothing there
            try:
                folder.rmdir()
            except OSError:
                break


def describe_holder(text: str) -> str:
    """The holder a lock file names, in words (``pid 123 on host h, engine native, since ...``)."""
    try:
        holder = json.loads(text)
        return (f"pid {holder['pid']} on host {holder['host']} ({holder.get('engine', '?')} engine, since "
                f"{holder.get('started', '?')})")
    except (ValueError, TypeError, KeyError):
        return "another process (its lock file names no holder)"


def acquire_run_lock(run_dir: Path, engine: str = "native", label: str | None = None) -> RunLock:
    """Take ``run_dir``'s lock (creating the folder if needed) or raise ``ValueError`` naming its holder.
    ``engine``: who holds it (an engine, or a program owning an output folder); ``label``: how the messages
    name the folder (default ``run_dir='...'``)."""
    run_dir = Path(run_dir)
    named = label or f"run_dir={shown(str(run_dir))}"
    created = [folder for folder in (run_dir, *run_dir.parents) if not folder.exists()]
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"{named} cannot be made ({err.strerror})") from None
    path = RunFolder(run_dir).lock
    while True:
        try:  # never through a symlink: a planted run.lock -> some file would have that file truncated
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as err:
            why = "it is a symlink; delete it" if err.errno == errno.ELOOP else err.strerror
            raise ValueError(f"{named}: cannot create its lock file {path} ({why})") from None
        if os.fstat(fd).st_nlink > 1:  # a hard link: truncating it would truncate the file it shares
            os.close(fd)
            raise ValueError(f"{named}: its lock file {path} is a hard link to another file; delete it")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = describe_holder(os.read(fd, 4096).decode("utf-8", "replace"))
            os.close(fd)
            raise ValueError(f"{named} is in use by {holder}: wait for that run to end or stop it; two runs in "
                             "one folder would interleave what they write") from None
        except OSError as err:  # ENOLCK, EOPNOTSUPP: a filesystem without flock (some network mounts)
            RunLock(run_dir, fd, created).release()
            raise ValueError(f"{named} is on a filesystem without file locks ({err.strerror}): "
                             "put run_dir on a local disk (copy the folder there to resume it)") from None
        try:  # the file may have been released (unlinked) between our open and our flock: lock the current one
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    stale = os.read(fd, 4096).decode("utf-8", "replace").strip()
    if stale:
        print(f"warning: {path} was left by {describe_holder(stale)}, which is no longer running: taking it over",
              file=sys.stderr)
    record = {"pid": os.getpid(), "host": socket.gethostname(), "engine": engine,
              "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "argv": sys.argv[1:]}
    lock = RunLock(run_dir, fd, created)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
    except OSError as err:  # a full disk
        lock.release()
        raise ValueError(f"{named}: {path} could not be written ({err.strerror})") from None
    return lock
