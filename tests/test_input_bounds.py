"""Bad input is one error, never a hang or a raw parser exception (issue 39): generator bounds that keep a reset
under a second, an empty task-type list, damaged ``game.tw-pddl`` files named in one line, and a retrieval
server's deeply nested or huge replies."""

from __future__ import annotations

import http.server
import json
import threading
import time

import gymnasium as gym
import pytest

import ecpo_gym  # noqa: F401  (registers the ids)
from ecpo_gym.alfworld.native.game import GameLoadError
from ecpo_gym.searchqa.retrievers.remote import (
    MAX_DOCUMENT_CHARS,
    MAX_REPLY_BYTES,
    RetrievalServerError,
    SearchR1HTTPRetriever,
)


@pytest.mark.parametrize("kwargs,words", [
    ({"num_receptacles": (10**9, 10**9)}, "num_receptacles must be (lo, hi) with 4 <= lo <= hi <= 64"),
    ({"max_objects_per_receptacle": 10**6}, "max_objects_per_receptacle must be an int in [0, 10]"),
    ({"num_tasks": 10**9}, "num_tasks must be an int in [1, 1000000]"),
    ({"task_types": []}, "task_types is empty"),
])
def test_alfworld_gen_refuses_sizes_that_would_hang_at_make(kwargs, words):
    started = time.perf_counter()
    with pytest.raises(ValueError) as refused:
        gym.make("ecpo/ALFWorldGen-v0", **kwargs)
    assert words in str(refused.value) and "\n" not in str(refused.value)
    assert time.perf_counter() - started < 5


def test_the_largest_household_allowed_resets_in_under_a_second():
    env = gym.make("ecpo/ALFWorldGen-v0", num_receptacles=(64, 64), max_objects_per_receptacle=10)
    for task in ("gen/Pick/1", "gen/Pick2/2"):
        started = time.perf_counter()
        _, info = env.reset(seed=0, options={"task_id": task})
        assert time.perf_counter() - started < 3  # (a shared, loaded machine: well under a second alone)
        assert len(info["admissible_actions"]) > 60
    env.close()


def test_an_empty_task_type_list_is_refused_for_the_real_games_too(tmp_path):
    with pytest.raises(ValueError, match="task_types is empty"):
        gym.make("ecpo/ALFWorld-v0", data_dir=str(damaged_split(tmp_path, b"{}")), task_types=[])


def damaged_split(root, content: bytes):
    game = root / "valid_seen" / "pick_and_place_simple-Apple-None-Fridge-1" / "trial_T1" / "game.tw-pddl"
    game.parent.mkdir(parents=True)
    game.write_bytes(content)
    return root / "valid_seen"


@pytest.mark.parametrize("content,cause", [
    (b'{"pddl_domain": "(define', "JSONDecodeError"),
    (b"\xff\xfe\x00garbage", "UnicodeDecodeError"),
    (b"[" * 200_000 + b"]" * 200_000, "RecursionError"),
    (b"[1, 2, 3]", "TypeError"),
    (b'{"grammar": 7}', ""),
    (b"", "JSONDecodeError"),
])
def test_a_damaged_game_file_is_one_error_naming_it(tmp_path, content, cause):
    split = damaged_split(tmp_path, content)
    env = gym.make("ecpo/ALFWorld-v0", data_dir=str(split))
    with pytest.raises(GameLoadError) as refused:
        env.reset(seed=0)
    message = str(refused.value)
    assert "pick_and_place_simple-Apple-None-Fridge-1/trial_T1/game.tw-pddl" in message, message
    assert cause in message and "\n" not in message and len(message) < 600


# ------------------------------------------------------------------------------------------------ HTTP retriever
class _Replies(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Replies)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/retrieve"
    httpd.shutdown()
    httpd.server_close()


def test_a_deeply_nested_reply_is_one_error_naming_the_url(server):
    _Replies.body = b'{"result": [' + b"[" * 100_000 + b"]" * 100_000 + b"]}"
    with pytest.raises(RetrievalServerError, match=f"{server} did not answer JSON .RecursionError."):
        SearchR1HTTPRetriever(server, timeout=30).batch_search(["q"], 3)


def test_a_reply_over_the_size_limit_is_refused_naming_the_url(server):
    _Replies.body = b'{"result": [[{"contents": "' + b"x" * (MAX_REPLY_BYTES + 10) + b'"}]]}'
    with pytest.raises(RetrievalServerError, match=f"{server} answered more than 16 MiB"):
        SearchR1HTTPRetriever(server, timeout=60).batch_search(["q"], 3)


def test_a_huge_document_is_cut_to_the_document_limit(server):
    _Replies.body = json.dumps({"result": [[{"document": {"id": "d1", "contents": "y" * 5_000_000}, "score": 1.5}]]}
                               ).encode()
    (hits,) = SearchR1HTTPRetriever(server, timeout=60).batch_search(["q"], 3)
    assert len(hits) == 1 and hits[0].score == 1.5
    assert hits[0].document.contents == "y" * MAX_DOCUMENT_CHARS


@pytest.mark.parametrize("result", [[7], [[{"document": {"contents": "a"}, "score": "high"}]], [{"a": 1}]])
def test_a_result_of_the_wrong_shape_is_one_error(server, result):
    _Replies.body = json.dumps({"result": result}).encode()
    with pytest.raises(RetrievalServerError, match=server):
        SearchR1HTTPRetriever(server, timeout=30).batch_search(["q"], 3)
