"""Search-augmented QA environments (paper App. B.1) on the Search-R1 protocol.

Each episode is one question. An action is one model turn holding ``<search>query</search>`` or
``<answer>text</answer>`` (with any ``<think>`` reasoning); a search returns the top-k documents in
Search-R1's ``<information>`` block, an answer ends the episode with reward 1 on an exact match against any
golden answer (0 otherwise), and a malformed turn is an invalid action (-0.01). At most ``max_steps`` (4) turns.

Anchor key (``state_key``): the question plus the *set* of document ids retrieved so far, so two rollouts that
issued different queries but saw the same evidence share an anchor. Canonical action: ``search[<normalised
query>]`` or ``answer[<normalised answer>]``. The admissible "actions" are the two open-ended templates.

- ``SearchQAEnv`` (``ecpo/SearchQA-v0``): real datasets (``datasets.py``) over bm25s, Lucene or a Search-R1
  retrieval server.
- ``SearchQAGenEnv`` (``ecpo/SearchQAGen-v0``): the generated knowledge world of ``world.py``, indexed in memory.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ecpo_gym.canonical import INVALID_ACTION, normalize_text
from ecpo_gym.core import MAX_STEPS, TaskStart, TextAgentEnv, Transition, UnknownTaskError
from ecpo_gym.families import declared_max_steps
from ecpo_gym.kwargs import check_choice, check_int, check_real, shown
from ecpo_gym.searchqa.answers import exact_match, normalize_answer, token_f1
from ecpo_gym.searchqa.corpus import Corpus, DataNotFoundError
from ecpo_gym.searchqa.datasets import QAExample, load_dataset
from ecpo_gym.searchqa.protocol import (
    ACTION_TEMPLATES,
    INVALID_TURN_FEEDBACK,
    ParsedTurn,
    format_documents,
    information_block,
    parse_turn,
)
from ecpo_gym.searchqa.retrievers import BM25sRetriever, Retriever, make_retriever
from ecpo_gym.searchqa.world import generate_world, world_corpus, world_questions

MAX_TOPK = 1000
WORLD_SIZE_KEYS = ("n_countries", "n_cities", "n_rivers", "n_companies", "n_people")
MAX_WORLD_ENTITIES = 10_000  # per kind; the generated world and its questions are built when the env is made


def check_episode_kwargs(kwargs: dict[str, Any]) -> None:
    """The episode arguments among ``kwargs``, checked as :class:`SearchQABaseEnv` will check them."""
    for name, (low, high) in {"topk": (1, MAX_TOPK), "max_steps": (1, MAX_STEPS), "max_query_chars": (1, None)}.items():
        if name in kwargs:
            check_int(name, kwargs[name], low, high)
    for name in ("reward_success", "reward_failure", "reward_invalid"):
        if name in kwargs:
            check_real(name, kwargs[name])


def search_action_key(query: str) -> str:
    """Canonical key of a search: the normalised query text."""
    return f"search[{normalize_text(query)}]"


def answer_action_key(answer: str) -> str:
    """Canonical key of an answer: the EM-normalised answer (answers that EM-match share a key)."""
    return f"answer[{normalize_answer(answer)}]"


class SearchQABaseEnv(TextAgentEnv):
    """The Search-R1 episode over a list of examples and a retriever (shared by both registered envs)."""

    invalid_feedback = INVALID_TURN_FEEDBACK

    def __init__(
        self,
        examples: Sequence[QAExample],
        retriever: Retriever,
        *,
        topk: int = 3,
        max_steps: int = declared_max_steps("ecpo/SearchQA-v0"),
        reward_success: float = 1.0,
        reward_failure: float = 0.0,
        reward_invalid: float = -0.01,
        max_query_chars: int = 1000,
        render_mode: str | None = None,
        owns_retriever: bool = True,
    ) -> None:
        topk = check_int("topk", topk, 1, MAX_TOPK)
        max_steps = check_int("max_steps", max_steps, 1, MAX_STEPS)
        max_query_chars = check_int("max_query_chars", max_query_chars, 1)
        super().__init__(max_steps=max_steps, reward_success=reward_success, reward_failure=reward_failure,
                         reward_invalid=reward_invalid, render_mode=render_mode)
        self.examples = {example.task_id: example for example in examples}
        self._task_ids = list(self.examples)
        self.retriever = retriever
        self.owns_retriever = bool(owns_retriever)  # close() releases only a retriever this env built
        self.topk = int(topk)
        self.max_query_chars = int(max_query_chars)
        self.current_example: QAExample | None = None
        self.retrieved_doc_ids: set[str] = set()
        self.queries: list[str] = []
        self._em = self._f1 = 0.0
        self._invalid_reason = ""

    # ------------------------------------------------------------------ TextAgentEnv hooks
    @property
    def task_ids(self) -> list[str]:
        return self._task_ids

    def _resolve_task_id(self, task_id: str) -> str:
        if task_id not in self.examples:
            raise UnknownTaskError(f"unknown task_id {shown(task_id)} ({len(self._task_ids)} tasks, e.g. "
                                   f"{self._task_ids[:2]})")
        return task_id

    def _load_task(self, task_id: str) -> TaskStart:
        example = self.examples[task_id]
        self.current_example = example
        self.retrieved_doc_ids = set()
        self.queries = []
        self._em = self._f1 = 0.0
        self._invalid_reason = ""
        return TaskStart(observation=example.question, task=example.question, task_type=self._task_type(example))

    def _task_type(self, example: QAExample) -> str:
        return example.data_source

    def _admissible_actions(self) -> list[str]:
        return list(ACTION_TEMPLATES)

    def _state_key(self) -> str:
        assert self.current_example is not None
        docs = ",".join(sorted(self.retrieved_doc_ids))
        return f"question[{normalize_text(self.current_example.question)}] docs[{docs}]"

    def parse_action(self, action: Any) -> tuple[str, Any]:
        turn = parse_turn(action)
        self._invalid_reason = turn.reason
        if not turn.is_valid:
            return INVALID_ACTION, None
        if turn.kind == "search":
            query = turn.content[: self.max_query_chars]
            return search_action_key(query), ParsedTurn("search", query)
        return answer_action_key(turn.content), turn

    def _execute(self, command: ParsedTurn) -> Transition:
        assert self.current_example is not None
        if command.kind == "search":
            hits = self.retriever.search(command.content, self.topk)
            self.queries.append(command.content)
            doc_ids = [hit.document.id for hit in hits]
            self.retrieved_doc_ids.update(doc_ids)
            observation = information_block(format_documents(hit.document.contents for hit in hits))
            return Transition(observation, metrics={"query": command.content, "doc_ids": doc_ids})
        golden = self.current_example.golden_answers
        self._em = exact_match(command.content, golden)
        self._f1 = token_f1(command.content, golden)
        return Transition("", terminated=True, won=self._em >= 1.0, metrics={"answer": command.content})

    def _invalid_observation(self) -> str:
        return self.invalid_feedback

    def _release(self) -> None:
        if self.owns_retriever:
            self.retriever.close()

    def _info(self) -> dict[str, Any]:
        info = super()._info()
        assert self.current_example is not None
        info.update(em=self._em, f1=self._f1, num_searches=len(self.queries),
                    data_source=self.current_example.data_source,
                    retrieved_doc_ids=sorted(self.retrieved_doc_ids))
        if self._invalid_reason:
            info["invalid_reason"] = self._invalid_reason
        return info


class SearchQAEnv(SearchQABaseEnv):
    """``ecpo/SearchQA-v0``: a real QA dataset over a real retriever.

    ``dataset``/``split`` pick a registered file under ``$ECPO_DATA_DIR/searchqa`` (default
    ``hotpotqa``/``dev500``); ``data_path`` loads any QA file instead, named after its content unless
    ``dataset``/``split`` are given, its schema detected unless ``schema`` is given (``datasets.SCHEMAS``).
    The corpus is ``corpus`` (a jsonl path or a :class:`Corpus`), else the dataset's own paragraphs
    (HotpotQA ``dev500``, HotpotQA distractor files). ``retriever`` is ``"bm25s"`` (default), ``"lucene"``, ``"http"`` (with
    ``retriever_url``, e.g. a dense E5 index behind Search-R1's server) or a :class:`Retriever` instance (which
    the caller owns: ``close()`` leaves it open for the other environments sharing it).
    """

    def __init__(
        self,
        dataset: str | None = None,
        split: str | None = None,
        *,
        data_dir: str | os.PathLike | None = None,
        data_path: str | os.PathLike | None = None,
        schema: str | None = None,
        data_sources: Sequence[str] | None = None,
        corpus: str | os.PathLike | Corpus | None = None,
        retriever: str | Retriever = "bm25s",
        retriever_url: str | None = None,
        retriever_kwargs: dict[str, Any] | None = None,
        cache_dir: str | os.PathLike | None = None,
        **episode_kwargs: Any,
    ) -> None:
        check_episode_kwargs(episode_kwargs)  # before the dataset and the retriever load
        qa = load_dataset(dataset, split, data_dir=data_dir, path=data_path, data_sources=data_sources,
                          schema=schema)
        if not qa.examples:
            raise ValueError(f"dataset {qa.name}/{qa.split} has no examples (data_sources={shown(data_sources)})")
        self.dataset = qa
        if isinstance(retriever, Retriever):
            backend = retriever
        elif retriever == "http":
            kwargs = dict(retriever_kwargs or {})
            if retriever_url is not None:
                kwargs["url"] = retriever_url
            backend = make_retriever("http", **kwargs)
        else:
            if isinstance(corpus, Corpus):
                documents = corpus
            elif corpus is not None:
                documents = Corpus.from_jsonl(corpus)
            elif qa.corpus is not None:
                documents = qa.corpus
            else:
                raise DataNotFoundError(
                    f"dataset {qa.name}/{qa.split} ({qa.path}, {shown(qa.schema)} schema) ships no paragraphs, so "
                    f"the {retriever} retriever needs corpus=<path to a corpus jsonl> (Search-R1's wiki-18: "
                    "huggingface.co/datasets/PeterJinGo/wiki-18-corpus), or use retriever='http' with "
                    "retriever_url=<a Search-R1 retrieval server>. Files that carry their paragraphs need "
                    "neither: the registered hotpotqa/dev500 (IRCoT) and HotpotQA's own distractor files."
                )
            backend = make_retriever(retriever, documents, cache_dir=cache_dir, **(retriever_kwargs or {}))
        self.corpus = backend.corpus if hasattr(backend, "corpus") else None
        episode_kwargs.setdefault("owns_retriever", backend is not retriever)
        super().__init__(qa.examples, backend, **episode_kwargs)


class SearchQAGenEnv(SearchQABaseEnv):
    """``ecpo/SearchQAGen-v0``: questions over a generated fictional world (see ``world.py``); no download.

    ``world_seed`` fixes the world, its corpus and its questions (task ids ``gen<seed>/<kind>/<n>``);
    ``world_size`` overrides the entity counts of :func:`generate_world`.
    """

    def __init__(self, world_seed: int = 0, *, world_size: dict[str, int] | None = None, **episode_kwargs: Any):
        check_int("world_seed", world_seed, 0)
        if world_size is not None and not isinstance(world_size, dict):
            raise ValueError(f"world_size={shown(world_size)} is invalid: it must be a mapping such as {{n_people: 30}}")
        for name, count in (world_size or {}).items():
            check_choice("world_size key", name, WORLD_SIZE_KEYS)
            check_int(f"world_size.{name}", count, 1, MAX_WORLD_ENTITIES)  # the world is generated here
        self.world = generate_world(world_seed, **(world_size or {}))
        corpus = world_corpus(self.world)
        self.corpus = corpus
        title_to_id = {document.title: document.id for document in corpus}
        examples = []
        counts: dict[str, int] = {}
        for question in world_questions(self.world):
            number = counts.get(question.kind, 0)
            counts[question.kind] = number + 1
            examples.append(QAExample(
                task_id=f"gen{world_seed}/{question.kind}/{number}", question=question.question,
                golden_answers=question.answers, data_source="generated",
                supporting_doc_ids=tuple(title_to_id[title] for title in question.supporting_titles),
                metadata={"kind": question.kind, "hops": question.hops},
            ))
        super().__init__(examples, BM25sRetriever(corpus, cache=False), **episode_kwargs)

    def _task_type(self, example: QAExample) -> str:
        return "two_hop" if example.metadata.get("hops", 1) > 1 else "single_hop"
