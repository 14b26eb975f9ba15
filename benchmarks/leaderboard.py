"""Leaderboard evaluation (the same as ``ecpo leaderboard``): evaluate an agent on fixed task manifests and print
the paper's tables. Results (jsonl per manifest, results.json, leaderboard.json/.md) go to ``--out-dir``
(default ``benchmarks/results/leaderboard``); rerunning resumes.

    python benchmarks/leaderboard.py --agent expert --manifest alfworld_gen --manifest webshop_gen --seeds 1
    python benchmarks/leaderboard.py --agent react --model /path/to/model --manifest searchqa_gen --greedy
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ecpo_train.evaluation.agents import VALIDATION_TEMPERATURE
from ecpo_train.evaluation.build import AGENT_KINDS, BACKENDS
from ecpo_train.evaluation.command import run_leaderboard

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "leaderboard"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="ECPO leaderboard evaluation")
    parser.add_argument("--agent", choices=AGENT_KINDS, default="expert")
    parser.add_argument("--manifest", action="append", help="manifest name or path (repeatable)")
    parser.add_argument("--env", help="evaluate every task of this env id (sorted) instead of manifests")
    parser.add_argument("--env-kwarg", action="append", help="key=value environment argument (repeatable)")
    parser.add_argument("--data-dir")
    parser.add_argument("--model")
    parser.add_argument("--checkpoint")
    parser.add_argument("--backend", choices=BACKENDS, default="transformers")
    parser.add_argument("--base-url")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--temperature", type=float, default=VALIDATION_TEMPERATURE)
    parser.add_argument("--greedy", action="store_true")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--limit", type=int)
    parser.add_argument("--out-dir", default=str(DEFAULT_OUT))
    parser.add_argument("--name")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args(argv)
    result = run_leaderboard(agent=args.agent, manifests=args.manifest, env_id=args.env, env_kwargs=args.env_kwarg,
                             data_dir=args.data_dir, model=args.model, checkpoint=args.checkpoint,
                             backend=args.backend, base_url=args.base_url, seeds=args.seeds,
                             temperature=args.temperature, greedy=args.greedy, trials=args.trials, limit=args.limit,
                             out_dir=args.out_dir, name=args.name, device=args.device,
                             progress=not args.no_progress, report_only=args.report_only)
    print(result["markdown"])


if __name__ == "__main__":
    main()
