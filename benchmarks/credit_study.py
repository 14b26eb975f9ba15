"""Credit study (issue 9): do the paper's claims about divergent anchors and ECPO hold on cheap, exact MDPs?

For every (environment, estimator, group size N, seed) cell of the protocol in ``credit_study.yaml`` this
trains a fresh tabular softmax policy with the project's own pieces: group rollouts
(``ecpo_train.rollout``), the credit estimators (``ecpo_train.credit.compute_advantages``) and the clipped
objective (``ecpo_train.loss.policy_update``). Nothing here re-implements credit math or the objective.

Measured per iteration: training success and mean episode return, evaluation success (exact by dynamic
programming on the diagnostic MDPs, sampled on embedded real environments), the estimator's diagnostics
(divergent-anchor fraction, mean rho, advantage std / range) and, where the true action values are known,
how often a truly worse ("rare lucky") action got a larger advantage than the truly best action at the
same anchor (App. C's over-rewarding event).

Outputs (``benchmarks/results/``): ``credit_study.json`` (raw per-run curves + the summary),
``credit_study.md`` (tables and a verdict per paper claim, every number read from the JSON summary) and
``credit_study_*.png``. ``--quick`` runs the same path on a tiny budget (CI smoke) and writes
``credit_study_quick.*`` instead.

    python benchmarks/credit_study.py            # the protocol (~30 min on 2 cores)
    python benchmarks/credit_study.py --quick    # smoke
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import multiprocessing as mp
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

SEARCH_TEMPLATE = "search[<query>]"  # WebShop's open-ended admissible action
PROTOCOL_PATH = Path(__file__).with_name("credit_study.yaml")
RESULTS_DIR = Path(__file__).with_name("results")
METHOD_LABELS = {
    "grpo": "GRPO",
    "gigpo_std": "GiGPO (w/ std)",
    "ecpo": "ECPO",
    "ecpo_eca_only": "ECA-only",
    "ecpo_vargate_only": "VarGate-only",
}
# two-sided 95% Student-t quantiles by degrees of freedom (beyond the table: normal)
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
         10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110,
         18: 2.101, 19: 2.093, 20: 2.086, 25: 2.060, 30: 2.042, 40: 2.021, 60: 2.000}


# ============================================================================================ protocol
def load_protocol(path: Path = PROTOCOL_PATH, *, quick: bool = False) -> dict[str, Any]:
    """Read the YAML protocol; ``quick`` overrides seeds / group sizes / iterations with its ``quick`` block."""
    if not path.exists():
        raise FileNotFoundError(f"credit-study protocol not found at {path}; it ships with the repository")
    protocol = yaml.safe_load(path.read_text())
    for key in ("methods", "group_sizes", "seeds", "credit", "optim", "envs"):
        if key not in protocol:
            raise ValueError(f"{path}: protocol is missing the key {key!r}")
    quick_block = protocol.pop("quick", None) or {}
    protocol["quick"] = bool(quick)
    if quick:
        protocol["seeds"] = int(quick_block.get("seeds", 2))
        protocol["group_sizes"] = list(quick_block.get("group_sizes", protocol["group_sizes"]))
        for env in protocol["envs"]:
            env["iterations"] = int(quick_block.get("iterations", 6))
            env["eval_episodes"] = int(quick_block.get("eval_episodes", env.get("eval_episodes", 64)))
            env["final_eval_episodes"] = env["eval_episodes"]
    return protocol


def run_specs(protocol: dict[str, Any], env_names: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """One spec per (env, method, N, seed) cell, heaviest first so the pool's tail is short."""
    specs = []
    for env in protocol["envs"]:
        if env_names and env["name"] not in env_names:
            continue
        for n in protocol["group_sizes"]:
            for method in protocol["methods"]:
                for seed in range(int(protocol["seeds"])):
                    specs.append({
                        "env_name": env["name"], "env_id": env["id"], "env_kwargs": env.get("kwargs") or {},
                        "iterations": int(env["iterations"]), "groups_per_batch": int(env["groups_per_batch"]),
                        "eval": env.get("eval", "rollouts"), "eval_episodes": int(env.get("eval_episodes", 64)),
                        "tasks": env.get("tasks"),
                        "final_eval_episodes": int(env.get("final_eval_episodes", env.get("eval_episodes", 64))),
                        "method": method, "group_size": int(n), "seed": seed,
                        "credit": dict(protocol["credit"]), "optim": dict(protocol["optim"]),
                        "rollout_temperature": float(protocol.get("rollout_temperature", 1.0)),
                        "eval_temperature": float(protocol.get("eval_temperature", 0.4)),
                    })
    specs.sort(key=lambda s: -s["group_size"] * s["iterations"] * (20 if s["eval"] == "rollouts" else 1))
    return specs



# ============================================================================================ one training run
class InstructionQueryPolicy:
    """Wraps a tabular policy for WebShop: it cannot write text, so its ``search[<query>]`` template action is
    sent as a search for the task instruction itself. Everything else (ids, log-probs) is the wrapped policy's."""

    def __init__(self, policy) -> None:
        self.policy = policy

    def act(self, contexts, temperature: float = 1.0):
        out = self.policy.act(contexts, temperature=temperature)
        for k, ctx in enumerate(contexts):
            if out.actions[k] == SEARCH_TEMPLATE:
                query = ctx.task.replace("[", " ").replace("]", " ")[:200]
                out.actions[k] = f"search[{query}]"
        return out


