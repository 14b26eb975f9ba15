"""``ecpo bench NAME [args]``: run a benchmark of the source checkout by its ``main(argv)``.

The benchmarks are the checkout's ``benchmarks`` package (a repository tool: wheels ship ``ecpo_gym`` and
``ecpo_train`` only). A runnable benchmark is a module of it with a top-level ``main``; ``ecpo bench NAME args``
is ``python -m benchmarks.NAME args`` run from the repository root, in this process.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

CHECKOUT = Path(__file__).resolve().parents[2]  # the repository root of an editable install


class NotACheckout(FileNotFoundError):
    """This ``ecpo`` was installed from a wheel: there is no ``benchmarks/`` beside its ``ecpo_train``."""


def benchmarks_package() -> ModuleType:
    """The checkout's ``benchmarks`` package, imported by name. The checkout's root goes first on ``sys.path``,
    as ``python -m`` puts the current folder there, so that the benchmarks' spawned worker processes (which
    start from this process's path) import their modules by name too."""
    if not (CHECKOUT / "benchmarks" / "__init__.py").is_file():
        raise NotACheckout("ecpo bench runs the benchmarks of a source checkout, and this ecpo is installed without "
                           "one (wheels do not ship benchmarks/): clone the repository and `pip install -e .` it")
    if str(CHECKOUT) not in sys.path:
        sys.path.insert(0, str(CHECKOUT))
    package = importlib.import_module("benchmarks")
    if Path(package.__file__).resolve().parent != CHECKOUT / "benchmarks":
        raise NotACheckout(f"another package named benchmarks ({package.__file__}) hides the checkout's "
                           f"{CHECKOUT / 'benchmarks'}")
    return package


def benchmark_names(package: ModuleType) -> list[str]:
    """The package's runnable modules: those defining a top-level ``main`` (read from the source, not imported:
    the benchmarks import torch, Ray, ALFWorld, ...)."""
    names = []
    for info in pkgutil.iter_modules(package.__path__):
        if info.ispkg or info.name.startswith("_"):
            continue
        source = Path(package.__path__[0], f"{info.name}.py").read_text(encoding="utf-8")
        tree = ast.parse(source)
        if any(isinstance(node, ast.FunctionDef) and node.name == "main" for node in tree.body):
            names.append(info.name)
    return sorted(names)


def run_benchmark(name: str, argv: Sequence[str]) -> int:
    """Import ``benchmarks.NAME`` and call its ``main(argv)``; the exit status (0 unless ``main`` returned a
    nonzero int). An unknown name raises ValueError listing the runnable ones."""
    package = benchmarks_package()
    names = benchmark_names(package)
    if name not in names:
        raise ValueError(f"unknown benchmark {name!r}; choose one of {', '.join(names)}")
    result = importlib.import_module(f"benchmarks.{name}").main(list(argv))
    return result if isinstance(result, int) and not isinstance(result, bool) else 0
