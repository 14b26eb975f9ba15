"""Search-QA question files in the formats people publish: container and schema read from content (issue #15)."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

import ecpo_gym  # noqa: F401  (registers the ids)
from ecpo_gym.searchqa.corpus import DataNotFoundError
from ecpo_gym.searchqa.datasets import HOW_TO_OBTAIN, load_qa_file

SEARCH_R1_TEMPLATE = ("Answer the given question. You must conduct reasoning inside <think> and </think> first "
                      "every time you get new information. ... For example, <answer> Beijing </answer>. "
                      "Question: {question}\n")

VERL_ROWS = [
    {"data_source": "searchR1_2wikimultihopqa",
     "prompt": [{"role": "system", "content": "You are a helpful and harmless assistant."},
                {"role": "user", "content": SEARCH_R1_TEMPLATE.format(question="Who was born first, Ada or Bo?")}],
     "ability": "fact-reasoning",
     "reward_model": {"style": "rule", "ground_truth": {"target": ["Ada", "Ada Lovelace"]}},
     "extra_info": {"index": 7, "split": "test"}},
    {"data_source": "searchR1_2wikimultihopqa",
     "prompt": [{"role": "user", "content": SEARCH_R1_TEMPLATE.format(question="Where did Cy die?")}],
     "ability": "fact-reasoning",
     "reward_model": {"style": "rule", "ground_truth": {"target": ["Paris, France"]}},
     "extra_info": {"index": 8, "split": "test"}},
]

HOTPOT_DISTRACTOR = [
    {"_id": "5a8b57f25542995d1e6f1371", "question": "Were Scott Derrickson and Ed Wood of the same nationality?",
     "answer": "yes", "type": "comparison", "level": "hard",
     "supporting_facts": [["Scott Derrickson", 0], ["Ed Wood", 0]],
     "context": [["Ed Wood (film)", ["Ed Wood is a 1994 American biographical film.", " It stars Johnny Depp."]],
                 ["Scott Derrickson", ["Scott Derrickson (born July 16, 1966) is an American director.",
                                       " He lives in Los Angeles."]],
                 ["Ed Wood", ["Edward Davis Wood Jr. (1924 - 1978) was an American filmmaker."]]]},
    {"_id": "5a8c7595554299585d9e36b6", "question": "Which studio released the film Kiss and Tell?",
     "answer": "Columbia Pictures", "type": "bridge", "level": "medium",
     "supporting_facts": [["Kiss and Tell (1945 film)", 0]],
     "context": [["Kiss and Tell (1945 film)", ["Kiss and Tell is a 1945 comedy film released by Columbia Pictures."]],
                 ["Ed Wood", ["Edward Davis Wood Jr. (1924 - 1978) was an American filmmaker."]]]},
]


def write_parquet(rows, path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def write_corpus(path):
    docs = [{"id": "d0", "contents": '"Ada Lovelace"\nAda was born in 1815.'},
            {"id": "d1", "contents": '"Cy"\nCy died in Paris, France.'}]
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return path


def test_verl_parquet_is_read_by_its_columns(tmp_path):
    data = load_qa_file(write_parquet(VERL_ROWS, tmp_path / "test.parquet"))
    assert data.schema == "verl"
    assert data.task_ids == ["2wikimultihopqa/test/7", "2wikimultihopqa/test/8"]
    first, second = data.examples
    assert first.question == "Who was born first, Ada or Bo?"  # the question inside the Search-R1 template
    assert first.golden_answers == ("Ada", "Ada Lovelace") and second.golden_answers == ("Paris, France",)


def test_container_comes_from_content_not_extension(tmp_path):
    parquet_named_jsonl = write_parquet(VERL_ROWS, tmp_path / "wiki.jsonl")
    assert load_qa_file(parquet_named_jsonl).schema == "verl"
    jsonl_named_parquet = tmp_path / "plain.parquet"
    jsonl_named_parquet.write_text(json.dumps({"question": "Q?", "answer": "A"}) + "\n")
    assert load_qa_file(jsonl_named_parquet).examples[0].golden_answers == ("A",)


def test_env_takes_an_explicit_schema(tmp_path):
    path = write_parquet(VERL_ROWS, tmp_path / "test.parquet")
    env = gym.make("ecpo/SearchQA-v0", data_path=path, schema="verl", corpus=write_corpus(tmp_path / "c.jsonl"),
                   cache_dir=tmp_path / "cache")
    obs, _ = env.reset(options={"task_id": "2wikimultihopqa/test/8"})
    assert obs == "Where did Cy die?"
    assert env.step("<answer>Paris, France</answer>")[4]["won"]
    env.close()
    with pytest.raises(ValueError, match="'plain' schema"):
        load_qa_file(path, schema="plain")
    with pytest.raises(ValueError, match="unknown schema"):
        load_qa_file(path, schema="nonsense")


def test_json_array_of_question_answer_objects(tmp_path):
    path = tmp_path / "2wiki_dev.json"
    path.write_text(json.dumps([{"question": "Who?", "answer": "Me"}, {"question": "What?", "answer": ["It"]}]))
    data = load_qa_file(path)
    assert data.schema == "plain" and data.task_ids == ["2wiki_dev/dev/0", "2wiki_dev/dev/1"]
    assert [e.golden_answers for e in data.examples] == [("Me",), ("It",)]


def test_rows_that_are_not_objects_get_a_clear_error(tmp_path):
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(["just a string"]))
    with pytest.raises(ValueError, match="row 0 is a str"):
        load_qa_file(path)
    path.write_text(json.dumps([{"a": {"b": 1}}, {"c": {"d": 2}}]))
    with pytest.raises(ValueError, match="unknown QA schema"):
        load_qa_file(path)


def test_hotpotqa_distractor_file_loads_with_its_paragraphs(tmp_path):
    path = tmp_path / "hotpot_dev_distractor_v1.json"
    path.write_text(json.dumps(HOTPOT_DISTRACTOR))
    data = load_qa_file(path)
    assert data.schema == "hotpotqa" and data.name == "hotpotqa" and data.split == "dev"
    assert data.task_ids == ["hotpotqa/dev/5a8b57f25542995d1e6f1371", "hotpotqa/dev/5a8c7595554299585d9e36b6"]
    assert len(data.corpus) == 4  # "Ed Wood" appears in both questions' contexts, indexed once
    first = data.examples[0]
    assert first.metadata == {"type": "comparison", "level": "hard"}
    assert {data.corpus.get(i).title for i in first.supporting_doc_ids} == {"Scott Derrickson", "Ed Wood"}
    assert data.corpus.get(first.supporting_doc_ids[0]).text.startswith("Scott Derrickson (born July 16, 1966)")


def test_searchqa_env_plays_a_distractor_file_with_no_other_corpus(tmp_path):
    path = tmp_path / "hotpot_dev_distractor_v1.json"
    path.write_text(json.dumps(HOTPOT_DISTRACTOR))
    env = gym.make("ecpo/SearchQA-v0", data_path=path, cache_dir=tmp_path / "cache")
    env.reset(options={"task_id": "hotpotqa/dev/5a8c7595554299585d9e36b6"})
    obs, _, _, _, info = env.step("<search>Kiss and Tell 1945 film</search>")
    assert "Columbia Pictures" in obs and info["is_action_valid"]
    assert env.step("<answer>Columbia Pictures</answer>")[1] == 1.0
    env.close()


def test_a_data_path_file_is_named_after_its_content(tmp_path):
    path = tmp_path / "bamboogle_test.jsonl"
    rows = [{"data_source": "bamboogle", "prompt": [{"role": "user", "content": "Who?"}],
             "reward_model": {"ground_truth": "Me"}, "extra_info": {"answer": "Me", "index": 0, "question": "Who?"}}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert load_qa_file(path).task_ids == ["bamboogle/test/0"]
    unnamed = tmp_path / "my_questions.jsonl"
    unnamed.write_text(json.dumps({"question": "Who?", "answers": ["Me"]}) + "\n")
    assert load_qa_file(unnamed).task_ids == ["my_questions/test/0"]
    # the env does not slip its default dataset name onto a file's tasks
    env = gym.make("ecpo/SearchQA-v0", data_path=path, corpus=write_corpus(tmp_path / "c.jsonl"),
                   cache_dir=tmp_path / "cache")
    assert list(env.unwrapped.task_ids) == ["bamboogle/test/0"]
    env.close()


def test_no_paragraphs_error_names_the_file_and_does_not_contradict_itself(tmp_path):
    path = tmp_path / "bamboogle_test.jsonl"
    path.write_text(json.dumps({"data_source": "bamboogle", "question": "Who?", "answer": "Me"}) + "\n")
    with pytest.raises(DataNotFoundError) as excinfo:
        gym.make("ecpo/SearchQA-v0", data_path=path)
    message = str(excinfo.value)
    assert "bamboogle/test" in message and str(path) in message and "corpus=" in message
    assert "hotpotqa/dev500 ships" not in message


def test_how_to_obtain_hint_reads_cleanly():
    assert "/path_to=" not in HOW_TO_OBTAIN and "data_dir=<" in HOW_TO_OBTAIN


def test_data_dir_may_be_the_benchmark_data_folder(data_dir):
    from ecpo_gym.searchqa.datasets import load_dataset

    root = data_dir
    assert load_dataset("nq", "test", data_dir=root).task_ids == load_dataset("nq", "test",
                                                                              data_dir=root / "searchqa").task_ids
