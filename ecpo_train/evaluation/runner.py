"""Run an agent over manifests and seeds, resumably, and write the leaderboard's JSON and markdown.

Layout under ``out_dir``::

    <agent>/run.json             the agent's settings, temperature and seeds (a resume must match them)
    <agent>/<manifest>.jsonl     one fsynced line per finished (group, task, seed) episode
    <agent>/results.json         every episode record + the aggregated tables, derived from the jsonl files
    leaderboard.json / .md       the tables of every agent under ``out_dir``

``run.json``, ``results.json`` and the tables are replaced whole (``ecpo_train.files.atomic``): a crash or a
full disk mid-write leaves the previous file, never an empty one. Nothing is written through a link: an agent folder,
an episode log or the summary's lock that is a link (a symlink, or a hard link to a file elsewhere) is refused in one
line. One process at a time evaluates an agent into a folder (``<agent>/run.lock``, ``runtime.run_lock``): a second
is refused, naming the first, so two never append the same episodes twice.

Starting again with the same ``out_dir`` and agent skips the (group, task, seed) pairs already logged.
Each episode's randomness comes from ``episode_seed(seed, task_id, trial)`` (environment reset and agent
sampling), so a resumed run gives the records an uninterrupted one would.

Episodes are played by ``collect_rollout`` (the training loop) on a group vector env of one copy; a
Reflexion trial is one more such episode on the same task after the agent has reflected.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from ecpo_gym.group import GroupVectorEnv
from ecpo_train.core.rollout import collect_rollout
from ecpo_train.evaluation.agents import Agent, AgentPolicy, Trial, episode_seed
from ecpo_train.evaluation.manifests import TaskManifest, resolve_task_ids
from ecpo_train.evaluation.results import append_record, load_records, record_key
from ecpo_train.evaluation.tables import aggregate, markdown_tables
from ecpo_train.files.atomic import open_no_follow, refuse_links, write_text


@dataclass
class EvalSettings:
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    limit: int | None = None  # first N tasks of each group (smoke runs)
    env_overrides: dict[str, Any] = field(default_factory=dict)
    progress: bool = True


def safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_.+" else "_" for c in name).strip("._") or "agent"


def play_task(envs: GroupVectorEnv, env_id: str, player: AgentPolicy, task_id: str, seed: int) -> dict[str, Any]:
    """Every trial of ``player.agent`` on ``task_id`` (stops at the first win); the outcome of the last trial."""
    agent = player.agent
    agent.begin_task(player.env, task_id, seed)
    started = time.perf_counter()
    total_steps = total_invalid = 0
    outcome: dict[str, Any] = {}
    trial_wins = []
    for trial_index in range(max(1, agent.max_trials)):
        trial_seed = episode_seed(seed, task_id, trial_index)
        rollout = collect_rollout(envs, player, [task_id], env_name=env_id, temperature=agent.temperature,
                                  seed=trial_seed, on_reset=functools.partial(player.begin_episode, seed=trial_seed))
        (episode,) = rollout.episodes
        info = episode.final_info
        total_steps += episode.length
        total_invalid += episode.invalid_steps
        trial_wins.append(episode.won)
        agent.end_episode(Trial(task=str(info.get("task", "")), steps=episode.transcript, won=episode.won,
                                final_observation=episode.final_observation))
        score, em = info.get("score"), info.get("em")
        outcome = {"task_type": episode.task_type, "success": episode.won, "reward": episode.total_reward,
                   "steps": episode.length, "invalid_actions": episode.invalid_steps,
                   "score": float(score) if score is not None else float(episode.won),
                   "em": float(em) if em is not None else None}
        if episode.won:
            break
    outcome.update(trials=len(trial_wins), trial_wins=trial_wins, total_steps=total_steps,
                   total_invalid_actions=total_invalid, seconds=round(time.perf_counter() - started, 3))
    return outcome


class _Progress:
    """A rich progress bar with the running success rate (a no-op when disabled)."""

    def __init__(self, enabled: bool, total: int, done: int, label: str) -> None:
        self.enabled, self.total, self.done, self.label = enabled, total, done, label
        self.wins = self.count = 0
        self._bar: Any = None

    def __enter__(self) -> Self:
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("{task.fields[status]}"))
            self._bar.__enter__()
            self._task = self._bar.add_task(self.label, total=self.total, completed=self.done, status="")
        return self

    def update(self, success: bool, where: str) -> None:
        self.count += 1
        self.wins += int(success)
        if self._bar is not None:
            status = f"success {self.wins / self.count:.3f} ({self.count} new) | {where}"
            self._bar.update(self._task, advance=1, status=status)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)


def manifest_provenance(manifest: TaskManifest, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a manifest's results were played on: its env id and, per group, the env kwargs (overrides applied)
    and the task list; results under one manifest name with another provenance are not the same results."""
    entry = manifest.to_json()
    return {"env_id": manifest.env_id,
            "groups": {group.name: {"env_kwargs": manifest.group_env_kwargs(group, overrides),
                                    "tasks": entry["groups"][group.name]} for group in manifest.groups}}


