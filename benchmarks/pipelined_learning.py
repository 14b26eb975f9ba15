"""Does pipelining change what the RLlib engine learns? ``corridor_llm`` (SmolLM2 scoring the corridors' doors)
trained from each seed under three arms: ECPO with ``max_policy_lag`` 0 and 1, and GiGPO with its standard
deviation (``gigpo_std``) under lag 1.

Each run validates before training and after its last iteration at the validation temperature with common
random numbers (the same seed validates the same episodes: two runs of one seed pair episode by episode). Two
comparisons, each paired by seed: ECPO lag 1 - ECPO lag 0, and ECPO lag 1 - GiGPO w/std lag 1, on

- final exact success (the corridors' DP value of the policy: no sampling noise), the seed as the unit: the
  paired 95 % t-interval over seeds and the MDE from the seeds (``stats.paired_diff``); the answer;
- secondary, conditional on the runs trained: the final validation episodes pooled over all seeds and paired
  episode by episode, Tango's interval, McNemar's p, the interval clustered by task and the MDE
  (``stats.paired_outcomes``).

Runs are appended to ``--runs`` (JSON lines) as they finish, so an interrupted study resumes where it stopped;
``--report`` only reads them and writes ``benchmarks/results/pipelined_learning.json`` and ``.md``.

    nohup python -m benchmarks.pipelined_learning --seeds 0 1 2 3 4 5 6 7 8 9 > pipelined_learning.log 2>&1 &
    python -m benchmarks.pipelined_learning --report
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import RAW_RESULTS, RESULTS, ArgumentParser, require_model
from benchmarks import stats as ps
from ecpo_train.policies.atomic import write_text

ARMS = {"ecpo_lag0": ("ecpo", 0), "ecpo_lag1": ("ecpo", 1), "gigpo_std_lag1": ("gigpo_std", 1)}
COMPARISONS = (("ecpo_lag1", "ecpo_lag0"), ("ecpo_lag1", "gigpo_std_lag1"))
SMOLLM2 = Path("~/.cache/ecpo/models/smollm2-135m-instruct").expanduser()


def train_arm(model: str, seed: int, arm: str, iterations: int, runners: int, run_dir: str) -> dict[str, Any]:
    """One run: validation before, ``iterations`` iterations, validation after; exact success and each final
    validation episode's outcome keyed by (task, copy)."""
    from ecpo_train.integrations.rllib import ECPOConfig
    from ecpo_train.runtime.config import load_config

    estimator, lag = ARMS[arm]
    train = load_config("corridor_llm", [f"model={model}", f"seed={seed}", f"iterations={iterations}",
                                         f"run_dir={run_dir}", "val_every=0", "progress=false"])
    algo = (ECPOConfig.from_train_config(train).env_runners(num_env_runners=runners)
            .training(estimator=estimator, max_policy_lag=lag).build_algo())
    started = time.perf_counter()
    try:
        before = algo.validate()
        history = [dict(algo.train()["ecpo"]) for _ in range(iterations)]
        after = algo.validate()
        copies: dict[str, int] = {}
        outcomes = {}
        for episode in algo.ecpo.validation_episodes:
            copy = copies[episode.task_id] = copies.get(episode.task_id, -1) + 1
            outcomes[f"{episode.task_id}#{copy}"] = bool(episode.won)
    finally:
        algo.stop()
    return {"seed": seed, "arm": arm, "exact_success_before": before.get("val/exact_success"),
            "exact_success_after": after.get("val/exact_success"), "val_success_after": after["val/success"],
            "val_outcomes_after": outcomes, "seconds": time.perf_counter() - started,
            "policy_lag_max": max(m["sampling/policy_lag_max"] for m in history),
            "stale_groups_resampled": sum(m["sampling/num_stale_groups_resampled"] for m in history),
            "runner_failures": sum(m["sampling/num_runner_failures"] for m in history)}


