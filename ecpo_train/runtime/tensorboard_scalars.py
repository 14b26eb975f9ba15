"""A run's TensorBoard scalars (``tensorboard: true``): TensorBoard's writer for the run folder's ``tensorboard/``,
adapted where it fails unlike the run's other files. ``MetricsLog`` (``runtime/run_dir.py``) owns the folder and
hands each iteration's metrics here.

- The writer opens at the first iteration logged and purges the events of that step and later: a resumed (or
  restarted) run replaces them.
- Its failures (a full disk) carry no file name: each is raised again naming the folder, so the run reports one
  line that says where.
- It writes its events from a thread, which prints a traceback when a write fails before the writer raises the
  same error in the run's thread: that thread's traceback is not printed (the run's one line reports the error).
"""

from __future__ import annotations

import contextlib
import typing
from pathlib import Path
from typing import Any


class TensorBoardScalars:
    """The scalars of one run's ``tensorboard/`` folder (torch's ``SummaryWriter``, imported at the first write)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._writer: Any = None

    def add(self, metrics: dict[str, float], step: int) -> None:
        """Every metric but ``iteration`` as a scalar at ``step``."""
        with self._naming_folder():
            if self._writer is None:
                from torch.utils.tensorboard import SummaryWriter

                _quiet_writer_thread()
                self._writer = SummaryWriter(str(self.folder), purge_step=step)
            for key, value in metrics.items():
                if key != "iteration":
                    self._writer.add_scalar(key, value, step)

    def flush(self) -> None:
        if self._writer is not None:
            with self._naming_folder():
                self._writer.flush()

    def close(self) -> None:
        """Close the writer (once: after a failed close, the next call has nothing to close)."""
        if self._writer is not None:
            writer, self._writer = self._writer, None
            with self._naming_folder():
                writer.close()

    @contextlib.contextmanager
    def _naming_folder(self) -> typing.Iterator[None]:
        """TensorBoard's writer fails (a full disk) without a file name: name its folder."""
        try:
            yield
        except OSError as err:
            raise OSError(err.errno, err.strerror or str(err), str(self.folder)) from None


def _quiet_writer_thread() -> None:
    """TensorBoard writes its events from a thread, which prints a traceback when the write fails (a full disk)
    before the writer raises the same error in the run's thread; that one is reported (one line naming the folder),
    the thread's traceback is not."""
    import threading

    from tensorboard.summary.writer.event_file_writer import _AsyncWriterThread

    default = threading.excepthook
    if getattr(default, "quiet_tensorboard", False):
        return

    def hook(args: Any) -> None:
        if not (isinstance(args.thread, _AsyncWriterThread) and issubclass(args.exc_type, OSError)):
            default(args)

    hook.quiet_tensorboard = True  # type: ignore[attr-defined]
    threading.excepthook = hook
