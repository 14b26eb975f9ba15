"""The leaderboard's options: one dataclass, read by ``ecpo leaderboard`` and ``ecpo eval``.

Each field is one command-line option: its name gives the flag (``env_kwarg`` -> ``--env-kwarg``), its default
the option's default and its ``help`` metadata the help text. ``typer_command`` turns a function of
``LeaderboardOptions`` into a typer command with those options. This module imports nothing heavy, so
``ecpo --help`` stays fast.
"""

from __future__ import annotations

import inspect
import math
import os
import typing
from collections.abc import Callable, Iterable
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from ecpo_gym.kwargs import cut_long_words, shown
from ecpo_train.policies import DTYPES
from ecpo_train.runtime import MIN_TEMPERATURE, VALIDATION_TEMPERATURE  # ``--greedy`` gives 0
from ecpo_train.runtime.limits import MAX_EVAL_SEEDS, MAX_SEQUENCE_TOKENS

AGENT_KINDS = ("checkpoint", "prompting", "react", "reflexion", "expert", "random")
CHAT_AGENTS = ("prompting", "react", "reflexion")  # the agents that use --model / --backend / --base-url
BACKENDS = ("transformers", "openai")


def _option(default: Any, help: str) -> Any:
    return field(default=default, metadata={"help": help})


@dataclass
class LeaderboardOptions:
    """Which agent to evaluate, on which tasks and seeds, and where the results go."""

    agent: str = _option("expert", " | ".join(AGENT_KINDS))
    manifest: list[str] | None = field(default=None, metadata={
        "help": "committed manifest name or JSON path (repeatable); default alfworld_gen + webshop_gen"})
    env: str | None = _option(None, "evaluate every task of this env id (sorted) instead of manifests")
    env_kwarg: list[str] | None = field(default=None, metadata={
        "help": "key=value environment argument (repeatable)"})
    data_dir: str | None = _option(None, "data folder / split folder for the real-data environments")
    model: str | None = _option(None, "transformers folder or hub id; the model name for --backend openai")
    checkpoint: str | None = _option(None, "training run folder or checkpoint.pt (--agent checkpoint)")
    backend: str = _option("transformers", " | ".join(BACKENDS) + " (chat endpoint)")
    base_url: str | None = _option(None, "OpenAI-compatible base URL; default $ECPO_OPENAI_BASE_URL")
    seeds: int = _option(3, "seeds 0..N-1; tables show mean ± std over them")
    temperature: float = _option(VALIDATION_TEMPERATURE, "sampling temperature (paper validation: 0.4)")
    greedy: bool = _option(False, "greedy decoding (temperature 0)")
    trials: int = _option(3, "Reflexion trials per task")
    limit: int | None = _option(None, "only the first N tasks of each manifest group")
    out_dir: str | None = _option("leaderboard", "results folder (resumes what is already there)")
    name: str | None = _option(None, "row label of this agent")
    device: str = _option("cpu", "torch device of local models")
    dtype: str = _option("float32", "weights dtype of local chat models")
    max_new_tokens: int = _option(512, "reply length limit of chat models")
    progress: bool = _option(True, "rich progress bar")
    report_only: bool = _option(False, "only rebuild the tables from out_dir")

    @property
    def sampling_temperature(self) -> float:
        return 0.0 if self.greedy else float(self.temperature)

    def check(self) -> None:
        """``ValueError`` naming the first option with an impossible value, or one the agent would ignore."""
        if self.agent not in AGENT_KINDS:
            raise ValueError(f"agent={shown(self.agent)}; choose from {', '.join(AGENT_KINDS)}")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend={shown(self.backend)}; choose from {', '.join(BACKENDS)}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype={shown(self.dtype)}; choose from {', '.join(DTYPES)}")
        for name, low, high in (("seeds", 1, MAX_EVAL_SEEDS), ("trials", 1, MAX_EVAL_SEEDS),
                                ("max_new_tokens", 1, MAX_SEQUENCE_TOKENS), ("limit", 1, None)):
            value = getattr(self, name)
            if value is not None and not (low <= value and (high is None or value <= high)):
                within = f">= {low}" if high is None else f"in [{low}, {high}]"
                raise ValueError(f"--{name.replace('_', '-')} must be {within}, got {value}")
        if not (math.isfinite(self.temperature) and (self.temperature == 0 or self.temperature >= MIN_TEMPERATURE)):
            raise ValueError(f"--temperature must be 0 (greedy) or a finite number >= {MIN_TEMPERATURE:g} (below it "
                             f"logits / T overflow), got {str(self.temperature)[:40]}")
        for name in ("env", "name", "data_dir", "model", "checkpoint", "base_url"):  # "" is not "left out"
            if getattr(self, name) is not None and not str(getattr(self, name)).strip():
                raise ValueError(f"--{name.replace('_', '-')} {shown(getattr(self, name))} is empty: give a value, "
                                 "or leave the option out")
        if self.report_only:  # only rebuilds the tables: every option of an evaluation would be ignored
            kept = ("report_only", "out_dir", "progress")
            given = [f"--{f.name.replace('_', '-')}" for f in fields(self)
                     if f.name not in kept and getattr(self, f.name) != f.default]
            if given:
                raise ValueError(f"--report-only only rebuilds the tables of --out-dir: {', '.join(given)} would be "
                                 "ignored; leave it out")
        if self.env and self.manifest:
            raise ValueError("--env evaluates every task of one env instead of manifests: give --env or --manifest, "
                             "not both")
        chat, local = self.agent in CHAT_AGENTS, self.agent in CHAT_AGENTS and self.backend == "transformers"
        used = {"model": chat, "base_url": chat and self.backend == "openai", "checkpoint": self.agent == "checkpoint",
                "backend": chat, "dtype": local, "max_new_tokens": chat, "trials": self.agent == "reflexion",
                "device": local or self.agent == "checkpoint",
                "temperature": self.agent not in ("expert", "random"), "greedy": self.agent not in ("expert", "random")}
        defaults = {f.name: f.default for f in fields(self)}
        ignored = [f"--{name.replace('_', '-')}" for name, reads in used.items()
                   if not reads and getattr(self, name) != defaults[name]]
        if ignored:
            raise ValueError(f"{', '.join(ignored)} would be ignored by --agent {self.agent}: leave it out")
        if not self.out_dir:
            raise ValueError("out_dir is required")
        check_output_folder(self.out_dir)
        check_device(self.device)


