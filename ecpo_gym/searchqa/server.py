"""Serve any retriever over HTTP with Search-R1's retrieval API (``POST /retrieve``).

``python -m ecpo_gym.searchqa.server --corpus corpus.jsonl --port 8000`` serves bm25s over a corpus, so
several trainers share one index. The body is ``{"queries": [str] | "query": str, "topk": int|null,
"return_scores": bool}``; a null ``topk`` means the server's default. Each document is sent as
``{id, contents, title, text}``, which satisfies both Search-R1 document shapes; the result is always one list
per query (a single ``query`` gets a one-element result). Binds to loopback by default.

Every request gets an answer: a body that is not the API (not JSON, not UTF-8, nested past the parser's limit,
over ``MAX_BODY_BYTES``, more than ``MAX_QUERIES`` queries or a query over ``MAX_QUERY_CHARS``) is HTTP 400 with
``{"error": ...}``, checked before the search lock is taken; an oversized body is read and discarded (up to
``MAX_DRAIN_BYTES``) so the client sees the 400 rather than a broken pipe. Searches take the lock per chunk
of ``LOCK_CHUNK`` queries, so one client's large batch does not hold everyone else back.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ecpo_gym.kwargs import shown
from ecpo_gym.searchqa.corpus import Corpus
from ecpo_gym.searchqa.retrievers import Retriever, make_retriever
from ecpo_gym.searchqa.retrievers.remote import MAX_QUERY_CHARS  # the client cuts longer queries to this

MAX_BODY_BYTES = 4 << 20
MAX_DRAIN_BYTES = 64 << 20  # an oversized body up to this is read (and dropped) so the 400 reaches the client
MAX_QUERIES = 4096
MAX_TOPK = 1000
LOCK_CHUNK = 64


class RequestError(ValueError):
    """A request body that does not follow the API (answered with HTTP 400)."""


def parse_request(body: Any, default_topk: int) -> tuple[list[str], int, bool]:
    """``(queries, topk, return_scores)`` from a request body."""
    if not isinstance(body, dict):
        raise RequestError("the body must be a JSON object")
    single = "queries" not in body and "query" in body
    queries = [body["query"]] if single else body.get("queries")
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        raise RequestError("'queries' must be a list of strings (or 'query' a string)")
    if len(queries) > MAX_QUERIES:
        raise RequestError(f"at most {MAX_QUERIES} queries per request, got {len(queries)}")
    longest = max((len(q) for q in queries), default=0)
    if longest > MAX_QUERY_CHARS:
        raise RequestError(f"a query may have at most {MAX_QUERY_CHARS} characters, got {longest}")
    topk = body.get("topk")
    topk = default_topk if topk is None else topk
    if isinstance(topk, bool) or not isinstance(topk, int) or not 0 <= topk <= MAX_TOPK:
        raise RequestError(f"'topk' must be null or an integer in [0, {MAX_TOPK}]")
    return queries, topk, bool(body.get("return_scores", False))


def retrieve_response(retriever: Retriever, body: Any, default_topk: int,
                      lock: threading.Lock | None = None) -> dict[str, Any]:
    """The API's response object for a request body; ``lock`` (if any) is held per chunk of queries searched."""
    queries, topk, return_scores = parse_request(body, default_topk)
    found = []
    for start in range(0, len(queries), LOCK_CHUNK):
        with lock if lock is not None else contextlib.nullcontext():
            found.extend(retriever.batch_search(queries[start : start + LOCK_CHUNK], topk))
    results = []
    for hits in found:
        docs = []
        for hit in hits:
            doc = {"id": hit.document.id, "contents": hit.document.contents,
                   "title": hit.document.title, "text": hit.document.text}
            docs.append({"document": doc, "score": hit.score} if return_scores else doc)
        results.append(docs)
    return {"result": results}


def read_json_body(handler: BaseHTTPRequestHandler, max_bytes: int) -> Any:
    """The request's JSON body; a ``RequestError`` (after reading and dropping an oversized body, so the client
    gets the answer) for a bad ``Content-Length``, a body over ``max_bytes`` or one that is not UTF-8 JSON."""
    raw = handler.headers.get("Content-Length")
    try:
        length = int(raw) if raw is not None else 0
    except ValueError:
        raise RequestError(f"Content-Length {shown(raw)} is not a number") from None
    if length <= 0:
        raise RequestError("a JSON body with its Content-Length is required")
    if length > max_bytes:
        handler.close_connection = True
        if length <= MAX_DRAIN_BYTES:
            left = length
            while left > 0:
                chunk = handler.rfile.read(min(left, 1 << 20))
                if not chunk:
                    break
                left -= len(chunk)
        raise RequestError(f"the body must be at most {max_bytes} bytes, got {length}")
    data = handler.rfile.read(length)
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise RequestError("the body is not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise RequestError(f"the body is not JSON ({exc})") from None


class RetrievalServer(ThreadingHTTPServer):
    """A threaded HTTP server answering ``POST /retrieve``; searches are serialised with one lock."""

    daemon_threads = True

    def __init__(self, retriever: Retriever, host: str = "127.0.0.1", port: int = 8000, default_topk: int = 3):
        self.retriever = retriever
        self.default_topk = int(default_topk)
        self.search_lock = threading.Lock()
        super().__init__((host, port), _RetrieveHandler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/retrieve"

    def serve_in_thread(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, name="ecpo-retrieval-server", daemon=True)
        thread.start()
        return thread


class _RetrieveHandler(BaseHTTPRequestHandler):
    server: RetrievalServer
    timeout = 60  # seconds a client may stall mid-request (a body shorter than its Content-Length)

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        if self.path.rstrip("/") != "/retrieve":
            self._send(404, {"error": f"unknown path {self.path}; use POST /retrieve"})
            return
        try:
            body = read_json_body(self, MAX_BODY_BYTES)
            payload = retrieve_response(self.server.retriever, body, self.server.default_topk,
                                        lock=self.server.search_lock)
        except (ValueError, RecursionError) as exc:  # RequestError, JSON, UTF-8, nesting past the parser's limit
            self._send(400, {"error": str(exc) if not isinstance(exc, RecursionError) else "the body nests too deep"})
            return
        except Exception as exc:  # noqa: BLE001 -- the retriever failed: answer 500 instead of dropping the client
            self._send(500, {"error": f"{type(exc).__name__}: {exc}"})
            return
        self._send(200, payload)

    def do_GET(self) -> None:
        self._send(405, {"error": "use POST /retrieve"})

    def log_message(self, format: str, *args: Any) -> None:  # quiet by default
        pass


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve a corpus over Search-R1's retrieval API.")
    parser.add_argument("--corpus", required=True, help="corpus jsonl ({id, contents} per line)")
    parser.add_argument("--retriever", default="bm25s", choices=["bm25s", "lucene"])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--topk", type=int, default=3)
    parser.add_argument("--cache-dir", default=None)
    args = parser.parse_args(argv)
    retriever = make_retriever(args.retriever, Corpus.from_jsonl(args.corpus), cache_dir=args.cache_dir)
    server = RetrievalServer(retriever, args.host, args.port, args.topk)
    print(f"serving {args.corpus} ({args.retriever}) at {server.url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        retriever.close()


if __name__ == "__main__":
    main()
