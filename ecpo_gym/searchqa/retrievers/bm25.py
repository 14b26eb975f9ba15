"""The default retriever: BM25 with bm25s, in-process, its index cached on disk per corpus fingerprint."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ecpo_gym.cache import staging_folder
from ecpo_gym.searchqa.corpus import Corpus
from ecpo_gym.searchqa.retrievers.base import Hit, Retriever, default_cache_dir

BM25S_INDEX_VERSION = 1  # bump when the cached index layout or tokenisation changes


def _params_digest(params: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:10]


class BM25sRetriever(Retriever):
    """BM25 over a corpus with bm25s (Lucene's BM25 variant; lowercase word tokens, English stopwords).

    With ``cache=True`` the index is saved under ``<cache dir>/bm25s/<corpus fingerprint>-<params>`` the first
    time and loaded from there afterwards; ``cache=False`` keeps it in memory only (generated corpora).
    """

    def __init__(
        self,
        corpus: Corpus,
        *,
        k1: float = 1.5,
        b: float = 0.75,
        stopwords: str | None = "en",
        cache: bool = True,
        cache_dir: str | os.PathLike | None = None,
    ) -> None:
        import bm25s

        self._bm25s = bm25s
        self.corpus = corpus
        self.k1, self.b, self.stopwords = float(k1), float(b), stopwords
        self.index_dir: Path | None = None
        self.loaded_from_cache = False
        if len(corpus) == 0:
            raise ValueError(f"{corpus.name}: cannot index an empty corpus")
        params = {"k1": self.k1, "b": self.b, "stopwords": stopwords, "version": BM25S_INDEX_VERSION,
                  "bm25s": getattr(bm25s, "__version__", "?")}
        if cache:
            self.index_dir = (default_cache_dir(cache_dir) / "bm25s"
                              / f"{corpus.fingerprint[:32]}-{_params_digest(params)}")
            if (self.index_dir / "ecpo_index.json").is_file():
                self._model = bm25s.BM25.load(str(self.index_dir))
                self.loaded_from_cache = True
                return
        self._model = self._build()
        if self.index_dir is not None:
            self._save(self.index_dir, params)

    def _tokenize(self, texts: Sequence[str]) -> list[list[str]]:
        return self._bm25s.tokenize(list(texts), stopwords=self.stopwords, return_ids=False,
                                    show_progress=False)

    def _build(self):
        model = self._bm25s.BM25(k1=self.k1, b=self.b)
        model.index(self._tokenize([doc.contents for doc in self.corpus]), show_progress=False)
        return model

    def _save(self, index_dir: Path, params: dict[str, Any]) -> None:
        # Save into a fresh folder and rename it into place, so a concurrent reader never sees half an index.
        with staging_folder(index_dir.parent) as staging:  # (a killed build's folder is removed by the next)
            try:
                self._model.save(str(staging))
                meta = dict(params, corpus=self.corpus.name, corpus_fingerprint=self.corpus.fingerprint,
                            documents=len(self.corpus))
                (staging / "ecpo_index.json").write_text(json.dumps(meta, indent=1))
                os.replace(staging, index_dir)
            except OSError:
                if not (index_dir / "ecpo_index.json").is_file():
                    raise

    def batch_search(self, queries: Sequence[str], topk: int) -> list[list[Hit]]:
        topk = min(int(topk), len(self.corpus))
        results: list[list[Hit]] = [[] for _ in queries]
        if topk < 1 or not queries:
            return results
        tokens = self._tokenize([str(query) for query in queries])
        known = [i for i, query_tokens in enumerate(tokens)
                 if any(token in self._model.vocab_dict for token in query_tokens)]
        if not known:
            return results
        doc_ids, scores = self._model.retrieve([tokens[i] for i in known], k=topk, show_progress=False,
                                               n_threads=1)
        for row, query_index in enumerate(known):
            results[query_index] = [Hit(self.corpus[int(doc)], float(score))
                                    for doc, score in zip(doc_ids[row], scores[row]) if score > 0]
        return results
