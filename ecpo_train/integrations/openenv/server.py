"""An OpenEnv server over any registered text environment: the adapter, the guarded app, ``serve``.

:class:`GymTextEnvironment` is OpenEnv's ``Environment`` over one Gymnasium env (``gymnasium.make(env_id)``):
one adapter for every family, since every ``ecpo/*`` id follows the ``TextAgentEnv`` contract
(``ecpo_gym/core.py``). ``reset(seed=, task_id=)`` and ``step(TextAction)`` return what the in-process env
returns (same seed, same episode), as a :class:`~.models.TextObservation`.

:func:`create_server_app` builds OpenEnv's FastAPI app in its production mode (episodes only over the ``/ws``
WebSocket, one environment per connection, destroyed when the connection ends) behind :class:`RequestGuard`:

* only ``/health``, ``/metadata``, ``/schema`` (HTTP GET) and ``/ws`` answer; anything else is a 404;
* a request body or WebSocket message over ``max_request_bytes`` is refused (HTTP 413; a WebSocket message that
  large closes that connection with code 1009, the others carry on);
* ``/ws?session_id=...`` (OpenEnv's attach-to-a-session) is refused (403): no client reaches another's episode;
* every error a client gets is one line of at most ``ERROR_CHARS`` characters: OpenEnv's error frames (bad JSON,
  an invalid message, an env's error) are rewritten to ``{"message": one line, "code": ...}`` and HTTP errors
  are ``{"detail": one line}``; no traceback leaves the server and no bad request stops it.

:func:`serve` binds the socket first (a port in use is a ``OSError`` before anything starts), prints
``serving ENV_ID on http://HOST:PORT`` and runs uvicorn until SIGINT/SIGTERM, then closes every session.
"""

from __future__ import annotations

import contextlib
import json
import math
import signal
import socket
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

import uvicorn
from openenv.core.env_server.http_server import create_fastapi_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import ConcurrencyConfig, EnvironmentMetadata, ServerMode

from ecpo_gym.group_workers import make_env
from ecpo_gym.kwargs import shown
from ecpo_train.integrations.openenv.models import EpisodeState, TextAction, TextObservation

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
DEFAULT_MAX_SESSIONS = 64
DEFAULT_MAX_REQUEST_BYTES = 1 << 20  # 1 MiB: a step's action is at most 64 Ki characters (MAX_ACTION_CHARS)
DEFAULT_IDLE_TIMEOUT_S = 600.0  # a session silent this long is closed (a client that vanished without a FIN)
ERROR_CHARS = 300
HTTP_PATHS = frozenset({"/health", "/metadata", "/schema"})
WS_PATH = "/ws"
_NAMED_INFO = ("task_id", "state_key", "admissible_actions", "step", "action_key", "is_action_valid", "won")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def one_line(text: Any, limit: int = ERROR_CHARS) -> str:
    """``text`` as one line of at most ``limit`` characters (input quoted in it is cut, never echoed whole)."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else f"{line[:limit]}... ({len(line) - limit} more characters)"


def _json_safe(value: Any) -> Any:
    """``info`` values as JSON: numpy scalars and arrays as numbers and lists, anything unknown as its str."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_json_safe(v) for v in value]
    if hasattr(value, "tolist"):  # numpy scalar or array
        return _json_safe(value.tolist())
    return str(value)


