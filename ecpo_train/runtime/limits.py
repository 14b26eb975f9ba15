"""What this machine can hold: the upper bounds of a run's sizes, read once from its cores and memory.

The config declares them on its fields (``runtime/config.py``), so an impossible size is a one-line error when the
config is built, before a folder is written or a process starts, instead of a ``MemoryError`` mid-run or a
thread library's abort:

- processes and threads (``env_workers``, ``threads``): at most ``PER_CORE`` per usable core, and never fewer than
  ``MIN_CEILING`` (the GPU presets' 8 env workers load on any machine); an env worker is a spawned Python holding
  its engine (about ``WORKER_BYTES``), so the memory caps them too;
- episodes held at once (``n_groups`` x ``group_size``, ``val_episodes_per_task`` x the validation tasks): at most
  the memory over ``EPISODE_BYTES``, a generous budget for one episode's step rows (50 steps of 2,048 + 512 token
  ids and their log-probabilities come to about 1 MiB).
"""

from __future__ import annotations

import os

PER_CORE = 4  # past a few per core, more workers or threads only queue for the same cores
MIN_CEILING = 8
WORKER_BYTES = 512 << 20  # one env worker process (measured ~0.5 GB: 32 workers took 16 GB)
EPISODE_BYTES = 1 << 20


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity), else the machine's core count."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def memory_bytes() -> int:
    """The machine's physical memory (``sysconf``); 16 GiB where the platform does not say."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 16 << 30


MAX_THREADS = max(MIN_CEILING, PER_CORE * usable_cores())
MAX_ENV_WORKERS = max(1, min(MAX_THREADS, memory_bytes() // WORKER_BYTES))
MAX_EPISODES = max(1, memory_bytes() // EPISODE_BYTES)
# a prompt or a reply longer than any model's context (a million tokens): refused when the config is built, not
# found mid-run as a cache of hundreds of GB
MAX_SEQUENCE_TOKENS = 1 << 20
MAX_LR = 10.0  # the largest learning rate (runtime/config.py says why)
MAX_SEED = 2**32 - 1  # numpy's global stream (np.random.seed) takes no larger seed: refused by name, not by numpy
# an evaluation's seeds 0..N-1 are listed at once, and each plays every task: 10,000 is past any table's use
MAX_EVAL_SEEDS = 10_000
