"""The copies behind a ``GroupVectorEnv``: an in-process shard of env copies, and the worker process that owns
one (``spawn``ed, commands over a Pipe, replies made picklable, restartable by the group env).

``make_env`` builds one copy from a registered id or a factory; ``EnvShard`` steps a block of copies and
reports an env's exception as an ``EnvError`` value (type, message, traceback) instead of raising, so one
failed copy never takes its block down; ``Worker`` runs an ``EnvShard`` in its own process.
"""

from __future__ import annotations

import contextlib
import importlib.util
import pickle
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from ecpo_gym.kwargs import SHOWN_CHARS, cut_long_words, shown

EnvSpec = str | Callable[..., gym.Env]


@dataclass(frozen=True)
class EnvError:
    """An exception one copy's env raised on reset: the exception itself (``None`` when it could not travel
    back from a worker process) and its formatted traceback. Not a tuple, so never mistaken for ``(obs, info)``."""

    exception: BaseException | None
    traceback: str


def make_env(env: EnvSpec, env_kwargs: dict[str, Any] | None = None, *, env_checker: bool = False) -> gym.Env:
    """Build one environment from a registered id or a factory (the one ``gymnasium.make`` of the project). What
    gymnasium reports as a stack trace is one ``ValueError`` naming the setting: a ``render_mode`` that is not text
    (its ``make`` calls ``.endswith`` on it) and a ``"module:id"`` whose module does not exist. A huge value in an
    error's message (gymnasium appends every env kwarg to a ``TypeError``; an ``OSError`` quotes its path) is cut
    (``kwargs.cut_long_words``), the error's type kept."""
    kwargs = dict(env_kwargs or {})
    mode = kwargs.get("render_mode")
    if mode is not None and (not isinstance(mode, str) or len(mode) > SHOWN_CHARS):  # (gymnasium warns quoting it)
        raise ValueError(f"render_mode={shown(mode)} is invalid: it must be a render mode's name (ansi) or None")
    if not isinstance(env, str):
        return env(**kwargs)
    import ecpo_gym  # noqa: F401  (registers the ids inside spawned workers)

    module = env.split(":", 1)[0] if ":" in env else None
    try:
        return gym.make(env, disable_env_checker=not env_checker, **kwargs)
    except ModuleNotFoundError:
        if module is None or _importable(module):
            raise  # a module the environment itself imports: not the id's
        raise ValueError(f"env_id {shown(env)}: there is no module {shown(module)} to import (the part before ':' "
                         "names the module that declares the id; a registered id, ecpo/..., needs none)") from None
    except gym.error.UnregisteredEnv as err:  # (gymnasium's message names the id's parts, not the setting)
        raise type(err)(f"env_id {shown(env)} is not a registered id: {cut_long_words(str(err))}") from None
    except gym.error.Error as err:
        if not str(err).startswith("Malformed environment ID"):
            bounded = _bounded_error(err, kwargs)
            if bounded is None:
                raise
            raise bounded from None
        raise type(err)(f"env_id {shown(env)} is not an id: ids look like ecpo/ALFWorldGen-v0 "
                        "([namespace/]name-vN)") from None
    except (TypeError, OSError) as err:
        bounded = _bounded_error(err, kwargs)
        if bounded is None:
            raise
        raise bounded from None


def _bounded_error(err: BaseException, kwargs: dict[str, Any]) -> BaseException | None:
    """``err`` again (its type kept) with every huge value in its message cut, or ``None`` when none is huge; an
    ``OSError`` (a path too long, say) also names the env kwargs it came from."""
    text = str(err)
    if cut_long_words(text) == text:
        return None
    if isinstance(err, OSError):
        where = f"{err.strerror}: {err.filename!r}" if err.strerror and err.filename else text
        return OSError(err.errno, cut_long_words(f"{where} (env_kwargs {shown(kwargs)})"))  # (errno picks the type)
    try:
        return type(err)(cut_long_words(text))
    except Exception:  # noqa: BLE001 -- an error type built from other arguments than one message
        return ValueError(cut_long_words(text))


