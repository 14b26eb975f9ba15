"""The retriever interface every backend implements: queries in, top-k scored documents out."""

from __future__ import annotations

import abc
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ecpo_gym.cache import cache_root
from ecpo_gym.searchqa.corpus import Document


@dataclass(frozen=True)
class Hit:
    """One retrieved document and its score."""

    document: Document
    score: float


class Retriever(abc.ABC):
    """Maps queries to their top-k documents, best first."""

    @abc.abstractmethod
    def batch_search(self, queries: Sequence[str], topk: int) -> list[list[Hit]]:
        """Top-``topk`` hits of each query (fewer when the corpus has fewer matching documents)."""

    def search(self, query: str, topk: int) -> list[Hit]:
        return self.batch_search([query], topk)[0]

    def close(self) -> None:
        """Release resources (a JVM searcher, an HTTP session)."""


def default_cache_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """The index cache folder: ``cache_dir``, else ``$ECPO_CACHE_DIR``, else ``~/.cache/ecpo``."""
    return cache_root(cache_dir)
