"""The divergent-anchor regime against policy concentration (issue 23): corridors and ALFWorld games.

The paper reports the divergent-anchor fraction rising from 9 % early in ALFWorld training to 28 % late. Whether
that can happen depends on the anchor structure: at one anchor visited n times, a divergent pattern (one action
taken >= 2 times beside another taken exactly once) is likely under a spread policy and rare under a concentrated
one. This script measures, for scripted epsilon-expert policies (with probability 1 - eps the expert's next command,
else a uniformly random admissible one), groups of N copies of one game:

* the divergent-anchor fraction (``compute_advantages``' own diagnostic, on the group's step rows);
* the lucky-singleton frequency: the share of anchors where the most frequent action (>= 2 visits) lost at least
  once and another action taken exactly once won -- the paper's fig. 1 situation;
* success, and pi(expert action) = 1 - eps + eps / |A| (the concentration on the expert's command).

Environments: the diagnostic corridor, generated ALFWorld (``ecpo/ALFWorldGen-v0``) and the real ALFWorld games
where ``ECPO_DATA_DIR`` holds them (``ecpo/ALFWorld-v0``, valid_seen). Beside the sampled corridor numbers, the exact
probability that one anchor with n visits is divergent is computed by enumerating the multinomial counts.

    python -m benchmarks.credit_regime            # writes benchmarks/results/credit_regime.{md,json}
    python -m benchmarks.credit_regime --quick    # a smoke run
"""

from __future__ import annotations

import itertools
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import RESULTS, ArgumentParser
from ecpo_train.policies.atomic import write_text

# eps levels: the corridor is cheap (many levels, many games); a TextWorld step costs ~30-130 ms, so ALFWorld gets
# five levels on four games of N = 8 copies, 25 steps at most
CORRIDOR_EPS = (1.0, 0.8, 0.6, 0.4, 0.2, 0.1, 0.05, 0.01)
ALFWORLD_EPS = (1.0, 0.6, 0.3, 0.1, 0.03)
ENVS = {  # name -> (env id, kwargs, games, N, eps levels)
    "corridor": ("ecpo/DivergentAnchor-v0", {"num_tasks": 40, "depth": 5, "good_prob": 0.85, "rare_prob": [0.4, 0.7]},
                 40, 8, CORRIDOR_EPS),
    "alfworld_gen": ("ecpo/ALFWorldGen-v0", {"max_steps": 25}, 4, 8, ALFWORLD_EPS),
    "alfworld_real": ("ecpo/ALFWorld-v0", {"max_steps": 25}, 4, 8, ALFWORLD_EPS),
}


def divergent_probability(n: int, probs: Sequence[float]) -> float:
    """Exact P(divergent) at one anchor visited ``n`` times, actions drawn i.i.d. from ``probs``: some action
    drawn >= 2 times and another exactly once (the diagnostic ``compute_advantages`` reports)."""
    total = 0.0
    k = len(probs)
    for counts in itertools.product(range(n + 1), repeat=k):
        if sum(counts) != n:
            continue
        drawn = [c for c in counts if c > 0]
        if max(drawn) >= 2 and min(drawn) == 1:
            coef = math.factorial(n) / math.prod(math.factorial(c) for c in counts)
            total += coef * math.prod(p**c for p, c in zip(probs, counts))
    return total


def expert_command(env: Any, info: dict[str, Any], plan: list[str], pointer: int) -> str | None:
    """The expert's next command: the good door of the current room on a corridor (room k is entered at step k),
    else the next unplayed step of the game's expert plan."""
    if hasattr(env, "state_view"):
        step = int(info["step"])
        return plan[step] if step < len(plan) else None
    return plan[pointer] if pointer < len(plan) else None


def play_group(env: Any, task_id: str, n: int, eps: float, rng: np.random.Generator, group: int) -> dict[str, list]:
    """N epsilon-expert episodes of one game: step rows (for the credit diagnostics) and episode outcomes."""
    rows: dict[str, list] = {"group_ids": [], "traj_ids": [], "steps": [], "anchor_keys": [], "action_keys": [],
                             "rewards": []}
    won, expert_prob = [], []
    for copy in range(n):
        _, info = env.reset(seed=int(rng.integers(2**31 - 1)), options={"task_id": task_id})
        plan, pointer, done, step = list(env.expert_plan()), 0, False, 0
        while not done:
            actions = list(info.get("admissible_actions", []))
            command = expert_command(env, info, plan, pointer)
            if command is not None and command in actions and rng.random() >= eps:
                action = command
                pointer += 1
            else:
                action = actions[int(rng.integers(len(actions)))] if actions else "look"
                if action == command:
                    pointer += 1
            if command in actions:
                expert_prob.append(1.0 - eps + eps / len(actions))
            state = info["state_key"]
            _, reward, terminated, truncated, info = env.step(action)
            step += 1
            for key, value in (("group_ids", group), ("traj_ids", copy), ("steps", step), ("anchor_keys", state),
                               ("action_keys", info.get("action_key", action)), ("rewards", float(reward))):
                rows[key].append(value)
            done = terminated or truncated
        won.append(bool(info.get("won", False)))
    return {"rows": rows, "won": won, "expert_prob": expert_prob}