def _as_json(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def _has_records(run_dir: Path, manifest_name: str) -> bool:
    """Whether ``run_dir`` holds a finished episode of manifest ``manifest_name``."""
    return bool(load_records(run_dir / f"{safe_name(manifest_name)}.jsonl", repair=False))


def check_run_config(run_dir: Path, config: dict[str, Any]) -> None:
    """Write ``run.json`` (the agent, the seeds and each manifest's provenance), or check that an existing one
    describes the same agent and the same manifests (more seeds and more manifests add to it); a difference is
    one ``ValueError`` naming it, and nothing is written. Only settings with results count: a ``run.json`` written
    by an evaluation that stopped before its first episode (an environment argument refused) is replaced, and so
    is the provenance of a manifest without an episode."""
    path = refuse_links(run_dir / "run.json")
    config = _as_json(config)
    if path.is_file() and not any(_has_records(run_dir, p.stem) for p in run_dir.glob("*.jsonl")):
        path.unlink()  # nothing was played under it: the settings it records bind nothing
    if path.is_file():
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):
            stored = None
        if not isinstance(stored, dict):
            raise ValueError(f"{path} is damaged: delete {run_dir} to evaluate again")
        if stored.get("agent") != config["agent"]:
            old, new = stored.get("agent") or {}, config["agent"]
            keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k)) if isinstance(old, dict) \
                else ["agent"]
            raise ValueError(f"{run_dir} holds results of a different agent configuration (it differs in "
                             f"{', '.join(keys)}): use another --out-dir or --name, or delete {run_dir}")
        stored_manifests = stored.get("manifests") or {}
        for name, provenance in (config.get("manifests") or {}).items():
            if name in stored_manifests and stored_manifests[name] != provenance and _has_records(run_dir, name):
                raise ValueError(f"{run_dir} holds results of manifest {name} played on other environment settings "
                                 "or tasks (env kwargs or task list changed): use another --out-dir, or delete "
                                 f"{run_dir} to evaluate again")
        merged = {**stored, "seeds": sorted(set(stored.get("seeds", [])) | set(config["seeds"])),
                  "manifests": {**stored_manifests, **(config.get("manifests") or {})}}
        write_text(path, json.dumps(merged, indent=1, sort_keys=True) + "\n")
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(config, indent=1, sort_keys=True) + "\n")


def evaluate(agent: Agent, manifests: Sequence[TaskManifest], out_dir: str | Path,
             settings: EvalSettings | None = None) -> dict[str, Any]:
    """Evaluate ``agent`` on every task of ``manifests`` for each seed; returns the agent's results dict."""
    from ecpo_train.runtime.run_lock import acquire_run_lock

    settings = settings or EvalSettings()
    out_dir = Path(out_dir)
    run_dir = refuse_links(out_dir / safe_name(agent.name), below=out_dir)
    lock = acquire_run_lock(run_dir, "leaderboard", label=f"the evaluation folder {run_dir}")
    try:
        _evaluate(agent, manifests, run_dir, settings)
    finally:
        lock.release()
    return write_reports(out_dir, agent.name, [m.name for m in manifests])


