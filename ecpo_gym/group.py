"""Group vector env: ``G`` groups x ``N`` copies, each group reset to one task and stepped together.

GRPO-style methods (and ECPO's anchors) compare the ``N`` trajectories of one group, so every copy of a
group must start from the same task; each copy's episode is otherwise independent. Copies are numbered
``traj_id = g * N + j`` (group ``g``, copy ``j``) and every ``info`` carries ``group_id`` and ``traj_id``.

``num_workers=0`` keeps every copy in this process (fast for cheap envs such as the diagnostic MDPs).
With ``num_workers=k`` the copies are sharded into ``k`` contiguous blocks, each block in its own process
(``multiprocessing`` Pipes, ``spawn`` context by default), because engines such as TextWorld's PDDL planner
are not thread-safe and each step is CPU-bound. A command goes to every worker before any reply is read,
so workers step in parallel. A worker that dies (or hangs past ``step_timeout``) is restarted; the
episodes it held come back ``truncated=True`` with ``info["error"]`` instead of raising, and the next
``reset`` works as usual.

API::

    from ecpo_gym.group import GroupVectorEnv

    envs = GroupVectorEnv("ecpo/ALFWorldGen-v0", num_groups=2, group_size=4, num_workers=2)
    results = envs.reset(task_ids=["gen/Pick/0", "gen/Heat/3"], seed=0)  # len 8: (obs, info) per copy
    done = [False] * envs.num_envs
    while not all(done):
        actions = [None if d else info["admissible_actions"][0]
                   for d, (_, info) in zip(done, results)]
        steps = envs.step(actions)           # None = copy finished/skipped: nothing is sent to it
        results = [(s.observation, s.info) for s in steps]
        done = [d or s.terminated or s.truncated for d, s in zip(done, steps)]
    envs.close()

- ``GroupVectorEnv(env, num_groups, group_size, num_workers=0, env_kwargs=None, mp_context="spawn",
  step_timeout=None)``: ``env`` is a registered id (made with ``gymnasium.make(env, **env_kwargs)``) or
  a picklable zero-argument-compatible factory called as ``factory(**env_kwargs)``.
- ``reset(task_ids=None, seed=None)`` -> ``list[(obs, info)]`` of length ``G * N``. ``task_ids`` has
  one id per group; ``None`` draws one task per group from ``task_ids`` (the env's list) with
  ``numpy.random.default_rng(seed)``. Copy ``i`` is reset with ``seed + i`` when ``seed`` is given. An
  exception of the env's reset is raised as itself, with its own message, from workers too (an unknown task
  id: ``ecpo_gym.UnknownTaskError``, a ``KeyError`` and ``ValueError``).
- ``step(actions)`` -> ``list[StepResult]`` (a named tuple ``observation, reward, terminated, truncated,
  info``), one per copy. ``actions[i] is None`` skips copy ``i``: it returns its last observation and
  flags with reward 0 and ``info["skipped"] = True``.
- ``step_async(actions)`` -> ``PendingStep``: the same step, started; its ``result()`` is ``step``'s list. The
  copies step in their worker processes (in-process: in one background thread) while the caller works, e.g.
  runs the policy for other copies. Several may be in flight for disjoint copies; collect them in the order
  they were started.
- ``task_ids``: the env's task ids; ``worker_pids``: the worker processes (empty in-process).

The copies themselves (in-process shards and worker processes) live in ``ecpo_gym.group_workers``.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple, Self

import gymnasium as gym
import numpy as np

from ecpo_gym.canonical import INVALID_ACTION
from ecpo_gym.group_workers import EnvError, EnvShard, EnvSpec, Worker, WorkerError
from ecpo_gym.kwargs import shown


class StepResult(NamedTuple):
    """One copy's step outcome; unpacks like gymnasium's 5-tuple."""

    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


class PendingStep:
    """A started ``GroupVectorEnv.step_async``: ``result()`` waits for it and returns one ``StepResult`` per copy
    (once; later calls return the same list)."""

    def __init__(self, finish: Callable[[], list[StepResult]]) -> None:
        self._finish: Callable[[], list[StepResult]] | None = finish
        self._results: list[StepResult] = []

    def result(self) -> list[StepResult]:
        if self._finish is not None:
            finish, self._finish = self._finish, None
            self._results = finish()
        return self._results


class GroupVectorEnv:
    """``num_groups`` x ``group_size`` copies of one environment (see the module docstring)."""

    def __init__(
        self,
        env: EnvSpec,
        num_groups: int,
        group_size: int,
        num_workers: int = 0,
        env_kwargs: dict[str, Any] | None = None,
        *,
        mp_context: str = "spawn",
        step_timeout: float | None = None,
        start_timeout: float | None = 300.0,
    ) -> None:
        if num_groups < 1 or group_size < 1:
            raise ValueError(f"num_groups and group_size must be >= 1, got {num_groups}, {group_size}")
        if num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        self.env_spec = env
        self.env_kwargs = dict(env_kwargs or {})
        self.num_groups = int(num_groups)
        self.group_size = int(group_size)
        self.num_envs = self.num_groups * self.group_size
        self.num_workers = min(int(num_workers), self.num_envs)
        self.step_timeout = step_timeout
        self.start_timeout = start_timeout
        self._task_ids: list[str] | None = None
        # copy i lives in shard owner[i] at position local[i]
        if self.num_workers == 0:
            self._blocks = [list(range(self.num_envs))]
        else:
            self._blocks = [list(block) for block in np.array_split(np.arange(self.num_envs), self.num_workers)]
        self._owner = np.empty(self.num_envs, dtype=np.int64)
        self._local = np.empty(self.num_envs, dtype=np.int64)
        for shard, block in enumerate(self._blocks):
            for local, i in enumerate(block):
                self._owner[i], self._local[i] = shard, local
        self._last: list[StepResult | None] = [None] * self.num_envs
        self._live = [False] * self.num_envs  # the copy's env holds the episode we reported
        self._closed = False
        self._shard: EnvShard | None = None
        self._thread: ThreadPoolExecutor | None = None  # in-process step_async: one thread, so steps stay in order
        self._workers: list[Worker] = []
        if self.num_workers == 0:
            self._shard = EnvShard(env, self.env_kwargs, self.num_envs)
        else:
            self._ctx = mp.get_context(mp_context)
            self._workers = [Worker(self._ctx, env, self.env_kwargs, len(b)) for b in self._blocks]
            try:
                for worker in self._workers:
                    worker.wait_ready(start_timeout)
            except BaseException:
                self.close()  # the workers that did start must not outlive the failed constructor
                raise

    # ------------------------------------------------------------------ properties
    @property
    def task_ids(self) -> list[str]:
        if self._task_ids is None:
            if self._shard is not None:
                self._task_ids = self._shard.task_ids()
            else:
                self._workers[0].send("task_ids", None)
                self._task_ids = self._workers[0].request(self.step_timeout)
        return self._task_ids

    @property
    def worker_pids(self) -> list[int]:
        return [w.process.pid for w in self._workers]

    def group_of(self, index: int) -> int:
        return index // self.group_size

    # ------------------------------------------------------------------ reset / step
    def reset(self, task_ids: Sequence[str] | None = None, seed: int | None = None) -> list[tuple[str, dict]]:
        """Reset every copy; group ``g`` plays ``task_ids[g]``. Returns ``(obs, info)`` per copy."""
        self._check_open()
        if task_ids is None:
            pool = self.task_ids
            if not pool:
                raise RuntimeError("the environment has no task ids to draw from")
            rng = np.random.default_rng(seed)
            task_ids = [pool[int(k)] for k in rng.integers(len(pool), size=self.num_groups)]
        task_ids = [str(t) for t in task_ids]
        if len(task_ids) != self.num_groups:
            raise ValueError(f"reset needs {self.num_groups} task ids (one per group), got {len(task_ids)}")
        requests = [
            (i, None if seed is None else int(seed) + i, task_ids[self.group_of(i)]) for i in range(self.num_envs)
        ]
        replies = self._dispatch("reset", requests, retry_dead=True)
        results: list[tuple[str, dict]] = []
        for i in range(self.num_envs):
            reply = replies[i]
            if isinstance(reply, EnvError):
                self._raise_reset_error(reply, i, task_ids[self.group_of(i)])
            obs, info = reply
            info = self._tag(dict(info), i)
            self._last[i] = StepResult(obs, 0.0, False, False, info)
            self._live[i] = True
            results.append((obs, info))
        return results

    def step(self, actions: Sequence[str | None]) -> list[StepResult]:
        """Step every copy whose action is not ``None``; returns one ``StepResult`` per copy."""
        return self._start_step(actions, background=False).result()

    def step_async(self, actions: Sequence[str | None]) -> PendingStep:
        """Start ``step(actions)`` and return at once; ``result()`` gives its list (module docstring)."""
        return self._start_step(actions, background=True)

    def _start_step(self, actions: Sequence[str | None], *, background: bool) -> PendingStep:
        self._check_open()
        if len(actions) != self.num_envs:
            raise ValueError(f"step needs {self.num_envs} actions (None to skip a copy), got {len(actions)}")
        if any(r is None for r in self._last):
            raise gym.error.ResetNeeded("call reset() before step()")
        requests = []
        results: list[StepResult | None] = [None] * self.num_envs
        for i, action in enumerate(actions):
            last = self._last[i]
            assert last is not None
            if action is None:
                results[i] = StepResult(last.observation, 0.0, last.terminated, last.truncated,
                                        {**last.info, "skipped": True})
            elif not self._live[i]:
                results[i] = self._failed(i, "the worker holding this episode was restarted; call reset()")
            else:
                requests.append((i, action))
        if self._shard is not None and background and requests:
            if self._thread is None:
                self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="group-env-step")
            future = self._thread.submit(self._shard.step, list(requests))
            collect: Callable[[], dict[int, Any]] = lambda: dict(future.result())
        else:
            collect = self._send("step", requests)

        def finish() -> list[StepResult]:
            replies = collect()
            for i, _ in requests:
                reply = replies[i]
                if isinstance(reply, str):
                    results[i] = self._failed(i, reply)
                    continue
                obs, reward, terminated, truncated, info = reply
                result = StepResult(obs, float(reward), bool(terminated), bool(truncated), self._tag(dict(info), i))
                self._last[i] = result
                results[i] = result
            return results  # type: ignore[return-value]

        return PendingStep(finish)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._thread is not None:
            self._thread.shutdown(wait=True)
        if self._shard is not None:
            self._shard.close()
        for worker in self._workers:
            worker.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # also runs on half-built objects and at interpreter exit
            self.close()

    # ------------------------------------------------------------------ internals
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("GroupVectorEnv is closed")

    def _tag(self, info: dict, i: int) -> dict:
        info["group_id"] = self.group_of(i)
        info["traj_id"] = i
        return info

    def _raise_reset_error(self, error: EnvError, i: int, task: str) -> None:
        """Raise the env's own exception (an unknown task id: ``UnknownTaskError``, a ``ValueError``) with its
        own message, in-process and from a worker alike. A worker's traceback rides along as a note, except on
        the ``ValueError``/``KeyError`` of a bad request, whose message says it all."""
        exc = error.exception
        if exc is None:  # it could not be sent back from the worker: its traceback is all there is
            raise RuntimeError(f"reset of copy {i} (task {shown(task)}) failed:\n{error.traceback}")
        if self._shard is None and not isinstance(exc, (ValueError, KeyError)):
            exc.add_note(f"raised by reset of copy {i} (task {shown(task)}) in an environment worker:\n{error.traceback}")
        raise exc

    def _failed(self, i: int, error: str) -> StepResult:
        """End copy ``i``'s episode as truncated, keeping its last observation."""
        last = self._last[i]
        assert last is not None
        info = {**last.info, "error": error, "is_action_valid": False, "won": False}
        info.setdefault("action_key", INVALID_ACTION)
        result = StepResult(last.observation, 0.0, last.terminated, not last.terminated, info)
        self._last[i] = result
        self._live[i] = False
        return result

    def _dispatch(self, command: str, requests: list[tuple], *, retry_dead: bool) -> dict[int, Any]:
        """Run per-copy requests on their shards; returns ``{copy: reply}`` (an error string on failure)."""
        return self._send(command, requests, retry_dead=retry_dead)()

    def _send(self, command: str, requests: list[tuple], *, retry_dead: bool = False) -> Callable[[], dict[int, Any]]:
        """Send per-copy requests to their workers now; the returned function reads the replies (``_dispatch``).

        In-process, the shard runs them when the replies are read. A worker restarted between the send and the
        read (another step in flight found it dead) has lost these requests: their copies get its error."""
        if not requests:
            return dict
        if self._shard is not None:
            shard = self._shard
            method = shard.reset if command == "reset" else shard.step
            return lambda: dict(method(list(requests)))
        per_worker: dict[int, list[tuple]] = {}
        for request in requests:
            i = request[0]
            per_worker.setdefault(int(self._owner[i]), []).append((int(self._local[i]), *request[1:]))
        sent: dict[int, Worker] = {}
        dead: dict[int, str] = {}
        for w, local_requests in per_worker.items():
            try:
                self._workers[w].send(command, local_requests)
                sent[w] = self._workers[w]
            except WorkerError as exc:
                dead[w] = str(exc)
        return lambda: self._read_replies(command, per_worker, sent, dead, retry_dead)

    def _read_replies(self, command: str, per_worker: dict[int, list[tuple]], sent: dict[int, Worker],
                      dead: dict[int, str], retry_dead: bool) -> dict[int, Any]:
        replies: dict[int, Any] = {}
        for w, worker in sent.items():
            if self._workers[w] is not worker:
                for local, *_ in per_worker[w]:
                    replies[self._blocks[w][local]] = f"worker pid {worker.process.pid} was restarted mid-step"
                continue
            try:
                for local, reply in worker.request(self.step_timeout):
                    replies[self._blocks[w][local]] = reply
            except WorkerError as exc:
                dead[w] = str(exc)
        for w, error in dead.items():
            self._restart(w)
            if retry_dead:
                self._workers[w].send(command, per_worker[w])
                for local, reply in self._workers[w].request(self.step_timeout):
                    replies[self._blocks[w][local]] = reply
            else:
                for local, *_ in per_worker[w]:
                    replies[self._blocks[w][local]] = error
        return replies

    def _restart(self, w: int) -> None:
        """Replace worker ``w``; every episode it held is lost."""
        self._workers[w].kill()
        self._workers[w].conn.close()
        self._workers[w] = Worker(self._ctx, self.env_spec, self.env_kwargs, len(self._blocks[w]))
        self._workers[w].wait_ready(self.start_timeout)
        for i in self._blocks[w]:
            self._live[i] = False
