"""QA datasets for the search environment: three file schemas, a name/split registry and stable task ids.

Schemas (SEARCHQA.md §4):
- ``searchr1``: Search-R1 parquet (``id``, ``question``, ``golden_answers``, ``data_source``, ``prompt``);
- ``verl``: verl-style jsonl (``data_source``, ``prompt``, ``extra_info{answer, question, index}``); the golden
  answers come from ``extra_info.answer`` (a str is one answer; ``ground_truth`` is never split on commas);
- ``plain``: jsonl of ``{"question", "answers"}`` (optional ``id``, ``data_source``);
- ``ircot``: HotpotQA dev questions with their paragraphs (``question_id``, ``question_text``,
  ``answers_objects``, ``contexts``), which also yields the offline paragraph corpus.

A task id is ``<name>/<split>/<the row's own id>`` (``#k`` appended to the k-th repeat of an id), so ids do
not depend on load order or filters.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ecpo_gym.searchqa.corpus import Corpus, DataNotFoundError, Document, make_contents

_WHITESPACE = re.compile(r"\s+")

HOW_TO_OBTAIN = (
    "Set ECPO_DATA_DIR to the benchmark data folder (it holds searchqa/…), or pass data_dir=/path_to=. "
    "Search-R1's parquet files come from its data scripts (github.com/PeterGriffinJin/Search-R1, "
    "scripts/data_process/qa_search_test_merge.py) or huggingface.co/datasets/PeterJinGo/nq_hotpotqa_train."
)


@dataclass(frozen=True)
class QAExample:
    """One question with its golden answers; ``supporting_doc_ids`` are known for corpus-backed datasets."""

    task_id: str
    question: str
    golden_answers: tuple[str, ...]
    data_source: str
    prompt: str = ""
    supporting_doc_ids: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass
class QADataset:
    """Examples of one dataset split; ``corpus`` is set when the dataset ships its own paragraphs."""

    name: str
    split: str
    examples: list[QAExample]
    corpus: Corpus | None = None
    path: Path | None = None

    def __len__(self) -> int:
        return len(self.examples)

    @property
    def task_ids(self) -> list[str]:
        return [example.task_id for example in self.examples]


@dataclass(frozen=True)
class DatasetFile:
    filename: str
    schema: str


# name -> split -> file under <data dir>/searchqa. Other names fall back to Search-R1's release layout
# ``<name>/<split>.parquet`` (or ``<name>_<split>.jsonl`` / ``<name>_<split>.parquet``).
DATASETS: dict[str, dict[str, DatasetFile]] = {
    "nq": {"test": DatasetFile("nq_search_test.parquet", "searchr1")},
    "nq_verl": {"test": DatasetFile("nq_test.jsonl", "verl")},
    "hotpotqa": {
        "dev": DatasetFile("hotpotqa_dev.jsonl", "verl"),
        "dev500": DatasetFile("hotpotqa_dev500_ircot.jsonl", "ircot"),
    },
}


def searchqa_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """``data_dir``, else ``$ECPO_DATA_DIR/searchqa``; a clear error when neither is available."""
    if data_dir is not None:
        return Path(data_dir)
    root = os.environ.get("ECPO_DATA_DIR")
    if not root:
        raise DataNotFoundError(f"ECPO_DATA_DIR is not set, so the search-QA data folder is unknown. {HOW_TO_OBTAIN}")
    return Path(root) / "searchqa"


def _missing(path: Path) -> DataNotFoundError:
    return DataNotFoundError(f"search-QA data file not found: {path}. {HOW_TO_OBTAIN}")


def resolve_dataset_file(name: str, split: str, data_dir: str | os.PathLike | None = None) -> Path:
    """The file (and schema) of ``name``/``split``; raises :class:`DataNotFoundError` naming the path."""
    folder = searchqa_data_dir(data_dir)
    known = DATASETS.get(name, {})
    if split in known:
        path = folder / known[split].filename
        if not path.is_file():
            raise _missing(path)
        return path
    candidates = [folder / name / f"{split}.parquet", folder / f"{name}_{split}.jsonl",
                  folder / f"{name}_{split}.parquet"]
    for path in candidates:
        if path.is_file():
            return path
    if known:
        raise ValueError(f"dataset {name!r} has splits {sorted(known)}, not {split!r}")
    raise _missing(candidates[0])


def detect_schema(path: Path) -> str:
    """``searchr1`` for parquet; for jsonl, the schema whose keys the first row carries."""
    if path.suffix == ".parquet":
        return "searchr1"
    with path.open(encoding="utf-8") as handle:
        first = next((line for line in handle if line.strip()), "")
    try:
        row = json.loads(first) if first else {}
    except json.JSONDecodeError:
        raise ValueError(f"{path}: the first line is not JSON") from None
    if "golden_answers" in row:
        return "searchr1"
    if "contexts" in row and "question_text" in row:
        return "ircot"
    if "extra_info" in row:
        return "verl"
    if "question" in row and ("answers" in row or "answer" in row):
        return "plain"
    raise ValueError(f"{path}: unknown QA schema (first row keys {sorted(row)})")


def _read_rows(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    rows = []
    with path.open(encoding="utf-8") as handle:
        for line_number, line in enumerate(handle):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{line_number + 1}: invalid JSON ({exc})") from None
    return rows


def _answers(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    return tuple(str(answer) for answer in value)


def _first_user_message(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    for message in prompt or ():
        if isinstance(message, dict) and message.get("role", "user") == "user":
            return str(message.get("content", ""))
    return ""


def _row_searchr1(row: dict[str, Any], position: int) -> dict[str, Any]:
    answers = row.get("golden_answers")
    if answers is None:
        answers = ((row.get("reward_model") or {}).get("ground_truth") or {}).get("target")
    return {"row_id": row.get("id", position), "question": row["question"], "answers": _answers(answers),
            "data_source": row.get("data_source", ""), "prompt": _first_user_message(row.get("prompt"))}


def _row_verl(row: dict[str, Any], position: int) -> dict[str, Any]:
    extra = row.get("extra_info") or {}
    question = extra.get("question") or _first_user_message(row.get("prompt"))
    answers = extra.get("answer")
    if answers is None:  # a str ground truth is one answer; never split it on commas
        answers = (row.get("reward_model") or {}).get("ground_truth")
    return {"row_id": extra.get("index", position), "question": question, "answers": _answers(answers),
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


def hotpotqa_paragraph_corpus(rows: Iterable[dict[str, Any]]) -> tuple[Corpus, dict[tuple[str, str], str]]:
    """The IRCoT paragraphs as a corpus, deduplicated by title + whitespace-normalised text.

    Ids are ``"0"``, ``"1"``, … in first-seen order; ``contents`` is ``"\\"<title>\\"\\n<text>"``. Returns the
    corpus and the ``(title, normalised text) -> id`` map used to locate supporting paragraphs.
    """
    key_to_id: dict[tuple[str, str], str] = {}
    documents = []
    for row in rows:
        for context in row.get("contexts") or ():
            text = _normalise_space(str(context.get("paragraph_text", "")))
            key = (str(context.get("title", "")), text)
            if key not in key_to_id:
                key_to_id[key] = str(len(documents))
                documents.append(Document(key_to_id[key], make_contents(key[0], text)))
    return Corpus(documents, name="hotpotqa_dev500_paragraphs"), key_to_id


def _finish(name: str, split: str, parsed: Sequence[dict[str, Any]]) -> list[QAExample]:
    seen: dict[str, int] = {}
    examples = []
    for row in parsed:
        row_id = str(row["row_id"])
        repeat = seen.get(row_id, 0)
        seen[row_id] = repeat + 1
        suffix = f"#{repeat}" if repeat else ""
        examples.append(QAExample(
            task_id=f"{name}/{split}/{row_id}{suffix}", question=str(row["question"]).strip(),
            golden_answers=row["answers"], data_source=str(row.get("data_source") or name),
            prompt=row.get("prompt", ""), supporting_doc_ids=tuple(row.get("supporting", ())),
        ))
    return examples


def load_qa_file(path: str | os.PathLike, *, name: str | None = None, split: str = "test",
                 schema: str | None = None) -> QADataset:
    """Load one QA file of any supported schema (detected from the file when ``schema`` is None)."""
    path = Path(path)
    if not path.is_file():
        raise _missing(path)
    schema = schema or detect_schema(path)
    name = name or path.stem
    rows = _read_rows(path)
    corpus = None
    try:
        if schema == "searchr1":
            parsed = [_row_searchr1(row, i) for i, row in enumerate(rows)]
        elif schema == "verl":
            parsed = [_row_verl(row, i) for i, row in enumerate(rows)]
        elif schema == "plain":
            parsed = [_row_plain(row, i) for i, row in enumerate(rows)]
        elif schema == "ircot":
            corpus, key_to_id = hotpotqa_paragraph_corpus(rows)
            parsed = []
            for i, row in enumerate(rows):
                supporting = [key_to_id[(str(c.get("title", "")), _normalise_space(str(c.get("paragraph_text", ""))))]
                              for c in row.get("contexts") or () if c.get("is_supporting")]
                parsed.append({"row_id": row.get("question_id", i), "question": row["question_text"],
                               "answers": _ircot_answers(row), "data_source": "hotpotqa",
                               "supporting": supporting})
        else:
            raise ValueError(f"unknown schema {schema!r}; choose searchr1, verl, plain or ircot")
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{path}: a row does not follow the {schema!r} schema ({type(exc).__name__}: {exc})") from None
    return QADataset(name, split, _finish(name, split, parsed), corpus=corpus, path=path)


def load_dataset(name: str = "hotpotqa", split: str = "dev500", *, data_dir: str | os.PathLike | None = None,
                 path: str | os.PathLike | None = None, data_sources: Sequence[str] | None = None) -> QADataset:
    """Load a dataset by registry name and split (or from ``path``), optionally keeping some data sources."""
    if path is None:
        path = resolve_dataset_file(name, split, data_dir)
        schema = DATASETS.get(name, {}).get(split)
        dataset = load_qa_file(path, name=name, split=split, schema=schema.schema if schema else None)
    else:
        dataset = load_qa_file(path, name=name, split=split)
    if data_sources is not None:
        wanted = set(data_sources)
        dataset.examples = [example for example in dataset.examples if example.data_source in wanted]
    return dataset