def _evaluate(agent: Agent, manifests: Sequence[TaskManifest], run_dir: Path, settings: EvalSettings) -> None:
    """:func:`evaluate`'s episodes, under the agent folder's lock."""
    import ecpo_gym  # noqa: F401  (registers the ids)
    from ecpo_gym.group_workers import make_env

    check_run_config(run_dir, {"agent": agent.describe(), "seeds": list(settings.seeds),
                               "manifests": {m.name: manifest_provenance(m, settings.env_overrides)
                                             for m in manifests}})
    for manifest in manifests:
        log = refuse_links(run_dir / f"{safe_name(manifest.name)}.jsonl")
        done = {record_key(r) for r in load_records(log)}
        for group in manifest.groups:
            env_kwargs = manifest.group_env_kwargs(group, settings.env_overrides)
            ids = group.task_ids[: settings.limit] if group.task_ids is not None else None
            pending_known = ids is not None and all((manifest.name, group.name, t, s) in done
                                                    for t in ids for s in settings.seeds)
            if pending_known:
                continue
            env = make_env(manifest.env_id, env_kwargs)
            envs = GroupVectorEnv(lambda env=env: env, num_groups=1, group_size=1)  # owns and closes env
            player = AgentPolicy(agent, env)
            try:
                ids = ids if ids is not None else resolve_task_ids(group, env)[: settings.limit]
                todo = [(s, t) for s in settings.seeds for t in ids if (manifest.name, group.name, t, s) not in done]
                label = f"{agent.name} | {manifest.name}/{group.name}"
                with _Progress(settings.progress, len(ids) * len(settings.seeds),
                               len(ids) * len(settings.seeds) - len(todo), label) as bar:
                    for seed, task_id in todo:
                        outcome = play_task(envs, manifest.env_id, player, task_id, seed)
                        record = {"agent": agent.name, "manifest": manifest.name, "benchmark": manifest.benchmark,
                                  "env_id": manifest.env_id, "group": group.name, "task_id": task_id,
                                  "seed": seed, **outcome}
                        append_record(log, record)
                        done.add(record_key(record))
                        bar.update(bool(outcome["success"]), f"seed {seed}")
            finally:
                envs.close()


def collect_records(run_dir: Path, manifest_names: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Every record of a run folder (optionally only some manifests), in a stable order."""
    paths = sorted(run_dir.glob("*.jsonl"))
    if manifest_names is not None:
        wanted = {safe_name(m) for m in manifest_names}
        paths = [p for p in paths if p.stem in wanted]
    records = [r for p in paths for r in load_records(p, repair=False)]
    return sorted(records, key=lambda r: (r["manifest"], r["group"], int(r["seed"]), r["task_id"]))


def write_reports(out_dir: str | Path, agent_name: str | None = None,
                  manifest_names: Sequence[str] | None = None) -> dict[str, Any]:
    """Derive ``<agent>/results.json`` (when ``agent_name``) and ``leaderboard.json/.md`` from the jsonl logs."""
    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        raise FileNotFoundError(f"no leaderboard results folder {out_dir}: run an evaluation into it first")
    result: dict[str, Any] = {}
    if agent_name is not None:
        run_dir = out_dir / safe_name(agent_name)
        records = collect_records(run_dir, manifest_names)
        run = json.loads((run_dir / "run.json").read_text(encoding="utf-8")) if (run_dir / "run.json").is_file() else {}
        result = {"run": run, "summary": aggregate(records).get(agent_name, {}), "episodes": records}
        write_text(run_dir / "results.json", json.dumps(result, indent=1, sort_keys=True) + "\n", below=out_dir)
    with _one_summary_writer(out_dir):
        everything = [r for d in sorted(p for p in out_dir.iterdir() if p.is_dir()) for r in collect_records(d)]
        summary = aggregate(everything)
        write_text(out_dir / "leaderboard.json", json.dumps(summary, indent=1, sort_keys=True) + "\n")
        markdown = markdown_tables(summary)
        write_text(out_dir / "leaderboard.md", markdown)
    result["markdown"] = markdown
    return result


@contextlib.contextmanager
def _one_summary_writer(out_dir: Path):
    """The folder's summary is rewritten by one process at a time: agents evaluated into one folder at once (a
    study's parallel jobs) each rebuild it from every log, in turn, so the last holds every agent (the lock is the
    kernel's: a killed writer releases it)."""
    fd = open_no_follow(out_dir / ".leaderboard.lock", os.O_RDWR | os.O_CREAT)  # (never created through a link)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
