"""The QA file schemas people publish: a file's rows read from its content, its schema told by their keys, and
one parser per schema turning a row into the fields ``datasets.QAExample`` needs.

A file's container is read from its content, never its extension: parquet (``PAR1`` magic), a JSON array (or an
object with a ``data`` array), or JSON lines. Its schema is then read from its rows' keys:

- ``searchr1``: Search-R1's parquet (``id``, ``question``, ``golden_answers``, ``data_source``, ``prompt``);
- ``verl``: verl-style rows (``data_source``, ``prompt``, ``reward_model{ground_truth}``, ``extra_info``), as
  verl, verl-agent and Search-R1 forks publish them (jsonl or parquet). The golden answers come from
  ``extra_info.answer``, else ``reward_model.ground_truth`` (a str is one answer, never split on commas; a
  ``{"target": [...]}`` dict is its list); the question from ``extra_info.question``, else the last user
  message of ``prompt`` (the text after its last ``Question:`` when a template wraps it);
- ``plain``: ``{"question", "answers"|"answer"}`` objects (optional ``id``, ``data_source``);
- ``ircot``: HotpotQA dev questions with their paragraphs (``question_id``, ``question_text``,
  ``answers_objects``, ``contexts``);
- ``hotpotqa``: HotpotQA's own distractor/fullwiki files (``_id``, ``question``, ``answer``, ``context`` as
  ``[title, [sentences]]`` pairs, ``supporting_facts``, ``type``, ``level``).

The last two carry their paragraphs, which become the offline retrieval corpus (``QADataset.corpus``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ecpo_gym.kwargs import shown
from ecpo_gym.searchqa.corpus import Corpus, Document, make_contents

_WHITESPACE = re.compile(r"\s+")
SCHEMAS = ("searchr1", "verl", "plain", "ircot", "hotpotqa")


# ---------------------------------------------------------------------- reading rows, detecting the schema
def read_rows(path: Path) -> list[dict[str, Any]]:
    """Every row of ``path`` as a dict, whatever the container (parquet, JSON array/document, JSON lines)."""
    with path.open("rb") as handle:
        magic = handle.read(4)
    if magic == b"PAR1":
        import pyarrow.parquet as pq

        rows: list[Any] = pq.read_table(path).to_pylist()
    else:
        text = path.read_text(encoding="utf-8-sig")
        rows = _json_rows(path, text)
    for position, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ValueError(  # noqa: TRY004  (bad file content, not a bad argument)
                f"{path}: row {position} is a {type(row).__name__}, not an object with named fields")
    return rows


def _json_rows(path: Path, text: str) -> list[Any]:
    if text.lstrip().startswith("["):
        try:
            return list(json.loads(text))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not a valid JSON array ({exc})") from None
    rows = []
    for line_number, line in enumerate(text.splitlines()):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            try:  # a pretty-printed JSON document rather than JSON lines
                document = json.loads(text)
            except json.JSONDecodeError:
                raise ValueError(f"{path}:{line_number + 1}: invalid JSON ({exc})") from None
            if isinstance(document, dict) and isinstance(document.get("data"), list):
                return list(document["data"])
            return [document]
    return rows


def schema_of_row(row: dict[str, Any]) -> str | None:
    """The schema whose fields ``row`` carries (None when it matches none)."""
    keys = set(row)
    if {"question", "golden_answers"} <= keys:
        return "searchr1"
    if {"question_text", "contexts"} <= keys:
        return "ircot"
    if {"question", "answer", "context"} <= keys:
        return "hotpotqa"
    if keys & {"extra_info", "reward_model"} and "prompt" in keys:
        return "verl"
    if "question" in keys and keys & {"answers", "answer"}:
        return "plain"
    return None


def detect_schema(path: str | os.PathLike, rows: Sequence[dict[str, Any]] | None = None) -> str:
    """The schema of a QA file, read from its first row's fields (``rows`` when already read)."""
    path = Path(path)
    if rows is None:
        rows = read_rows(path)
    if not rows:
        raise ValueError(f"{path}: the file holds no rows")
    schema = schema_of_row(rows[0])
    if schema is None:
        raise ValueError(f"{path}: unknown QA schema (first row fields {sorted(map(str, rows[0]))}); known "
                         f"schemas: {', '.join(SCHEMAS)} (see ecpo_gym/searchqa/schemas.py)")
    return schema


# ---------------------------------------------------------------------- one parser per schema
def _answers(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, dict):  # verl's ``{"target": [...]}`` ground truth
        return _answers(value.get("target", value.get("answer")))
    return tuple(str(answer) for answer in value)


def _user_message(prompt: Any, *, last: bool = False) -> str:
    if isinstance(prompt, str):
        return prompt
    messages = [str(m.get("content", "")) for m in prompt or () if isinstance(m, dict) and m.get("role", "user") == "user"]
    if not messages:
        return ""
    return messages[-1] if last else messages[0]


def _question_of_prompt(prompt: Any) -> str:
    """The question inside a chat prompt: the last user message, after its last ``Question:`` if templated."""
    message = _user_message(prompt, last=True)
    _, marker, tail = message.rpartition("Question:")
    return tail.strip() if marker and tail.strip() else message


