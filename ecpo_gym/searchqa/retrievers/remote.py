"""Client for Search-R1's retrieval server API, so a dense (E5) index served elsewhere plugs in as a retriever.

Request: ``POST <url>`` (``.../retrieve``) with ``{"queries": [str], "topk": int, "return_scores": true}``;
response: ``{"result": [per query: [{"document": {...}, "score": float}, ...]]}`` (Search-R1's retrieval server API). Only the
document's ``contents`` is needed; its ``id`` is used when the server sends one (dense backends do), else a
content hash stands in (pyserini's BM25 backend sends ``title``/``text``/``contents`` only).
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import socket
import threading
import urllib.parse
from collections.abc import Sequence
from typing import Any

from ecpo_gym.kwargs import shown
from ecpo_gym.searchqa.corpus import Document
from ecpo_gym.searchqa.retrievers.base import Hit, Retriever

# what ecpo's own server (ecpo_gym/searchqa/server.py) accepts: longer queries are cut to MAX_QUERY_CHARS
# (a BM25 or dense query gains nothing past that), and a batch goes in requests of REQUEST_QUERIES queries,
# so a body stays under the server's size limit whatever the policy wrote
MAX_QUERY_CHARS = 4096
REQUEST_QUERIES = 64
# what a reply may hold: a larger body is refused, and a longer document is cut (a passage is ~100 words; an
# observation of megabytes would only fill the prompt)
MAX_REPLY_BYTES = 16 * 2**20
MAX_DOCUMENT_CHARS = 20_000


class RetrievalServerError(RuntimeError):
    """The retrieval server was unreachable or answered something other than the Search-R1 API."""


def document_from_json(doc: Any) -> Document:
    """A :class:`Document` from a server's document object (``{id?, contents}`` or ``{title, text}``)."""
    if not isinstance(doc, dict):
        raise RetrievalServerError(f"expected a document object, got {type(doc).__name__}")
    contents = doc.get("contents")
    if contents is None:
        contents = f'"{doc.get("title", "")}"\n{doc.get("text", "")}'
    contents = str(contents)[:MAX_DOCUMENT_CHARS]
    doc_id = doc.get("id")
    if doc_id is None:
        doc_id = "sha1:" + hashlib.sha1(contents.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return Document(str(doc_id), contents)


MAX_URL_CHARS = 2048  # a retrieval server's address: longer is a mistake, and each error names it whole


class SearchR1HTTPRetriever(Retriever):
    """Retriever backed by a Search-R1 retrieval server (e.g. ``http://127.0.0.1:8000/retrieve``)."""

    def __init__(self, url: str = "http://127.0.0.1:8000/retrieve", *, timeout: float = 30.0) -> None:
        """``timeout``: seconds for a whole request (connecting, sending, the whole reply), not for each wait."""
        if not isinstance(url, str) or not url.startswith(("http://", "https://")) or len(url) > MAX_URL_CHARS:
            raise ValueError(f"retriever url must start with http:// or https:// (at most {MAX_URL_CHARS} characters: "
                             f"every error quotes it), got {shown(url)}")
        from ecpo_gym.kwargs import check_real

        self.url = url
        self.timeout = check_real("timeout", timeout, 0.001, 86400.0)

    def batch_search(self, queries: Sequence[str], topk: int) -> list[list[Hit]]:
        hits: list[list[Hit]] = []
        for start in range(0, len(queries), REQUEST_QUERIES):
            hits.extend(self._request([str(q)[:MAX_QUERY_CHARS] for q in queries[start : start + REQUEST_QUERIES]],
                                      topk))
        return hits

    def _request(self, queries: list[str], topk: int) -> list[list[Hit]]:
        body = json.dumps({"queries": queries, "topk": int(topk), "return_scores": True}).encode("utf-8")
        try:
            status, raw = self._post(body)
            if status >= 400:
                raise RetrievalServerError(f"{self.url} answered HTTP {status}: "
                                           f"{raw[:500].decode('utf-8', 'replace')}")
            if len(raw) > MAX_REPLY_BYTES:
                raise RetrievalServerError(f"{self.url} answered more than {MAX_REPLY_BYTES // 2**20} MiB for "
                                           f"{len(queries)} queries: not a retrieval reply")
            payload = json.loads(raw.decode("utf-8"))
        except (OSError, http.client.HTTPException) as exc:  # (refused, reset, timed out, a garbled status line)
            raise RetrievalServerError(f"cannot reach the retrieval server at {self.url}: {exc}") from exc
        except (ValueError, RecursionError) as exc:  # (not UTF-8, not JSON, or JSON nested past the parser's depth)
            raise RetrievalServerError(f"{self.url} did not answer JSON ({type(exc).__name__})") from None
        result = payload.get("result") if isinstance(payload, dict) else None
        if not isinstance(result, list) or len(result) != len(queries):
            raise RetrievalServerError(f"{self.url}: expected 'result' with {len(queries)} lists, got {shown(payload)}")
        try:
            return [[self._hit(item) for item in per_query[: int(topk)]] for per_query in result]
        except (TypeError, ValueError, RecursionError) as exc:
            raise RetrievalServerError(f"{self.url}: a 'result' entry is not a list of documents "
                                       f"({type(exc).__name__})") from None

    def _post(self, body: bytes) -> tuple[int, bytes]:
        """``POST body`` and the reply's status and body (at most ``MAX_REPLY_BYTES + 1`` bytes), all within
        ``timeout`` seconds: a socket's own timeout bounds each wait, so a server trickling its reply byte by byte
        would never trip it; at the deadline the connection is shut down instead (a ``TimeoutError``)."""
        parts = urllib.parse.urlsplit(self.url)
        kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        connection = kind(parts.hostname, parts.port, timeout=self.timeout)
        late = threading.Event()

        def cut() -> None:
            late.set()
            if connection.sock is not None:
                with contextlib.suppress(OSError):
                    connection.sock.shutdown(socket.SHUT_RDWR)

        deadline = threading.Timer(self.timeout, cut)
        deadline.daemon = True
        deadline.start()
        try:
            connection.connect()
            if late.is_set():
                raise TimeoutError
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            connection.request("POST", path, body=body, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            raw = response.read(MAX_REPLY_BYTES + 1)
            if late.is_set():
                raise TimeoutError
            return response.status, raw
        except (OSError, http.client.HTTPException):
            if late.is_set():
                raise TimeoutError(f"no whole reply within timeout={self.timeout:g} s") from None
            raise
        finally:
            deadline.cancel()
            connection.close()

    @staticmethod
    def _hit(item: Any) -> Hit:
        if isinstance(item, dict) and "document" in item:
            return Hit(document_from_json(item["document"]), float(item.get("score", 0.0)))
        return Hit(document_from_json(item), 0.0)  # return_scores ignored by the server: bare documents
