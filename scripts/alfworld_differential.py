"""Differential check of the native ALFWorld engine against TextWorld's engine on real games.

For every game of the given folders / ``.tar.gz`` archives it plays, on both engines side by side, the
stored walkthrough (with a few invalid commands slipped in) and ``--walks`` seeded random walks over the
admissible commands mixed with invalid ones (garbage, wrong objects, ``help``, empty, odd case and
spacing). At every step it compares the observation, the admissible list (order included), reward, done,
won and the anchor state key, and records the first examples of each kind of mismatch.

    OMP_NUM_THREADS=1 nice -n 10 python scripts/alfworld_differential.py \
        $ECPO_DATA_DIR/alfworld/json_2.1.1/valid_seen $ECPO_DATA_DIR/alfworld/json_2.1.1-train.tar.gz \
        --walks 1 --max-steps 25 --processes 2

Writes ``benchmarks/results/alfworld_differential.json`` and ``.md`` (``--out`` changes the stem).
"""

from __future__ import annotations

import argparse
import glob
import json
import multiprocessing as mp
import os
import random
import sys
import tarfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

GARBAGE = ["", "   ", "help", "xyzzy", "go to", "take", "open the pod bay doors", "look around please",
           "inventory inventory", "go to nowhere 99", "Look", "LOOK", "examine", "use", "move to"]
MAX_EXAMPLES = 25


def iter_games(sources: list[str], limit: int | None = None, seed: int = 0, skip: int = 0):
    """(name, game dict or path) for every game.tw-pddl under the folders / inside the archives. Folder games
    come in a seeded shuffled order (paths only, loaded by the workers), so a run stopped by ``--time-limit``
    has checked a uniform sample; archive games come in archive order. The first ``skip`` games of that
    order are passed over (to continue a run stopped by its time limit)."""
    count = 0
    seen = 0
    for source in sources:
        if source.endswith((".tar.gz", ".tgz", ".tar")):
            with tarfile.open(source, "r|*") as archive:  # one streaming pass, in archive order
                for member in archive:
                    if not member.name.endswith("game.tw-pddl"):
                        continue
                    seen += 1
                    if seen <= skip:
                        continue
                    if limit is not None and count >= limit:
                        return
                    yield f"{os.path.basename(source)}:{member.name}", json.load(archive.extractfile(member))
                    count += 1
        else:
            paths = sorted(glob.glob(os.path.join(source, "**", "game.tw-pddl"), recursive=True))
            random.Random(seed).shuffle(paths)
            for path in paths:
                seen += 1
                if seen <= skip:
                    continue
                if limit is not None and count >= limit:
                    return
                yield path, path
                count += 1


def invalid_command(rng: random.Random, admissible: list[str], names: list[str]) -> str:
    """An invalid (or only textually odd) command: garbage, wrong objects, case and spacing variants."""
    kind = rng.randrange(6)
    if kind == 0:
        return rng.choice(GARBAGE)
    if kind == 1 and names:  # a verb with a wrong object
        a, b = rng.choice(names), rng.choice(names)
        return rng.choice([f"take {a} from {b}", f"move {a} to {b}", f"open {a}", f"use {a}", f"go to {a}",
                           f"heat {a} with {b}", f"examine {a}", f"slice {a} with {b}", f"close {a}"])
    command = rng.choice(admissible)
    if kind == 2:
        return command.upper()
    if kind == 3:
        return command.replace(" ", "  ", 1)
    if kind == 4:
        return f"  {command}  "  # surrounding spaces are stripped: valid on both engines
    return command + " now"


