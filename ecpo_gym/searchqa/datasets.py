"""QA datasets for the search environment: the file schemas people publish, a name/split registry, stable ids.

A file's container and schema are read from its content (:mod:`ecpo_gym.searchqa.schemas`: Search-R1's parquet,
verl-style rows, plain question/answers objects, IRCoT and HotpotQA files, the last two with the paragraphs that
become the offline retrieval corpus, ``QADataset.corpus``).

A task id is ``<name>/<split>/<the row's own id>`` (``#k`` appended to the k-th repeat of an id), so ids do
not depend on load order or filters. A registered dataset is named by its registry name; a file loaded by path
by its rows' ``data_source`` (when they share one) or else its file name.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ecpo_gym.kwargs import shown
from ecpo_gym.searchqa.corpus import Corpus, DataNotFoundError
from ecpo_gym.searchqa.schemas import SCHEMAS, detect_schema, parse_rows, read_rows, schema_of_row

_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]+")
_SPLIT_WORDS = {"train": "train", "dev": "dev", "validation": "dev", "val": "dev", "test": "test"}
_HUB_NAMES = {"hotpot_qa": "hotpotqa", "nq_open": "nq", "2wikimultihop": "2wikimultihopqa", "ambig_qa": "ambigqa"}

HOW_TO_OBTAIN = (
    "Set ECPO_DATA_DIR to the benchmark data folder (it holds searchqa/…), or pass data_dir=<that searchqa "
    "folder> (or data_path=<one QA file>). Search-R1's parquet files come from its data scripts "
    "(github.com/PeterGriffinJin/Search-R1, scripts/data_process/qa_search_test_merge.py) or "
    "huggingface.co/datasets/PeterJinGo/nq_hotpotqa_train."
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
    schema: str = ""

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
DEFAULT_DATASET = ("hotpotqa", "dev500")


def searchqa_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """``data_dir`` (the search-QA folder, or the benchmark data folder holding ``searchqa/``), else
    ``$ECPO_DATA_DIR/searchqa``; a clear error when neither is available."""
    if data_dir is not None:
        folder = Path(data_dir)
        return folder / "searchqa" if (folder / "searchqa").is_dir() else folder
    root = os.environ.get("ECPO_DATA_DIR")
    if not root:
        raise DataNotFoundError(f"ECPO_DATA_DIR is not set, so the search-QA data folder is unknown. {HOW_TO_OBTAIN}")
    return Path(root) / "searchqa"


def _missing(path: Path) -> DataNotFoundError:
    return DataNotFoundError(f"search-QA data file not found: {path}. {HOW_TO_OBTAIN}")


def resolve_dataset_file(name: str, split: str, data_dir: str | os.PathLike | None = None) -> Path:
    """The file of ``name``/``split``; raises :class:`DataNotFoundError` naming the path."""
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
        raise ValueError(f"dataset {shown(name)} has splits {sorted(known)}, not {shown(split)}")
    raise _missing(candidates[0])


def source_name(data_source: str) -> str:
    """A dataset name from a ``data_source`` value: verl's ``searchR1_`` tag and a Hub owner dropped, Hub
    names of the paper's sets mapped to their short names (``searchR1_2wikimultihopqa`` -> ``2wikimultihopqa``,
    ``hotpotqa/hotpot_qa`` -> ``hotpotqa``, ``google-research-datasets/nq_open`` -> ``nq``)."""
    name = re.sub(r"^searchr1_", "", str(data_source).strip(), flags=re.IGNORECASE).rsplit("/", 1)[-1]
    name = _UNSAFE_NAME.sub("_", name).strip("_")
    return _HUB_NAMES.get(name.lower(), name)


def _file_name(path: Path, parsed: Sequence[dict[str, Any]]) -> str:
    sources = {source_name(row.get("data_source") or "") for row in parsed}
    if len(sources) == 1 and "" not in sources:
        return sources.pop()
    return _UNSAFE_NAME.sub("_", path.name.split(".", 1)[0]).strip("_") or "qa"


def _file_split(path: Path) -> str:
    for word in re.split(r"[^a-z]+", path.name.split(".", 1)[0].lower()):
        if word in _SPLIT_WORDS:
            return _SPLIT_WORDS[word]
    return "test"


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
            metadata=dict(row.get("metadata") or {}),
        ))
    return examples


def load_qa_file(path: str | os.PathLike, *, name: str | None = None, split: str | None = None,
                 schema: str | None = None) -> QADataset:
    """Load one QA file of any supported container and schema (detected from its content when ``schema`` is
    None). ``name`` defaults to the rows' shared ``data_source`` (else the file name); ``split`` to the
    split word in the file name (``train``/``dev``/``test``), else ``test``."""
    path = Path(path)
    if not path.is_file():
        raise _missing(path)
    rows = read_rows(path)
    if schema is not None and schema not in SCHEMAS:
        raise ValueError(f"unknown schema {shown(schema)}; choose one of {', '.join(SCHEMAS)}")
    schema = schema or detect_schema(path, rows)
    try:
        parsed, corpus = parse_rows(schema, rows, path)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        found = schema_of_row(rows[0]) if rows else None
        hint = f"; its rows look like {shown(found)}" if found and found != schema else ""
        raise ValueError(f"{path}: a row does not follow the {shown(schema)} schema "
                         f"({type(exc).__name__}: {exc}){hint}") from None
    for position, row in enumerate(parsed):
        if not row["answers"] or not str(row["question"]).strip():
            missing = "golden answers" if not row["answers"] else "question"
            raise ValueError(f"{path}: row {position} ({shown(schema)} schema) has no {missing}")
    name = name or _file_name(path, parsed)
    split = split or _file_split(path)
    return QADataset(name, split, _finish(name, split, parsed), corpus=corpus, path=path, schema=schema)


def load_dataset(name: str | None = None, split: str | None = None, *, data_dir: str | os.PathLike | None = None,
                 path: str | os.PathLike | None = None, data_sources: Sequence[str] | None = None,
                 schema: str | None = None) -> QADataset:
    """Load a dataset by registry name and split (default ``hotpotqa``/``dev500``), or the file at ``path``
    (named after its content unless ``name`` is given), optionally keeping only some data sources."""
    if path is None:
        name = name or DEFAULT_DATASET[0]
        split = split or (DEFAULT_DATASET[1] if name == DEFAULT_DATASET[0] else "test")
        file = resolve_dataset_file(name, split, data_dir)
        registered = DATASETS.get(name, {}).get(split)
        schema = schema or (registered.schema if registered else None)
        dataset = load_qa_file(file, name=name, split=split, schema=schema)
    else:
        dataset = load_qa_file(path, name=name, split=split, schema=schema)
    if data_sources is not None:
        wanted = set(data_sources)
        dataset.examples = [example for example in dataset.examples if example.data_source in wanted]
    return dataset
