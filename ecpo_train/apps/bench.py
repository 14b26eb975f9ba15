"""``ecpo bench NAME [args]``: run a benchmark of the source checkout, as ``python -m benchmarks.NAME args``.

The benchmarks are the checkout's ``benchmarks`` package (a repository tool: wheels ship ``ecpo_gym`` and
``ecpo_train`` only, and nothing in them imports it). A runnable benchmark is a module of it with a top-level
``main``; ``ecpo bench NAME args`` runs ``python -m benchmarks.NAME args`` in a child process, in the caller's
folder (paths in ``args`` mean what they say), with the checkout's root first on the child's ``PYTHONPATH``
(and ``-P``: a ``benchmarks`` folder where the caller stands does not hide the checkout's).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ecpo_gym.kwargs import shown

CHECKOUT = Path(__file__).resolve().parents[2]  # the repository root of an editable install


class NotACheckout(FileNotFoundError):
    """This ``ecpo`` was installed from a wheel: there is no ``benchmarks/`` beside its ``ecpo_train``."""


def benchmarks_folder() -> Path:
    """The checkout's ``benchmarks`` folder; ``NotACheckout`` where this ``ecpo`` was installed without one."""
    folder = CHECKOUT / "benchmarks"
    if not (folder / "__init__.py").is_file():
        raise NotACheckout("ecpo bench runs the benchmarks of a source checkout, and this ecpo is installed without "
                           "one (wheels do not ship benchmarks/): clone the repository and `pip install -e .` it")
    return folder


def benchmark_names(folder: Path) -> list[str]:
    """The folder's runnable modules: those defining a top-level ``main`` (read from the source, not imported:
    the benchmarks import torch, Ray, ALFWorld, ...)."""
    names = []
    for path in sorted(folder.glob("*.py")):
        if path.name.startswith("_"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(isinstance(node, ast.FunctionDef) and node.name == "main" for node in tree.body):
            names.append(path.stem)
    return names


def run_benchmark(name: str, argv: Sequence[str]) -> int:
    """``python -m benchmarks.NAME argv`` of the checkout, with this Python; its exit status. An unknown name
    raises ValueError listing the runnable ones."""
    names = benchmark_names(benchmarks_folder())
    if name not in names:
        raise ValueError(f"unknown benchmark {shown(name)}; choose one of {', '.join(names)}")
    path = os.pathsep.join(p for p in (str(CHECKOUT), os.environ.get("PYTHONPATH", "")) if p)
    child = subprocess.Popen([sys.executable, "-P", "-m", f"benchmarks.{name}", *argv],
                             env=os.environ | {"PYTHONPATH": path, "PYTHONUNBUFFERED": "1"},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace")
    # the child's lines go through this process's streams as they come (a caller that captures them, a test
    # or a notebook, sees them; a long benchmark still prints its progress live)
    pumps = [threading.Thread(target=_relay, args=(stream, name), daemon=True)
             for stream, name in ((child.stdout, "stdout"), (child.stderr, "stderr"))]
    for pump in pumps:
        pump.start()
    try:
        code = child.wait()
    except KeyboardInterrupt:
        child.terminate()
        code = child.wait()
    for pump in pumps:
        pump.join()
    return code


def _relay(stream: Any, name: str) -> None:
    for line in stream:
        target = getattr(sys, name)
        target.write(line)
        target.flush()
