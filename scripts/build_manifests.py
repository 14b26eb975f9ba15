"""Regenerate the committed manifests in ``ecpo_train/manifests/``: ``python scripts/build_manifests.py``.

- ``alfworld_valid_seen``: the 140 games of ALFWorld's valid_seen split (game paths relative to the split),
  listed from ``$ECPO_DATA_DIR/alfworld/json_2.1.1/valid_seen`` (skipped when the data is absent);
- ``alfworld_gen``: 20 generated games per subtask with seeds 100000+ (disjoint from the generator's default
  training ids ``gen/<type>/0..299``);
- ``webshop_test``: WebShop's standard test goals ``goal_0..goal_499`` (the first 500 of the shuffled goal
  list). ExpeL's 100 fixed tasks are not used: the environment addresses goals by index and the product file
  they come from is not available here;
- ``webshop_gen``: the first 100 goals of the generated catalogue's test range;
- ``searchqa_gen``: the first 50 single-hop and 50 two-hop questions of the generated world (seed 0);
- ``searchqa``: the paper's QA datasets: HotpotQA dev500 (all 500, self-contained corpus) and NQ test (first
  500 ids, needs a wiki-18 retriever: pass ``retriever=http retriever_url=...`` or ``corpus=...``), plus the
  other five datasets as ``first: 500`` groups resolved from Search-R1's files under ``$ECPO_DATA_DIR/searchqa``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from ecpo_train.evaluation.manifests import MANIFEST_DIR, TaskGroup, TaskManifest
from ecpo_train.files.atomic import write_text

SUBTASKS = ("Pick", "Clean", "Cool", "Look", "Heat", "Pick2")
QA_OTHER_DATASETS = ("triviaqa", "popqa", "2wikimultihopqa", "musique", "bamboogle")


def alfworld_gen_manifest(per_subtask: int = 20, first_seed: int = 100000) -> TaskManifest:
    ids = [f"gen/{t}/{first_seed + k}" for k in range(per_subtask) for t in SUBTASKS]  # interleaved: any prefix is balanced
    return TaskManifest("alfworld_gen", "alfworld", "ecpo/ALFWorldGen-v0", {}, [TaskGroup("gen", task_ids=ids)],
                        f"{per_subtask} generated households per subtask, seeds {first_seed}+ (held out)")


def alfworld_split_manifest(split_dir: Path, split: str) -> TaskManifest:
    ids = sorted(os.path.relpath(p, split_dir) for p in split_dir.glob("*/*/game.tw-pddl"))
    return TaskManifest(f"alfworld_{split}", "alfworld", "ecpo/ALFWorld-v0", {"split": split},
                        [TaskGroup(split, task_ids=ids)], f"the {len(ids)} games of ALFWorld {split}")


def webshop_manifests() -> list[TaskManifest]:
    test = TaskManifest("webshop_test", "webshop", "ecpo/WebShop-v0", {"split": "all"},
                        [TaskGroup("test", task_ids=[f"goal_{i}" for i in range(500)])],
                        "WebShop's standard test goals goal_0..goal_499 (needs the real product files)")
    gen = TaskManifest("webshop_gen", "webshop", "ecpo/WebShopGen-v0", {},
                       [TaskGroup("gen", task_ids=[f"goal_{i}" for i in range(100)])],
                       "the first 100 goals of the generated catalogue (catalogue_seed 0, seed 42)")
    return [test, gen]


def searchqa_gen_manifest(per_kind: int = 50) -> TaskManifest:
    from ecpo_gym.searchqa.env import SearchQAGenEnv

    env = SearchQAGenEnv(world_seed=0)
    single = [e.task_id for e in env.examples.values() if e.metadata.get("hops", 1) <= 1][:per_kind]
    double = [e.task_id for e in env.examples.values() if e.metadata.get("hops", 1) > 1][:per_kind]
    return TaskManifest("searchqa_gen", "searchqa", "ecpo/SearchQAGen-v0", {"world_seed": 0},
                        [TaskGroup("single_hop", task_ids=single), TaskGroup("two_hop", task_ids=double)],
                        f"first {per_kind} single-hop and two-hop questions of generated world 0")


def searchqa_manifest(data_dir: Path | None, k: int = 500) -> TaskManifest:
    groups = []
    hotpot_ids = nq_ids = None
    if data_dir is not None:
        from ecpo_gym.searchqa.datasets import load_dataset

        hotpot_ids = load_dataset("hotpotqa", "dev500", data_dir=data_dir).task_ids[:k]
        nq_ids = load_dataset("nq", "test", data_dir=data_dir).task_ids[:k]
    groups.append(TaskGroup("nq", {"dataset": "nq", "split": "test"}, task_ids=nq_ids, first=None if nq_ids else k))
    for name in QA_OTHER_DATASETS[:2]:
        groups.append(TaskGroup(name, {"dataset": name, "split": "test"}, first=k))
    groups.append(TaskGroup("hotpotqa", {"dataset": "hotpotqa", "split": "dev500"}, task_ids=hotpot_ids,
                            first=None if hotpot_ids else k))
    for name in QA_OTHER_DATASETS[2:]:
        groups.append(TaskGroup(name, {"dataset": name, "split": "test"}, first=k))
    return TaskManifest("searchqa", "searchqa", "ecpo/SearchQA-v0", {}, groups,
                        "the paper's seven QA test sets (first 500 ids each); HotpotQA dev500 ships its corpus, "
                        "the others need retriever=http retriever_url=<Search-R1 server> or corpus=<wiki-18 jsonl>")


def write_manifest(manifest: TaskManifest, out_dir: Path = MANIFEST_DIR) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{manifest.name}.json"
    data: dict[str, Any] = manifest.to_json()
    write_text(path, json.dumps(data, indent=1) + "\n")
    return path


def main(argv: list[str] | None = None) -> None:
    data_root = os.environ.get("ECPO_DATA_DIR")
    manifests = [alfworld_gen_manifest(), *webshop_manifests(), searchqa_gen_manifest()]
    split_dir = Path(data_root) / "alfworld" / "json_2.1.1" / "valid_seen" if data_root else None
    if split_dir is not None and split_dir.is_dir():
        manifests.append(alfworld_split_manifest(split_dir, "valid_seen"))
    else:
        print("ECPO_DATA_DIR/alfworld/json_2.1.1/valid_seen not found: alfworld_valid_seen not rewritten", file=sys.stderr)
    manifests.append(searchqa_manifest(Path(data_root) / "searchqa" if data_root else None))
    for manifest in manifests:
        print(write_manifest(manifest))


if __name__ == "__main__":
    main(sys.argv[1:])
