"""``Progress``: the one rich progress line every long training loop shows (iterations done, then the latest
phase or metrics).

Where the output is not a terminal (a log file, a pipe) rich draws nothing until the end; every loop then prints
plain lines instead (``ecpo train`` and ``ecpo sft`` alike): the count with the latest status and phase at most
once every ``LINES_EVERY`` seconds, and always on a stage's first phase, its first unit done and its last, so a
long run in a log shows that it moves.
"""

from __future__ import annotations

import sys
import time
import typing
from typing import Any

LINES_EVERY = 30.0  # seconds between plain progress lines where the output is not a terminal


class Progress:
    """One rich progress line: iterations done, then the latest phase (from the first step) or metrics."""

    def __init__(self, enabled: bool, total: int, done: int, label: str, lines_every: float = LINES_EVERY,
                 val_label: str = "") -> None:
        self.enabled, self.total, self.done, self.label = enabled, total, done, label
        self.lines_every = float(lines_every)
        self.val_label = val_label  # what the "val" figure measures (core.tasks.validation_label)
        self._progress: Any = None
        self._started = time.perf_counter()
        self._last_status = ""
        self._phase = ""
        self._plain = False  # not a terminal: periodic plain lines instead of the bar
        self._last_line = -float("inf")
        self._advanced = False  # a unit of this stage done in this process (the first one is always a line)

    def __enter__(self) -> typing.Self:
        if self.enabled and not sys.stdout.isatty():
            self._plain = True
        elif self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), TextColumn("{task.fields[status]}"))
            self._progress.__enter__()
            self._task = self._progress.add_task(self.label, total=self.total, completed=self.done,
                                                 status="starting")
        return self

    def stage(self, label: str, total: int) -> None:
        """A new bar (the previous one stays on screen, complete): e.g. expert episodes, then optimizer steps."""
        if self._plain and self.done < self.total:
            self._line(force=True)
        self.label, self.total, self.done, self._last_status, self._phase = label, total, 0, "", ""
        self._started, self._last_line, self._advanced = time.perf_counter(), -float("inf"), False
        if self._progress is not None:
            self._task = self._progress.add_task(label, total=total, completed=0, status="")

    def phase(self, text: str) -> None:
        """Within an iteration: what is running now (e.g. ``rollout step 3, 12 episodes live``)."""
        if self._progress is not None:
            status = f"{self._last_status} | {text}" if self._last_status else text
            self._progress.update(self._task, status=status)
        elif self._plain:
            self._phase = text
            self._line(force=False)

    def advance(self, status: str = "") -> None:
        """One unit of the current bar done; ``status`` shown after the count."""
        self.done += 1
        self._last_status, self._phase = status or self._last_status, ""
        if self._progress is not None:
            self._progress.update(self._task, advance=1, status=self._last_status)
        elif self._plain:
            self._line(force=self.done >= self.total or not self._advanced)
        self._advanced = True

    def _line(self, force: bool) -> None:
        now = time.perf_counter()
        if force or now - self._last_line >= self.lines_every:
            self._last_line = now
            status = "".join(f" | {part}" for part in (self._last_status, self._phase) if part)
            print(f"{self.label}: {self.done}/{self.total} ({now - self._started:.0f}s){status}", flush=True)

    def update(self, metrics: dict[str, float]) -> None:
        status = f"success {metrics.get('success', 0):.2f}"
        if "val/success" in metrics:
            status += f" | val {metrics['val/success']:.2f}" + (f" ({self.val_label})" if self.val_label else "")
        status += f" | kl {metrics.get('update/kl', 0):.4f} | {metrics.get('time/iteration', 0):.1f}s/it"
        self.advance(status)

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)


def no_phase(text: str) -> None:
    """An engine's phase line where no progress line shows it (the default of ``on_phase``)."""
