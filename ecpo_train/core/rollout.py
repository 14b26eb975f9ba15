"""Group rollouts (Algorithm 1, step A): G groups x N copies of one task each, stepped together.

Every live copy gets its prompt context, the policy answers all of them in one batched call, and the
group vector env steps them together; finished copies are dropped from generation. The result is a
``TrajectoryBatch`` (one row per step) whose token columns carry what the learner needs (the prompt and
response token ids and the old log-probs), plus per-episode statistics and the time split between
generation and environment stepping.

This is the one episode loop of the project: training, validation and the leaderboard all play through
``collect_rollout``, so a malformed reply is treated the same everywhere (``sent_action``).

An environment fault (a worker process that died or hung, an env that raised: the group vector env ends the
copy as truncated with ``info["error"]``) is not the agent's doing: the episode is kept with its ``fault``,
left out of the episode metrics, and its step rows are left out of the table, so credit never sees it (no
``<invalid>`` row for an action the agent did not take). The metrics count it (``env/worker_failures``,
``env/faulted_episodes``, ``env/dropped_rows``) and one warning line names it.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ecpo_gym.canonical import INVALID_ACTION
from ecpo_gym.group import GroupVectorEnv
from ecpo_gym.kwargs import shown
from ecpo_train.core.batch import StepTableBuilder, TrajectoryBatch
from ecpo_train.policies.base import PolicyOutput, StepContext

ANCHOR_KEYS = ("state_key", "observation_key")
# The step-row table's extra columns beside the core and token ones: the env's structured and text keys under
# their own names, and the raw reply.
ROLLOUT_EXTRAS = ("state_key", "observation_key", "response")


def check_anchor_key(anchor_key: Any) -> str:
    """The anchor-key rule, the one place it is checked (the native config, RLlib's configs, the episode loop, the
    candidate connector): the info field an anchor is read from, one of ``ANCHOR_KEYS``, every ``ecpo_gym`` env's
    info carrying both. ``ValueError`` in one line otherwise."""
    if anchor_key not in ANCHOR_KEYS:
        raise ValueError(f"anchor_key={shown(anchor_key)}; valid: {', '.join(ANCHOR_KEYS)}")
    return anchor_key


def check_info_keys(info: dict, anchor_key: str, env_name: str) -> None:
    """The info an episode starts with carries what a step row reads: ``state_key`` and ``anchor_key``'s field.
    An env that lacks one is refused in one line, before a step is played."""
    missing = [key for key in dict.fromkeys(("state_key", anchor_key)) if key not in info]
    if missing:
        raise ValueError(f"{env_name}: the info of reset() has no {' or '.join(missing)}; step credit reads each "
                         "step's anchor from it (an ecpo_gym TextAgentEnv provides both; see docs/environments.md)")


class Actor(Protocol):
    """What ``collect_rollout`` asks of a policy: one batched ``act`` call (every ``Policy`` is one)."""

    def act(self, contexts: Sequence[StepContext], temperature: float = 1.0) -> PolicyOutput: ...


def sent_action(action: Any) -> str:
    """The text the environment receives for a policy's action: an empty, ``None`` or non-string action (a
    reply with no parsable action) becomes the canonical ``INVALID_ACTION``, on every path."""
    return action if isinstance(action, str) and action else INVALID_ACTION


@dataclass
class Episode:
    """Outcome of one trajectory.

    ``transcript`` holds ``(observation, action sent, raw response)`` per step; ``final_observation`` and
    ``final_info`` are what the last step returned (env metrics such as WebShop ``score`` or QA ``em``).
    """

    group_id: int
    traj_id: int
    task_id: str
    task_type: str
    won: bool
    length: int
    total_reward: float
    invalid_steps: int
    terminated: bool = False  # the episode ended in a terminal state (else it was truncated)
    fault: str = ""  # the environment fault that ended it (info["error"]), if one did
    transcript: list[tuple[str, str, str]] = field(default_factory=list, repr=False)
    final_observation: str = field(default="", repr=False)
    final_info: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class Rollout:
    """A batch of step rows plus episode outcomes and timings."""

    batch: TrajectoryBatch
    episodes: list[Episode]
    generation_seconds: float = 0.0
    env_seconds: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)


def episode_metrics(episodes: Sequence[Episode], prefix: str = "") -> dict[str, float]:
    """Success (overall and per task type), reward mean/std, episode length and invalid-action rate of the
    episodes an environment fault did not end."""
    episodes = [e for e in episodes if not e.fault]
    if not episodes:
        return {}
    won = np.array([e.won for e in episodes], dtype=float)
    rewards = np.array([e.total_reward for e in episodes])
    lengths = np.array([e.length for e in episodes], dtype=float)
    metrics = {
        f"{prefix}success": float(won.mean()),
        f"{prefix}reward_mean": float(rewards.mean()),
        f"{prefix}reward_std": float(rewards.std()),
        f"{prefix}episode_length": float(lengths.mean()),
        f"{prefix}invalid_action_rate": float(sum(e.invalid_steps for e in episodes) / max(lengths.sum(), 1.0)),
    }
    for task_type in sorted({e.task_type for e in episodes if e.task_type}):
        mask = np.array([e.task_type == task_type for e in episodes])
        metrics[f"{prefix}success/{task_type}"] = float(won[mask].mean())
    return metrics


def step_draw(seed: int, copy: int, step: int) -> float:
    """The uniform in [0, 1) behind copy ``copy``'s choice at its step ``step`` under ``draws_seed=seed``: a
    function of these three numbers alone, whatever the other copies do."""
    return float(np.random.default_rng([seed, copy, step]).random())


def collect_rollout(
    envs: GroupVectorEnv,
    policy: Actor,
    task_ids: Sequence[str],
    *,
    env_name: str,
    temperature: float,
    seed: int | None = None,
    anchor_key: str = "state_key",
    history_length: int | None = None,
    on_reset: Callable[[list[tuple[str, dict[str, Any]]]], None] | None = None,
    draws_seed: int | None = None,
    policy_version: int = 0,
    waves: int = 1,
) -> Rollout:
    """Play one episode on every copy of ``envs`` (group ``g`` on ``task_ids[g]``) with ``policy``.

    Copy ``i`` is reset with ``seed + i`` (see ``GroupVectorEnv.reset``). ``anchor_key`` picks the info
    field that becomes the batch's ``anchor_key`` column (the credit's anchors): the env's structured
    ``state_key`` (default) or the normalised observation ``observation_key`` (the paper's text anchor). Both
    are kept as extras under their own names (``state_key``, ``observation_key``). ``on_reset``, when given, is
    called once with every copy's ``(observation, info)`` after the reset and before the first action (agents
    that read the episode's start, e.g. the leaderboard's expert, prepare there). Every action goes through
    ``sent_action``. ``draws_seed``, when given, fixes the uniform behind every choice: copy ``i``'s choice at its
    step ``t`` gets ``StepContext.draw`` from ``(draws_seed, i, t)`` alone, so two policies run with the same seed
    make the same choice wherever their distributions agree (common random numbers: paired validation); policies
    that sample tokens rather than choose among candidates ignore it. ``policy_version`` is the version of
    ``policy``'s weights, stamped on every row (``TrajectoryBatch.policy_version``).

    ``waves > 1`` splits the groups into that many waves of whole groups (``rollout_waves``; at most one wave per
    group), played in turn so
    that the policy's batched call for one wave runs while the environment steps of the others run (in the env
    workers, or a background thread in-process: ``GroupVectorEnv.step_async``). Every copy's episode is the
    lock-step one: its context, its draw (``(draws_seed, copy, step)``) and its env do not depend on the wave, and
    the rows come out in the same order; only a policy whose batched call depends on the batch's composition
    (token sampling from one shared generator, padded float arithmetic) can answer differently. ``env_seconds``
    is then the time spent waiting for env steps the policy's calls did not hide.
    """
    check_anchor_key(anchor_key)
    if isinstance(waves, bool) or not isinstance(waves, int) or waves < 1:
        raise ValueError(f"waves={shown(waves)} must be an integer >= 1 (1 = lock-step)")
    n = envs.num_envs
    started = time.perf_counter()
    results = envs.reset(task_ids=list(task_ids), seed=seed)
    env_seconds = time.perf_counter() - started
    generation_seconds = 0.0
    if on_reset is not None:
        on_reset(results)
    observations = [obs for obs, _ in results]
    infos = [info for _, info in results]
    check_info_keys(infos[0], anchor_key, env_name)
    live = [True] * n
    histories: list[list[tuple[str, str]]] = [[] for _ in range(n)]
    transcripts: list[list[tuple[str, str, str]]] = [[] for _ in range(n)]
    table = StepTableBuilder(ROLLOUT_EXTRAS, tokens=True)
    totals = [0.0] * n  # per copy: reward so far, and invalid steps so far
    invalid = [0] * n
    episodes: list[Episode | None] = [None] * n

    def act(wave: list[int]) -> tuple[list[int], PolicyOutput, list[str | None]]:
        """The policy's batched call for the live copies of ``wave``: the copies, its output, the actions sent."""
        nonlocal generation_seconds
        active = [i for i in wave if live[i]]
        contexts = [
            StepContext(
                env_name=env_name,
                task=str(infos[i].get("task", "")),
                step_count=int(infos[i].get("step", len(histories[i]))),
                history=histories[i][-history_length:] if history_length else list(histories[i]),
                observation=observations[i],
                admissible_actions=list(infos[i].get("admissible_actions", [])),
                state_key=str(infos[i]["state_key"]),
                draw=None if draws_seed is None else step_draw(draws_seed, i, len(histories[i])),
            )
            for i in active
        ]
        started = time.perf_counter()
        output = policy.act(contexts, temperature=temperature)
        generation_seconds += time.perf_counter() - started
        actions: list[str | None] = [None] * n
        for k, i in enumerate(active):
            actions[i] = sent_action(output.actions[k])
        return active, output, actions

    def record(active: list[int], output: PolicyOutput, actions: list[str | None], steps: list) -> None:
        """Append the step rows of ``active``'s copies and end the episodes that finished."""
        for k, i in enumerate(active):
            before, after = infos[i], steps[i].info
            if after.get("error"):  # the environment failed this copy: the agent's action never took effect
                live[i] = False
                episodes[i] = Episode(
                    group_id=envs.group_of(i), traj_id=i, task_id=str(before.get("task_id", "")),
                    task_type=str(before.get("task_type", "")), won=False, length=len(transcripts[i]),
                    total_reward=totals[i], invalid_steps=invalid[i], transcript=transcripts[i],
                    final_observation=observations[i], final_info=dict(after), fault=str(after["error"]))
                continue
            valid = bool(after.get("is_action_valid", False))
            length = table.append(
                group_id=envs.group_of(i), traj_id=i, anchor_key=str(before[anchor_key]),
                action_key=str(after.get("action_key", INVALID_ACTION)), reward=float(steps[i].reward),
                is_action_valid=valid, prompt_ids=output.prompt_ids[k], response_ids=output.response_ids[k],
                old_logprobs=output.logprobs[k], state_key=str(before["state_key"]),
                observation_key=str(before.get("observation_key", "")), response=output.responses[k])
            totals[i] += float(steps[i].reward)
            invalid[i] += not valid
            transcripts[i].append((observations[i], actions[i], output.responses[k]))
            histories[i].append((observations[i], actions[i]))
            observations[i], infos[i] = steps[i].observation, after
            if steps[i].terminated or steps[i].truncated:
                live[i] = False
                episodes[i] = Episode(
                    group_id=envs.group_of(i), traj_id=i, task_id=str(after.get("task_id", "")),
                    task_type=str(after.get("task_type", "")), won=bool(after.get("won", False)),
                    length=length, total_reward=totals[i], invalid_steps=invalid[i],
                    terminated=bool(steps[i].terminated), transcript=transcripts[i],
                    final_observation=observations[i], final_info=dict(after),
                )

    wave_copies = [[i for g in groups for i in range(g * envs.group_size, (g + 1) * envs.group_size)]
                   for groups in np.array_split(np.arange(envs.num_groups), min(waves, envs.num_groups))]
    if len(wave_copies) == 1:  # lock-step: every live copy acts, then every copy steps
        while any(live):
            active, output, actions = act(wave_copies[0])
            started = time.perf_counter()
            steps = envs.step(actions)
            env_seconds += time.perf_counter() - started
            record(active, output, actions, steps)
    else:  # waves in turn: a wave's call runs while the waves started before it step (collected in order)
        in_flight: deque = deque()
        try:
            for wave in wave_copies:
                active, output, actions = act(wave)
                in_flight.append((wave, active, output, actions, envs.step_async(actions)))
            while in_flight:
                wave, active, output, actions, pending = in_flight[0]
                started = time.perf_counter()
                steps = pending.result()
                env_seconds += time.perf_counter() - started
                in_flight.popleft()
                record(active, output, actions, steps)
                if any(live[i] for i in wave):
                    active, output, actions = act(wave)
                    in_flight.append((wave, active, output, actions, envs.step_async(actions)))
        finally:  # a policy that raised: the steps already started are read, so the env's next call is clean
            for *_, pending in in_flight:
                pending.result()
    batch = table.build().with_policy_version(policy_version)
    done = [e for e in episodes if e is not None]
    faulted = {e.traj_id for e in done if e.fault}
    if faulted:
        batch = batch.select(np.flatnonzero([traj not in faulted for traj in batch.traj_id]))
    metrics = episode_metrics(done) | fault_metrics(done, len(table) - len(batch))
    return Rollout(batch=batch, episodes=done, generation_seconds=generation_seconds, env_seconds=env_seconds,
                   metrics=metrics)


