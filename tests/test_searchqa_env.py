"""Search-QA environments: episode protocol, rewards, anchor keys, the oracle, datasets and loaders."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ecpo_gym  # noqa: F401  (registers the ids)
from ecpo_gym.canonical import INVALID_ACTION
from ecpo_gym.searchqa.corpus import DataNotFoundError
from ecpo_gym.searchqa.datasets import load_dataset, load_qa_file
from ecpo_gym.searchqa.env import SearchQAEnv, SearchQAGenEnv
from ecpo_gym.searchqa.expert import GoldEvidenceOracle, run_oracle_episode


@pytest.fixture(scope="module")
def gen_env():
    env = gym.make("ecpo/SearchQAGen-v0")
    yield env
    env.close()


@pytest.fixture(scope="module")
def searchqa_dir(data_dir) -> Path:
    return data_dir / "searchqa"


# ---------------------------------------------------------------------- generated world
def test_oracle_scores_one_on_every_generated_question(gen_env):
    env = gen_env.unwrapped
    assert len(env.task_ids) > 300
    two_hop = needed_second_search = 0
    for task_id in env.task_ids:
        total, info = run_oracle_episode(gen_env, task_id)
        example = env.current_example
        assert total == 1.0 and info["won"] and info["em"] == 1.0 and info["f1"] == 1.0, task_id
        # the oracle's searches found every supporting paragraph before it answered
        assert set(example.supporting_doc_ids) <= set(info["retrieved_doc_ids"]), task_id
        assert 1 <= info["num_searches"] <= example.metadata["hops"]
        two_hop += example.metadata["hops"] == 2
        needed_second_search += info["num_searches"] == 2
    # a two-hop question's own words rarely surface the bridge paragraph: the second search is needed
    assert two_hop > 100 and needed_second_search >= 0.9 * two_hop


def test_generated_answers_need_the_evidence(gen_env):
    env = gen_env.unwrapped
    for example in env.examples.values():
        corpus_texts = [env.corpus.get(doc_id).contents for doc_id in example.supporting_doc_ids]
        assert any(answer in corpus_texts[-1] for answer in example.golden_answers)  # last hop holds it
        assert not any(answer.lower() in example.question.lower() for answer in example.golden_answers)
    assert len({e.question for e in env.examples.values()}) == len(env.examples)


def test_generated_world_is_deterministic_per_seed():
    a, b, c = SearchQAGenEnv(world_seed=3), SearchQAGenEnv(world_seed=3), SearchQAGenEnv(world_seed=4)
    assert a.task_ids == b.task_ids
    assert [d.contents for d in a.corpus] == [d.contents for d in b.corpus]
    assert [d.contents for d in a.corpus] != [d.contents for d in c.corpus]
    obs_a, info_a = a.reset(seed=11)
    obs_b, info_b = b.reset(seed=11)
    assert (obs_a, info_a["task_id"]) == (obs_b, info_b["task_id"])


def test_episode_rewards_keys_and_info(gen_env):
    env = gen_env.unwrapped
    task_id = next(t for t in env.task_ids if "/person_birth_country/" in t)
    obs, info = gen_env.reset(options={"task_id": task_id})
    question = env.current_example.question
    assert obs == question and info["task_type"] == "two_hop" and info["data_source"] == "generated"
    assert info["admissible_actions"] == ["<search>{query}</search>", "<answer>{answer}</answer>"]
    assert info["state_key"] == f"question[{question.lower().rstrip('?')}] docs[]"
    assert info["num_searches"] == 0 and info["em"] == 0.0

    obs, reward, terminated, truncated, info = gen_env.step("<search>no tags here")
    assert reward == pytest.approx(-0.01) and not terminated and not truncated
    assert info["action_key"] == INVALID_ACTION and not info["is_action_valid"] and "invalid_reason" in info
    assert "<search>" in obs and info["state_key"].endswith("docs[]")

    obs, reward, terminated, truncated, info = gen_env.step(f"<think>look it up</think><search>  {question} </search>")
    assert reward == 0.0 and not terminated
    assert info["action_key"] == f"search[{question.lower().rstrip('?')}]"
    assert obs.startswith("\n\n<information>Doc 1(Title: ") and obs.endswith("</information>\n\n")
    assert len(info["doc_ids"]) == 3 and info["num_searches"] == 1
    assert info["state_key"].endswith(f"docs[{','.join(sorted(info['doc_ids']))}]")

    obs, reward, terminated, truncated, info = gen_env.step("<answer>The Nowhere-Land!</answer>")
    assert terminated and not truncated and reward == 0.0 and not info["won"] and info["em"] == 0.0
    assert info["action_key"] == "answer[nowhereland]" and obs == ""
    # stepping an ended episode is harmless
    _, reward, _, _, info = gen_env.step("<answer>x</answer>")
    assert reward == 0.0 and not info["is_action_valid"]


def test_truncation_after_four_turns(gen_env):
    gen_env.reset(seed=0)
    results = [gen_env.step(f"<search>query {i}</search>") for i in range(4)]
    assert [r[3] for r in results] == [False, False, False, True]
    assert not any(r[2] for r in results) and results[-1][4]["num_searches"] == 4


def test_state_key_is_the_set_of_retrieved_documents(gen_env):
    """Different queries that surface the same evidence share an anchor; order does not matter."""
    env = gen_env.unwrapped
    task_id = next(t for t in env.task_ids if "/person_employer_city/" in t)
    example = env.examples[task_id]
    person, company = (env.corpus.get(i).title for i in example.supporting_doc_ids)

    def key_after(queries):
        gen_env.reset(options={"task_id": task_id})
        info = {}
        for query in queries:
            info = gen_env.step(f"<search>{query}</search>")[4]
        return info["state_key"], info["action_key"]

    k1, _ = key_after([person, company])
    k2, _ = key_after([company, person])
    assert k1 == k2
    k3, action = key_after([f"{person.upper()}!!", company])
    assert k3 == k1 and action == f"search[{company.lower()}]"
    k4, _ = key_after([person])
    assert k4 != k1


def test_answer_keys_merge_em_equivalent_answers(gen_env):
    env = gen_env.unwrapped
    assert env.parse_action("<answer>The  Paris.</answer>")[0] == env.parse_action("<answer>paris</answer>")[0]
    assert env.parse_action("<search>paris</search>")[0] != env.parse_action("<answer>paris</answer>")[0]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(actions=st.lists(st.one_of(
    st.text(max_size=60),
    st.builds(lambda s: f"<search>{s}</search>", st.text(max_size=40)),
    st.builds(lambda s: f"<answer>{s}</answer>", st.text(max_size=20)),
    st.sampled_from(["<search>", "<answer>x</answer><search>y</search>", "\x00", "<think>", "</answer>"]),
), min_size=1, max_size=6), seed=st.integers(0, 10_000))
def test_fuzzed_actions_never_raise(gen_env, actions, seed):
    obs, info = gen_env.reset(seed=seed)
    for action in actions:
        obs, reward, terminated, truncated, info = gen_env.step(action)
        assert isinstance(obs, str) and gen_env.observation_space.contains(obs)
        assert reward in (1.0, 0.0, -0.01)
        assert info["is_action_valid"] == (info["action_key"] != INVALID_ACTION)
        if terminated or truncated:
            break


def test_gym_check_env():
    check_env(SearchQAGenEnv(world_seed=1), skip_render_check=True)


# ---------------------------------------------------------------------- datasets and SearchQA-v0
def test_plain_jsonl_loader_and_stable_ids(tmp_path):
    path = tmp_path / "mine_test.jsonl"
    rows = [{"question": "Who wrote Hamlet?", "answers": ["Shakespeare", "William Shakespeare"]},
            {"id": "q7", "question": "Capital of France?", "answers": "Paris", "data_source": "toy"},
            {"id": "q7", "question": "Repeat id?", "answers": ["x"]}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    data = load_qa_file(path, name="mine", split="test")
    assert data.task_ids == ["mine/test/0", "mine/test/q7", "mine/test/q7#1"]
    assert data.examples[0].golden_answers == ("Shakespeare", "William Shakespeare")
    assert data.examples[1].golden_answers == ("Paris",) and data.examples[1].data_source == "toy"
    assert load_dataset("mine", "test", data_dir=tmp_path).task_ids == data.task_ids


def test_missing_data_gives_one_clear_error(tmp_path):
    with pytest.raises(DataNotFoundError) as excinfo:
        load_dataset("nq", "test", data_dir=tmp_path)
    message = str(excinfo.value)
    assert str(tmp_path / "nq_search_test.parquet") in message and "ECPO_DATA_DIR" in message
    with pytest.raises(DataNotFoundError, match="triviaqa"):
        SearchQAEnv("triviaqa", "test", data_dir=tmp_path)


def test_registered_datasets_load_with_their_schemas(searchqa_dir):
    nq = load_dataset("nq", "test", data_dir=searchqa_dir)
    assert len(nq) == 3610 and nq.task_ids[0] == "nq/test/test_0"
    assert nq.examples[0].golden_answers == ("Wilhelm Conrad Röntgen",) and nq.examples[0].data_source == "nq"
    assert "<search>" in nq.examples[0].prompt  # the Search-R1 prompt ships in the parquet
    nq_verl = load_dataset("nq_verl", "test", data_dir=searchqa_dir)
    assert len(nq_verl) == 3610
    assert nq_verl.examples[0].golden_answers == ("14 December 1972 UTC", "December 1972")  # never split on ", "
    hotpot = load_dataset("hotpotqa", "dev", data_dir=searchqa_dir)
    assert len(hotpot) == 7405 and hotpot.examples[0].golden_answers == ("yes",)
    dev500 = load_dataset("hotpotqa", "dev500", data_dir=searchqa_dir)
    assert len(dev500) == 500 and len(dev500.corpus) == 4858
    assert all(len(e.supporting_doc_ids) == 2 for e in dev500.examples)
    first = dev500.examples[0]
    assert first.golden_answers == ("Chief of Protocol",)
    assert {dev500.corpus.get(i).title for i in first.supporting_doc_ids} == {"Shirley Temple", "Kiss and Tell (1945 film)"}
    # the 500 IRCoT questions are in the verl file with the same answers
    by_question = {e.question: e.golden_answers for e in hotpot.examples}
    assert by_question[first.question] == first.golden_answers


def test_searchqa_env_on_hotpotqa_with_oracle(tmp_path, searchqa_dir):
    env = gym.make("ecpo/SearchQA-v0", data_dir=searchqa_dir, cache_dir=tmp_path)
    base = env.unwrapped
    assert len(base.task_ids) == 500
    wins, found, oracle = 0, 0, GoldEvidenceOracle(env)
    for task_id in base.task_ids[:40]:
        total, info = run_oracle_episode(env, task_id)
        wins += total == 1.0 and info["won"]
        found += set(base.current_example.supporting_doc_ids) <= set(info["retrieved_doc_ids"])
        assert info["data_source"] == "hotpotqa" and 1 <= info["num_searches"] <= 3
    assert wins == 40 and oracle.env is base
    assert found >= 36  # question + title searches surface both gold paragraphs for almost every question
    env.close()
    # the second environment reuses the cached index
    again = SearchQAEnv(data_dir=searchqa_dir, cache_dir=tmp_path)
    assert again.retriever.loaded_from_cache and again.owns_retriever
    again.close()


def test_dataset_without_corpus_asks_for_one(searchqa_dir):
    with pytest.raises(DataNotFoundError, match="wiki-18"):
        SearchQAEnv("nq", "test", data_dir=searchqa_dir)
