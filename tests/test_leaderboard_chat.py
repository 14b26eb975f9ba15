"""Leaderboard chat agents: the HTTP agents play episodes against a real local OpenAI-compatible server (a tiny
model behind scripts/chat_server.py), the client's errors are one clear line, and Reflexion replays failed
tasks, reflecting only before another trial."""

from __future__ import annotations

import json
import urllib.request

import pytest

from ecpo_train.evaluation.build import build_agent
from ecpo_train.evaluation.chat import ChatModel
from ecpo_train.evaluation.manifests import TaskGroup, TaskManifest, load_manifest
from ecpo_train.evaluation.runner import EvalSettings, evaluate

FAST = EvalSettings(seeds=[0], progress=False)


# ------------------------------------------------------------------ chat agents against a real local server
@pytest.fixture(scope="module")
def tiny_server(tmp_path_factory):
    from chat_server import ChatCompletionServer  # the demo server lives in the checkout's scripts/

    from ecpo_train.evaluation.chat import TransformersChatModel
    from ecpo_train.runtime.models import write_tiny_model

    folder = write_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)
    server = ChatCompletionServer(TransformersChatModel(str(folder), max_new_tokens=24), model_name="tiny")
    server.start()
    yield server, folder
    server.shutdown()
    server.server_close()