def compare(tw_state, nat_state, tw_reward, nat_reward, scope: str) -> list[tuple[str, object, object]]:
    from ecpo_gym.alfworld.engine import state_key_of_facts

    diffs = []
    for key in ("feedback", "admissible_commands", "won", "done"):
        a, b = tw_state.get(key) if key != "done" else bool(tw_state["won"]), nat_state[key]
        if key == "done":
            a, b = bool(tw_state.get("done", tw_state["won"])), bool(nat_state["done"])
        if a != b:
            diffs.append((key, a, b))
    if tw_reward != nat_reward:
        diffs.append(("reward", tw_reward, nat_reward))
    ka, kb = state_key_of_facts(tw_state["_facts"], scope), state_key_of_facts(nat_state["_facts"], scope)
    if ka != kb:
        diffs.append(("state_key", ka, kb))
    return diffs


def check_game(name: str, data: dict, walks: int, max_steps: int, seed: int) -> dict:
    """Play the walkthrough and ``walks`` random walks on both engines; return counts and mismatches."""
    from ecpo_gym.alfworld.engine import make_engine, release_engine
    from ecpo_gym.alfworld.native import NativeEngine

    rng = random.Random(f"{seed}:{name}")
    if isinstance(data, str):
        with open(data) as handle:
            data = json.load(handle)
    tw, nat = make_engine(), NativeEngine()
    result = {"game": name, "steps": 0, "mismatches": [], "expert_won_tw": None, "expert_won_native": None,
              "tw_seconds": 0.0, "native_seconds": 0.0, "error": None}
    try:
        t0 = time.perf_counter()
        tw.load(data)
        t1 = time.perf_counter()
        nat.load(data)
        t2 = time.perf_counter()
        result["tw_seconds"] += t1 - t0
        result["native_seconds"] += t2 - t1
        names = sorted(set(nat.entity_names().values()))
        plans = [("expert", list(data.get("walkthrough") or []))] + [(f"random{k}", None) for k in range(walks)]
        for walk, plan in plans:
            t0 = time.perf_counter()
            a = tw.reset()
            t1 = time.perf_counter()
            b = nat.reset()
            t2 = time.perf_counter()
            result["tw_seconds"] += t1 - t0
            result["native_seconds"] += t2 - t1
            history: list[str] = []
            won_a = won_b = False
            steps = len(plan) + 2 if plan is not None else max_steps
            inserts = set(rng.sample(range(steps), 2)) if plan is not None else set()
            for step in range(steps + 1):
                diffs = compare(a, b, a.get("score", 0) if step else 0, b["score"] if step else 0, name)
                result["steps"] += 1
                for field, va, vb in diffs:
                    result["mismatches"].append({"game": name, "walk": walk, "step": step, "field": field,
                                                 "history": list(history), "textworld": _short(va),
                                                 "native": _short(vb)})
                if diffs or step == steps or (plan is not None and not plan and step not in inserts):
                    break
                if plan is not None and step in inserts:
                    # only a command that is not admissible here, so the walkthrough still wins
                    command = invalid_command(rng, a["admissible_commands"], names)
                    while command.strip() in a["admissible_commands"]:
                        command = invalid_command(rng, a["admissible_commands"], names)
                elif plan is not None:
                    command = plan.pop(0)
                elif rng.random() < 0.25:
                    command = invalid_command(rng, a["admissible_commands"], names)
                else:
                    command = rng.choice([c for c in a["admissible_commands"] if c != "help"])
                history.append(command)
                t0 = time.perf_counter()
                a, ra, _ = tw.step(command)
                t1 = time.perf_counter()
                b, _, _ = nat.step(command)
                t2 = time.perf_counter()
                a["score"] = ra
                result["tw_seconds"] += t1 - t0
                result["native_seconds"] += t2 - t1
                won_a, won_b = won_a or bool(a["won"]), won_b or bool(b["won"])
            if walk == "expert":
                result["expert_won_tw"], result["expert_won_native"] = won_a, won_b
    except Exception as error:  # noqa: BLE001  (a crash is a finding, not a reason to stop the whole run)
        result["error"] = f"{type(error).__name__}: {error}"
    finally:
        release_engine(tw)
    return result


