"""`ecpo serve`: a real server process driven by OpenEnv's own client (and raw frames for the bad ones).

Episodes through the server equal the in-process env step for step; sessions are isolated; bad requests get one
line and a 4xx (or an error frame) and leave the server serving; a client that vanishes mid-episode frees its
session; SIGTERM stops the server cleanly.
"""

from __future__ import annotations

import contextlib
import json
import random
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("openenv")
import gymnasium as gym
from conftest import DATA_DIR
from openenv_serving import Server, served
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect as ws_connect

import ecpo_gym  # noqa: F401
from ecpo_train.integrations.openenv.client import ECPOEnvClient
from ecpo_train.integrations.openenv.server import ERROR_CHARS, _json_safe

ANCHOR = "ecpo/DivergentAnchor-v0"
LINE_LIMIT = ERROR_CHARS + 60  # the message, its "... (N more characters)" tail and the code


@pytest.fixture(scope="module")
def anchor_server() -> Iterator[Server]:
    with served(ANCHOR, "--max-sessions", "16") as server:
        yield server


def _actions(seed: int) -> Iterator[str | None]:
    """A reproducible mix of admissible actions (None: pick one) and invalid text."""
    rng = random.Random(seed)
    while True:
        yield "fly to the moon" if rng.random() < 0.15 else None


def _play_both(client, env: gym.Env, seed: int | None, task_id: str | None, max_steps: int = 25) -> list[tuple]:
    """Play one episode through the server and in process with the same actions; every step's fields compared."""
    options = None if task_id is None else {"task_id": task_id}
    result = client.reset(seed=seed, **({} if task_id is None else {"task_id": task_id}))
    text, info = env.reset(seed=seed, options=options)
    obs = result.observation
    assert (obs.text, obs.state_key, obs.admissible_actions, obs.task_id, obs.seed, obs.step, result.reward,
            result.done) == (text, info["state_key"], info["admissible_actions"], info["task_id"], seed, 0, None,
                             False)
    rng, trace = random.Random(seed), []
    for step, pick in zip(range(max_steps), _actions(seed or 0), strict=False):
        action = pick if pick is not None else rng.choice(obs.admissible_actions)
        result = client.step(action)
        text, reward, terminated, truncated, info = env.step(action)
        obs = result.observation
        here = (text, reward, terminated, truncated, info["state_key"], info["action_key"],
                info["admissible_actions"], info["is_action_valid"], info["won"], info["step"])
        there = (obs.text, result.reward, obs.terminated, obs.truncated, obs.state_key, obs.action_key,
                 obs.admissible_actions, obs.is_action_valid, obs.won, obs.step)
        assert there == here, f"step {step + 1} of seed {seed}: {there} != {here}"
        rest = {k: v for k, v in info.items() if k not in
                ("task_id", "state_key", "admissible_actions", "step", "action_key", "is_action_valid", "won")}
        assert obs.info == _json_safe(rest)
        assert result.done == (terminated or truncated)
        trace.append((obs.state_key, obs.action_key, result.reward))
        if result.done:
            break
    return trace


FAMILIES = [
    pytest.param(ANCHOR, id="DivergentAnchor"),
    pytest.param("ecpo/ALFWorldGen-v0", id="ALFWorldGen", marks=pytest.mark.slow),
    pytest.param("ecpo/WebShopGen-v0", id="WebShopGen", marks=pytest.mark.slow),
    pytest.param("ecpo/SearchQAGen-v0", id="SearchQAGen", marks=pytest.mark.slow),
    pytest.param("ecpo/ALFWorld-v0", id="ALFWorld", marks=[pytest.mark.slow, pytest.mark.data]),
    pytest.param("ecpo/WebShop-v0", id="WebShop", marks=[pytest.mark.slow, pytest.mark.data]),
    pytest.param("ecpo/SearchQA-v0", id="SearchQA", marks=[pytest.mark.slow, pytest.mark.data]),
]


def family_kwargs(env_id: str, cache: Path) -> dict:
    """The constructor arguments a test gives an id: the real-data ids read the shared data folder's files (its
    WebShop catalogue is the sample one), and search-QA keeps its index in the test's folder."""
    root = DATA_DIR or Path(".")  # the data-marked ids skip without it
    return {
        "ecpo/WebShop-v0": {"products_file": str(root / "webshop" / "sample" / "items_shuffle_sample.json"),
                            "attributes_file": str(root / "webshop" / "items_ins_v2_1000.json")},
        "ecpo/SearchQA-v0": {"data_dir": str(root / "searchqa"), "cache_dir": str(cache)},
    }.get(env_id, {})