def exact_success_and_return_std(env, policy, temperature: float, task_ids: Sequence[str]) -> tuple[float, float]:
    """Exact evaluation of ``policy`` (at ``temperature``) on a diagnostic MDP, tasks drawn uniformly from
    ``task_ids``: the success probability (DP) and the std of the episode return.

    Every non-terminal transition of these MDPs pays 0 and a tabular policy never acts invalidly, so the
    return is ``reward_success`` with probability p and ``reward_failure`` otherwise: its std is
    ``|reward_success - reward_failure| * sqrt(p (1 - p))`` with p the task-averaged success probability.
    """
    from ecpo_gym.diagnostic import success_probability

    logits = policy.logits.detach().numpy()
    values = []
    for task_id in task_ids:
        model = env.transition_model(task_id)
        table = {}
        for state, actions in model.items():
            names = list(actions)
            slots = [policy.slots.get((state, a)) for a in names]
            z = np.array([0.0 if k is None else logits[k] for k in slots]) / temperature
            p = np.exp(z - z.max())
            table[state] = dict(zip(names, p / p.sum()))
        values.append(success_probability(model, env.initial_state(task_id), horizon=env.max_steps,
                                          policy=table))
    success = float(np.mean(values))
    spread = abs(float(env.reward_success) - float(env.reward_failure))
    return success, spread * math.sqrt(max(0.0, success * (1.0 - success)))


def best_actions(env) -> dict[str, set[str]]:
    """For a diagnostic MDP: the truly best action(s) of every anchor state, by DP under the optimal policy."""
    from ecpo_gym.diagnostic import action_values

    best: dict[str, set[str]] = {}
    for task_id in env.task_ids:
        model = env.transition_model(task_id)
        q = action_values(model, gamma=1.0, horizon=env.max_steps).q
        for state, row in q.items():
            top = max(row.values())
            best[state] = {a for a, v in row.items() if v >= top - 1e-12}
    return best


def best_action_probability(policy, actions_of: dict[str, list[str]], best: dict[str, set[str]]) -> float:
    """How concentrated the policy is on the truly best actions: pi(best | s) at temperature 1, averaged over
    the anchor states ``actions_of`` (state -> admissible actions; states never visited count as uniform)."""
    values = []
    for state, actions in actions_of.items():
        probs = policy.action_probabilities(state, actions)
        values.append(sum(p for a, p in probs.items() if a in best[state]))
    return float(np.mean(values)) if values else float("nan")


def misranked_anchor_fraction(rows: dict[str, Any], advantages: np.ndarray, best: dict[str, set[str]]) -> float:
    """App. C's over-rewarding event, measured: among anchors (group, state) where the truly best action and
    some worse action were both sampled, the fraction where a worse action's mean advantage exceeds the
    best action's. NaN when no such anchor occurred in the batch."""
    sums: dict[tuple, list[float]] = {}
    for g, s, a, adv in zip(rows["group_ids"], rows["state_keys"], rows["action_keys"], advantages):
        if s not in best:
            continue
        entry = sums.setdefault((g, s, a in best[s], a), [0.0, 0])
        entry[0] += float(adv)
        entry[1] += 1
    by_anchor: dict[tuple, dict[str, list[float]]] = {}
    for (g, s, is_best, a), (total, count) in sums.items():
        by_anchor.setdefault((g, s), {"best": [], "worse": []})["best" if is_best else "worse"].append(total / count)
    compared = [v for v in by_anchor.values() if v["best"] and v["worse"]]
    if not compared:
        return float("nan")
    return float(np.mean([max(v["worse"]) > max(v["best"]) for v in compared]))


def diagnostic_values(diag: dict[str, float]) -> dict[str, float]:
    """The study's per-batch diagnostics from ``compute_advantages``' dict (NaN where an estimator has none)."""
    nan = float("nan")
    return {
        "divergent_fraction": float(diag.get("divergent_anchor_fraction", nan)),
        "mean_rho": float(diag.get("mean_rho", nan)),
        "adv_std": float(diag.get("advantage_std", nan)),
        "adv_range": float(diag.get("advantage_max", nan)) - float(diag.get("advantage_min", nan)),
    }


DIAG_KEYS = ("divergent_fraction", "mean_rho", "adv_std", "adv_range")
CURVE_KEYS = ("train_success", "train_return", "eval_success", "eval_return_std", "misranked_fraction",
              "best_action_prob", *DIAG_KEYS)


