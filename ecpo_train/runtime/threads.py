"""Torch's CPU thread count chosen from the cores actually free (config ``threads: auto``).

On a machine shared with other busy processes, torch's default (one thread per core) makes every parallel
region wait for its slowest thread, and a thread that has lost its core to another process stalls all of
them: on 2 cores with one competing job the scoring demo ran 6.8x slower than idle, where one thread would
run at about half speed. ``choose_threads`` therefore counts the cores this process may use
(``os.sched_getaffinity``), subtracts the load the *other* processes put on them (the 1-minute load average
minus this process's own average use since the last call), and rounds to at least 1. The trainer re-chooses
before each update, so a machine that becomes busy (or idle) is followed within an iteration.

The count changes float summation order, so a run under ``auto`` is not bitwise reproducible from one
machine load to another; the default (``threads: 0``) leaves torch's own count, and the CPU presets opt in.
"""

from __future__ import annotations

import os
import time

import torch

from ecpo_train.runtime.limits import usable_cores

_last_sample: dict[str, float] = {}


def own_busy_cores() -> float:
    """This process's average number of busy cores since the previous call (0 on the first call)."""
    wall, cpu = time.monotonic(), time.process_time()
    previous = dict(_last_sample)
    if previous and wall - previous["wall"] < 1.0:  # too short a window to say anything: keep the older sample
        return 0.0
    _last_sample.update(wall=wall, cpu=cpu)
    if not previous:
        return 0.0
    return max(0.0, (cpu - previous["cpu"]) / (wall - previous["wall"]))


def choose_threads(setting: int | str = "auto") -> int:
    """``setting`` as a thread count: an integer >= 1 is used as given, 0 keeps torch's current count; ``"auto"``
    = the cores the other processes leave free, rounded, at least 1 (module docstring)."""
    if setting != "auto":
        return int(setting) or torch.get_num_threads()
    cores = usable_cores()
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average on this platform: assume the machine is ours
        return cores
    others = max(0.0, load - own_busy_cores())
    return max(1, min(cores, int(cores - others + 0.5)))


def apply_threads(setting: int | str = "auto") -> int:
    """Set torch's intra-op thread count from ``setting`` (:func:`choose_threads`); returns the count."""
    threads = choose_threads(setting)
    if threads != torch.get_num_threads():
        torch.set_num_threads(threads)
    return threads