@pytest.mark.parametrize("env_id", FAMILIES)
def test_episodes_through_the_server_equal_the_in_process_env(env_id: str, request: pytest.FixtureRequest,
                                                              tmp_path: Path) -> None:
    """Every family: reset by seed and by task id, then the same actions give the same observation, reward, done,
    state key, canonical action and admissible actions at every step; then three sessions at once, each equal to
    its own in-process env."""
    kwargs = family_kwargs(env_id, tmp_path)
    env = gym.make(env_id, disable_env_checker=True, **kwargs)
    try:
        task_ids = [str(t) for t in env.unwrapped.task_ids]
        with contextlib.ExitStack() as stack:
            server = (request.getfixturevalue("anchor_server") if env_id == ANCHOR
                      else stack.enter_context(served(env_id, "--env-kwargs", json.dumps(kwargs))))
            client = stack.enter_context(ECPOEnvClient(base_url=server.url).sync())
            traces = [_play_both(client, env, seed, None) for seed in (0, 7)]
            traces.append(_play_both(client, env, 3, task_ids[len(task_ids) // 2]))
            assert all(traces) and any(len(t) > 1 for t in traces)
            state = client.state()
            assert (state.env_id, state.task_id, state.seed) == (env_id, task_ids[len(task_ids) // 2], 3)

            def concurrent(seed: int) -> list[tuple]:
                own = gym.make(env_id, disable_env_checker=True, **kwargs)
                try:
                    with ECPOEnvClient(base_url=server.url).sync() as other:
                        return _play_both(other, own, seed, None, max_steps=8)
                finally:
                    own.close()

            with ThreadPoolExecutor(3) as pool:  # sessions at once: this family's envs share nothing across them
                assert all(pool.map(concurrent, (21, 22, 23)))
    finally:
        env.close()


def test_concurrent_sessions_are_isolated(anchor_server: Server) -> None:
    """Eight clients step their own episodes at once; each equals its own in-process env, and each client's state
    is its own episode (one client's steps never reach another's)."""

    def one(seed: int) -> tuple[list[tuple], str, int]:
        env = gym.make(ANCHOR, disable_env_checker=True)
        try:
            with ECPOEnvClient(base_url=anchor_server.url).sync() as client:
                trace = _play_both(client, env, seed, None, max_steps=40)
                state = client.state()
                return trace, state.episode_id, state.step_count
        finally:
            env.close()

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(100, 108)))
    assert len({episode for _, episode, _ in results}) == 8
    assert [count for _, _, count in results] == [len(trace) for trace, _, _ in results]


def test_a_session_cannot_attach_to_another(anchor_server: Server) -> None:
    """OpenEnv's ``/ws?session_id=`` (attach to an open session) is refused before the handshake completes."""
    with ECPOEnvClient(base_url=anchor_server.url).sync() as client:
        client.reset(seed=1)
        with pytest.raises(InvalidStatus) as refused:
            ws_connect(anchor_server.ws_url + "?session_id=anything", proxy=None, open_timeout=10)
        assert refused.value.response.status_code == 403
        assert client.step("open red door").observation.step == 1  # the first session is untouched


def _error(ws) -> str:
    frame = json.loads(ws.recv(timeout=30))
    assert frame["type"] == "error", frame
    message = frame["data"]["message"]
    assert "\n" not in message and len(message) <= LINE_LIMIT and "Traceback" not in message, message
    return message


def test_malformed_frames_get_one_line_and_the_session_carries_on(anchor_server: Server) -> None:
    with ws_connect(anchor_server.ws_url, proxy=None, open_timeout=10) as ws:
        ws.send("{not json")
        assert "Invalid JSON" in _error(ws)
        ws.send(json.dumps({"type": "step", "data": {"action": "open red door"}}))
        assert "send reset before step" in _error(ws)
        ws.send(json.dumps({"type": "launch", "data": {}}))
        assert "Unknown message type" in _error(ws)
        ws.send(json.dumps({"type": "reset", "data": {"seed": "x" * 5000}}))
        assert "seed must be an integer" in _error(ws)
        ws.send(json.dumps({"type": "reset", "data": {"sede": 3}}))
        assert "got sede" in _error(ws)
        ws.send(json.dumps({"type": "reset", "data": {"task_id": "no-such-task-" + "y" * 5000}}))
        _error(ws)
        ws.send(json.dumps({"type": "reset", "data": {"seed": 5}}))
        reset = json.loads(ws.recv(timeout=30))
        assert reset["type"] == "observation" and reset["data"]["observation"]["seed"] == 5
        ws.send(json.dumps({"type": "step", "data": {"action": 42}}))
        assert "action" in _error(ws)
        ws.send(json.dumps({"type": "step", "data": {"action": "z" * 100_000}}))  # over MAX_ACTION_CHARS
        assert "zzzzz" * 100 not in _error(ws)
        ws.send(json.dumps({"type": "step", "data": {"action": "open red door", "secret": 1}}))
        assert "secret" in _error(ws)
        ws.send(json.dumps({"type": "step", "data": {"action": "this is no door"}}))
        step = json.loads(ws.recv(timeout=30))["data"]
        assert step["observation"]["action_key"] == "<invalid>" and step["observation"]["step"] == 1


def test_http_bad_requests_are_4xx_with_one_line(anchor_server: Server) -> None:
    assert anchor_server.get("/health").json() == {"status": "healthy"}
    cases = [
        (anchor_server.get("/reset", method="POST", json={}), 404),  # episodes only over /ws
        (anchor_server.get("/step", method="POST", json={"action": {"action": "x"}}), 404),
        (anchor_server.get("/mcp", method="POST", json={}), 404),
        (anchor_server.get("/health", method="POST"), 405),
        (anchor_server.get("/schema", data=b"x" * (2 << 20)), 413),  # over --max-request-bytes (1 MiB)
        (anchor_server.get("/" + "p" * 10_000), 404),
    ]
    for response, status in cases:
        assert response.status_code == status, response.text[:200]
        detail = response.json()["detail"]
        assert isinstance(detail, str) and "\n" not in detail and len(detail) <= LINE_LIMIT, detail
    assert anchor_server.get("/schema").status_code == 200


def test_an_oversized_message_closes_only_its_connection(anchor_server: Server) -> None:
    with ECPOEnvClient(base_url=anchor_server.url).sync() as other:
        other.reset(seed=2)
        with ws_connect(anchor_server.ws_url, proxy=None, open_timeout=10, max_size=None) as ws:
            ws.send(json.dumps({"type": "step", "data": {"action": "a" * (2 << 20)}}))
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=30)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
        assert other.step("open red door").observation.step == 1
    assert anchor_server.get("/health").status_code == 200


def _vanish(ws) -> None:
    """Drop the TCP connection without a WebSocket close frame (a client killed mid-episode)."""
    ws.socket.shutdown(socket.SHUT_RDWR)
    ws.socket.close()


@pytest.mark.slow  # its own server (~10 s to start, more on a busy machine)
def test_vanished_clients_free_their_sessions_and_sigterm_stops_cleanly() -> None:
    """With room for two sessions, five clients that drop mid-episode leave both places free again; a third
    session beyond the limit is refused with one line; SIGTERM with a client mid-episode stops the server with
    status 0 and no traceback, and that client's next step fails instead of hanging."""
    with served(ANCHOR, "--max-sessions", "2") as server:
        for seed in range(5):
            ws = ws_connect(server.ws_url, proxy=None, open_timeout=10).__enter__()  # dropped below, never closed
            ws.send(json.dumps({"type": "reset", "data": {"seed": seed}}))
            ws.recv(timeout=30)
            ws.send(json.dumps({"type": "step", "data": {"action": "open red door"}}))
            ws.recv(timeout=30)
            _vanish(ws)
        deadline = time.monotonic() + 20
        while True:  # the server notices each drop on its own schedule
            try:
                with ECPOEnvClient(base_url=server.url).sync() as a, ECPOEnvClient(base_url=server.url).sync() as b:
                    a.reset(seed=1), b.reset(seed=2)
                    with ws_connect(server.ws_url, proxy=None, open_timeout=10) as third:  # refused on arrival
                        assert "capacity" in _error(third).lower()
                break
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        client = ECPOEnvClient(base_url=server.url, message_timeout_s=30).sync()
        client.connect()
        client.reset(seed=4)
        client.step("open red door")
        code, err = server.stop()
        assert code == 0 and "Traceback" not in err, err[-2000:]
        with pytest.raises(Exception):  # noqa: B017  (the session went with the server)
            client.step("open red door")
        client.close()


def test_cli_refusals_are_one_line_exit_2(capsys: pytest.CaptureFixture) -> None:
    from ecpo_train.apps.cli import main

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        port = str(taken.getsockname()[1])
        for args, expected in [
            (["serve", ANCHOR, "--port", port], "cannot listen on 127.0.0.1:" + port),
            (["serve", "ecpo/NoSuchEnv-v0"], "NoSuchEnv"),
            (["serve", ANCHOR, "--env-kwargs", "[1, 2]"], "--env-kwargs must be a JSON object"),
            (["serve", ANCHOR, "--env-kwargs", "{oops"], "--env-kwargs '{oops' is not JSON (Expecting property name"),
            (["serve", ANCHOR, "--env-kwargs", "{" + "x" * 5000], "is not JSON"),
            (["serve", ANCHOR, "--env-kwargs", '{"depth": -3}'], "depth"),
            (["serve", ANCHOR, "--max-sessions", "0"], "--max-sessions"),
            (["serve", ANCHOR, "--max-request-bytes", "10"], "--max-request-bytes"),
            (["serve", ANCHOR, "--port", "70000"], "--port"),
        ]:
            with pytest.raises(SystemExit) as exited:
                main(args)
            err = capsys.readouterr().err
            lines = err.strip().splitlines()
            assert exited.value.code == 2, (args, err)
            assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], (args, err)
    finally:
        taken.close()