def train_run(spec: dict[str, Any]) -> dict[str, Any]:
    """Train one fresh tabular policy for one protocol cell; per-iteration curves and summary numbers."""
    import torch

    import ecpo_gym  # noqa: F401
    from ecpo_gym.group import GroupVectorEnv, make_env
    from ecpo_train.credit import compute_advantages
    from ecpo_train.loss import UpdateSettings, policy_update
    from ecpo_train.policies.tabular import TabularSoftmaxPolicy
    from ecpo_train.rollout import collect_rollout

    torch.set_num_threads(1)
    started = time.perf_counter()
    seed, n, groups = spec["seed"], spec["group_size"], spec["groups_per_batch"]
    run_seed = 1_000_003 * seed + 7_919 * n + 17
    rng = np.random.default_rng(run_seed)
    torch.manual_seed(run_seed)
    envs = GroupVectorEnv(spec["env_id"], num_groups=groups, group_size=n, num_workers=0,
                          env_kwargs=spec["env_kwargs"])
    probe = make_env(spec["env_id"], spec["env_kwargs"]).unwrapped  # for the exact model and DP values
    exact = spec["eval"] == "exact"
    best = best_actions(probe) if exact else {}
    task_pool = list(envs.task_ids)[: spec["tasks"]] if spec.get("tasks") else list(envs.task_ids)
    actions_of = ({state: list(actions) for task in task_pool for state, actions in probe.transition_model(task).items()}
                  if exact else {})
    eval_envs = None
    if not exact:
        eval_envs = GroupVectorEnv(spec["env_id"], num_groups=spec["eval_episodes"], group_size=1, num_workers=0,
                                   env_kwargs=spec["env_kwargs"])
    policy = TabularSoftmaxPolicy(seed=run_seed)
    reference = policy.frozen_copy()
    actor = InstructionQueryPolicy(policy)
    optim = spec["optim"]
    optimizer = torch.optim.Adam(policy.parameters(), lr=float(optim["learning_rate"]))
    settings = UpdateSettings(clip_eps=float(optim["clip_eps"]), kl_coef=float(optim["kl_coef"]),
                              epochs=int(optim["epochs"]), mini_batch_size=int(optim["mini_batch_size"]),
                              micro_batch_size=int(optim["micro_batch_size"]),
                              max_grad_norm=float(optim["max_grad_norm"]))
    curves: dict[str, list[float]] = {k: [] for k in CURVE_KEYS}

    def evaluate(iteration: int, repeats: int = 1) -> tuple[float, float]:
        """Evaluation success and the std of evaluation episode returns: exact by DP on diagnostic MDPs,
        else ``repeats`` batches of ``eval_episodes`` sampled episodes on tasks drawn from the pool."""
        if exact:
            return exact_success_and_return_std(probe, policy, spec["eval_temperature"], task_pool)
        episodes = []
        for r in range(repeats):
            eval_seed = 10_000 + 1_000 * r + iteration
            eval_rng = np.random.default_rng(eval_seed)
            tasks = [task_pool[i] for i in eval_rng.integers(len(task_pool), size=spec["eval_episodes"])]
            episodes += collect_rollout(eval_envs, actor, tasks, env_name=spec["env_name"],
                                        temperature=spec["eval_temperature"], seed=eval_seed).episodes
        return (float(np.mean([e.won for e in episodes])), float(np.std([e.total_reward for e in episodes])))

    for iteration in range(spec["iterations"]):
        tasks = [task_pool[i] for i in rng.integers(len(task_pool), size=groups)]
        rollout = collect_rollout(envs, actor, tasks, env_name=spec["env_name"],
                                  temperature=spec["rollout_temperature"], seed=int(rng.integers(2**31)))
        batch = rollout.batch
        columns = batch.credit_arrays()
        advantages, diag = compute_advantages(spec["method"], **columns, **spec["credit"])
        advantages = np.asarray(advantages, dtype=np.float64)
        curves["train_success"].append(float(np.mean([e.won for e in rollout.episodes])))
        curves["train_return"].append(float(np.mean([e.total_reward for e in rollout.episodes])))
        for name, value in diagnostic_values(diag).items():
            curves[name].append(value)
        curves["misranked_fraction"].append(misranked_anchor_fraction(columns, advantages, best) if exact
                                            else float("nan"))
        old_logp = torch.tensor([lp[0] for lp in batch.extras["old_logprobs"]], dtype=torch.float32).unsqueeze(-1)
        old_mask = torch.ones_like(old_logp)
        prompts, responses = batch.extras["prompt_ids"], batch.extras["response_ids"]

        def logprob_fn(index: np.ndarray, prompts=prompts, responses=responses):
            return policy.logprobs([prompts[i] for i in index], [responses[i] for i in index],
                                   temperature=spec["rollout_temperature"])

        def ref_logprob_fn(index: np.ndarray, prompts=prompts, responses=responses):
            with torch.no_grad():
                return reference.logprobs([prompts[i] for i in index], [responses[i] for i in index],
                                          temperature=spec["rollout_temperature"])[0]

        policy_update(logprob_fn, ref_logprob_fn, list(policy.parameters()), optimizer, old_logp, old_mask,
                      torch.as_tensor(advantages, dtype=torch.float32), settings, rng,
                      before_step=lambda: policy.grow_optimizer_state(optimizer))
        success, return_std = evaluate(iteration)
        curves["eval_success"].append(success)
        curves["eval_return_std"].append(return_std)
        curves["best_action_prob"].append(best_action_probability(policy, actions_of, best) if exact else float("nan"))
    # the final policy, evaluated once more with a larger sample where evaluation is sampled
    final_success = curves["eval_success"][-1] if exact else evaluate(
        spec["iterations"], repeats=max(1, spec["final_eval_episodes"] // spec["eval_episodes"]))[0]
    envs.close()
    if eval_envs is not None:
        eval_envs.close()
    return {key: spec[key] for key in ("env_name", "env_id", "method", "group_size", "seed", "iterations")} | {
        "curves": curves, "final_success": final_success, "seconds": time.perf_counter() - started}


# ============================================================================================ statistics
def t975(df: int) -> float:
    """Two-sided 95% Student-t quantile (table, then the normal limit)."""
    if df < 1:
        return float("nan")
    if df in _T975:
        return _T975[df]
    below = max(k for k in _T975 if k <= df)
    return _T975[below] if df <= 60 else 1.96


def mean_ci(values: Sequence[float]) -> dict[str, float]:
    """Mean and 95% t-interval half-width over seeds (NaNs dropped)."""
    x = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    if len(x) == 0:
        return {"mean": float("nan"), "ci": float("nan"), "n": 0}
    half = t975(len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)) if len(x) > 1 else float("nan")
    return {"mean": float(x.mean()), "ci": float(half), "n": len(x)}


def diff_ci(a: Sequence[float], b: Sequence[float]) -> dict[str, float]:
    """mean(a) - mean(b) with a Welch 95% interval (conservative df = min(n_a, n_b) - 1)."""
    x = np.asarray([v for v in a if not math.isnan(v)], dtype=float)
    y = np.asarray([v for v in b if not math.isnan(v)], dtype=float)
    if len(x) < 2 or len(y) < 2:
        return {"diff": float("nan"), "low": float("nan"), "high": float("nan")}
    d = float(x.mean() - y.mean())
    half = t975(min(len(x), len(y)) - 1) * math.sqrt(x.var(ddof=1) / len(x) + y.var(ddof=1) / len(y))
    return {"diff": d, "low": d - half, "high": d + half}


def verdict(d: dict[str, float], direction: int) -> str:
    """'holds' when the 95% interval of the difference lies on the claimed side of 0, 'contradicted' when it
    lies on the other side, else 'not significant' (right sign) / 'not supported' (wrong sign)."""
    low, high, diff = d["low"] * direction, d["high"] * direction, d["diff"] * direction
    if math.isnan(diff):
        return "no data"
    lo, hi = min(low, high), max(low, high)
    if lo > 0:
        return "holds"
    if hi < 0:
        return "contradicted"
    return "not significant" if diff > 0 else "not supported"


def _segment(curve: Sequence[float], fraction: float, late: bool) -> np.ndarray:
    x = np.asarray(curve, dtype=float)
    k = max(2, round(len(x) * fraction))
    return x[-k:] if late else x[:k]


def run_metrics(run: dict[str, Any], early_fraction: float, late_fraction: float) -> dict[str, float]:
    """Per-run scalars: final success, late-stage reward std, diagnostics averaged over training."""
    c = run["curves"]

    def nanmean(x):
        x = np.asarray(x, dtype=float)
        return float(np.nanmean(x)) if np.isfinite(x).any() else float("nan")

    return {
        "final_success": float(run.get("final_success", c["eval_success"][-1])),
        "late_reward_std": float(np.std(_segment(c["train_return"], late_fraction, True), ddof=1)),
        "late_eval_std": float(np.std(_segment(c["eval_success"], late_fraction, True), ddof=1)),
        "late_eval_return_std": nanmean(_segment(c.get("eval_return_std", [float("nan")] * 2), late_fraction, True)),
        "final_best_prob": float(c["best_action_prob"][-1]) if c.get("best_action_prob") else float("nan"),
        "divergent_early": nanmean(_segment(c["divergent_fraction"], early_fraction, False)),
        "divergent_late": nanmean(_segment(c["divergent_fraction"], late_fraction, True)),
        "mean_rho": nanmean(c["mean_rho"]),
        "adv_range": nanmean(c["adv_range"]),
        "adv_std": nanmean(c["adv_std"]),
        "misranked": nanmean(c["misranked_fraction"]),
        "misranked_late": nanmean(_segment(c["misranked_fraction"], late_fraction, True)),
    }


def summarize(runs: Sequence[dict[str, Any]], protocol: dict[str, Any]) -> dict[str, Any]:
    """Table cells (mean, 95% CI per env x method x N) and the verdict of every paper claim."""
    early, late = float(protocol.get("early_fraction", 0.25)), float(protocol.get("late_fraction", 0.25))
    metrics: dict[tuple, list[dict[str, float]]] = {}
    for run in runs:
        metrics.setdefault((run["env_name"], run["method"], run["group_size"]), []).append(
            run_metrics(run, early, late))
    envs = sorted({k[0] for k in metrics}, key=lambda e: [x["name"] for x in protocol["envs"]].index(e))
    sizes = sorted({k[2] for k in metrics})
    methods = [m for m in protocol["methods"] if any(k[1] == m for k in metrics)]

    def col(env, method, n, name):
        return [m[name] for m in metrics.get((env, method, n), [])]

    cells = {}
    for env in envs:
        for method in methods:
            for n in sizes:
                if (env, method, n) not in metrics:
                    continue
                names = metrics[(env, method, n)][0].keys()
                cells[f"{env}|{method}|{n}"] = {name: mean_ci(col(env, method, n, name)) for name in names}

    claims = []

    def add(claim_id, text, env, parts):
        status = [p["verdict"] for p in parts]
        overall = ("holds" if all(s == "holds" for s in status) else
                   "contradicted" if any(s == "contradicted" for s in status) else
                   "partly holds" if any(s == "holds" for s in status) else "not reproduced")
        claims.append({"id": claim_id, "claim": text, "env": env, "verdict": overall, "parts": parts})

    def compare(env, n, metric, a, b, direction, label):
        d = diff_ci(col(env, a, n, metric), col(env, b, n, metric))
        return {"label": label, "N": n, "metric": metric, "a": a, "b": b, **d, "verdict": verdict(d, direction)}

    for env in envs:
        has = lambda m: m in methods
        if has("gigpo_std"):
            parts = []
            for n in sizes:
                d = diff_ci(col(env, "gigpo_std", n, "divergent_late"), col(env, "gigpo_std", n, "divergent_early"))
                parts.append({"label": "GiGPO divergent-anchor fraction, late - early", "N": n,
                              "metric": "divergent_late-early", "a": "late", "b": "early", **d,
                              "verdict": verdict(d, +1)})
            add("C1", "Divergent anchors become more frequent as training proceeds", env, parts)
        if has("gigpo_std") and has("ecpo") and env == "diagnostic":
            add("C2", "GiGPO over-rewards rare lucky actions (a truly worse action out-scores the best one at an "
                      "anchor more often than under ECPO)", env,
                [compare(env, n, "misranked", "gigpo_std", "ecpo", +1, "misranked-anchor fraction, GiGPO - ECPO")
                 for n in sizes])
        if has("gigpo_std") and has("ecpo"):
            add("C3", "ECPO beats GiGPO in final success at every group size N", env,
                [compare(env, n, "final_success", "ecpo", "gigpo_std", +1, "final success, ECPO - GiGPO")
                 for n in sizes])
            parts = []
            for n in sizes:
                parts.append(compare(env, n, "late_reward_std", "ecpo", "gigpo_std", -1,
                                     "late train-return std, ECPO - GiGPO"))
                parts.append(compare(env, n, "late_eval_std", "ecpo", "gigpo_std", -1,
                                     "late eval-success std, ECPO - GiGPO"))
            add("C5", "ECPO lowers late-stage reward std vs GiGPO (GiGPO oscillates late)", env, parts)
            add("C6", "ECPO lowers the advantage range vs GiGPO", env,
                [compare(env, n, "adv_range", "ecpo", "gigpo_std", -1, "advantage range, ECPO - GiGPO")
                 for n in sizes])
        if all(has(m) for m in ("gigpo_std", "ecpo", "ecpo_eca_only", "ecpo_vargate_only")):
            parts = []
            for n in sizes:
                parts.append(compare(env, n, "final_success", "ecpo_eca_only", "gigpo_std", +1,
                                     "final success, ECA-only - GiGPO"))
                parts.append(compare(env, n, "final_success", "ecpo_vargate_only", "gigpo_std", +1,
                                     "final success, VarGate-only - GiGPO"))
                parts.append(compare(env, n, "final_success", "ecpo", "ecpo_eca_only", +1,
                                     "final success, ECPO - ECA-only"))
                parts.append(compare(env, n, "final_success", "ecpo", "ecpo_vargate_only", +1,
                                     "final success, ECPO - VarGate-only"))
            add("C4", "ECA-only and VarGate-only each beat GiGPO, and ECPO beats both", env, parts)
        if has("ecpo") and len(sizes) >= 2:
            parts = []
            for small, large in itertools.pairwise(sizes):
                d = diff_ci(col(env, "ecpo", large, "mean_rho"), col(env, "ecpo", small, "mean_rho"))
                parts.append({"label": f"ECPO mean rho, N={large} - N={small}", "N": small, "metric": "mean_rho",
                              "a": f"N={large}", "b": f"N={small}", **d, "verdict": verdict(d, +1)})
            add("C7", "VarGate's mean rho is lower at smaller N", env, parts)
    claims.sort(key=lambda c: (c["id"], envs.index(c["env"])))
    confounds = {}
    for env in envs:  # does a low late-stage std just mean a converged (successful) policy?
        rows = [m for (e, _, _), ms in metrics.items() if e == env for m in ms]
        final = [m["final_success"] for m in rows]
        confounds[env] = {f"corr_final_success_{name}": pearson(final, [m[name] for m in rows])
                          for name in ("late_reward_std", "late_eval_std")}
    return {"envs": envs, "methods": methods, "group_sizes": sizes, "cells": cells, "claims": claims,
            "confounds": confounds, "seeds": int(protocol["seeds"]), "quick": bool(protocol.get("quick", False))}


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson correlation over the pairs where both are finite (NaN when undefined)."""
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = np.isfinite(a) & np.isfinite(b)
    a, b = a[keep], b[keep]
    if len(a) < 3 or a.std() == 0 or b.std() == 0:
        return float("nan")
    return float(np.corrcoef(a, b)[0, 1])


# ============================================================================================ report
def fmt(cell: dict[str, float], scale: float = 1.0, digits: int = 3) -> str:
    """``mean ± ci`` as written in the report (the test re-derives these strings from the JSON)."""
    mean, ci = cell["mean"] * scale, cell["ci"] * scale
    if math.isnan(mean):
        return "n/a"
    return f"{mean:.{digits}f} ± {ci:.{digits}f}" if not math.isnan(ci) else f"{mean:.{digits}f}"


def fmt_diff(part: dict[str, Any]) -> str:
    if math.isnan(part["diff"]):
        return "n/a"
    return f"{part['diff']:+.3f} [{part['low']:+.3f}, {part['high']:+.3f}]"


TABLE_METRICS = (
    ("final_success", "Final success (eval T=0.4)"),
    ("late_reward_std", "Late-stage train-return std (across iterations)"),
    ("late_eval_std", "Late-stage eval-success std (across iterations)"),
    ("late_eval_return_std", "Late-stage eval return std (across episodes, mean per iteration)"),
    ("final_best_prob", "Final pi(best action) at anchors (T=1)"),
    ("adv_range", "Advantage range (mean per batch)"),
    ("divergent_late", "Divergent-anchor fraction (late)"),
    ("mean_rho", "Mean rho"),
    ("misranked", "Misranked-anchor fraction"),
)


def render_report(summary: dict[str, Any], protocol: dict[str, Any], runtime_s: float, images: Sequence[str]) -> str:
    """The markdown report; every number comes from ``summary`` (which is stored in the JSON)."""
    label = "QUICK SMOKE RUN (tiny budget, not evidence)" if summary["quick"] else "full protocol"
    lines = [
        "# Credit study: do the paper's divergent-anchor claims reproduce?",
        "",
        (f"Run: **{label}** — {summary['seeds']} seeds per cell, group sizes N = "
        f"{', '.join(map(str, summary['group_sizes']))}, methods "
        f"{', '.join(METHOD_LABELS.get(m, m) for m in summary['methods'])}; wall time {runtime_s / 60:.1f} min. "
        "Generated by `benchmarks/credit_study.py` from `credit_study.yaml`; the raw per-run curves and this "
        "summary are in the JSON next to this file."),
        "",
        "Policy: the project's tabular softmax policy (`ecpo_train/policies/tabular.py`) trained with the "
        "project's credit estimators (`ecpo_train/credit.py`) and clipped objective (`ecpo_train/loss.py`), "
        "credit hyperparameters " + ", ".join(f"{k}={v}" for k, v in protocol["credit"].items()) + ". "
        "Intervals are 95% Student-t intervals over seeds; differences use Welch intervals. A claim part "
        "*holds* when the interval of the difference lies on the claimed side of zero, is *contradicted* when "
        "it lies on the other side, and is otherwise *not significant* (right sign) or *not supported* "
        "(wrong sign).",
        "",
        "## Verdicts",
        "",
        "| Claim | Env | Verdict |",
        "|---|---|---|",
    ]
    for claim in summary["claims"]:
        lines.append(f"| {claim['id']}: {claim['claim']} | {claim['env']} | **{claim['verdict']}** |")
    lines += ["", "## Evidence per claim", ""]
    for claim in summary["claims"]:
        lines += [f"### {claim['id']} ({claim['env']}): {claim['claim']} — {claim['verdict']}", "",
                  "| Comparison | N | Difference [95% CI] | Verdict |", "|---|---|---|---|"]
        for part in claim["parts"]:
            lines.append(f"| {part['label']} | {part['N']} | {fmt_diff(part)} | {part['verdict']} |")
        lines.append("")
    for env in summary["envs"]:
        lines += [f"## Results table: {env}", ""]
        for metric, title in TABLE_METRICS:
            header = "| Method | " + " | ".join(f"N={n}" for n in summary["group_sizes"]) + " |"
            rows = []
            for method in summary["methods"]:
                cells = [summary["cells"].get(f"{env}|{method}|{n}", {}).get(metric) for n in summary["group_sizes"]]
                if all(c is None or math.isnan(c["mean"]) for c in cells):
                    continue
                rows.append(f"| {METHOD_LABELS.get(method, method)} | "
                            + " | ".join("n/a" if c is None else fmt(c) for c in cells) + " |")
            if rows:
                lines += [f"**{title}** (mean ± 95% CI half-width)", "", header,
                          "|---|" + "---|" * len(summary["group_sizes"]), *rows, ""]
    lines += ["## Protocol", "",
              (f"Optimiser: Adam, learning rate {protocol['optim']['learning_rate']}, clip {protocol['optim']['clip_eps']}, "
              f"KL coefficient {protocol['optim']['kl_coef']}, one update per iteration; rollout temperature "
              f"{protocol.get('rollout_temperature', 1.0)}, evaluation temperature {protocol.get('eval_temperature', 0.4)}. "
              "Identical for every method (tuned once on short GRPO / GiGPO probes, never per method)."), ""]
    for env in protocol["envs"]:
        if env["name"] not in summary["envs"]:
            continue
        lines.append(f"- **{env['name']}**: `{env['id']}` with {env.get('kwargs') or {}}, "
                     f"{'a pool of ' + str(env['tasks']) + ' tasks, ' if env.get('tasks') else ''}"
                     f"{env['iterations']} iterations x {env['groups_per_batch']} groups of N, evaluation "
                     + ("exact (DP)" if env.get("eval") == "exact" else
                        f"{env.get('eval_episodes')} sampled episodes per iteration, "
                        f"{env.get('final_eval_episodes', env.get('eval_episodes'))} for the final policy") + ".")
        ref = summary.get("reference", {}).get(env["name"])
        if ref:
            lines.append(f"  Exact success at T=0.4 of the uniform policy: {ref['uniform']:.3f}; of the optimal "
                         f"policy: {ref['optimal']:.3f} (the ceiling of every curve).")
    lines += [""] + [f"- {note}" for note in protocol.get("notes", [])] + [""]
    lines += ["## Reading the late-stage numbers", "",
              ("A low late-stage std is not only a sign of stable credit: a policy that has converged (to the optimum "
              "or to a local optimum) also shows it, across iterations and across episodes. Across all runs of an env, "
              "the correlation of final success with late-stage std is:"), ""]
    for env, conf in summary.get("confounds", {}).items():
        lines.append(f"- {env}: train-return std r = {conf['corr_final_success_late_reward_std']:+.2f}, "
                     f"eval-success std r = {conf['corr_final_success_late_eval_std']:+.2f}")
    lines += ["", "so std differences between methods must be read together with their final success.", ""]
    lines += ["## Definitions", "",
              ("- *Final success*: success probability of the final policy at the paper's validation temperature "
              "0.4 — exact (dynamic programming over the MDP) on the diagnostic env, sampled episodes elsewhere."),
              ("- *Late-stage train-return std*: std over the last "
              f"{int(100 * float(protocol.get('late_fraction', 0.25)))}% of iterations of the per-iteration "
              "mean training episode return (the paper's reward-oscillation measure), averaged over seeds. It mixes "
              "sampling noise of the small batch with real oscillation of the policy."),
              ("- *Late-stage eval-success std*: the same std of the per-iteration evaluation success. On the "
              "diagnostic env this is exact (DP), so it measures only the policy's own oscillation."),
              ("- *Late-stage eval return std*: spread of episode returns under the evaluation policy within one "
              "iteration (exact on the diagnostic env: 10 sqrt(p(1-p))), averaged over late iterations."),
              ("- *Final pi(best action)*: the policy's probability (T=1) of the truly best action, averaged over "
              "the anchor rooms (diagnostic env only)."),
              ("- *Divergent-anchor fraction*: share of anchors (states visited >= 2 times in a group) where some "
              "canonical action was sampled more than once and another exactly once (paper fig. 1), from "
              "`compute_advantages`' diagnostics; 'late' = last quarter of training."),
              "- *Advantage range*: max - min of the final advantages of a batch, averaged over iterations.",
              "- *Mean rho*: VarGate's reliability weight averaged over the anchors of a batch, then over training.",
              ("- *Misranked-anchor fraction* (diagnostic env only, true values known by DP): among anchors where the "
              "truly best action and a worse one were both sampled, how often a worse action's mean advantage "
              "exceeded the best one's — App. C's 'rare lucky action over-rewarded' event, measured directly."),
              ""]
    lines += ["## Figures", ""] + [f"![{Path(i).stem}]({Path(i).name})" for i in images] + [""]
    return "\n".join(lines)


def plot_study(runs: Sequence[dict[str, Any]], summary: dict[str, Any], prefix: Path) -> list[str]:
    """Small PNGs: success curves with bands, divergent-anchor fraction over training, per-N diagnostics."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    sizes, methods = summary["group_sizes"], summary["methods"]
    colors = dict(zip(METHOD_LABELS, ("#777777", "#d62728", "#1f77b4", "#2ca02c", "#ff7f0e")))
    for env in summary["envs"]:
        for curve, ylabel, tag in (("eval_success", "eval success", "curves"),
                                   ("divergent_fraction", "divergent-anchor fraction", "divergent")):
            fig, axes = plt.subplots(1, len(sizes), figsize=(3.2 * len(sizes), 2.6), sharey=True, squeeze=False)
            for ax, n in zip(axes[0], sizes):
                for method in methods:
                    ys = [r["curves"][curve] for r in runs
                          if r["env_name"] == env and r["method"] == method and r["group_size"] == n]
                    if not ys:
                        continue
                    y = np.asarray(ys, dtype=float)
                    mean = np.nanmean(y, axis=0)
                    half = t975(len(y) - 1) * np.nanstd(y, axis=0, ddof=1) / math.sqrt(len(y)) if len(y) > 1 else 0
                    x = np.arange(1, y.shape[1] + 1)
                    ax.plot(x, mean, color=colors.get(method), lw=1.2, label=METHOD_LABELS.get(method, method))
                    ax.fill_between(x, mean - half, mean + half, color=colors.get(method), alpha=0.15, lw=0)
                ax.set_title(f"{env}, N={n}", fontsize=8)
                ax.set_xlabel("iteration", fontsize=7)
                ax.tick_params(labelsize=6)
            axes[0][0].set_ylabel(ylabel, fontsize=7)
            axes[0][-1].legend(fontsize=5, loc="best")
            fig.tight_layout()
            path = prefix.parent / f"{prefix.name}_{env}_{tag}.png"
            fig.savefig(path, dpi=70)
            plt.close(fig)
            written.append(str(path))
        fig, axes = plt.subplots(1, 3, figsize=(9.6, 2.6), squeeze=False)
        for ax, (metric, title) in zip(axes[0], (("mean_rho", "mean rho"), ("adv_range", "advantage range"),
                                                  ("late_reward_std", "late reward std"))):
            width = 0.8 / max(1, len(methods))
            for k, method in enumerate(methods):
                cells = [summary["cells"].get(f"{env}|{method}|{n}", {}).get(metric) for n in sizes]
                mean = [np.nan if c is None else c["mean"] for c in cells]
                err = [np.nan if c is None else c["ci"] for c in cells]
                if all(math.isnan(v) for v in mean):
                    continue
                ax.bar(np.arange(len(sizes)) + k * width, mean, width, yerr=err, color=colors.get(method),
                       label=METHOD_LABELS.get(method, method), error_kw={"lw": 0.6})
            ax.set_xticks(np.arange(len(sizes)) + 0.4 - width / 2, [f"N={n}" for n in sizes], fontsize=7)
            ax.set_title(f"{env}: {title}", fontsize=8)
            ax.tick_params(labelsize=6)
        axes[0][0].legend(fontsize=5)
        fig.tight_layout()
        path = prefix.parent / f"{prefix.name}_{env}_per_n.png"
        fig.savefig(path, dpi=70)
        plt.close(fig)
        written.append(str(path))
    return written


# ============================================================================================ main
def _worker_init() -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def run_study(protocol: dict[str, Any], env_names: Sequence[str] | None = None, workers: int | None = None,
              progress: bool = True) -> list[dict[str, Any]]:
    """Train every cell of the protocol over a process pool; results in spec order of completion."""
    specs = run_specs(protocol, env_names)
    workers = int(workers or protocol.get("workers", 2))
    runs = []
    started = time.perf_counter()
    if workers <= 1:
        iterator = map(train_run, specs)
        pool = None
    else:
        pool = mp.get_context("spawn").Pool(workers, initializer=_worker_init)
        iterator = pool.imap_unordered(train_run, specs)
    try:
        for k, run in enumerate(iterator, 1):
            runs.append(run)
            if progress:
                print(f"[{k}/{len(specs)}] {run['env_name']} {run['method']} N={run['group_size']} "
                      f"seed={run['seed']}: final success {run['final_success']:.3f} "
                      f"({run['seconds']:.1f}s, {time.perf_counter() - started:.0f}s elapsed)", flush=True)
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    runs.sort(key=lambda r: (r["env_name"], r["method"], r["group_size"], r["seed"]))
    return runs


def available_envs(protocol: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    """Envs of the protocol that can be built here, and why the others were skipped."""
    import gymnasium as gym

    import ecpo_gym  # noqa: F401
    from ecpo_gym.group import make_env

    usable, skipped = [], {}
    for env in protocol["envs"]:
        try:
            make_env(env["id"], env.get("kwargs") or {}).close()
        except (ImportError, gym.error.Error, FileNotFoundError, ValueError, AttributeError) as exc:
            skipped[env["name"]] = f"{env['id']} could not be built: {type(exc).__name__}: {exc}"
            continue
        usable.append(env["name"])
    return usable, skipped


def reference_success(protocol: dict[str, Any], names: Sequence[str]) -> dict[str, dict[str, float]]:
    """Exact success of the uniform and of the optimal policy on the protocol's exactly evaluated envs."""
    import ecpo_gym  # noqa: F401
    from ecpo_gym.diagnostic import success_probability
    from ecpo_gym.group import make_env

    out = {}
    for env_spec in protocol["envs"]:
        if env_spec["name"] not in names or env_spec.get("eval") != "exact":
            continue
        env = make_env(env_spec["id"], env_spec.get("kwargs") or {}).unwrapped
        tasks = list(env.task_ids)[: env_spec["tasks"]] if env_spec.get("tasks") else list(env.task_ids)
        uniform, optimal = [], []
        for task in tasks:
            model, start = env.transition_model(task), env.initial_state(task)
            uniform.append(success_probability(model, start, horizon=env.max_steps,
                                               policy={s: dict.fromkeys(a, 1.0) for s, a in model.items()}))
            optimal.append(success_probability(model, start, horizon=env.max_steps))
        out[env_spec["name"]] = {"uniform": float(np.mean(uniform)), "optimal": float(np.mean(optimal))}
        env.close()
    return out


def write_outputs(runs: Sequence[dict[str, Any]], protocol: dict[str, Any], runtime: float, out: Path,
                  skipped: dict[str, str]) -> dict[str, Any]:
    """Summary, figures, JSON and markdown report of a finished study; returns the summary."""
    summary = summarize(runs, protocol)
    summary["skipped_envs"] = skipped
    summary["reference"] = reference_success(protocol, summary["envs"])
    out.mkdir(parents=True, exist_ok=True)
    prefix = out / ("credit_study_quick" if protocol.get("quick") else "credit_study")
    images = plot_study(runs, summary, prefix)
    report = render_report(summary, protocol, runtime, images)
    if skipped:
        report += "\n## Skipped environments\n\n" + "\n".join(f"- {k}: {v}" for k, v in skipped.items()) + "\n"
    payload = {"protocol": protocol, "runtime_s": runtime, "summary": summary, "runs": list(runs)}
    prefix.with_suffix(".json").write_text(json.dumps(payload, separators=(",", ":"), allow_nan=True))
    prefix.with_suffix(".md").write_text(report)
    print(f"wrote {prefix.with_suffix('.md')}, {prefix.with_suffix('.json')} and {len(images)} figures "
          f"({runtime:.0f}s)")
    for claim in summary["claims"]:
        print(f"  {claim['id']} [{claim['env']}] {claim['verdict']}: {claim['claim']}")
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny budget smoke run (CI)")
    parser.add_argument("--protocol", type=Path, default=PROTOCOL_PATH)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--envs", nargs="*", default=None, help="subset of the protocol's env names")
    parser.add_argument("--from-json", type=Path, default=None,
                        help="re-summarise a finished study's JSON (its runs and protocol) without training")
    args = parser.parse_args(argv)
    if args.from_json is not None:
        if not args.from_json.exists():
            print(f"no study results at {args.from_json}; run benchmarks/credit_study.py first", file=sys.stderr)
            return 2
        payload = json.loads(args.from_json.read_text())
        protocol = payload["protocol"]
        if "notes" not in protocol:  # notes written after the run are prose only, never numbers of the run
            protocol["notes"] = yaml.safe_load(args.protocol.read_text()).get("notes", [])
        write_outputs(payload["runs"], protocol, float(payload["runtime_s"]), args.out,
                      payload["summary"].get("skipped_envs", {}))
        return 0
    protocol = load_protocol(args.protocol, quick=args.quick)
    usable, skipped = available_envs(protocol)
    names = [n for n in usable if not args.envs or n in args.envs]
    for name, why in skipped.items():
        print(f"skipping env {name}: {why}", file=sys.stderr)
    if not names:
        print("no environment of the protocol can be built", file=sys.stderr)
        return 2
    started = time.perf_counter()
    runs = run_study(protocol, names, args.workers)
    write_outputs(runs, protocol, time.perf_counter() - started, args.out, skipped)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
