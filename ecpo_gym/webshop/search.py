"""Product search (``docs/environments.md``, WebShop search): one BM25 document per product, top 50 hits.

``Retriever`` is the interface pages use: ``search(query, k) -> [asin, ...]``. ``BM25Retriever`` (default)
scores with ``bm25s`` using Lucene's BM25 variant and pyserini's defaults (k1=0.9, b=0.4) over an
analyzer close to Anserini's English one: ``[a-z0-9]+`` tokens, Lucene's English stop words, a light
plural stemmer (not Porter: rankings differ slightly from the original's). Ties keep catalogue order.
``LuceneRetriever`` (``search_backend="lucene"``, the ``lucene`` extra) is the original's engine: Lucene BM25
with Anserini's English analyzer through pyserini, index cached on disk (``ecpo_gym.lucene``).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from ecpo_gym.kwargs import shown
from ecpo_gym.webshop.products import Product

SEARCH_RETURN_N = 50
BM25_K1, BM25_B = 0.9, 0.4
_TOKEN = re.compile(r"[a-z0-9]+")
# Lucene's EnglishAnalyzer default stop set.
STOP_WORDS = frozenset(["a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it", "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these", "they", "this", "to", "was", "will", "with"])


def option_text(product: Product) -> str:
    return ", and ".join(f"{name}: {', '.join(values)}" for name, values in product.options.items())


def search_document(product: Product) -> str:
    """Lowercased ``Title Description BulletPoints[0] option_text`` (the indexed ``contents``)."""
    first_bullet = product.bullet_points[0] if product.bullet_points else ""
    return " ".join([product.title, product.description, first_bullet, option_text(product)]).lower()


def normalize_query(query: str) -> str:
    """The search argument as the original builds it: lowercased, split on single spaces, re-joined."""
    return " ".join(query.lower().split(" "))


def stem(token: str) -> str:
    """A light English plural stemmer (ies -> y, es after s/x/z/ch/sh, s -> ''; never below 3 letters)."""
    if len(token) > 4 and token.endswith("ies"):
        return token[:-3] + "y"
    if len(token) > 4 and token.endswith("es") and token[-3] in "sxz":
        return token[:-2]
    if len(token) > 4 and token.endswith(("ches", "shes")):
        return token[:-2]
    if len(token) > 3 and token.endswith("s") and not token.endswith(("ss", "us", "is")):
        return token[:-1]
    return token


def analyze(text: str) -> list[str]:
    return [stem(t) for t in _TOKEN.findall(text.lower()) if t not in STOP_WORDS]


class Retriever(Protocol):
    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[str]:
        """ASINs of the top ``k`` products for ``query``, best first."""


class BM25Retriever:
    """BM25 over the product documents with ``bm25s`` (Lucene scoring, pyserini's k1/b)."""

    def __init__(self, products: Sequence[Product], *, k1: float = BM25_K1, b: float = BM25_B) -> None:
        import bm25s

        self.asins = [p.asin for p in products]
        corpus = [analyze(search_document(p)) for p in products]
        self._bm25 = bm25s.BM25(k1=k1, b=b, method="lucene")
        self._bm25.index(corpus, show_progress=False)
        self._vocab = self._bm25.vocab_dict

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[str]:
        tokens = [t for t in analyze(normalize_query(query)) if t in self._vocab]
        if not tokens or not self.asins:
            return []
        scores = self._bm25.get_scores(tokens)
        positive = np.flatnonzero(scores > 0)
        if positive.size > k:
            top = positive[np.argpartition(-scores[positive], k - 1)[:k]]
            # argpartition breaks the k-th place arbitrarily: include every doc tied with it, then cut
            cutoff = scores[top].min()
            top = positive[scores[positive] >= cutoff]
        else:
            top = positive
        order = np.lexsort((top, -scores[top]))
        return [self.asins[i] for i in top[order][:k]]


LUCENE_INDEX_VERSION = 1


def catalogue_fingerprint(documents: Sequence[tuple[str, str]]) -> str:
    """SHA-256 of every ``(asin, contents)`` pair, in order (keys the on-disk Lucene index)."""
    digest = hashlib.sha256()
    for asin, contents in documents:
        digest.update(asin.encode("utf-8", "surrogatepass") + b"\0" + contents.encode("utf-8", "surrogatepass") + b"\n")
    return digest.hexdigest()


class LuceneRetriever:
    """The original's engine: Lucene BM25 (pyserini's k1/b, Anserini's English analyzer) over the same documents.

    Needs the ``lucene`` extra (``pip install 'ecpo[lucene]'``). The index is built once per catalogue under
    ``<cache_dir or $ECPO_CACHE_DIR or ~/.cache/ecpo>/lucene/webshop-<catalogue fingerprint>`` and reused.
    """

    def __init__(self, products: Sequence[Product], *, k1: float = BM25_K1, b: float = BM25_B,
                 cache_dir: str | os.PathLike | None = None) -> None:
        from ecpo_gym.lucene import (
            LuceneSearcher,
            build_lucene_index,
            default_index_root,
            index_is_built,
            write_documents_jsonl,
        )

        documents = [(p.asin, search_document(p)) for p in products]
        fingerprint = catalogue_fingerprint(documents)
        self.index_dir = default_index_root(cache_dir) / f"webshop-{fingerprint[:32]}-v{LUCENE_INDEX_VERSION}"
        self.built_index = False
        if not index_is_built(self.index_dir):
            meta = {"catalogue": "webshop", "fingerprint": fingerprint, "documents": len(documents),
                    "version": LUCENE_INDEX_VERSION}
            build_lucene_index(lambda path: write_documents_jsonl(documents, path), self.index_dir, meta=meta)
            self.built_index = True
        self._loaded = {p.asin for p in products}
        self._searcher = LuceneSearcher(self.index_dir, k1=k1, b=b)

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[str]:
        hits = self._searcher.search(normalize_query(query), k)
        return [asin for asin, _ in hits if asin in self._loaded]  # the original drops unloaded ASINs

    def close(self) -> None:
        self._searcher.close()


RETRIEVERS = {"bm25s": BM25Retriever, "lucene": LuceneRetriever}


def build_retriever(products: Sequence[Product], backend: str = "bm25s", **kwargs) -> Retriever:
    """The retriever registered under ``backend`` (``RETRIEVERS``), built over ``products``."""
    if backend not in RETRIEVERS:
        raise ValueError(f"search backend {shown(backend)}; available: {sorted(RETRIEVERS)}")
    return RETRIEVERS[backend](products, **kwargs)