def _importable(module: str) -> bool:
    """Whether ``module`` exists (its parent packages are imported to look, as importing it would)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def unknown_tasks(env: EnvSpec | gym.Env, task_ids: list[str], env_kwargs: dict[str, Any] | None = None) -> list[str]:
    """The ids of ``task_ids`` the environment cannot reset to (``UnknownTaskError``), asked of ``env`` (a made
    environment, or an id or factory built here once). An environment that is not a ``TextAgentEnv`` knows only
    its ``task_ids``."""
    from ecpo_gym.core import UnknownTaskError

    made = env if isinstance(env, gym.Env) else make_env(env, env_kwargs)
    try:
        inner = made.unwrapped
        resolve = getattr(inner, "_resolve_task_id", None)
        if resolve is None:
            known = {str(t) for t in getattr(inner, "task_ids", ())}
            return [t for t in task_ids if t not in known]
        unknown = []
        for task_id in task_ids:
            try:
                resolve(task_id)
            except UnknownTaskError:
                unknown.append(task_id)
        return unknown
    finally:
        if made is not env:
            made.close()


class EnvShard:
    """A block of environment copies; the same code runs in-process and inside a worker."""

    def __init__(self, env: EnvSpec, env_kwargs: dict[str, Any] | None, size: int) -> None:
        self.envs = [make_env(env, env_kwargs) for _ in range(size)]

    def task_ids(self) -> list[str]:
        return [str(t) for t in self.envs[0].unwrapped.task_ids] if self.envs else []

    def reset(self, requests: list[tuple[int, int | None, str | None]]) -> list[tuple[int, Any]]:
        """``(local_index, seed, task_id)`` -> ``(local_index, (obs, info) | EnvError)``."""
        out = []
        for local, seed, task_id in requests:
            try:
                options = None if task_id is None else {"task_id": task_id}
                out.append((local, self.envs[local].reset(seed=seed, options=options)))
            except Exception as exc:  # noqa: BLE001  (reported to the caller, who raises it)
                out.append((local, EnvError(exc, traceback.format_exc())))
        return out

    def step(self, requests: list[tuple[int, Any]]) -> list[tuple[int, Any]]:
        """``(local_index, action)`` -> ``(local_index, 5-tuple | error string)``."""
        out = []
        for local, action in requests:
            try:
                out.append((local, tuple(self.envs[local].step(action))))
            except Exception:  # noqa: BLE001  (the caller ends this copy's episode with the error)
                out.append((local, traceback.format_exc()))
        return out

    def close(self) -> None:
        for env in self.envs:
            with contextlib.suppress(Exception):  # one env's failing close must not keep the others open
                env.close()


def worker_main(conn: Any, env: EnvSpec, env_kwargs: dict[str, Any] | None, size: int) -> None:
    """Worker loop: build a shard, then answer ``(command, payload)`` messages until ``close``."""
    try:
        shard = EnvShard(env, env_kwargs, size)
    except Exception:  # noqa: BLE001  (sent to the parent, which raises it with this traceback)
        conn.send(("error", traceback.format_exc()))
        conn.close()
        return
    conn.send(("ready", None))
    try:
        while True:
            command, payload = conn.recv()
            if command == "close":
                break
            if command == "reset":
                conn.send(("ok", [(local, portable(reply)) for local, reply in shard.reset(payload)]))
            elif command == "step":
                conn.send(("ok", shard.step(payload)))
            elif command == "task_ids":
                conn.send(("ok", shard.task_ids()))
            else:
                conn.send(("error", f"unknown command {shown(command)}"))
    except (EOFError, KeyboardInterrupt, BrokenPipeError):
        pass
    finally:
        shard.close()
        conn.close()


def portable(reply: Any) -> Any:
    """``reply`` as it can cross the pipe: an ``EnvError`` whose exception does not survive a pickle round trip
    keeps only its traceback."""
    if isinstance(reply, EnvError):
        try:
            pickle.loads(pickle.dumps(reply.exception))
        except Exception:  # noqa: BLE001  (any failure means: send the traceback alone)
            return EnvError(None, reply.traceback)
    return reply


class WorkerError(RuntimeError):
    """A worker died or timed out while serving a request."""


class Worker:
    """Parent-side handle of one worker process."""

    def __init__(self, ctx: Any, env: EnvSpec, env_kwargs: dict[str, Any] | None, size: int) -> None:
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=worker_main, args=(child, env, env_kwargs, size), daemon=True)
        self.process.start()
        child.close()

    def wait_ready(self, timeout: float | None) -> None:
        status, payload = self.receive(timeout)
        if status != "ready":
            self.kill()
            raise RuntimeError(f"environment worker failed to start:\n{payload}")

    def send(self, command: str, payload: Any) -> None:
        try:
            self.conn.send((command, payload))
        except (BrokenPipeError, ConnectionResetError, OSError) as exc:
            raise WorkerError(f"worker pid {self.process.pid} died (its pipe is closed): {exc}") from exc

    def receive(self, timeout: float | None) -> tuple[str, Any]:
        try:
            if timeout is not None and not self.conn.poll(timeout):
                raise WorkerError(f"worker pid {self.process.pid} gave no answer within {timeout} s")
            return self.conn.recv()
        except (EOFError, ConnectionResetError, BrokenPipeError, OSError) as exc:
            code = self.process.exitcode
            raise WorkerError(f"worker pid {self.process.pid} died (exit code {code}): {shown(exc)}") from exc

    def request(self, timeout: float | None) -> Any:
        status, payload = self.receive(timeout)
        if status != "ok":
            raise RuntimeError(f"environment worker error:\n{payload}")
        return payload

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):  # the worker may already be gone
            self.conn.send(("close", None))
        self.process.join(timeout=5)
        if self.process.is_alive():
            self.kill()
        self.conn.close()

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5)
