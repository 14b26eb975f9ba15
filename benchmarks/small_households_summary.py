"""Before/after validation success of a small-household run, with its intervals, from the run's metrics files.

    python -m benchmarks.small_households_summary --before B.jsonl --metrics RUN.jsonl --episodes 96 --out S.json

``--before``: the metrics of the validation before training (its first line with ``val/success``); ``--metrics``:
the training run's ``metrics.jsonl`` (after = its last line with ``val/success``). Written: successes and
success before and after with 95 % Wilson intervals, the gain with its 95 % Newcombe (hybrid score) and Wald
intervals for two independent proportions, success by task type, and per training iteration its success,
rows, optimizer steps and time split (``benchmarks/results/raw/small_households/*_summary.json``).

``--before-episodes`` / ``--after-episodes`` (the runs' ``validation.jsonl``; before = its first line, after =
its last) add the paired comparison: validation fixes every choice's uniform draw by (seed, copy, step), so
the same validation episode before and after training differs only where the policy does. Episodes pair by
(task, copy); written: the gained and lost episodes, McNemar's exact p, the paired difference with Tango's
unconditional score 95 % interval (``stats.paired_binary``), the share of episodes that changed, and the
minimum detectable effect (80 % power at that share: ``stats.mcnemar_mde``).

    python -m benchmarks.small_households_summary --restat S1.json S2.json ...

rewrites the paired block of stored summaries with the current statistics. Tango's interval, p and MDE depend on
the gained, lost and total episode counts alone, which each summary stores, so this equals a rerun from the
validation files.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from benchmarks import ArgumentParser
from benchmarks.stats import MisalignedCells, newcombe, paired_binary, paired_outcomes, wald_diff, wilson
from ecpo_train.policies.atomic import write_text

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


def read_validation(path: str) -> list[dict]:
    from ecpo_train.runtime.run_dir import read_validation_file

    if not Path(path).is_file():
        raise SystemExit(f"error: {path} does not exist (a run folder's validation.jsonl, written by `ecpo train`)")
    lines = read_validation_file(Path(path))
    if not lines:
        raise SystemExit(f"error: {path} is not a validation.jsonl written by `ecpo train` (one line per "
                         "validation with the episodes' outcomes)")
    return lines


def paired(before: dict, after: dict, before_path: str, after_path: str) -> dict:
    """The paired before/after comparison of two validations' episodes, matched by (task, copy)."""
    outcome = lambda line: {(t, c): w for t, c, w in zip(line["task_ids"], line["copies"], line["won"])}
    try:
        test = paired_outcomes(outcome(before), outcome(after), label=f"{before_path} and {after_path}")
    except MisalignedCells as error:
        raise SystemExit(f"error: {error}") from None
    return {"iteration_before": before["iteration"], "iteration_after": after["iteration"]} | paired_block(test)


def paired_block(test: dict) -> dict:
    """The summary's paired fields from :func:`stats.paired_outcomes` (or ``paired_binary``)."""
    out = {"episodes": test["episodes"], "gained": test["gained"], "lost": test["lost"], "mcnemar_p": test["p"],
           "paired_gain": test["diff"], "changed_share": round(test["discordant_share"], 4),
           "paired_gain_tango95": [round(test["low"], 4), round(test["high"], 4)],
           "paired_mde80": round(test["mde"], 4) if math.isfinite(test["mde"]) else None}
    if test["gained"] + test["lost"] == 0:  # nothing changed: no interval, nothing about power
        out |= {"paired_gain_tango95": None, "paired_mde80": None,
                "note": "no episode changed its outcome: the policies agree on every validation episode"}
    return out


def restat(paths: list[str]) -> None:
    """Rewrite the paired block of stored summaries from their own gained / lost / episode counts."""
    for path in paths:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise SystemExit(f"error: cannot read summary {path}: {error}") from None
        old = data.get("paired")
        if old is None:
            print(f"{path}: no paired block, left as it is")
            continue
        block = paired_block(paired_binary(old["gained"], old["lost"], old["episodes"]))
        keep = {k: old[k] for k in ("iteration_before", "iteration_after") if k in old}
        data["paired"] = keep | block  # (a key of the old conditional interval is dropped with the old block)
        write_text(Path(path), json.dumps(data, indent=1) + "\n")
        print(f"{path}: {_paired_line(data['paired'])}")


def _paired_line(pair: dict) -> str:
    if pair["paired_gain_tango95"] is None:
        return f"paired over {pair['episodes']} episodes: {pair['note']}"
    low, high = pair["paired_gain_tango95"]
    mde = f"MDE {pair['paired_mde80']:.3f}" if pair["paired_mde80"] is not None else "no MDE at this share"
    return (f"paired over {pair['episodes']} episodes: {pair['gained']} gained, {pair['lost']} lost (McNemar p "
            f"{pair['mcnemar_p']:.3g}); gain {pair['paired_gain']:+.3f}, Tango 95 % [{low:+.3f}, {high:+.3f}], {mde}")


def main(argv: list[str] | None = None) -> dict:
    parser = ArgumentParser(__spec__.name, description=__doc__.split("\n\n")[0])
    parser.add_argument("--restat", nargs="+", metavar="SUMMARY", help="rewrite stored summaries' paired blocks "
                        "with the current statistics (from their counts) and stop")
    parser.add_argument("--before", help="metrics of the validation before training")
    parser.add_argument("--metrics", help="the training run's metrics.jsonl")
    parser.add_argument("--episodes", type=int, help="validation episodes per validation")
    parser.add_argument("--before-episodes", help="validation.jsonl of the run validated before training")
    parser.add_argument("--after-episodes", help="validation.jsonl of the training run (paired comparison)")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    if args.restat:
        restat(args.restat)
        return {}
    if args.before is None or args.metrics is None or args.episodes is None or args.out is None:
        parser.error("--before, --metrics, --episodes and --out are required (or --restat)")
    if args.episodes < 1:
        parser.error("--episodes must be >= 1")
    if (args.before_episodes is None) != (args.after_episodes is None):
        parser.error("--before-episodes and --after-episodes go together")
    out = summary(read_lines(args.before), read_lines(args.metrics), args.episodes, args.before, args.metrics)
    if args.before_episodes:
        out["paired"] = paired(read_validation(args.before_episodes)[0], read_validation(args.after_episodes)[-1],
                               args.before_episodes, args.after_episodes)
    write_text(Path(args.out), json.dumps(out, indent=1) + "\n")
    print(f"success {out['successes_before']}/{args.episodes} -> {out['successes_after']}/{args.episodes}; gain "
          f"{out['gain']:+.3f}, 95 % Newcombe [{out['gain_newcombe95'][0]:+.3f}, {out['gain_newcombe95'][1]:+.3f}]")
    if "paired" in out:
        print(_paired_line(out["paired"]))
    return out


if __name__ == "__main__":
    main()
