"""``Progress``: the one rich progress line every long training loop shows (iterations done, then the latest
phase or metrics)."""

from __future__ import annotations

import time
import typing
from typing import Any


class Progress:
    """One rich progress line: iterations done, then the latest phase (from the first step) or metrics."""

    def __init__(self, enabled: bool, total: int, done: int, label: str) -> None:
        self.enabled, self.total, self.done, self.label = enabled, total, done, label
        self._progress: Any = None
        self._started = time.perf_counter()
        self._last_status = ""

    def __enter__(self) -> typing.Self:
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), TextColumn("{task.fields[status]}"))
            self._progress.__enter__()
            self._task = self._progress.add_task(self.label, total=self.total, completed=self.done,
                                                 status="starting")
        return self

    def phase(self, text: str) -> None:
        """Within an iteration: what is running now (e.g. ``rollout step 3, 12 episodes live``)."""
        if self._progress is not None:
            status = f"{self._last_status} | {text}" if self._last_status else text
            self._progress.update(self._task, status=status)

    def update(self, metrics: dict[str, float]) -> None:
        if self._progress is None:
            return
        status = f"success {metrics.get('success', 0):.2f}"
        if "val/success" in metrics:
            status += f" | val {metrics['val/success']:.2f}"
        status += f" | kl {metrics.get('update/kl', 0):.4f} | {metrics.get('time/iteration', 0):.1f}s/it"
        self._last_status = status
        self._progress.update(self._task, advance=1, status=status)

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)
