"""The retrievers subpackage: base, backends and factory import without a circle (issue #12)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["ecpo_gym.searchqa.retrievers.lucene", "ecpo_gym.searchqa.retrievers.remote",
                                    "ecpo_gym.searchqa.retrievers.bm25", "ecpo_gym.searchqa.retrievers"])
def test_each_backend_imports_first_in_a_fresh_interpreter(module):
    # a circle (backend -> factory module -> backend) shows up only when the backend is imported first
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True, timeout=120)


def test_backends_import_the_base_not_the_factory():
    from pathlib import Path

    import ecpo_gym.searchqa.retrievers as package

    folder = Path(package.__file__).parent
    for backend in ("bm25.py", "lucene.py", "remote.py"):
        source = (folder / backend).read_text()
        assert "from ecpo_gym.searchqa.retrievers import" not in source
        assert "ecpo_gym.searchqa.retrieval" not in source


@pytest.mark.parametrize("module", ["retrieval", "lucene", "remote"])
def test_the_old_alias_modules_are_gone(module):
    # one import path per retriever: ecpo_gym.searchqa.retrievers.*
    with pytest.raises(ModuleNotFoundError):
        __import__(f"ecpo_gym.searchqa.{module}")


def test_factory_builds_backends_by_name():
    from ecpo_gym.searchqa import retrievers
    from ecpo_gym.searchqa.corpus import Corpus, Document
    from ecpo_gym.searchqa.retrievers.remote import SearchR1HTTPRetriever

    assert retrievers.retriever_class("http") is SearchR1HTTPRetriever
    corpus = Corpus([Document("0", '"A"\nalpha beta'), Document("1", '"B"\ngamma delta')])
    hits = retrievers.make_retriever("bm25s", corpus, cache=False).search("gamma", 1)
    assert [hit.document.id for hit in hits] == ["1"]
    with pytest.raises(ValueError, match="unknown retriever 'faiss'"):
        retrievers.make_retriever("faiss", corpus)


def test_the_http_retriever_timeout_bounds_the_whole_request_against_a_trickling_server():
    """Issue 58.8: a server trickling its body (a byte every 0.2 s) kept one step 118.7 s with timeout=2, as a
    socket's timeout bounds each wait only. The timeout bounds the whole request: one clear error after it."""
    import socket
    import threading
    import time

    from ecpo_gym.searchqa.retrievers.remote import RetrievalServerError, SearchR1HTTPRetriever

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    stop = threading.Event()

    def trickle() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
            while not stop.is_set():
                try:
                    conn.sendall(b" ")
                except OSError:
                    return
                time.sleep(0.2)

    server = threading.Thread(target=trickle, daemon=True)
    server.start()
    retriever = SearchR1HTTPRetriever(f"http://127.0.0.1:{listener.getsockname()[1]}/retrieve", timeout=1.0)
    started = time.monotonic()
    try:
        with pytest.raises(RetrievalServerError, match="within timeout=1 s"):
            retriever.batch_search(["who"], 3)
        assert time.monotonic() - started < 3.0
    finally:
        stop.set()
        listener.close()
    with pytest.raises(ValueError, match="timeout=nan is invalid"):
        SearchR1HTTPRetriever("http://127.0.0.1:1/retrieve", timeout=float("nan"))
