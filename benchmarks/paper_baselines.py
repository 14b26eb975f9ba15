"""The CPU baselines of ``benchmarks/paper_benchmarks.py`` (its ``baselines`` stage): the
untrained SmolLM2, then the benchmark's warm start, each through ``ecpo leaderboard`` on real ALFWorld ``valid_seen``
games, and ``OUT/baselines.json`` beside the leaderboard's own files (docs/leaderboard.md).

    python -m benchmarks.paper_benchmarks baselines --env alfworld --device cpu --leaderboard-games 4 \\
        --sft-per-type 1 --out DIR
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any

BASELINE_MANIFEST = "alfworld_valid_seen_by_type"  # valid_seen, one group per task type: --limit K = K per type
UNTRAINED = "SmolLM2-135M-Instruct, untrained (scoring)"


def leaderboard_baselines(args: argparse.Namespace, config: Any, sft_tasks: list[str]) -> dict[str, Any]:
    """The untrained model, then the warm start (stage 1, fine-tuned on ``sft_tasks``), through ``ecpo
    leaderboard`` on the first ``--leaderboard-games`` games of each ALFWorld task type of ``valid_seen`` (one
    seed, the validation temperature), each as a checkpoint of the benchmark's policy (``config``, the
    benchmark's run); ``OUT/baselines.json`` after each (with ``--report-only``, only that file, from the
    episodes played so far)."""
    from ecpo_train.evaluation.command import run_leaderboard
    from ecpo_train.evaluation.options import LeaderboardOptions
    from ecpo_train.runtime.run import open_run
    from ecpo_train.runtime.sft import SFT_SUMMARY, run_sft
    from ecpo_train.runtime.trainer import Trainer

    out: Path = args.out
    warm = f"SmolLM2-135M-Instruct, warm start on {6 * args.sft_per_type} train games (scoring)"
    for name, folder in ((UNTRAINED, "untrained"), (warm, "warm_start")):
        if args.report_only:
            break
        model = config.model
        if folder == "warm_start":
            model = str(out / "sft_model")
            if not (out / "sft_model" / SFT_SUMMARY).is_file():
                started = time.time()
                run_sft(dataclasses.replace(config, train_tasks=sft_tasks), episodes=len(sft_tasks),
                        epochs=args.sft_epochs, lr=args.sft_lr, out=out / "sft_model", batch_size=args.sft_batch)
                (out / "sft_model" / "seconds.json").write_text(json.dumps({"seconds": time.time() - started}))
        if not (out / folder / "checkpoint.pt").is_file():
            with open_run(Trainer, dataclasses.replace(config, model=model, run_dir=str(out / folder), n_groups=1,
                                                       group_size=2), overwrite=True) as run:
                run.save()  # the untrained policy's checkpoint (the run shell writes config.yaml with it)
        options = LeaderboardOptions(agent="checkpoint", checkpoint=str(out / folder), manifest=[BASELINE_MANIFEST],
                                     limit=args.leaderboard_games, seeds=1, out_dir=str(out / "leaderboard"),
                                     name=name, device=args.device, progress=False)
        print(run_leaderboard(options)["markdown"])
        write_baselines(out)
    return write_baselines(out)


def write_baselines(out: Path) -> dict[str, Any]:
    """``OUT/baselines.json``: the leaderboard's table per agent, every episode's steps and seconds, the warm
    start's summary, and the machine's load (``os.getloadavg`` now; ``OUT/load.log``'s ``uptime`` lines where the
    operator sampled them during the run): the timings are only read beside it."""
    from ecpo_train.evaluation.runner import collect_records, write_reports

    folder = out / "leaderboard"
    summary = {"tables": write_reports(folder)["markdown"], "agents": {}, "load_now": os.getloadavg(),
               "cpu_count": os.cpu_count()}
    for run_dir in sorted(p for p in folder.iterdir() if p.is_dir()):
        records = collect_records(run_dir)
        if records:
            summary["agents"][records[0]["agent"]] = [
                {k: r[k] for k in ("task_id", "task_type", "success", "steps", "seconds")} for r in records]
    for name in ("sft_model/sft.json", "sft_model/seconds.json"):
        if (out / name).is_file():
            summary.setdefault("warm_start", {}).update(json.loads((out / name).read_text()))
    if "model" in summary.get("warm_start", {}):  # by its folder's name (sft.json holds its weights' hash), not a path
        summary["warm_start"]["model"] = Path(summary["warm_start"]["model"]).name
    if (out / "load.log").is_file():
        summary["load_samples"] = (out / "load.log").read_text().splitlines()
    (out / "baselines.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary
