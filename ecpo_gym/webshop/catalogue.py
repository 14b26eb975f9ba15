"""A loaded WebShop catalogue: products, goals and the search index, built once and cached per process.

Building the index is the expensive part of an environment; every env made with the same catalogue
arguments in one process shares one ``Catalogue`` (reset then costs only a page render).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field

from ecpo_gym.webshop.goals import Goal
from ecpo_gym.webshop.products import Product
from ecpo_gym.webshop.search import Retriever, build_retriever


@dataclass
class Catalogue:
    products: list[Product]
    goals: list[Goal]
    retriever: Retriever
    by_asin: dict[str, Product] = field(default_factory=dict)
    search_cache: dict[str, list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.by_asin:
            self.by_asin = {p.asin: p for p in self.products}


_CACHE: dict[Hashable, Catalogue] = {}
MAX_CACHED = 8


def cached_catalogue(key: Hashable, build: Callable[[], tuple[Sequence[Product], Sequence[Goal]]],
                     backend: str = "bm25s") -> Catalogue:
    """The catalogue for ``key``, building products, goals and index on first use."""
    full_key = (key, backend)
    catalogue = _CACHE.get(full_key)
    if catalogue is None:
        products, goals = build()
        catalogue = Catalogue(list(products), list(goals), build_retriever(products, backend))
        if len(_CACHE) >= MAX_CACHED:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[full_key] = catalogue
    return catalogue


def files_identity(paths: Iterable[str | os.PathLike | None]) -> tuple[tuple[str, int, int] | None, ...]:
    """``(path, mtime_ns, size)`` of each file (None when absent) for a cache key, so an edited or replaced
    data file builds a fresh catalogue instead of reusing the stale one."""
    identity = []
    for path in paths:
        try:
            stat = os.stat(path) if path is not None else None
        except OSError:
            stat = None
        identity.append(None if stat is None else (str(path), stat.st_mtime_ns, stat.st_size))
    return tuple(identity)


def clear_catalogue_cache() -> None:
    _CACHE.clear()