def _short(value, limit: int = 600):
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _worker(batch: list[tuple[str, dict]], walks: int, max_steps: int, seed: int) -> list[dict]:
    return [check_game(name, data, walks, max_steps, seed) for name, data in batch]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sources", nargs="+", help="split folders and/or .tar.gz archives of game.tw-pddl files")
    parser.add_argument("--walks", type=int, default=1, help="random walks per game (besides the walkthrough)")
    parser.add_argument("--max-steps", type=int, default=25)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int, default=None, help="check only the first N games")
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--batch", type=int, default=10, help="games per task sent to a worker")
    parser.add_argument("--time-limit", type=float, default=None,
                        help="seconds; then games not started are skipped and the summary says so")
    parser.add_argument("--skip", type=int, default=0,
                        help="pass over the first N games (those a stopped run with the same sources checked)")
    parser.add_argument("--merge", default=None,
                        help="a stopped run's summary JSON (same sources, --skip = its games_checked) to add in")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "alfworld_differential"))
    args = parser.parse_args(argv)

    started = time.time()
    results: list[dict] = []
    planned = 0
    with ProcessPoolExecutor(args.processes, mp_context=mp.get_context("spawn")) as pool:
        futures, batch = [], []
        for item in iter_games(args.sources, args.limit, args.seed, args.skip):
            planned += 1
            batch.append(item)
            if len(batch) == args.batch:
                futures.append(pool.submit(_worker, batch, args.walks, args.max_steps, args.seed))
                batch = []
        if batch:
            futures.append(pool.submit(_worker, batch, args.walks, args.max_steps, args.seed))
        stopped = False
        for future in as_completed(futures):
            if future.cancelled():
                continue
            results.extend(future.result())
            bad = sum(1 for r in results if r["mismatches"] or r["error"])
            print(f"[{time.time() - started:7.0f}s] {len(results)} games, {bad} with mismatches", flush=True)
            if args.time_limit is not None and not stopped and time.time() - started > args.time_limit:
                stopped = True
                for other in futures:
                    other.cancel()  # games not started yet are skipped; running batches finish
    summary = summarize(results, args, time.time() - started)
    summary["games_planned"] = planned
    summary["complete"] = len(results) == planned
    if args.merge:
        summary = merge(json.loads(Path(args.merge).read_text()), summary, args.skip)
    write(summary, args.out)
    print(json.dumps({k: v for k, v in summary.items() if k not in ("examples", "errors")}, indent=1))
    return 0 if summary["mismatch_count"] == 0 and summary["games_with_errors"] == 0 else 1


def summarize(results: list[dict], args, seconds: float) -> dict:
    results.sort(key=lambda r: r["game"])
    mismatches = [m for r in results for m in r["mismatches"]]
    by_field: dict[str, int] = {}
    for m in mismatches:
        by_field[m["field"]] = by_field.get(m["field"], 0) + 1
    tw_s = sum(r["tw_seconds"] for r in results)
    nat_s = sum(r["native_seconds"] for r in results)
    return {
        "sources": args.sources, "walks_per_game": args.walks, "max_steps": args.max_steps, "seed": args.seed,
        "games_checked": len(results), "steps_compared": sum(r["steps"] for r in results),
        "mismatch_count": len(mismatches), "games_with_mismatches": sum(1 for r in results if r["mismatches"]),
        "mismatches_by_field": by_field,
        "games_with_errors": sum(1 for r in results if r["error"]),
        "expert_won_textworld": sum(1 for r in results if r["expert_won_tw"]),
        "expert_won_native": sum(1 for r in results if r["expert_won_native"]),
        "textworld_seconds": round(tw_s, 1), "native_seconds": round(nat_s, 1),
        "wall_seconds": round(seconds, 1),
        "examples": mismatches[:MAX_EXAMPLES],
        "errors": [{"game": r["game"], "error": r["error"]} for r in results if r["error"]][:MAX_EXAMPLES],
    }


