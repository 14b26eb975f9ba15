"""The search-QA retrieval server answers every body (issue 25): 400 for anything it cannot parse or that exceeds its
bounds, decided before the search lock, so one client's oversized request never holds the others back."""

from __future__ import annotations

import http.client
import json

import pytest

from ecpo_gym.searchqa.retrievers.bm25 import BM25sRetriever
from ecpo_gym.searchqa.retrievers.remote import MAX_QUERY_CHARS, SearchR1HTTPRetriever
from ecpo_gym.searchqa.server import MAX_BODY_BYTES, MAX_QUERIES, RetrievalServer
from ecpo_gym.searchqa.world import generate_world, world_corpus


@pytest.fixture(scope="module")
def server():
    srv = RetrievalServer(BM25sRetriever(world_corpus(generate_world(0)), cache=False), "127.0.0.1", 0)
    srv.serve_in_thread()
    yield srv
    srv.shutdown()
    srv.server_close()


def post(server, body: bytes, headers: dict[str, str] | None = None, timeout: float = 20) -> tuple[int, dict]:
    host, port = server.server_address[:2]
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        connection.request("POST", "/retrieve", body=body,
                           headers={"Content-Type": "application/json"} | (headers or {}))
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


@pytest.mark.parametrize("body,words", [
    (b"[" * 100_000 + b"]" * 100_000, "nests too deep"),  # was: connection closed, RecursionError inside
    (b"{not json", "not JSON"),
    (b"\xff\xfe{}", "not UTF-8"),
    (b'"just a string"', "JSON object"),
    (b'{"queries": [1, 2]}', "list of strings"),
    (b'{"queries": ["a"], "topk": -1}', "topk"),
    (b'{"queries": ["a"], "topk": true}', "topk"),
])
def test_a_body_the_server_cannot_use_is_answered_400(server, body, words):
    status, payload = post(server, body)
    assert status == 400 and words in payload["error"]


def test_an_oversized_body_is_read_and_answered_400_not_a_broken_pipe(server):
    body = b'{"queries": ["' + b"a" * (17 << 20) + b'"]}'  # 17 MB
    status, payload = post(server, body, timeout=60)
    assert status == 400 and f"at most {MAX_BODY_BYTES} bytes" in payload["error"]


def test_bad_content_lengths_are_answered_400(server):
    for length in ("abc", "-5", "0"):
        host, port = server.server_address[:2]
        connection = http.client.HTTPConnection(host, port, timeout=10)
        connection.putrequest("POST", "/retrieve")
        connection.putheader("Content-Length", length)
        connection.endheaders()
        response = connection.getresponse()
        assert response.status == 400, length
        assert "Content-Length" in json.loads(response.read())["error"]
        connection.close()


def test_oversized_queries_are_refused_without_taking_the_search_lock(server):
    """With the lock held by someone else, an oversized request is still answered at once: it never waits for
    the lock, so it could never have held it."""
    too_long = json.dumps({"queries": ["river " * 2_000_000]}).encode()  # 12 MB query... over the body bound
    long_query = json.dumps({"queries": ["x" * (MAX_QUERY_CHARS + 1)]}).encode()
    too_many = json.dumps({"queries": ["a"] * (MAX_QUERIES + 1)}).encode()
    with server.search_lock:
        for body, words in ((too_long, "bytes"), (long_query, f"at most {MAX_QUERY_CHARS} characters"),
                            (too_many, f"at most {MAX_QUERIES} queries")):
            status, payload = post(server, body, timeout=30)
            assert status == 400 and words in payload["error"]


def test_a_valid_request_still_searches_while_the_bounds_hold(server):
    status, payload = post(server, json.dumps({"query": "capital city", "topk": 2}).encode())
    assert status == 200 and len(payload["result"]) == 1 and len(payload["result"][0]) == 2


def test_a_batch_searched_in_chunks_under_the_lock_equals_one_in_process_batch(server):
    """The server takes the lock per 64 queries (so others get in between); the answer is still the batch's."""
    queries = [f"river city {i}" for i in range(200)]
    status, payload = post(server, json.dumps({"queries": queries, "topk": 2}).encode())
    want = server.retriever.batch_search(queries, 2)
    assert status == 200
    assert [[doc["id"] for doc in row] for row in payload["result"]] == [[hit.document.id for hit in row]
                                                                          for row in want]


def test_the_client_cuts_long_queries_so_the_server_accepts_them(server):
    client = SearchR1HTTPRetriever(f"http://127.0.0.1:{server.server_address[1]}/retrieve")
    long_query = "capital city " * 1000  # 13,000 characters: over the server's bound
    cut = long_query[:MAX_QUERY_CHARS]
    many = [long_query] + [f"river {i}" for i in range(99)]  # two requests of at most 64 queries
    got = client.batch_search(many, 2)
    want = server.retriever.batch_search([cut] + many[1:], 2)
    assert [[hit.document.id for hit in row] for row in got] == [[hit.document.id for hit in row] for row in want]


def test_the_demo_chat_server_answers_400_to_the_same_bodies(tiny_model_dir):
    """scripts/chat_server.py reads its body with the same reader: deep nesting and 17 MB get a 400 too."""
    from chat_server import ChatCompletionServer  # the demo server lives in the checkout's scripts/

    from ecpo_train.evaluation.chat import TransformersChatModel

    chat = ChatCompletionServer(TransformersChatModel(str(tiny_model_dir), max_new_tokens=4), model_name="tiny")
    chat.start()
    try:
        for body in (b"[" * 100_000 + b"]" * 100_000, b'{"messages": "' + b"a" * (17 << 20) + b'"}'):
            connection = http.client.HTTPConnection("127.0.0.1", chat.port, timeout=60)
            connection.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            assert response.status == 400 and "message" in json.loads(response.read())["error"]
            connection.close()
    finally:
        chat.shutdown()
        chat.server_close()