class GymTextEnvironment(Environment[TextAction, TextObservation, EpisodeState]):
    """OpenEnv's ``Environment`` over one registered text env; a fresh one per session (no shared state)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self.env_id = env_id
        self._env = make_env(env_id, dict(env_kwargs or {}))
        self._state = EpisodeState(env_id=env_id)
        self._started = False

    def reset(self, seed: int | None = None, episode_id: str | None = None, task_id: str | None = None,
              **unknown: Any) -> TextObservation:
        """Start an episode: ``env.reset(seed=seed, options={"task_id": task_id})`` (either may be None)."""
        if unknown:
            names = ", ".join(one_line(name, 40) for name in sorted(unknown)[:5])
            raise ValueError(f"reset takes seed, task_id and episode_id; got {names}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"reset seed must be an integer or null, got {one_line(repr(seed), 60)}")
        if task_id is not None and not isinstance(task_id, (str, int)):
            raise ValueError(f"reset task_id must be a string, got {type(task_id).__name__}")
        if episode_id is not None and not isinstance(episode_id, str):
            raise ValueError(f"reset episode_id must be a string, got {type(episode_id).__name__}")
        self._started = False  # a reset that raises leaves no episode to step
        options = None if task_id is None else {"task_id": str(task_id)}
        text, info = self._env.reset(seed=seed, options=options)
        self._started = True
        self._state = EpisodeState(episode_id=one_line(episode_id, 200) if episode_id else str(uuid.uuid4()),
                                   step_count=0, env_id=self.env_id, task_id=info.get("task_id"), seed=seed)
        return self._observation(text, None, False, False, info)

    def step(self, action: TextAction, timeout_s: float | None = None, **kwargs: Any) -> TextObservation:
        """One ``env.step(action.action)``; never raises for any text (no match: an invalid-action step)."""
        if not self._started:
            raise ValueError("no episode: send reset before step")
        text, reward, terminated, truncated, info = self._env.step(action.action)
        self._state.step_count += 1
        self._state.done = bool(terminated or truncated)
        return self._observation(text, float(reward), bool(terminated), bool(truncated), info)

    @property
    def state(self) -> EpisodeState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(name=self.env_id, description=f"{self.env_id} (ECPO text environment)",
                                   version="1.0.0")

    def close(self) -> None:
        self._env.close()

    def _observation(self, text: str, reward: float | None, terminated: bool, truncated: bool,
                     info: Mapping[str, Any]) -> TextObservation:
        rest = {k: _json_safe(v) for k, v in info.items() if k not in _NAMED_INFO}
        return TextObservation(
            text=text, reward=reward, done=terminated or truncated, terminated=terminated, truncated=truncated,
            admissible_actions=[str(a) for a in info.get("admissible_actions", ())],
            state_key=str(info.get("state_key", "")),
            action_key=None if info.get("action_key") is None else str(info["action_key"]),
            task_id=None if info.get("task_id") is None else str(info["task_id"]),
            seed=self._state.seed,
            step=int(info.get("step", 0)), won=bool(info.get("won", False)),
            is_action_valid=None if info.get("is_action_valid") is None else bool(info["is_action_valid"]),
            info=rest,
        )


class RequestGuard:
    """ASGI middleware in front of OpenEnv's app: the paths, sizes and error shape ``ecpo serve`` promises."""

    def __init__(self, app: Callable[..., Awaitable[None]], max_request_bytes: int) -> None:
        self.app = app
        self.max_request_bytes = max_request_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
        else:  # lifespan: OpenEnv's session reaper starts and stops with it
            await self.app(scope, receive, send)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if path not in HTTP_PATHS:
            await _reply(send, 404, f"no such endpoint {one_line(path, 80)}: this server answers GET "
                                    f"{', '.join(sorted(HTTP_PATHS))} and episodes over the WebSocket {WS_PATH}")
            return
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_request_bytes):
            await _reply(send, 413, f"request body over {self.max_request_bytes} bytes (the server's "
                                    "--max-request-bytes)")
            return
        body, more = bytearray(), True
        while more:  # a chunked body is counted as it arrives
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_request_bytes:
                await _reply(send, 413, f"request body over {self.max_request_bytes} bytes (the server's "
                                        "--max-request-bytes)")
                return
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self.app(scope, replay, _OneLineHTTPErrors(send))

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        query = scope.get("query_string", b"").decode("latin-1")
        if scope.get("path") != WS_PATH or "session_id=" in query:
            await receive()  # websocket.connect
            await send({"type": "websocket.close", "code": 1008})  # before accept: HTTP 403 to the client
            return

        async def one_line_frames(message: dict[str, Any]) -> None:
            if message["type"] == "websocket.send" and message.get("text"):
                message = {**message, "text": _one_line_frame(message["text"])}
            await send(message)

        await self.app(scope, receive, one_line_frames)


