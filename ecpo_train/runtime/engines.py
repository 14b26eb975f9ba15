"""The engines a run can be trained with, each declared once: ``register_engine(EngineSpec(...))``.

A run folder is written by one engine (``runtime/run.py`` drives any of them). Everything the run folder
(``runtime/run_dir.py``), the start checks (``runtime/resume.py``) and ``ecpo train --engine NAME`` (``apps/cli.py``)
know of an engine is its spec: its name, its class (a ``runtime.run.Engine``), the name of its checkpoint in the run
folder, how a resume reads the config the new one is compared with, whether ``config.yaml`` records its name, and
the command-line options only it reads; none of those modules names an engine. The native trainer is declared
here; the RLlib engine declares itself (``ecpo_train/integrations/engines.py``, imported with the package, so that
every process knows the folders it writes); a user's own engine is declared the same way from the user's module.

This module imports nothing of the project at import time (``import ecpo_train`` reads it).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

ENGINE_KEY = "engine"  # what config.yaml records beside the config of an engine that records its name
DEFAULT_ENGINE = "native"  # ``--engine``'s default; its config.yaml records no name


@dataclass(frozen=True)
class EngineOption:
    """A command-line option of ``ecpo train`` that only its engine reads (``name``: the keyword, ``--name-with-
    dashes`` on the command line)."""

    name: str
    default: Any
    help: str

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


@dataclass(frozen=True)
class EngineSpec:
    """One engine.

    ``engine``: ``"module:Class"`` (imported on use) or the class, built as ``Class(train_config, **settings)``
    (its ``name`` is the spec's: the run shell finds the spec by it);
    ``checkpoint``: its checkpoint's name in the run folder (a file, or a folder replaced whole:
    ``atomic.replaced_folder``); ``read_config(folder, checkpoint)``: the config a ``--resume`` compares the new one
    with (``folder``: the ``run_dir.RunFolder``; returning ``None``: nothing to compare); ``records_name``: ``config.yaml``
    records ``engine: NAME`` (the default engine's does not); ``summary``: ``--engine``'s help for it; ``files``: what
    ``ecpo train`` says the run folder holds; ``options``: the options only it reads, and ``options_are`` what they
    are for (an option given with another engine is refused, naming this one); ``settings(options, nproc)``: the
    options given (and ``--nproc``) as the engine's keyword arguments, a ``ValueError`` for a bad one (checked before
    anything is read or started); ``None``: no keyword arguments, and ``--nproc K`` runs K processes of the engine
    under ``torch.distributed.run``."""

    name: str
    engine: str | Callable[..., Any]
    checkpoint: str
    read_config: Callable[[Any, Path], dict[str, Any] | None]
    records_name: bool = True
    summary: str = ""
    files: str = ""
    options: tuple[EngineOption, ...] = ()
    options_are: str = "reads"
    settings: Callable[[Mapping[str, Any], int], dict[str, Any]] | None = None

    def engine_class(self) -> Callable[..., Any]:
        """The engine's class (imported now where it was declared as ``"module:Class"``)."""
        if not isinstance(self.engine, str):
            return self.engine
        module, _, attr = self.engine.partition(":")
        return getattr(importlib.import_module(module), attr)

    def engine_settings(self, options: Mapping[str, Any], nproc: int = 0) -> dict[str, Any]:
        """:attr:`settings` of the command line's options and ``--nproc`` (none: no keyword arguments)."""
        return dict(self.settings(options, nproc)) if self.settings is not None else {}


_ENGINES: dict[str, EngineSpec] = {}
ENGINES: Mapping[str, EngineSpec] = MappingProxyType(_ENGINES)  # a read-only live view, in registration order


def register_engine(spec: EngineSpec) -> EngineSpec:
    """Declare an engine. Declaring a name again with an equal spec does nothing; with another one, or a
    checkpoint name another engine has, it is a ``ValueError`` (two engines must never read each other's state)."""
    if not isinstance(spec, EngineSpec):
        raise TypeError(f"register_engine takes an EngineSpec, got {type(spec).__name__}")
    before = _ENGINES.get(spec.name)
    if before is not None and before != spec:
        raise ValueError(f"engine {spec.name!r} is already declared ({before.engine}): pick another name")
    taken = next((other.name for other in _ENGINES.values()
                  if other.name != spec.name and other.checkpoint == spec.checkpoint), None)
    if taken is not None:
        raise ValueError(f"engine {spec.name!r}: checkpoint {spec.checkpoint!r} is the {taken} engine's: pick another")
    _ENGINES[spec.name] = spec
    return spec


def unregister_engine(name: str) -> None:
    """Remove a declared engine (a test's or a notebook's throwaway one)."""
    _ENGINES.pop(name, None)


def engine_spec(name: str) -> EngineSpec:
    """The spec of engine ``name``; an undeclared one is a ``ValueError`` naming the declared ones."""
    spec = _ENGINES.get(name)
    if spec is None:
        from ecpo_gym.kwargs import shown

        raise ValueError(f"--engine {shown(name)}; valid: {', '.join(_ENGINES)}")
    return spec


def engine_names() -> list[str]:
    return list(_ENGINES)


def checkpoint_names() -> tuple[str, ...]:
    """Every declared engine's checkpoint name in a run folder, in declaration order."""
    return tuple(spec.checkpoint for spec in _ENGINES.values())


def _checkpoint_config(folder: Any, checkpoint: Path) -> dict[str, Any] | None:
    """The native checkpoint's own config, read without its tensors (authoritative: a ``config.yaml`` may have been
    edited, or damaged by an older version); refused before a model loads."""
    from ecpo_train.runtime.checkpoint_io import checkpoint_config

    return checkpoint_config(checkpoint)


NATIVE = register_engine(EngineSpec(
    name=DEFAULT_ENGINE, engine="ecpo_train.runtime.trainer:Trainer", checkpoint="checkpoint.pt",
    read_config=_checkpoint_config, records_name=False, summary="the single-machine trainer",
    files="metrics.jsonl, tensorboard/, checkpoint.pt, curves.png"))  # (no settings: --nproc K runs K processes)