def test_server_speaks_openai_chat_completions(tiny_server):
    server, _ = tiny_server
    body = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "hello"}], "temperature": 0,
                       "max_tokens": 5}).encode()
    request = urllib.request.Request(f"{server.base_url}/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        answer = json.loads(response.read())
    assert answer["object"] == "chat.completion" and answer["model"] == "tiny"
    assert isinstance(answer["choices"][0]["message"]["content"], str)
    assert 1 <= answer["usage"]["completion_tokens"] <= 5
    hello = [{"role": "user", "content": "hello"}]
    for bad_body in (b'{"messages": 3}', b"[1, 2]", b"not json", b"\xff\xfe",
                     json.dumps({"messages": hello, "max_tokens": -1}).encode(),
                     json.dumps({"messages": hello, "max_tokens": "5"}).encode(),
                     json.dumps({"messages": hello, "temperature": "hot"}).encode(),
                     b'{"messages": [{"role": "user", "content": "hi"}], "temperature": NaN}',
                     json.dumps({"messages": hello, "seed": -1}).encode(),
                     json.dumps({"messages": [{"role": "robot", "content": "hi"}]}).encode(),
                     json.dumps({"messages": [{"role": "user", "content": 7}]}).encode()):
        bad = urllib.request.Request(f"{server.base_url}/chat/completions", data=bad_body,
                                     headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(bad, timeout=30)
        assert err.value.code == 400, bad_body
        assert "message" in json.loads(err.value.read())["error"]
    # a request for more tokens than the server generates is capped, not an unbounded generation
    big = urllib.request.Request(f"{server.base_url}/chat/completions",
                                 data=json.dumps({"messages": hello, "max_tokens": 10**9}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(big, timeout=120) as response:
        assert json.loads(response.read())["usage"]["completion_tokens"] <= server.model.max_new_tokens


@pytest.mark.slow
def test_http_agents_complete_episodes_against_the_local_server(tiny_server, tmp_path):
    from ecpo_train.evaluation.chat import OpenAIChatModel

    server, _ = tiny_server
    client = OpenAIChatModel("tiny", base_url=server.base_url, api_key="unused")
    messages = [{"role": "user", "content": "Say something."}]
    local = server.model  # the same weights, called in process
    # greedy decoding over HTTP equals greedy decoding in process: the client really talks to the model
    assert client.complete(messages, temperature=0, max_tokens=6) == local.complete(messages, temperature=0,
                                                                                    max_tokens=6)
    manifest = TaskManifest("searchqa_gen_one", "searchqa", "ecpo/SearchQAGen-v0", {"max_steps": 1},
                            [TaskGroup("single_hop", task_ids=load_manifest("searchqa_gen").groups[0].task_ids[:1])])
    for kind in ("prompting", "react", "reflexion"):
        agent = build_agent(kind, backend="openai", model="tiny", base_url=server.base_url, max_new_tokens=8,
                            **({"trials": 2} if kind == "reflexion" else {}))
        episodes = evaluate(agent, [manifest], tmp_path, FAST)["episodes"]
        assert len(episodes) == 1
        record = episodes[0]
        assert record["steps"] == 1 and record["em"] is not None  # a random tiny model never answers right
        assert record["trials"] == (2 if kind == "reflexion" else 1)
        if kind == "reflexion":
            assert record["total_steps"] == 2 and record["trial_wins"] == [False, False]


def test_openai_client_reports_missing_settings_and_dead_endpoints(monkeypatch):
    from ecpo_train.evaluation.chat import OpenAIChatModel

    for var in ("ECPO_OPENAI_BASE_URL", "OPENAI_BASE_URL", "ECPO_OPENAI_MODEL"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ValueError, match="ECPO_OPENAI_BASE_URL"):
        OpenAIChatModel("m")
    client = OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1", retries=1, timeout_s=2)
    with pytest.raises(OSError, match="127.0.0.1:9"):
        client.complete([{"role": "user", "content": "hi"}], temperature=0)


def test_openai_client_reports_an_answer_that_is_not_json():
    from ecpo_train.evaluation.chat import OpenAIChatModel

    server = _serving(200, b"<html>sign in</html>")  # e.g. a proxy's login page in front of the endpoint
    try:
        client = OpenAIChatModel("m", base_url=f"http://127.0.0.1:{server.server_address[1]}/v1", retries=1)
        with pytest.raises(OSError, match="other than JSON.*sign in"):
            client.complete([{"role": "user", "content": "hi"}], temperature=0)
    finally:
        server.shutdown()
        server.server_close()


class _ScriptedChat(ChatModel):
    """Always answers the same search-QA reply; counts its calls."""

    name = "scripted"

    def __init__(self):
        self.calls = 0

    def complete(self, messages, *, temperature, max_tokens=None, seed=None):
        self.calls += 1
        return "<think>guess</think><answer>nobody</answer>"


def test_reflexion_replays_failed_tasks_and_reflects_only_before_another_trial(tmp_path):
    from ecpo_train.evaluation.react import ReflexionAgent

    chat = _ScriptedChat()
    agent = ReflexionAgent(chat, trials=3)
    manifest = TaskManifest("searchqa_gen_one", "searchqa", "ecpo/SearchQAGen-v0", {"max_steps": 1},
                            [TaskGroup("single_hop", task_ids=load_manifest("searchqa_gen").groups[0].task_ids[:1])])
    (record,) = evaluate(agent, [manifest], tmp_path, FAST)["episodes"]
    assert record["trials"] == 3 and record["trial_wins"] == [False] * 3
    assert chat.calls == 3 + 2  # one action per trial, one reflection between trials
    assert len(agent.reflections) == 2


# ------------------------------------------------------------------------------ issue 52.10
def _serving(status: int, body: bytes):
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class _Reply(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), _Reply)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.parametrize("status,body,words", [
    (404, b'{"error": "model not found"}', "answered HTTP 404: {\"error\": \"model not found\"}"),
    (401, b"<html>\n<b>sign in</b>\n</html>", "answered HTTP 401: <html> <b>sign in</b> </html>"),
    (200, b"<html>login</html>", "answered with something other than JSON"),
    (200, b"[1, 2]", "answered JSON that is not an object"),
])
def test_an_endpoint_error_is_one_line_without_the_urls_credentials(tmp_path, status, body, words):
    from typer.testing import CliRunner

    from ecpo_train.apps.cli import app

    server = _serving(status, body)
    try:
        url = f"http://alice:s3cret@127.0.0.1:{server.server_address[1]}/v1?api_key=k3y"
        result = CliRunner().invoke(app, ["leaderboard", "--agent", "prompting", "--backend", "openai", "--model",
                                          "m", "--base-url", url, "--env", "ecpo/DivergentAnchor-v0", "--limit", "1",
                                          "--seeds", "1", "--no-progress", "--out-dir", str(tmp_path / "lb")])
    finally:
        server.shutdown()
        server.server_close()
    assert result.exit_code == 2 and result.exception is None or isinstance(result.exception, SystemExit), \
        result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: chat endpoint http://127.0.0.1:"), result.output
    assert words in lines[0], lines[0]
    assert "s3cret" not in result.output and "alice" not in result.output and "k3y" not in result.output
    assert "s3cret" not in "".join(p.read_text() for p in (tmp_path / "lb").rglob("*.json"))


def test_two_endpoints_serving_one_model_name_are_two_agents():
    from ecpo_train.evaluation.agents import PromptingAgent
    from ecpo_train.evaluation.chat import OpenAIChatModel

    first = PromptingAgent(OpenAIChatModel("m", base_url="http://host-a:8000/v1"))
    second = PromptingAgent(OpenAIChatModel("m", base_url="https://bob:pw@host-b/v1/"))
    assert first.name == "prompting:m@host-a:8000/v1" and second.name == "prompting:m@host-b/v1"
    assert first.describe() != second.describe() and "pw" not in json.dumps(second.describe())
