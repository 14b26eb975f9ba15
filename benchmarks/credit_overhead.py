"""Advantage-computation overhead (the ``credit`` stage of ``benchmarks.speed``): GRPO vs GiGPO vs ECPO end to end
on a verl-agent-shaped batch.

The batch mimics one ALFWorld iteration of the paper (App. A.1): 16 groups x 8 rollouts, up to 50 steps,
long textual observations as anchor keys (~35-40% of rows on a shared anchor), reward 10 on success and
-0.1 per invalid action. Each timing starts from raw per-step Python strings (fresh string objects every
repetition, so no cached hashes) and ends with the advantage array. Methods are interleaved per repetition
on one thread. A plain Python dict-of-lists GiGPO (the style of verl-agent's implementation) is timed on
the same batch for comparison, and the two key-factorisation strategies are timed on their own. The credit
diagnostics every run logs beside its estimator (``core.credit.diagnostics``: ECPO's gate, the step credit, the
distance to GiGPO w/std's and GRPO's advantages) are timed as a run pays them: on the rows a table coded once,
given ECPO's advantages.

    python -m benchmarks.speed credit [--reps 30] [--seed 0] [--out benchmarks/results/credit_overhead.json]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import math
import platform
import statistics
from collections import defaultdict

import numpy as np
import torch

from benchmarks.timing import machine, timed
from ecpo_gym.canonical import INVALID_ACTION
from ecpo_train.core.credit import CreditConfig, compute_advantages, factorize_keys, prepare_rows
from ecpo_train.core.credit.diagnostics import credit_diagnostics

RECEPTACLES = ["cabinet", "countertop", "drawer", "fridge", "garbagecan", "shelf", "sinkbasin", "stoveburner",
               "microwave", "coffeemachine", "toaster", "diningtable", "sidetable", "dresser", "bed", "desk"]
OBJECTS = ["apple", "mug", "knife", "potato", "lettuce", "soapbar", "cellphone", "book", "pencil", "plate",
           "spatula", "tomato", "egg", "bowl", "keychain", "creditcard"]


def _observation(rng: np.random.Generator, task: int, detail: str) -> str:
    """An ALFWorld-like observation (~0.8-1.5k characters): room description, task, admissible actions."""
    seen = ", ".join(f"a {RECEPTACLES[i % 16]} {1 + i // 16}" for i in rng.permutation(40)[:30])
    admissible = "\n ".join(
        f"go to {RECEPTACLES[i % 16]} {1 + i // 16}" for i in rng.permutation(40)[:20]
    )
    return (
        "-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly around you, "
        f"you see {seen}.\n\nYour task is to: put a clean {OBJECTS[task % 16]} in {RECEPTACLES[task % 16]}.\n"
        f"{detail}\nYour admissible actions of the current situation are: [\n {admissible}\n]."
    )


def build_batch(seed: int, groups: int = 16, rollouts: int = 8, max_steps: int = 50, shared_prob: float = 0.38):
    """Rows (group_ids, traj_ids, steps, anchor_keys, action_keys, rewards) as Python lists."""
    rng = np.random.default_rng(seed)
    cols: dict[str, list] = {k: [] for k in ("group_ids", "traj_ids", "steps", "anchor_keys", "action_keys", "rewards")}
    for group in range(groups):
        shared_states = [_observation(rng, group, f"You arrive at {RECEPTACLES[j]} {j}.") for j in range(12)]
        actions = [f"go to {RECEPTACLES[j]} {1 + j % 3}" for j in range(10)] + [f"take {OBJECTS[group]} 1 from shelf 1"]
        action_weights = np.array([2.0**-j for j in range(len(actions))])
        action_weights /= action_weights.sum()
        for traj in range(rollouts):
            success = rng.random() < 0.5
            length = int(rng.integers(15, max_steps + 1)) if success else max_steps
            for step in range(1, length + 1):
                if rng.random() < shared_prob:
                    state = shared_states[int(rng.integers(len(shared_states)))]
                else:
                    state = _observation(rng, group, f"You are at step {step} of rollout {traj}; nothing happens.")
                invalid = rng.random() < 0.1
                action = INVALID_ACTION if invalid else actions[int(rng.choice(len(actions), p=action_weights))]
                reward = (10.0 if success and step == length else 0.0) - (0.1 if invalid else 0.0)
                for key, value in zip(cols, (f"task-{group}", traj, step, state, action, reward)):
                    cols[key].append(value)
    return cols


def fresh_strings(cols: dict[str, list]) -> dict[str, list]:
    """New str objects for every key (a new rollout's strings carry no cached hash)."""
    return cols | {key: [(s + "\x00")[:-1] for s in cols[key]] for key in ("group_ids", "anchor_keys", "action_keys")}


def loop_gigpo(cols: dict[str, list], gamma: float = 0.95, omega: float = 1.0, eps: float = 1e-6) -> list[float]:
    """Straightforward dict-of-lists GiGPO_w/std (per-trajectory return loops, per-group anchor dicts)."""
    n = len(cols["rewards"])
    by_traj: dict[tuple, list[int]] = defaultdict(list)
    for i in range(n):
        by_traj[(cols["group_ids"][i], cols["traj_ids"][i])].append(i)
    g_return = [0.0] * n
    traj_return = {}
    for key, rows in by_traj.items():
        rows.sort(key=lambda i: cols["steps"][i])
        running = 0.0
        for i in reversed(rows):
            running = cols["rewards"][i] + gamma * running
            g_return[i] = running
        traj_return[key] = sum(cols["rewards"][i] for i in rows)
    by_group: dict[str, list[float]] = defaultdict(list)
    for (group, _), value in traj_return.items():
        by_group[group].append(value)
    episode = {}
    for key, value in traj_return.items():
        values = by_group[key[0]]
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
        episode[key] = 0.0 if std == 0.0 else (value - mean) / (std + eps)
    anchors: dict[tuple, list[int]] = defaultdict(list)
    for i in range(n):
        anchors[(cols["group_ids"][i], cols["anchor_keys"][i])].append(i)
    step_adv = [0.0] * n
    for rows in anchors.values():
        if len(rows) < 2:
            continue
        values = [g_return[i] for i in rows]
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
        for i in rows:
            step_adv[i] = 0.0 if std == 0.0 else (g_return[i] - mean) / (std + eps)
    return [episode[(cols["group_ids"][i], cols["traj_ids"][i])] + omega * step_adv[i] for i in range(n)]


def measure(reps: int, seed: int) -> dict:
    """Every method's median milliseconds over ``reps`` interleaved repetitions (after two warm-up ones) on
    ``build_batch(seed)``, one thread on one core, and the ratios the targets are read from."""
    if reps < 1:
        raise ValueError(f"--reps {reps}: at least one repetition is needed for a median")
    torch.set_num_threads(1)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

    cols = build_batch(seed)
    ecpo_adv, diag = compute_advantages("ecpo", cols)
    max_diff = float(np.abs(np.array(loop_gigpo(cols)) - compute_advantages("gigpo_std", cols)[0]).max())
    rows = prepare_rows(*cols.values())

    methods = {
        "grpo": lambda c: compute_advantages("grpo", c),
        "gigpo_std": lambda c: compute_advantages("gigpo_std", c),
        "ecpo": lambda c: compute_advantages("ecpo", c),
        "ecpo_torch_cpu": lambda c: compute_advantages("ecpo", c | {"rewards": torch.tensor(c["rewards"])}),
        "loop_gigpo_std": loop_gigpo,
        "factorize_dict": lambda c: factorize_keys(c["anchor_keys"]),
        "factorize_np_unique": lambda c: np.unique(np.array(c["anchor_keys"]), return_inverse=True)[1],
        "credit_diagnostics": lambda c: credit_diagnostics("ecpo", rows, CreditConfig(), ecpo_adv),
    }
    times: dict[str, list[float]] = {name: [] for name in methods}
    for rep in range(reps + 2):  # two warm-up repetitions
        for name, fn in methods.items():
            elapsed = timed(fn, fresh_strings(cols))[1]  # (the fresh strings made before the clock starts)
            if rep >= 2:
                times[name].append(elapsed * 1e3)
    median = {name: statistics.median(values) for name, values in times.items()}
    return {
        "batch": {"rows": len(cols["rewards"]), "groups": 16, "rollouts_per_group": 8, "max_steps": 50,
                  "mean_state_key_chars": float(np.mean([len(s) for s in cols["anchor_keys"]])),
                  "anchor_hit_rate": diag["anchor_hit_rate"], "num_anchors": diag["num_anchors"],
                  "divergent_anchor_fraction": diag["divergent_anchor_fraction"]},
        "median_ms": median,
        "ratios": {
            "ecpo_over_gigpo": median["ecpo"] / median["gigpo_std"],
            "gigpo_over_grpo": median["gigpo_std"] / median["grpo"],
            "loop_gigpo_over_vectorised_gigpo": median["loop_gigpo_std"] / median["gigpo_std"],
            "np_unique_over_dict_factorize": median["factorize_np_unique"] / median["factorize_dict"],
            "diagnostics_over_ecpo": median["credit_diagnostics"] / median["ecpo"],
        },
        "targets": {"ecpo_over_gigpo_max": 1.3, "ecpo_ms_max": 25.0,
                    "met": median["ecpo"] / median["gigpo_std"] <= 1.3 and median["ecpo"] <= 25.0},
        "loop_vs_vectorised_max_abs_diff": max_diff,
        "reps": reps, "threads": 1, "python": platform.python_version(), "numpy": np.__version__,
        "torch": torch.__version__, "machine": platform.processor() or platform.machine(), "host": machine(),
    }