def lucky_fraction(rows: dict[str, list], won: list[bool]) -> tuple[int, int]:
    """(lucky-singleton anchors, anchors) of one group; an anchor is a state visited >= 2 times."""
    visits: dict[str, list[tuple[str, int]]] = {}
    for traj, state, action in zip(rows["traj_ids"], rows["anchor_keys"], rows["action_keys"]):
        visits.setdefault(state, []).append((action, traj))
    anchors = lucky = 0
    for seen in visits.values():
        if len(seen) < 2:
            continue
        anchors += 1
        counts: dict[str, list[int]] = {}
        for action, traj in seen:
            counts.setdefault(action, []).append(traj)
        top = max(counts, key=lambda a: len(counts[a]))
        if len(counts[top]) >= 2 and not all(won[t] for t in counts[top]):
            lucky += any(len(ts) == 1 and won[ts[0]] for a, ts in counts.items() if a != top)
    return lucky, anchors


def sweep(name: str, quick: bool, log: Any = print) -> dict[str, Any]:
    import ecpo_gym  # noqa: F401
    from ecpo_gym.group_workers import make_env
    from ecpo_train.core.credit import compute_advantages

    env_id, kwargs, games, n, levels = ENVS[name]
    env = make_env(env_id, kwargs).unwrapped
    tasks = list(env.task_ids)[: (2 if quick else games)]
    epsilons = levels[::2] if quick else levels
    out = []
    started = time.perf_counter()
    for eps in epsilons:
        rng = np.random.default_rng(1234)
        div, lucky, anchors, success, expert = [], 0, 0, [], []
        for g, task in enumerate(tasks):
            played = play_group(env, task, n, eps, rng, g)
            _, diag = compute_advantages("grpo", **played["rows"])
            if diag["num_anchors"]:
                div.append(diag["divergent_anchor_fraction"])
            found, total = lucky_fraction(played["rows"], played["won"])
            lucky, anchors = lucky + found, anchors + total
            success += played["won"]
            expert += played["expert_prob"]
        out.append({"eps": eps, "pi_expert": float(np.mean(expert)) if expert else float("nan"),
                    "divergent_fraction": float(np.mean(div)) if div else float("nan"),
                    "lucky_fraction": lucky / anchors if anchors else float("nan"), "anchors": anchors,
                    "success": float(np.mean(success)), "groups": len(tasks)})
        log(f"[{name}] eps={eps}: divergent {out[-1]['divergent_fraction']:.3f}, lucky "
            f"{out[-1]['lucky_fraction']:.3f}, success {out[-1]['success']:.2f} "
            f"({time.perf_counter() - started:.0f}s)")
    env.close()
    return {"env_id": env_id, "kwargs": kwargs, "N": n, "tasks": tasks, "points": out,
            "seconds": time.perf_counter() - started}


def render(results: dict[str, Any], exact: dict[str, list], quick: bool) -> str:
    lines = ["# Divergent anchors and lucky singletons against policy concentration", "",
             (f"Run: **{'QUICK SMOKE RUN' if quick else 'committed protocol'}**, written by "
              "`benchmarks/credit_regime.py`. Scripted epsilon-expert policies, groups of N copies of one game; "
              "pi(expert) is the mean probability of the expert's command where it was admissible. Divergent "
              "fraction: `compute_advantages`' diagnostic (anchors with one action taken >= 2 times beside one taken "
              "once); lucky-singleton fraction: anchors where the most frequent action lost at least once and another "
              "action taken once won."), ""]
    for name, res in results.items():
        if "skipped" in res:
            lines += [f"## {name}", "", f"Skipped: {res['skipped']}", ""]
            continue
        lines += [(f"## {name}: `{res['env_id']}` {res['kwargs']}, N = {res['N']}, {len(res['tasks'])} games "
                  f"({res['seconds']:.0f} s)"), "", ("| eps | pi(expert) | divergent fraction | lucky-singleton fraction "
                  "| anchors | success |"), "|---|---|---|---|---|---|"]
        for p in res["points"]:
            lines.append(f"| {p['eps']:.2f} | {p['pi_expert']:.3f} | {p['divergent_fraction']:.3f} | "
                         f"{p['lucky_fraction']:.3f} | {p['anchors']} | {p['success']:.2f} |")
        lines.append("")
    lines += ["## Exact P(divergent) at one anchor visited n = 8 times", "",
              "| pi(top action) | " + " | ".join(exact) + " |", "|---|" + "---|" * len(exact)]
    for row in zip(*exact.values()):
        lines.append(f"| {row[0][0]:.2f} | " + " | ".join(f"{v:.3f}" for _, v in row) + " |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgumentParser(__spec__.name, description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--envs", nargs="+", default=list(ENVS))
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    unknown = [e for e in args.envs if e not in ENVS]
    if unknown:
        print(f"unknown env(s) {unknown}; valid: {', '.join(ENVS)}", file=sys.stderr)
        return 2
    results: dict[str, Any] = {}
    for name in args.envs:
        if name == "alfworld_real" and not os.environ.get("ECPO_DATA_DIR"):
            results[name] = {"skipped": "ECPO_DATA_DIR is not set (the real games are not here)"}
            continue
        try:
            results[name] = sweep(name, args.quick)
        except (FileNotFoundError, ImportError, ValueError) as err:
            results[name] = {"skipped": f"{type(err).__name__}: {err}"}
    levels = (1 / 3, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)
    exact = {f"{k} actions": [(c, divergent_probability(8, [c] + [(1 - c) / (k - 1)] * (k - 1))) for c in levels]
             for k in (3, 5)}
    stem = args.out / ("credit_regime_quick" if args.quick else "credit_regime")
    args.out.mkdir(parents=True, exist_ok=True)
    write_text(stem.with_suffix(".json"), json.dumps({"quick": args.quick, "results": results, "exact_n8": exact}))
    write_text(stem.with_suffix(".md"), render(results, exact, args.quick))
    print(f"wrote {stem.with_suffix('.md')} and {stem.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
