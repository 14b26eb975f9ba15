"""The harness every speed and memory benchmark shares (what it gives each figure: docs/benchmarks.md)."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import ROOT  # the checkout: child processes run its code

MB, GB = 1 << 20, 1 << 30


def load() -> float:
    """The 1-minute load average: on a shared machine every figure is an upper bound, read beside it."""
    return os.getloadavg()[0]


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` says of it."""
    info = Path("/proc/cpuinfo")
    name = next((line.split(":", 1)[1].strip() for line in info.read_text().splitlines()
                 if line.startswith("model name")), "") if info.is_file() else ""
    return name or platform.processor() or platform.machine()


def machine() -> dict[str, Any]:
    """The facts a figure is read with: platform, Python, CPU model, cores (and those usable), the load now."""
    from ecpo_train.runtime.limits import usable_cores

    return {"platform": platform.platform(), "python": platform.python_version(), "cpu": cpu_model(),
            "cpus": os.cpu_count(), "usable_cpus": usable_cores(), "load_average_1m": load()}


def latency(seconds: list[float], tail: int = 90) -> dict[str, float]:
    """Median, ``tail``-th percentile and mean in milliseconds, and the count."""
    ms = sorted(s * 1000.0 for s in seconds)
    if not ms:
        return {"count": 0}
    return {"median_ms": statistics.median(ms), f"p{tail}_ms": ms[min(len(ms) - 1, tail * len(ms) // 100)],
            "mean_ms": statistics.fmean(ms), "count": len(ms)}


def timed(call: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    """``call(*args, **kwargs)``'s result and its wall seconds."""
    started = time.perf_counter()
    result = call(*args, **kwargs)
    return result, time.perf_counter() - started


def seconds(call: Callable[[], Any], repeats: int = 1, sync: Callable[[], None] = lambda: None) -> list[float]:
    """Wall seconds of each of ``repeats`` calls of ``call()``, each from an idle device to an idle device (``sync``
    waits for it)."""
    sync()
    return [timed(lambda: (call(), sync()))[1] for _ in range(repeats)]


class PeakSampler:
    """Highest RSS of this process seen by a thread polling every 2 ms, from ``start()`` to ``stop()``."""

    def __init__(self) -> None:
        import psutil

        self.process, self.peak, self.baseline, self.running = psutil.Process(), 0, 0, False

    def rss(self) -> int:
        return int(self.process.memory_info().rss)

    def poll(self) -> None:
        while self.running:
            self.peak = max(self.peak, self.rss())
            time.sleep(0.002)

    def start(self) -> None:
        self.baseline = self.peak = self.rss()
        self.running, self.thread = True, threading.Thread(target=self.poll, daemon=True)
        self.thread.start()

    def stop(self) -> int:
        self.running = False
        self.thread.join()
        return max(self.peak, self.rss())


def call_in_child(target: str, **kwargs: Any) -> dict[str, Any]:
    """``module:function`` of this checkout called with ``kwargs`` in a fresh process, its JSON result (its last
    stdout line): a peak-memory figure that nothing earlier in this process has touched. A failure raises
    ``RuntimeError`` with its stderr's tail."""
    module, function = target.split(":")
    code = (f"import json, sys\nfrom {module} import {function}\n"
            f"print(json.dumps({function}(**json.loads(sys.argv[1]))))")
    done = subprocess.run([sys.executable, "-c", code, json.dumps(kwargs)], cwd=ROOT, capture_output=True, text=True,
                          check=False)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"exit {done.returncode}: {done.stderr.strip()[-2000:]}")
    return json.loads(lines[-1])