def check_output_folder(path: str | Path) -> None:
    """``ValueError`` when ``path`` cannot become a folder: it, or a folder above it, is a file, or the name is too long
    or holds a NUL character (``run_dir.check_path_length``)."""
    from ecpo_train.runtime.run_dir import check_path_length

    check_path_length(Path(path), f"--out-dir {shown(str(path))}")
    probe = Path(path).absolute()
    while not os.path.exists(probe):  # (False, not an OSError, for a name too long for a path)
        probe = probe.parent
    if not probe.is_dir():
        raise ValueError(f"{path} cannot be a results folder: {probe} is a file")


def check_device(device: str) -> None:
    """``cpu``, ``cuda`` or ``cuda:N``; CUDA only where this torch has a usable GPU."""
    kind, _, index = device.partition(":")
    if kind not in ("cpu", "cuda") or (index and (kind != "cuda" or not index.isdigit())):
        raise ValueError(f"--device {shown(device)}; valid: cpu, cuda, cuda:N")
    if kind == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ValueError(f"--device {device} but this torch ({torch.__version__}) has no usable CUDA device: "
                             "use --device cpu, or install a CUDA build of torch")


ERROR_LINE_CHARS = 2000  # a message echoing a huge value (a 10 MB config string) is cut to this


def error_line(err: BaseException) -> str:
    """An exception as the one line the CLI prints: its message's first line (a ``KeyError`` without quotes), each
    huge value in it cut (:func:`cut_long_words`), the whole cut to ``ERROR_LINE_CHARS`` characters."""
    text = str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err)
    if isinstance(err, OSError) and err.strerror and err.filename:  # not "[Errno 2] ...": path first, then why
        text = f"{err.filename}: {err.strerror}"
    text = text.strip()
    line = cut_long_words(text.splitlines()[0]) if text else type(err).__name__
    if len(line) > ERROR_LINE_CHARS:
        line = f"{line[:ERROR_LINE_CHARS]}... ({len(line) - ERROR_LINE_CHARS} more characters)"
    return line


def typer_command(function: Callable[..., Any], *, only: Iterable[str] | None = None,
                  defaults: dict[str, Any] | None = None, helps: dict[str, str] | None = None) -> Callable[..., Any]:
    """A typer command calling ``function(options, **rest)``: its options are the fields of
    ``LeaderboardOptions`` (those named in ``only``, with ``defaults``/``helps`` replacing the dataclass's),
    after ``function``'s own parameters other than ``options`` (e.g. a positional argument)."""
    import typer

    chosen = set(only) if only is not None else None
    defaults, helps = defaults or {}, helps or {}
    hints = typing.get_type_hints(LeaderboardOptions)
    own_hints = typing.get_type_hints(function, include_extras=True)  # keeps typer's Annotated metadata
    parameters, annotations = [], {}
    for p in inspect.signature(function).parameters.values():
        if p.name != "options":
            parameters.append(p.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=own_hints[p.name]))
            annotations[p.name] = own_hints[p.name]
    option_names = []
    for f in fields(LeaderboardOptions):
        if chosen is not None and f.name not in chosen:
            continue
        default = defaults.get(f.name, f.default if f.default is not MISSING else None)
        option = typer.Option(default, help=helps.get(f.name, f.metadata.get("help")))
        parameters.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=option,
                                            annotation=hints[f.name]))
        annotations[f.name] = hints[f.name]
        option_names.append(f.name)

    def command(**values: Any) -> Any:
        options = LeaderboardOptions(**{name: values.pop(name) for name in option_names})
        return function(options, **values)

    command.__name__, command.__doc__ = function.__name__, function.__doc__
    command.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    command.__annotations__ = annotations
    return command
