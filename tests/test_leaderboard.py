"""Leaderboard evaluation: expert/random agents guard the environments' success logic end to end, the tables
equal the aggregation of the per-task records, an interrupted run resumes without losing or repeating
episodes (the chat agents: ``test_leaderboard_chat.py``)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ecpo_train.evaluation.agents import Agent, RandomAgent
from ecpo_train.evaluation.build import build_agent, parse_overrides
from ecpo_train.evaluation.command import run_leaderboard
from ecpo_train.evaluation.manifests import (
    TaskGroup,
    TaskManifest,
    available_manifests,
    benchmark_of,
    load_manifest,
    parse_manifest,
)
from ecpo_train.evaluation.options import LeaderboardOptions
from ecpo_train.evaluation.results import append_record, load_records
from ecpo_train.evaluation.runner import EvalSettings, evaluate
from ecpo_train.evaluation.tables import ALFWORLD_COLUMNS, aggregate, format_cell, markdown_tables

FAST = EvalSettings(seeds=[0], progress=False)
SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _manifest(name: str, limit: int) -> TaskManifest:
    manifest = load_manifest(name)
    for group in manifest.groups:
        group.task_ids = group.task_ids[:limit]
    return manifest


# ------------------------------------------------------------------ manifests
def test_committed_manifests_are_fixed_and_valid():
    names = available_manifests()
    for expected in ("alfworld_gen", "alfworld_valid_seen", "webshop_gen", "webshop_test", "searchqa_gen", "searchqa"):
        assert expected in names
    for name in names:
        load_manifest(name)
    valid_seen = load_manifest("alfworld_valid_seen").groups[0].task_ids
    assert len(valid_seen) == 140 and valid_seen == sorted(valid_seen)
    assert all(t.endswith("/game.tw-pddl") for t in valid_seen)
    gen = load_manifest("alfworld_gen").groups[0].task_ids
    assert {t.split("/")[1] for t in gen[:6]} == set(ALFWORLD_COLUMNS[:-1])  # any prefix covers every subtask
    assert load_manifest("webshop_test").groups[0].task_ids == [f"goal_{i}" for i in range(500)]


@pytest.mark.parametrize(
    ("env_id", "benchmark"),
    [
        ("ecpo/ALFWorld-v0", "alfworld"),
        ("ecpo/ALFWorldGen-v0", "alfworld"),
        ("ecpo/WebShop-v0", "webshop"),
        ("ecpo/WebShopGen-v0", "webshop"),
        ("ecpo/SearchQA-v0", "searchqa"),
        ("ecpo/SearchQAGen-v0", "searchqa"),
        ("ecpo/DivergentAnchor-v0", "diagnostic"),  # declared by its EnvFamily (was "divergentanchor")
        ("ecpo/DivergentAnchorNoisy-v0", "diagnostic"),
        ("mylab/WebShopClone-v1", "webshopclone"),  # not an ECPO id: its own bare name, no family guessed
    ],
)
def test_benchmark_is_the_declared_family_benchmark(env_id, benchmark):
    assert benchmark_of(env_id) == benchmark


def test_bad_manifests_give_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="missing key"):
        parse_manifest({"name": "x"})
    with pytest.raises(ValueError, match="exactly one of"):
        parse_manifest({"name": "x", "env_id": "ecpo/ALFWorldGen-v0", "groups": {"g": {}}})
    with pytest.raises(ValueError, match="twice"):
        parse_manifest({"name": "x", "env_id": "e", "groups": {"g": {"task_ids": ["a", "a"]}}})
    with pytest.raises(FileNotFoundError, match="alfworld_gen"):
        load_manifest("no_such_manifest")
    assert parse_overrides(["max_steps=5", "split=test", "flag=true"]) == {"max_steps": 5, "split": "test",
                                                                           "flag": True}
    with pytest.raises(ValueError, match="key=value"):
        parse_overrides(["oops"])


def test_an_env_kwarg_given_twice_is_refused_not_the_last_one_taken():
    """``--env-kwarg depth=3 --env-kwarg depth=4`` evaluated depth 4 without a word; the bad pair is named."""
    with pytest.raises(ValueError, match="--env-kwarg 'depth' is given twice: give it once"):
        parse_overrides(["depth=3", "depth=4"])
    with pytest.raises(ValueError, match="--env-kwarg 'oops': expected key=value"):
        parse_overrides(["oops"])


@pytest.mark.parametrize("change, words", [
    ({"first": True}, "'first' must be a positive integer"),
    ({"env_kwargs": [["max_steps", 5]]}, "'env_kwargs' must be an object"),
    ({"top_env_kwargs": [["max_steps", 5]]}, "'env_kwargs' must be an object"),
    ({"env_id": "os:ecpo/ALFWorldGen-v0"}, "names a module to import"),
    ({"name": {"a": 1}}, "'name' must be a string"),
])
def test_a_manifest_is_data_checked_whole_in_one_line(tmp_path, change, words):
    """Issue 58 (low): ``first: true`` and ``env_kwargs: [[...]]`` were accepted silently; a manifest never names
    code to import."""
    group = {"first": 2} | {k: v for k, v in change.items() if k in ("first", "env_kwargs")}
    data = {"name": "x", "env_id": "ecpo/ALFWorldGen-v0", "groups": {"g": group}}
    data |= {k: v for k, v in change.items() if k in ("env_id", "name")}
    if "top_env_kwargs" in change:
        data["env_kwargs"] = change["top_env_kwargs"]
    with pytest.raises(ValueError, match=words):
        parse_manifest(data)


def test_a_manifest_nested_100k_deep_is_one_line(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text('{"name": "x", "env_id": "e", "groups": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ValueError, match="nested deeper than a manifest is"):
        load_manifest(path)


# ------------------------------------------------------------------ experts win, random loses (embedded envs)
@pytest.mark.slow
def test_expert_scores_100_and_random_near_0_on_embedded_envs(tmp_path):
    manifests = [_manifest("alfworld_gen", 6), _manifest("webshop_gen", 10), _manifest("searchqa_gen", 10)]
    expert = evaluate(build_agent("expert"), manifests, tmp_path, FAST)
    table = expert["summary"]
    for column in ALFWORLD_COLUMNS:  # one generated game of each subtask
        assert table["alfworld_gen"]["table"][column]["mean"] == 100.0
    assert table["webshop_gen"]["table"]["Score"]["mean"] == 100.0
    assert table["webshop_gen"]["table"]["Success"]["mean"] == 100.0
    assert table["searchqa_gen"]["table"]["Avg."]["mean"] == 100.0
    assert all(r["invalid_actions"] == 0 for r in expert["episodes"])

    short = EvalSettings(seeds=[0, 1], progress=False, env_overrides={"max_steps": 8})
    alf = evaluate(build_agent("random"), [_manifest("alfworld_gen", 3)], tmp_path, short)
    rest = evaluate(build_agent("random"), [_manifest("webshop_gen", 10), _manifest("searchqa_gen", 10)],
                    tmp_path, EvalSettings(seeds=[0, 1], progress=False))
    assert alf["summary"]["alfworld_gen"]["table"]["All"]["mean"] <= 20.0
    assert rest["summary"]["webshop_gen"]["table"]["Success"]["mean"] <= 10.0
    assert rest["summary"]["webshop_gen"]["table"]["Score"]["mean"] < 40.0
    assert rest["summary"]["searchqa_gen"]["table"]["Avg."]["mean"] <= 10.0
    # the leaderboard table holds both agents' rows
    markdown = (tmp_path / "leaderboard.md").read_text()
    assert "| expert | 100.0 ± 0.0" in markdown and "| random |" in markdown


@pytest.mark.data
def test_expert_wins_real_valid_seen_games(tmp_path):
    manifest = load_manifest("alfworld_valid_seen")
    ids = manifest.groups[0].task_ids
    pick = {}
    for task_id in ids:  # the first game of three subtasks
        pick.setdefault(task_id.split("-", 1)[0], task_id)
    manifest.groups[0].task_ids = list(pick.values())[:3]
    result = evaluate(build_agent("expert"), [manifest], tmp_path, FAST)
    assert [r["success"] for r in result["episodes"]] == [True] * 3
    assert result["summary"]["alfworld_valid_seen"]["table"]["All"]["mean"] == 100.0


@pytest.mark.data
def test_data_dir_reaches_the_real_env_as_its_declared_argument(tmp_path, data_dir):
    options = LeaderboardOptions(agent="expert", manifest=["alfworld_valid_seen"], data_dir=str(data_dir),
                                 seeds=1, limit=1, out_dir=str(tmp_path), progress=False)
    result = run_leaderboard(options)
    assert result["summary"]["alfworld_valid_seen"]["table"]["All"]["mean"] == 100.0


# ------------------------------------------------------------------ tables == aggregation of the records
def test_tables_equal_the_aggregation_of_per_task_records(tmp_path):
    manifests = [_manifest("webshop_gen", 8), _manifest("searchqa_gen", 6)]
    result = evaluate(RandomAgent(), manifests, tmp_path, EvalSettings(seeds=[0, 1, 2], progress=False))
    episodes = json.loads((tmp_path / "random" / "results.json").read_text())["episodes"]
    assert len(episodes) == 3 * (8 + 12)
    for record in episodes:
        assert {"task_id", "seed", "success", "score", "steps", "invalid_actions"} <= set(record)
    summary = result["summary"]

    def per_seed(rows, metric):
        values = [100.0 * sum(float(r[metric]) for r in rows if r["seed"] == s) / sum(r["seed"] == s for r in rows)
                  for s in (0, 1, 2)]
        mean = sum(values) / 3
        return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / 2)

    web = [r for r in episodes if r["manifest"] == "webshop_gen"]
    for column, metric in (("Score", "score"), ("Success", "success")):
        mean, std = per_seed(web, metric)
        cell = summary["webshop_gen"]["table"][column]
        assert cell["mean"] == pytest.approx(mean) and cell["std"] == pytest.approx(std)
    qa = [r for r in episodes if r["manifest"] == "searchqa_gen"]
    group_means = []
    for group in ("single_hop", "two_hop"):
        mean, _ = per_seed([r for r in qa if r["group"] == group], "em")
        assert summary["searchqa_gen"]["table"][group]["mean"] == pytest.approx(mean)
        group_means.append(mean)
    assert summary["searchqa_gen"]["table"]["Avg."]["mean"] == pytest.approx(sum(group_means) / 2)
    markdown = (tmp_path / "leaderboard.md").read_text()
    assert format_cell(summary["webshop_gen"]["table"]["Score"]) in markdown
    assert json.loads((tmp_path / "leaderboard.json").read_text())["random"]["webshop_gen"]["table"] == \
        json.loads(json.dumps(summary["webshop_gen"]["table"]))


def test_alfworld_columns_follow_task_types():
    records = [{"agent": "a", "manifest": "m", "benchmark": "alfworld", "group": "g", "task_id": f"t{k}",
                "seed": seed, "task_type": task_type, "success": success, "score": float(success)}
               for seed in (0, 1)
               for k, (task_type, success) in enumerate([("Pick", True), ("Pick", seed == 0), ("Heat", False)])]
    table = aggregate(records)["a"]["m"]["table"]
    assert table["Pick"]["mean"] == pytest.approx(75.0) and table["Pick"]["std"] == pytest.approx(math.sqrt(1250))
    assert table["Heat"]["mean"] == 0.0 and table["Clean"] is None
    assert table["All"]["mean"] == pytest.approx(100 * (2 / 3 + 1 / 3) / 2)


def test_markdown_rows_align_when_agents_ran_different_groups():
    def record(agent, group, task, success):
        return {"agent": agent, "manifest": "qa", "benchmark": "searchqa", "group": group, "task_id": task,
                "seed": 0, "success": success, "em": float(success), "score": float(success)}

    records = [record("full", "nq", "a", True), record("full", "hotpotqa", "b", False),
               record("cut", "nq", "a", False)]  # an interrupted run that never reached hotpotqa
    summary = aggregate(records)
    assert summary["cut"]["qa"]["columns"] == ["nq", "Avg."]
    table = markdown_tables(summary).splitlines()
    header = next(line for line in table if line.startswith("| Method"))
    assert header == "| Method | nq | hotpotqa | Avg. |"
    rows = {line.split(" | ")[0]: line for line in table if line.startswith(("| full", "| cut"))}
    assert rows["| full"] == "| full | 100.0 ± 0.0 | 0.0 ± 0.0 | 50.0 ± 0.0 |"
    assert rows["| cut"] == "| cut | 0.0 ± 0.0 | – | 0.0 ± 0.0 |"


# ------------------------------------------------------------------ resume
class _Interrupted(RuntimeError):
    pass


class _FailingRandom(RandomAgent):
    """A random agent that dies at the first step of its k-th episode (a simulated crash)."""

    def __init__(self, fail_at: int) -> None:
        super().__init__()
        self.fail_at, self.episodes = fail_at, 0

    def begin_episode(self, env, observation, info, seed):
        super().begin_episode(env, observation, info, seed)
        self.episodes += 1

    def act(self, ctx):
        if self.episodes == self.fail_at:
            raise _Interrupted("simulated interruption")
        return super().act(ctx)


def _strip_time(records):
    return sorted(({k: v for k, v in r.items() if k != "seconds"} for r in records),
                  key=lambda r: (r["manifest"], r["group"], r["seed"], r["task_id"]))


def test_resume_after_interruption_and_torn_line_loses_nothing(tmp_path):
    manifests = [_manifest("webshop_gen", 6), _manifest("searchqa_gen", 4)]
    settings = EvalSettings(seeds=[0, 1], progress=False)
    reference = evaluate(RandomAgent(), manifests, tmp_path / "once", settings)["episodes"]
    assert len(reference) == 2 * (6 + 8)

    with pytest.raises(_Interrupted):
        evaluate(_FailingRandom(fail_at=9), manifests, tmp_path / "resumed", settings)
    log = tmp_path / "resumed" / "random" / "webshop_gen.jsonl"
    assert len(load_records(log)) == 8
    with open(log, "ab") as handle:  # a crash in the middle of writing a line
        handle.write(b'{"agent": "random", "manifest": "webshop_gen", "gr')
    survivor = _FailingRandom(fail_at=-1)
    resumed = evaluate(survivor, manifests, tmp_path / "resumed", settings)["episodes"]
    assert survivor.episodes == len(reference) - 8  # finished episodes were not replayed
    assert _strip_time(resumed) == _strip_time(reference)
    lines = log.read_text().splitlines()
    assert len(lines) == 12 and all(json.loads(line) for line in lines)


def test_a_whole_last_record_without_its_newline_is_kept(tmp_path):
    log = tmp_path / "m.jsonl"
    first = {"manifest": "m", "group": "g", "task_id": "t0", "seed": 0, "success": True}
    second = {**first, "task_id": "t1", "success": False}
    log.write_text(json.dumps(first) + "\n" + json.dumps(second))  # the crash hit before the newline
    assert load_records(log) == [first, second]
    assert log.read_text().endswith("\n")
    append_record(log, {**first, "task_id": "t2"})
    assert [r["task_id"] for r in load_records(log)] == ["t0", "t1", "t2"]


def test_resume_refuses_a_different_agent_configuration(tmp_path):
    evaluate(build_agent("random"), [_manifest("searchqa_gen", 1)], tmp_path, FAST)
    other = build_agent("expert", name="random")
    with pytest.raises(ValueError, match="different agent configuration"):
        evaluate(other, [_manifest("searchqa_gen", 1)], tmp_path, FAST)


class _CountingAgent(Agent):
    name = "count"

    def act(self, ctx):
        return "<invalid>"


def test_invalid_actions_and_steps_are_counted(tmp_path):
    manifest = TaskManifest("webshop_gen_two", "webshop", "ecpo/WebShopGen-v0", {"max_steps": 3},
                            [TaskGroup("gen", task_ids=["goal_0", "goal_1"])])
    episodes = evaluate(_CountingAgent(), [manifest], tmp_path, FAST)["episodes"]
    assert [(r["steps"], r["invalid_actions"], r["success"], r["score"]) for r in episodes] == [(3, 3, False, 0.0)] * 2


def test_checkpoint_agent_loads_a_tabular_trainer_checkpoint(tmp_path):
    import dataclasses

    import torch

    from ecpo_train.policies.tabular import TabularSoftmaxPolicy
    from ecpo_train.runtime.config import TrainConfig

    policy = TabularSoftmaxPolicy(seed=0)
    slot = policy.slot("s", "click[buy now]")
    policy.logits.data[slot] = 5.0
    config = dataclasses.asdict(TrainConfig(policy="tabular", env_id="ecpo/WebShopGen-v0", run_dir=str(tmp_path)))
    torch.save({"policy": policy.state_dict(), "config": config}, tmp_path / "checkpoint.pt")
    agent = build_agent("checkpoint", checkpoint=str(tmp_path), temperature=0.0, name="tab")
    assert agent.policy.slots[("s", "click[buy now]")] == slot  # the trained table came back
    manifest = TaskManifest("webshop_gen_one", "webshop", "ecpo/WebShopGen-v0", {"max_steps": 2},
                            [TaskGroup("gen", task_ids=["goal_0"])])
    (record,) = evaluate(agent, [manifest], tmp_path / "out", FAST)["episodes"]
    assert record["steps"] == 2 and not record["success"]  # the untrained states act greedily, no purchase
    with pytest.raises(FileNotFoundError, match="checkpoint"):
        build_agent("checkpoint", checkpoint=str(tmp_path / "missing"))


def test_qa_columns_follow_the_papers_dataset_order():
    from ecpo_train.evaluation.tables import aggregate, ordered_groups

    assert ordered_groups(["hotpotqa", "zeta", "nq", "bamboogle", "alpha", "nq"]) == [
        "nq", "hotpotqa", "bamboogle", "zeta", "alpha"]
    records = [{"agent": "a", "manifest": "searchqa", "benchmark": "searchqa", "group": g, "seed": 0, "em": em,
                "task_id": f"{g}/1"} for g, em in (("hotpotqa", 1.0), ("nq", 0.0))]
    run = aggregate(records)["a"]["searchqa"]
    assert run["columns"] == ["nq", "hotpotqa", "Avg."]
    assert run["table"]["Avg."]["mean"] == 50.0


def test_agents_evaluated_into_one_folder_at_once_all_reach_its_leaderboard(tmp_path):
    """Two evaluations into one results folder at the same time (a study's parallel jobs) each rewrite the folder's
    leaderboard from every agent's log: neither fails, and the last table holds both agents."""
    import subprocess
    import sys

    manifests = [_manifest("webshop_gen", 2)]
    for name in ("a", "b"):
        agent = RandomAgent()
        agent.name = name
        evaluate(agent, manifests, tmp_path, EvalSettings(seeds=[0], progress=False))
    script = ("import sys; from ecpo_train.evaluation.runner import write_reports\n"
              "for _ in range(150): write_reports(sys.argv[1], sys.argv[2])")
    writers = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path), name], stderr=subprocess.PIPE, text=True)
               for name in ("a", "b")]
    errors = [writer.communicate(timeout=300)[1] for writer in writers]
    assert [writer.returncode for writer in writers] == [0, 0], errors
    assert set(json.loads((tmp_path / "leaderboard.json").read_text())) == {"a", "b"}
