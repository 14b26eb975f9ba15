"""Before/after validation success of a small-household run, with its intervals, from the run's metrics files.

    python benchmarks/small_households_summary.py --before B.jsonl --metrics RUN.jsonl --episodes 96 --out S.json

``--before``: the metrics of the validation before training (its first line with ``val/success``); ``--metrics``:
the training run's ``metrics.jsonl`` (after = its last line with ``val/success``). Written: successes and
success before and after with 95 % Wilson intervals, the gain with its 95 % Newcombe (hybrid score) and Wald
intervals for two independent proportions, success by task type, and per training iteration its success,
rows, optimizer steps and time split (``benchmarks/results/small_households/*_summary.json``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from paired_stats import newcombe, wald_diff, wilson

ITERATION_KEYS = ("iteration", "success", "num_steps", "update/rows_computed", "update/rows_skipped",
                  "update/optimizer_steps", "time/generation", "time/env", "time/credit", "time/update",
                  "time/iteration")


def read_lines(path: str) -> list[dict]:
    try:
        return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    except (OSError, json.JSONDecodeError) as error:
        raise SystemExit(f"error: cannot read metrics {path}: {error}") from None


def validated(lines: list[dict], path: str) -> list[dict]:
    out = [line for line in lines if "val/success" in line]
    if not out:
        raise SystemExit(f"error: {path} has no validation line (val/success)")
    return out


def summary(before_lines: list[dict], run_lines: list[dict], episodes: int, before_path: str, run_path: str) -> dict:
    first, last = validated(before_lines, before_path)[0], validated(run_lines, run_path)[-1]
    k1, k2 = round(first["val/success"] * episodes), round(last["val/success"] * episodes)
    p1, p2 = k1 / episodes, k2 / episodes
    by_type = lambda line: {k.split("/", 2)[2]: v for k, v in line.items() if k.startswith("val/success/")}
    return {
        "val_episodes": episodes, "success_before": p1, "successes_before": k1,
        "success_before_wilson95": [round(x, 4) for x in wilson(k1, episodes)],
        "success_after": p2, "successes_after": k2,
        "success_after_wilson95": [round(x, 4) for x in wilson(k2, episodes)],
        "gain": p2 - p1, "gain_newcombe95": [round(x, 4) for x in newcombe(k1, episodes, k2, episodes)],
        "gain_wald95": [round(x, 4) for x in wald_diff(p1, p2, episodes)],
        "by_type_before": by_type(first), "by_type_after": by_type(last),
        "time_validation_after": last.get("time/validation"),
        "iterations": [{k: round(line[k], 3) if isinstance(line[k], float) else line[k] for k in ITERATION_KEYS
                        if k in line} for line in run_lines if "time/update" in line],
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="metrics of the validation before training")
    parser.add_argument("--metrics", required=True, help="the training run's metrics.jsonl")
    parser.add_argument("--episodes", type=int, required=True, help="validation episodes per validation")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if args.episodes < 1:
        parser.error("--episodes must be >= 1")
    out = summary(read_lines(args.before), read_lines(args.metrics), args.episodes, args.before, args.metrics)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"success {out['successes_before']}/{args.episodes} -> {out['successes_after']}/{args.episodes}; gain "
          f"{out['gain']:+.3f}, 95 % Newcombe [{out['gain_newcombe95'][0]:+.3f}, {out['gain_newcombe95'][1]:+.3f}]")
    return out


if __name__ == "__main__":
    main()
