"""Retrieval corpora: documents in the Search-R1 corpus format and their content fingerprint.

A corpus line is ``{"id": str, "contents": "\\"<title>\\"\\n<text>"}`` (wiki-18's format).
The fingerprint (SHA-256 of every id and contents, in order) keys on-disk index caches, so an edited corpus
never reuses a stale index.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from ecpo_gym.kwargs import shown
from ecpo_gym.searchqa.protocol import split_contents


class DataNotFoundError(FileNotFoundError):
    """A data file is missing; the message names the path and how to obtain it."""


@dataclass(frozen=True)
class Document:
    """One retrievable passage: a stable id and its ``contents`` (title line, then text)."""

    id: str
    contents: str

    @property
    def title(self) -> str:
        """The first line of ``contents`` with surrounding quotes removed."""
        return split_contents(self.contents)[0].strip().strip('"')

    @property
    def text(self) -> str:
        return split_contents(self.contents)[1]

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "contents": self.contents}


def make_contents(title: str, text: str) -> str:
    """``contents`` in the corpus format: the quoted title on the first line, then the text."""
    return f'"{title}"\n{text}'


class Corpus(Sequence[Document]):
    """An ordered, id-unique collection of documents."""

    def __init__(self, documents: Iterable[Document], *, name: str = "corpus") -> None:
        self.name = name
        self._documents = list(documents)
        self._by_id: dict[str, int] = {}
        for position, document in enumerate(self._documents):
            if document.id in self._by_id:
                raise ValueError(f"{name}: duplicate document id {shown(document.id)}")
            self._by_id[document.id] = position

    def __len__(self) -> int:
        return len(self._documents)

    def __getitem__(self, index):  # type: ignore[override]
        return self._documents[index]

    def get(self, doc_id: str) -> Document | None:
        position = self._by_id.get(doc_id)
        return None if position is None else self._documents[position]

    @cached_property
    def fingerprint(self) -> str:
        """SHA-256 hex digest of every (id, contents) pair, in order."""
        digest = hashlib.sha256()
        for document in self._documents:
            digest.update(document.id.encode("utf-8", "surrogatepass") + b"\0")
            digest.update(document.contents.encode("utf-8", "surrogatepass") + b"\n")
        return digest.hexdigest()

    @classmethod
    def from_jsonl(cls, path: str | os.PathLike) -> Corpus:
        """Read a corpus jsonl file (``{"id", "contents"}`` per line; a missing id becomes the line number)."""
        path = Path(path)
        if not path.is_file():
            raise DataNotFoundError(
                f"corpus file not found: {path}. A corpus is a jsonl file with one "
                '{"id": ..., "contents": "\\"Title\\"\\ntext"} object per line (Search-R1\'s wiki-18 corpus: '
                "huggingface.co/datasets/PeterJinGo/wiki-18-corpus); for the offline HotpotQA corpus set "
                "ECPO_DATA_DIR to the folder holding searchqa/hotpotqa_dev500_ircot.jsonl."
            )
        documents = []
        with path.open(encoding="utf-8") as handle:
            for line_number, line in enumerate(handle):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    contents = row["contents"]
                except (json.JSONDecodeError, KeyError, TypeError) as exc:
                    raise ValueError(f"{path}:{line_number + 1}: not a corpus line ({exc})") from None
                documents.append(Document(str(row.get("id", line_number)), str(contents)))
        return cls(documents, name=path.name)

    def write_jsonl(self, path: str | os.PathLike) -> None:
        with Path(path).open("w", encoding="utf-8") as handle:
            handle.writelines(json.dumps(document.to_json(), ensure_ascii=False) + "\n" for document in self._documents)