def training_rollout(envs: GroupVectorEnv, policy: Actor, task_ids: Sequence[str], config: Any, seed: int,
                     policy_version: int = 0) -> Rollout:
    """Step A as a run plays it, wherever it runs (the native trainer, an RLlib env runner, a replay of one):
    :func:`collect_rollout` with the run's env, sampling temperature, anchor key, history length and waves
    (``config``: a ``runtime.config.TrainConfig``)."""
    return collect_rollout(envs, policy, list(task_ids), env_name=config.env_id, temperature=config.rollout_temperature,
                           seed=int(seed), anchor_key=config.anchor_key, history_length=config.history_length,
                           policy_version=policy_version, waves=config.rollout_waves)


def fault_metrics(episodes: Sequence[Episode], dropped_rows: int) -> dict[str, float]:
    """``env/worker_failures`` (distinct faults: a dead worker is one, however many copies it held),
    ``env/faulted_episodes`` and ``env/dropped_rows``; a rollout with a fault also prints one warning line."""
    faults = [e.fault for e in episodes if e.fault]
    if faults:
        first = next((line for line in faults[0].splitlines() if line.strip()), faults[0]).strip()
        print(f"warning: environment fault: {len(faults)} of {len(episodes)} episodes lost ({first}); their "
              f"{dropped_rows} step rows are left out of the batch and its credit", file=sys.stderr)
    return {"env/worker_failures": float(len(set(faults))), "env/faulted_episodes": float(len(faults)),
            "env/dropped_rows": float(dropped_rows)}
