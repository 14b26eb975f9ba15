"""Task manifests: the fixed lists of task ids a leaderboard evaluates, so every run and machine sees the same.

A manifest is a small JSON file (committed in ``ecpo_train/manifests/``)::

    {"name": "alfworld_valid_seen", "benchmark": "alfworld", "env_id": "ecpo/ALFWorld-v0",
     "env_kwargs": {"split": "valid_seen"},
     "groups": {"valid_seen": {"task_ids": ["pick_and_place_simple-.../trial_.../game.tw-pddl", ...]}},
     "description": "..."}

``benchmark`` picks the table the results go to (``alfworld``, ``webshop``, ``searchqa``; anything else gets
a generic success table). Each group is one column source (a split, or a QA dataset) with its own
``env_kwargs`` merged over the manifest's. A group lists its ``task_ids`` explicitly, or says ``"first": K``:
the first K ids of the environment's own ``task_ids`` order (used for QA datasets whose files are not
shipped here; dataset task ids are the rows' own ids, so the same file gives the same K ids).

Without a manifest (``manifest_from_env``) the runner lists the environment's ``task_ids`` sorted, so any
split folder works, e.g. ALFWorld ``valid_unseen`` (not listed here: that split is not available to us).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ecpo_gym import family_of
from ecpo_gym.families import recorded_env_id
from ecpo_gym.kwargs import shown

MANIFEST_DIR = Path(__file__).resolve().parent.parent / "manifests"


@dataclass
class TaskGroup:
    """One split or dataset of a manifest: its environment settings and its task ids."""

    name: str
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    task_ids: list[str] | None = None  # None: take the first ``first`` ids of the environment
    first: int | None = None


@dataclass
class TaskManifest:
    name: str
    benchmark: str
    env_id: str
    env_kwargs: dict[str, Any]
    groups: list[TaskGroup]
    description: str = ""

    def group_env_kwargs(self, group: TaskGroup, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        """The environment constructor arguments of ``group`` (manifest < group < ``overrides``)."""
        return {**self.env_kwargs, **group.env_kwargs, **(overrides or {})}

    def to_json(self) -> dict[str, Any]:
        groups: dict[str, Any] = {}
        for group in self.groups:
            entry: dict[str, Any] = {}
            if group.env_kwargs:
                entry["env_kwargs"] = group.env_kwargs
            if group.task_ids is not None:
                entry["task_ids"] = list(group.task_ids)
            if group.first is not None:
                entry["first"] = group.first
            groups[group.name] = entry
        return {"name": self.name, "benchmark": self.benchmark, "env_id": self.env_id,
                "env_kwargs": self.env_kwargs, "description": self.description, "groups": groups}


def benchmark_of(env_id: str) -> str:
    """The benchmark an ECPO environment id declares (``EnvFamily.benchmark``: ``alfworld`` / ``webshop`` /
    ``searchqa`` / ``diagnostic``); any other id is reported under its own bare name."""
    family = family_of(env_id)
    if family is not None:
        return family.benchmark
    return env_id.rsplit("/", 1)[-1].lower().split("-", 1)[0]


def parse_manifest(data: dict[str, Any], source: str = "<dict>") -> TaskManifest:
    """Validate a manifest's JSON; a clear ``ValueError`` (``TypeError`` for a non-object) naming ``source``."""
    if not isinstance(data, dict):
        raise TypeError(f"manifest {source}: expected a JSON object")
    missing = [key for key in ("name", "env_id", "groups") if key not in data]
    if missing:
        raise ValueError(f"manifest {source}: missing key(s) {', '.join(missing)}")
    for key in ("name", "env_id", "benchmark", "description"):
        if key in data and not isinstance(data[key], str) and not (key == "benchmark" and data[key] is None):
            raise ValueError(f"manifest {source}: {key!r} must be a string")
    recorded_env_id(data["env_id"], f"manifest {source}")  # a manifest is data: it never imports code
    raw_groups = data["groups"]
    if not isinstance(raw_groups, dict) or not raw_groups:
        raise ValueError(f"manifest {source}: 'groups' must be a non-empty object of group name -> spec")
    groups = []
    for name, spec in raw_groups.items():
        if not isinstance(spec, dict):
            raise TypeError(f"manifest {source}: group {shown(name)} must be an object")
        task_ids, first = spec.get("task_ids"), spec.get("first")
        if (task_ids is None) == (first is None):
            raise ValueError(f"manifest {source}: group {shown(name)} needs exactly one of 'task_ids' or 'first'")
        if task_ids is not None:
            if not isinstance(task_ids, list) or not all(isinstance(t, str) for t in task_ids):
                raise ValueError(f"manifest {source}: group {shown(name)} 'task_ids' must be a list of strings")
            if len(set(task_ids)) != len(task_ids):
                raise ValueError(f"manifest {source}: group {shown(name)} lists a task id twice")
        if first is not None and (isinstance(first, bool) or not isinstance(first, int) or first < 1):
            raise ValueError(f"manifest {source}: group {shown(name)} 'first' must be a positive integer")
        groups.append(TaskGroup(name=str(name), env_kwargs=_kwargs(spec, f"manifest {source}: group {shown(name)}"),
                                task_ids=list(task_ids) if task_ids is not None else None, first=first))
    env_id = str(data["env_id"])
    return TaskManifest(name=str(data["name"]), benchmark=str(data.get("benchmark") or benchmark_of(env_id)),
                        env_id=env_id, env_kwargs=_kwargs(data, f"manifest {source}"), groups=groups,
                        description=str(data.get("description", "")))


