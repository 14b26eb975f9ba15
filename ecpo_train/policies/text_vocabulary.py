"""The small text policy's words: how a text becomes token ids, and which words have their own id.

A text is lowercased and cut into words and numbers (``"go to cabinet 10."`` -> ``go, to, cabinet, 10``);
punctuation is dropped. The vocabulary is built from the texts the policy is first trained on (``ecpo sft``
builds it from the expert's play of the training split: goals, observations, admissible actions): the
``max_words`` most frequent words, ties broken alphabetically, so the same texts always give the same ids. A word
outside it still gets an id: one of ``hash_buckets`` shared ids chosen by the word's CRC-32 (stable across
processes and machines, unlike Python's ``hash``). A policy trained from scratch has no known words and reads
every word through the buckets.

Ids: 0 pads, ``1 .. len(SPECIAL)`` are the markers the policy lays out a step with (``text.py``), then the known
words, then the buckets.
"""

from __future__ import annotations

import re
import zlib
from collections import Counter
from collections.abc import Iterable, Sequence

from ecpo_gym.kwargs import shown

PAD = 0
# history segment, goal segment, current-observation segment, action-in-history marker; then the repeat feature
# of a candidate: taken 0, 1, 2, 3+ times earlier in the episode
SPECIAL = ("<history>", "<goal>", "<observation>", "<act>", "<taken0>", "<taken1>", "<taken2>", "<taken3+>")
_WORD = re.compile(r"[a-z]+|[0-9]+")
DEFAULT_HASH_BUCKETS = 2048
DEFAULT_MAX_WORDS = 8000


def words(text: str) -> list[str]:
    """The words and numbers of ``text``, lowercased, in order."""
    return _WORD.findall(text.lower())


class Vocabulary:
    """Word -> id (module docstring); ``encode`` memoises each distinct text."""

    def __init__(self, known: Sequence[str] = (), hash_buckets: int = DEFAULT_HASH_BUCKETS) -> None:
        if int(hash_buckets) < 1:
            raise ValueError(f"hash_buckets={shown(hash_buckets)}: at least 1 bucket is needed for unknown words")
        self.known = list(dict.fromkeys(str(w) for w in known))
        self.hash_buckets = int(hash_buckets)
        self.first_word = 1 + len(SPECIAL)
        self._ids = {word: self.first_word + i for i, word in enumerate(self.known)}
        self.first_bucket = self.first_word + len(self.known)
        self._cache: dict[str, tuple[int, ...]] = {}

    @property
    def size(self) -> int:
        """Rows of the embedding table: padding, markers, known words, buckets."""
        return self.first_bucket + self.hash_buckets

    def special(self, name: str) -> int:
        return 1 + SPECIAL.index(name)

    def word_id(self, word: str) -> int:
        known = self._ids.get(word)
        if known is not None:
            return known
        return self.first_bucket + zlib.crc32(word.encode("utf-8")) % self.hash_buckets

    def encode(self, text: str) -> tuple[int, ...]:
        ids = self._cache.get(text)
        if ids is None:
            if len(self._cache) > 200_000:  # a long run sees new observations forever: bound the memo
                self._cache.clear()
            ids = tuple(self.word_id(w) for w in words(text))
            self._cache[text] = ids
        return ids

    def to_dict(self) -> dict:
        return {"known": list(self.known), "hash_buckets": self.hash_buckets}

    @classmethod
    def from_dict(cls, data: dict) -> Vocabulary:
        if not isinstance(data, dict) or not isinstance(data.get("known"), list):
            raise ValueError("not a text-policy vocabulary (expected {known: [...], hash_buckets: N})")
        return cls(data["known"], int(data.get("hash_buckets", DEFAULT_HASH_BUCKETS)))

    @classmethod
    def build(cls, texts: Iterable[str], max_words: int = DEFAULT_MAX_WORDS,
              hash_buckets: int = DEFAULT_HASH_BUCKETS) -> Vocabulary:
        """The ``max_words`` most frequent words of ``texts`` (ties alphabetical), plus the buckets."""
        counts: Counter[str] = Counter()
        for text in texts:
            counts.update(words(text))
        ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[: int(max_words)]
        return cls([word for word, _ in ranked], hash_buckets)
