"""Retrievers for search-QA: one interface (``base``), its backends and the factory that builds one by name.

Backends: ``bm25s`` (:class:`BM25sRetriever`, in-process, the default), ``lucene`` (pyserini, the ``lucene``
extra) and ``http`` (any server speaking Search-R1's ``POST /retrieve``, e.g. a dense E5 index). Backends import
the base, never this package, so nothing here imports in a circle; optional backends load only when built.
"""

from __future__ import annotations

import importlib
from typing import Any

from ecpo_gym.kwargs import shown
from ecpo_gym.searchqa.corpus import Corpus
from ecpo_gym.searchqa.retrievers.base import Hit, Retriever, default_cache_dir
from ecpo_gym.searchqa.retrievers.bm25 import BM25sRetriever

# name -> "module:Class"; the class takes the corpus first unless it is a remote backend
RETRIEVERS: dict[str, str] = {
    "bm25s": "ecpo_gym.searchqa.retrievers.bm25:BM25sRetriever",
    "lucene": "ecpo_gym.searchqa.retrievers.lucene:LuceneRetriever",
    "http": "ecpo_gym.searchqa.retrievers.remote:SearchR1HTTPRetriever",
}
REMOTE = frozenset({"http"})


def retriever_class(name: str) -> type[Retriever]:
    """The backend class registered under ``name`` (imported on first use)."""
    if name not in RETRIEVERS:
        raise ValueError(f"unknown retriever {shown(name)}; choose one of {', '.join(repr(n) for n in RETRIEVERS)}")
    module, _, attribute = RETRIEVERS[name].partition(":")
    return getattr(importlib.import_module(module), attribute)


def make_retriever(name: str, corpus: Corpus | None = None, **kwargs: Any) -> Retriever:
    """Build a retriever by name: ``"bm25s"``, ``"lucene"`` (needs the ``lucene`` extra) or ``"http"``."""
    cls = retriever_class(name)
    if name in REMOTE:
        return cls(**kwargs)
    if corpus is None and name == "bm25s":
        raise ValueError("the bm25s retriever needs a corpus")
    return cls(corpus, **kwargs)


__all__ = ["RETRIEVERS", "BM25sRetriever", "Hit", "Retriever", "default_cache_dir", "make_retriever",
           "retriever_class"]