def compare(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Both comparisons on exact success (t over seeds) and on the paired final episodes (McNemar), Holm-corrected
    together within each measure."""
    by_arm = {arm: {r["seed"]: r for r in runs if r["arm"] == arm} for arm in ARMS}
    exact, episodes = [], []
    for a, b in COMPARISONS:
        seeds = sorted(set(by_arm[a]) & set(by_arm[b]))
        _, diffs = ps.paired_values(ps.keyed([by_arm[a][s]["exact_success_after"] for s in seeds], seeds),
                                 ps.keyed([by_arm[b][s]["exact_success_after"] for s in seeds], seeds),
                                 label=f"{a} - {b}")
        exact.append({"comparison": f"{a} - {b}", "measure": "final exact success (the seed as the unit)",
                      "seeds": seeds} | ps.paired_diff(list(diffs), m=len(COMPARISONS)))
        before = {(s, k): v for s in seeds for k, v in by_arm[b][s]["val_outcomes_after"].items()}
        after = {(s, k): v for s in seeds for k, v in by_arm[a][s]["val_outcomes_after"].items()}
        pooled = "secondary: final validation episodes pooled over seeds (conditional on these runs)"
        episodes.append({"comparison": f"{a} - {b}", "seeds": seeds, "measure": pooled}
                        | ps.paired_outcomes(before, after, label=f"{a} - {b}", task_of=_task))
    return ps.apply_holm(exact) + ps.apply_holm(episodes)


def _task(key: tuple) -> str:
    """The task of a pooled validation episode ``(seed, "task#copy")``: its cluster."""
    return key[1].rsplit("#", 1)[0]


def report(runs: list[dict[str, Any]], parts: list[dict[str, Any]]) -> str:
    header = (f"{len({r['seed'] for r in runs})} seeds; {len(runs)} runs; median "
              f"{sorted(r['seconds'] for r in runs)[len(runs) // 2]:.0f} s per run. "
              "`python -m benchmarks.pipelined_learning`.")
    lines = ["## Pipelined rollouts: what lag 1 learns (`corridor_llm`, RLlib engine)", "", header, "",
             "Mean final exact success per arm (over its seeds; before training: "
             + ", ".join(sorted({f"{r['exact_success_before']:.3f}" for r in runs})) + "): "
             + ", ".join(f"{arm} {sum(r['exact_success_after'] for r in mine) / len(mine):.3f}"
                         for arm in ARMS if (mine := [r for r in runs if r["arm"] == arm])) + ".", "",
             "| comparison | measure | difference [95 %] | by task | p |", "| --- | --- | --- | --- | --- |"]
    for part in parts:
        lines.append(f"| {part['comparison']} | {part['measure']} | {ps.fmt_part(part)} | {ps.fmt_clustered(part)} | "
                     f"{part['p']:.3f} |")
    lines += ["", "How to read it:", "",
              "- Final exact success (the policy's DP value, one number per run) is the comparison of the training "
              "procedures: its unit is the seed, so the interval carries the run-to-run variation of training. "
              "A difference smaller than its MDE could go unseen.",
              "- The episode rows (secondary) pool every seed's final validation episodes and pair them episode by "
              "episode (Tango's interval; by task, the interval clustered by task). All episodes of one run share "
              "that run's trained weights, so the interval is conditional on these runs: it says which of these "
              "trained policies won more of the same episodes, not how another set of seeds would come out. Where "
              "it and the exact-success row disagree, the exact-success row is the answer about the procedures."]
    lagged = [r for r in runs if r["policy_lag_max"] > ARMS[r["arm"]][1] or r["stale_groups_resampled"]]
    lines.append(f"- Staleness: every lag-1 batch had lag at most 1 ({len(lagged)} runs over the bound, "
                 f"{sum(r['stale_groups_resampled'] for r in runs):.0f} stale groups re-played).")
    faulty = [r for r in runs if r["runner_failures"]]
    if faulty:
        lines.append("- Runner faults (the runs went on, lost groups re-played on the healthy runners): " + "; ".join(
            f"seed {r['seed']} {r['arm']}, {r['runner_failures']:.0f} failures, {r['seconds']:.0f} s" for r in faulty)
            + ". Their draws differ from a fault-free run's from the first lost group on; they are kept, since a "
              "run is not repeated after its result is seen (this benchmark's rule; no registration of it was "
              "committed before the runs).")
    return "\n".join(lines + [""])


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    parser = ArgumentParser(__spec__.name, description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--arms", nargs="+", choices=tuple(ARMS), default=list(ARMS))
    parser.add_argument("--iterations", type=int, default=12)
    parser.add_argument("--runners", type=int, default=2)
    parser.add_argument("--model", default=str(SMOLLM2))
    parser.add_argument("--runs", default=str(RAW_RESULTS / "pipelined_learning" / "runs.jsonl"))
    parser.add_argument("--report", action="store_true", help="only the statistics of the runs already in --runs")
    args = parser.parse_args(argv)
    runs_path = Path(args.runs)
    done = [json.loads(line) for line in runs_path.read_text().splitlines()] if runs_path.exists() else []
    if not args.report:
        require_model(args.model)
        import ray

        runs_path.parent.mkdir(parents=True, exist_ok=True)
        ray.init(num_cpus=args.runners + 1, include_dashboard=False, log_to_driver=False, configure_logging=False)
        try:
            for seed in args.seeds:
                for arm in args.arms:
                    if any(r["seed"] == seed and r["arm"] == arm for r in done):
                        continue
                    with tempfile.TemporaryDirectory() as folder:
                        run = train_arm(args.model, seed, arm, args.iterations, args.runners, folder)
                    done.append(run | {"iterations": args.iterations, "load_average": os.getloadavg()})
                    with runs_path.open("a") as file:
                        file.write(json.dumps(done[-1]) + "\n")
                    print(f"seed {seed} {arm}: exact success {run['exact_success_before']:.3f} -> "
                          f"{run['exact_success_after']:.3f} ({run['seconds']:.0f} s)", flush=True)
        finally:
            ray.shutdown()
    parts = compare(done)
    out = {"runs": [{k: v for k, v in r.items() if k != "val_outcomes_after"} for r in done], "comparisons": parts}
    write_text(RESULTS / "pipelined_learning.json", json.dumps(out, indent=1) + "\n")
    markdown = report(done, parts)
    write_text(RESULTS / "pipelined_learning.md", markdown)
    print(markdown)
    return out


if __name__ == "__main__":
    main()