class _OneLineHTTPErrors:
    """``send`` for an HTTP request: a 4xx/5xx JSON body from FastAPI becomes ``{"detail": one line}``."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.error = False
        self.start: dict[str, Any] | None = None
        self.body = bytearray()

    async def __call__(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start" and message.get("status", 200) >= 400:
            self.error, self.start = True, message
            return
        if not self.error:
            await self.send(message)
            return
        self.body += message.get("body", b"")
        if message.get("more_body", False):
            return
        assert self.start is not None
        try:
            detail = json.loads(self.body).get("detail", "")
        except (ValueError, AttributeError):
            detail = self.body.decode("utf-8", "replace")
        if isinstance(detail, list):  # FastAPI's validation errors: one line per error, joined
            detail = "; ".join(f"{'.'.join(map(str, e.get('loc', ())))}: {e.get('msg', '')}" for e in detail
                               if isinstance(e, dict))
        await _reply(self.send, int(self.start["status"]), str(detail) or "error")


def _one_line_frame(text: str) -> str:
    """An OpenEnv WebSocket error frame as ``{"message": one line, "code": ...}`` (other frames pass as they are)."""
    try:
        frame = json.loads(text)
    except ValueError:
        return text
    if not isinstance(frame, dict) or frame.get("type") != "error":
        return text
    data = frame.get("data") if isinstance(frame.get("data"), dict) else {}
    message = str(data.get("message", "error"))
    errors = data.get("errors")
    if isinstance(errors, list) and errors:  # pydantic's errors carry the whole input: keep field and reason
        message += ": " + "; ".join(f"{'.'.join(map(str, e.get('loc', ())))}: {e.get('msg', '')}" for e in errors
                                    if isinstance(e, dict))
    kept = {k: data[k] for k in ("code", "active_sessions", "max_sessions") if k in data}
    return json.dumps({"type": "error", "data": {"message": one_line(message), **kept}})


async def _reply(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": one_line(detail)}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def check_server_options(max_sessions: int, max_request_bytes: int, idle_timeout_s: float) -> None:
    """``ValueError`` naming the setting for a limit out of range (before anything is built)."""
    if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or not 1 <= max_sessions <= 4096:
        raise ValueError(f"--max-sessions must be an integer in [1, 4096], got {shown(max_sessions)}")
    if (isinstance(max_request_bytes, bool) or not isinstance(max_request_bytes, int)
            or not 1024 <= max_request_bytes <= 1 << 30):
        raise ValueError(f"--max-request-bytes must be an integer in [1024, 2**30], got {shown(max_request_bytes)}")
    if not (isinstance(idle_timeout_s, (int, float)) and math.isfinite(idle_timeout_s) and idle_timeout_s > 0):
        raise ValueError(f"--idle-timeout must be a positive number of seconds, got {shown(idle_timeout_s)}")


def create_server_app(env_id: str, env_kwargs: Mapping[str, Any] | None = None, *,
                      max_sessions: int = DEFAULT_MAX_SESSIONS,
                      max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
                      idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S) -> RequestGuard:
    """The guarded ASGI app serving ``env_id``. One env is built and closed here first, so an unknown id, bad
    kwargs or missing data raise now (``gymnasium.error.Error``, ``ValueError``, ``OSError``...) rather than on a
    client's first connection."""
    check_server_options(max_sessions, max_request_bytes, idle_timeout_s)
    kwargs = dict(env_kwargs or {})
    GymTextEnvironment(env_id, kwargs).close()

    def factory() -> GymTextEnvironment:
        return GymTextEnvironment(env_id, kwargs)

    app = create_fastapi_app(
        factory, TextAction, TextObservation, env_name=env_id, state_cls=EpisodeState, mode=ServerMode.PRODUCTION,
        concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions, session_timeout=idle_timeout_s),
    )
    return RequestGuard(app, max_request_bytes)


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: a free one); ``OSError`` if it cannot be bound."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"--port must be an integer in [0, 65535], got {shown(port)}")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as err:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {err.strerror or err}") from None
    return sock


class _StopOnSignal(uvicorn.Server):
    """uvicorn's server, except that SIGINT/SIGTERM end it with status 0 after its graceful shutdown (uvicorn raises
    the signal again once it has shut down, so the process would die of it)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def serve(env_id: str, env_kwargs: Mapping[str, Any] | None = None, *, host: str = DEFAULT_HOST,
          port: int = DEFAULT_PORT, max_sessions: int = DEFAULT_MAX_SESSIONS,
          max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES, idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
          log_level: str = "warning") -> None:
    """Serve ``env_id`` until SIGINT/SIGTERM (then every open session's env is closed and this returns)."""
    app = create_server_app(env_id, env_kwargs, max_sessions=max_sessions, max_request_bytes=max_request_bytes,
                            idle_timeout_s=idle_timeout_s)
    sock = bind_socket(host, port)
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    print(f"serving {env_id} on http://{shown}:{bound_port} (WebSocket {WS_PATH}; at most {max_sessions} "
          "sessions)", flush=True)
    config = uvicorn.Config(app, log_level=log_level, ws_max_size=max_request_bytes, timeout_graceful_shutdown=5,
                            access_log=False, lifespan="on")
    try:
        _StopOnSignal(config).run(sockets=[sock])
    finally:
        sock.close()




__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "GymTextEnvironment", "RequestGuard", "bind_socket",
           "check_server_options", "create_server_app", "one_line", "serve"]