def _row_searchr1(row: dict[str, Any], position: int) -> dict[str, Any]:
    answers = row.get("golden_answers")
    if answers is None:
        answers = (row.get("reward_model") or {}).get("ground_truth")
    return {"row_id": row.get("id", position), "question": row["question"], "answers": _answers(answers),
            "data_source": row.get("data_source", ""), "prompt": _user_message(row.get("prompt"))}


def _row_verl(row: dict[str, Any], position: int) -> dict[str, Any]:
    extra = row.get("extra_info")
    extra = extra if isinstance(extra, dict) else {}
    question = extra.get("question") or row.get("question") or _question_of_prompt(row.get("prompt"))
    answers = extra.get("answer")
    if answers is None:  # a str ground truth is one answer; never split it on commas
        reward_model = row.get("reward_model")
        answers = reward_model.get("ground_truth") if isinstance(reward_model, dict) else None
    row_id = extra.get("index", row.get("id", position))
    return {"row_id": row_id, "question": question, "answers": _answers(answers),
            "data_source": row.get("data_source", "")}


def _row_plain(row: dict[str, Any], position: int) -> dict[str, Any]:
    answers = row["answers"] if "answers" in row else row["answer"]
    return {"row_id": row.get("id", position), "question": row["question"], "answers": _answers(answers),
            "data_source": row.get("data_source", "")}


def _normalise_space(text: str) -> str:
    return _WHITESPACE.sub(" ", text).strip()


def _ircot_answers(row: dict[str, Any]) -> tuple[str, ...]:
    answers: list[str] = []
    for obj in row.get("answers_objects") or ():
        answers.extend(str(span) for span in obj.get("spans") or ())
        if obj.get("number"):
            answers.append(str(obj["number"]))
    return tuple(answers)


def _ircot_paragraphs(row: dict[str, Any]) -> list[tuple[str, str, bool]]:
    return [(str(c.get("title", "")), str(c.get("paragraph_text", "")), bool(c.get("is_supporting")))
            for c in row.get("contexts") or ()]


def _hotpotqa_paragraphs(row: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """HotpotQA's ``context`` ``[[title, [sentences]], ...]``; a paragraph supports when a supporting fact
    names its title."""
    supporting = {str(fact[0]) for fact in row.get("supporting_facts") or () if fact}
    paragraphs = []
    for title, sentences in row["context"]:
        text = "".join(str(s) for s in sentences) if not isinstance(sentences, str) else sentences
        paragraphs.append((str(title), text, str(title) in supporting))
    return paragraphs


def paragraph_corpus(paragraphs_per_row: Iterable[list[tuple[str, str, bool]]], name: str
                     ) -> tuple[Corpus, list[tuple[str, ...]]]:
    """The rows' paragraphs as one corpus, deduplicated by title + whitespace-normalised text.

    Ids are ``"0"``, ``"1"``, … in first-seen order; ``contents`` is ``"\\"<title>\\"\\n<text>"``. Returns the
    corpus and, per row, the ids of its supporting paragraphs.
    """
    key_to_id: dict[tuple[str, str], str] = {}
    documents = []
    supporting = []
    for paragraphs in paragraphs_per_row:
        row_supporting = []
        for title, text, is_supporting in paragraphs:
            key = (title, _normalise_space(text))
            if key not in key_to_id:
                key_to_id[key] = str(len(documents))
                documents.append(Document(key_to_id[key], make_contents(*key)))
            if is_supporting:
                row_supporting.append(key_to_id[key])
        supporting.append(tuple(row_supporting))
    return Corpus(documents, name=name), supporting


def parse_rows(schema: str, rows: list[dict[str, Any]], path: Path) -> tuple[list[dict[str, Any]], Corpus | None]:
    if schema == "searchr1":
        return [_row_searchr1(row, i) for i, row in enumerate(rows)], None
    if schema == "verl":
        return [_row_verl(row, i) for i, row in enumerate(rows)], None
    if schema == "plain":
        return [_row_plain(row, i) for i, row in enumerate(rows)], None
    if schema == "ircot":
        corpus, supporting = paragraph_corpus((_ircot_paragraphs(row) for row in rows),
                                              "hotpotqa_dev500_paragraphs")
        parsed = [{"row_id": row.get("question_id", i), "question": row["question_text"],
                   "answers": _ircot_answers(row), "data_source": "hotpotqa", "supporting": supporting[i]}
                  for i, row in enumerate(rows)]
        return parsed, corpus
    if schema == "hotpotqa":
        corpus, supporting = paragraph_corpus((_hotpotqa_paragraphs(row) for row in rows), f"{path.stem}_paragraphs")
        parsed = [{"row_id": row.get("_id", row.get("id", i)), "question": row["question"],
                   "answers": _answers(row["answer"]), "data_source": "hotpotqa", "supporting": supporting[i],
                   "metadata": {k: row[k] for k in ("type", "level") if k in row}}
                  for i, row in enumerate(rows)]
        return parsed, corpus
    raise ValueError(f"unknown schema {shown(schema)}; choose one of {', '.join(SCHEMAS)}")