def _kwargs(spec: dict[str, Any], where: str) -> dict[str, Any]:
    """``spec``'s ``env_kwargs``: an object of keyword -> value (a list of pairs is not one), or nothing."""
    kwargs = spec.get("env_kwargs")
    if kwargs is None:
        return {}
    if not isinstance(kwargs, dict):
        raise ValueError(f"{where}: 'env_kwargs' must be an object of keyword -> value")  # noqa: TRY004
    return dict(kwargs)


def available_manifests() -> list[str]:
    """Names of the committed manifests."""
    return sorted(path.stem for path in MANIFEST_DIR.glob("*.json"))


def load_manifest(name_or_path: str | Path) -> TaskManifest:
    """A committed manifest by name (``alfworld_gen``) or any manifest file by path."""
    path = Path(name_or_path)
    if not os.path.isfile(path):  # (False, not an OSError, for a name too long for a path)
        path = MANIFEST_DIR / f"{name_or_path}.json"
    if not os.path.isfile(path):
        raise FileNotFoundError(f"manifest {shown(name_or_path)} not found (neither a file nor one of the committed "
                                f"manifests in {MANIFEST_DIR}: {', '.join(available_manifests())})")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"manifest {path} is not valid JSON: {err}") from None
    except RecursionError:
        raise ValueError(f"manifest {path} is nested deeper than a manifest is: not a manifest") from None
    return parse_manifest(data, str(path))


def manifest_from_env(env_id: str, env_kwargs: dict[str, Any] | None = None, *, group: str | None = None,
                      limit: int | None = None) -> TaskManifest:
    """An ad-hoc manifest: every task id of the environment, sorted (the first ``limit`` when given)."""
    from ecpo_gym.group_workers import make_env

    kwargs = dict(env_kwargs or {})
    env = make_env(env_id, kwargs)
    try:
        ids = sorted(str(t) for t in env.unwrapped.task_ids)
    finally:
        env.close()
    if limit is not None:
        ids = ids[:limit]
    group_name = group or str(kwargs.get("split") or kwargs.get("dataset") or "all")
    name = env_id.rsplit("/", 1)[-1] + ("_" + group_name if group_name != "all" else "")
    return TaskManifest(name=name, benchmark=benchmark_of(env_id), env_id=env_id, env_kwargs=kwargs,
                        groups=[TaskGroup(name=group_name, task_ids=ids)],
                        description=f"every task of {env_id} {kwargs}, sorted")


def resolve_task_ids(group: TaskGroup, env: Any) -> list[str]:
    """The task ids of ``group`` on a made environment (``first`` reads the environment's own order)."""
    if group.task_ids is not None:
        return list(group.task_ids)
    ids = [str(t) for t in env.unwrapped.task_ids]
    return ids[: group.first]