def merge(previous: dict, current: dict, skip: int) -> dict:
    """One summary for a run continued with ``--skip``: counts add, the first examples are kept. Refuses a
    previous run that does not match (other settings, or not exactly the ``skip`` games passed over)."""
    for key in ("walks_per_game", "max_steps", "seed"):
        if previous[key] != current[key]:
            raise SystemExit(f"--merge: the previous run used {key}={previous[key]}, this one {current[key]}")
    if previous["games_checked"] != skip or previous["sources"] != current["sources"]:
        raise SystemExit(f"--merge: the previous run checked {previous['games_checked']} games of "
                         f"{previous['sources']}; pass the same sources and --skip {previous['games_checked']}")
    merged = dict(current)
    for key in ("games_checked", "steps_compared", "mismatch_count", "games_with_mismatches", "games_with_errors",
                "expert_won_textworld", "expert_won_native", "textworld_seconds", "native_seconds",
                "wall_seconds"):
        merged[key] = round(previous[key] + current[key], 1) if isinstance(current[key], float) else \
            previous[key] + current[key]
    by_field = dict(previous["mismatches_by_field"])
    for field, count in current["mismatches_by_field"].items():
        by_field[field] = by_field.get(field, 0) + count
    merged["mismatches_by_field"] = by_field
    merged["examples"] = (previous["examples"] + current["examples"])[:MAX_EXAMPLES]
    merged["errors"] = (previous["errors"] + current["errors"])[:MAX_EXAMPLES]
    merged["games_planned"] = previous["games_planned"]
    merged["runs"] = previous.get("runs", 1) + 1
    return merged


def write(summary: dict, stem: str) -> None:
    Path(stem).parent.mkdir(parents=True, exist_ok=True)
    with open(f"{stem}.json", "w") as handle:
        json.dump(summary, handle, indent=1)
    sources = ", ".join(os.path.basename(s.rstrip("/")) for s in summary["sources"])
    lines = [
        "# ALFWorld native engine vs TextWorld: differential check",
        "",
        (f"Sources: {sources}; walkthrough + {summary['walks_per_game']} random walk(s) of <= "
         f"{summary['max_steps']} steps per game, invalid commands mixed in, seed {summary['seed']}."),
        "",
        ("| games | steps compared | mismatches | games with mismatches | games with errors "
         "| expert wins (TextWorld / native) |"),
        "| --- | --- | --- | --- | --- | --- |",
        (f"| {summary['games_checked']} | {summary['steps_compared']} | {summary['mismatch_count']} | "
         f"{summary['games_with_mismatches']} | {summary['games_with_errors']} | "
         f"{summary['expert_won_textworld']} / {summary['expert_won_native']} |"),
        "",
        (f"Run {'complete' if summary.get('complete', True) else 'stopped by its time limit'}: "
         f"{summary['games_checked']} of {summary.get('games_planned', summary['games_checked'])} games checked "
         f"(folder games in a seeded random order, so a partial run is a uniform sample)"
         + (f"; in {summary['runs']} runs, each continuing the last with --skip/--merge." if summary.get("runs", 1) > 1
            else ".")),
        "",
        (f"Engine time inside the check: TextWorld {summary['textworld_seconds']} s, native "
         f"{summary['native_seconds']} s (load + reset + step)."),
    ]
    if summary["examples"]:
        lines += ["", "First mismatches:", ""]
        for m in summary["examples"][:10]:
            lines.append(f"- `{m['game']}` {m['walk']} step {m['step']} `{m['field']}`: TextWorld "
                         f"`{m['textworld'][:160]}` vs native `{m['native'][:160]}`")
    if summary["errors"]:
        lines += ["", "Errors:", ""] + [f"- `{e['game']}`: {e['error']}" for e in summary["errors"][:10]]
    with open(f"{stem}.md", "w") as handle:
        handle.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
