"""Credit study (issue 9): do the paper's claims about divergent anchors and ECPO hold on cheap, exact MDPs?

Every (environment, estimator, group size N, seed) cell of ``credit_study.yaml`` trains a fresh tabular softmax
policy as a native ``Trainer`` run (nothing here re-implements its rollout, credit or update), measuring
``CURVE_KEYS`` between iterations (the report's Definitions say what each is); ``credit_study_report`` makes the
summary, the markdown and the figures. Commands and outputs: docs/benchmarks.md; the statistics:
docs/credit_experiments.md, "End-to-end training".
"""

from __future__ import annotations

import json
import math
import operator
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import RESULTS, count, read_json, refused
from benchmarks.study import StudyCommand, in_processes, read_protocol
from ecpo_train.files.atomic import write_text

SEARCH_TEMPLATE = "search[<query>]"  # WebShop's open-ended admissible action
PROTOCOL_PATH = Path(__file__).with_name("credit_study.yaml")


def load_protocol(path: Path = PROTOCOL_PATH, *, quick: bool = False) -> dict[str, Any]:
    """Read the YAML protocol; ``quick`` overrides seeds / group sizes / iterations with its ``quick`` block."""
    protocol = read_protocol(path, ("methods", "group_sizes", "seeds", "credit", "optim", "envs"))
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
    specs = [{"env_name": env["name"], "env_id": env["id"], "env_kwargs": env.get("kwargs") or {},
              "iterations": int(env["iterations"]), "groups_per_batch": int(env["groups_per_batch"]),
              "eval": env.get("eval", "rollouts"), "eval_episodes": int(env.get("eval_episodes", 64)),
              "tasks": env.get("tasks"),
              "final_eval_episodes": int(env.get("final_eval_episodes", env.get("eval_episodes", 64))),
              "method": method, "group_size": int(n), "seed": seed,
              "credit": dict(protocol["credit"]), "optim": dict(protocol["optim"]),
              "rollout_temperature": float(protocol.get("rollout_temperature", 1.0)),
              "eval_temperature": float(protocol.get("eval_temperature", 0.4))}
             for env in protocol["envs"] if not env_names or env["name"] in env_names
             for n in protocol["group_sizes"] for method in protocol["methods"]
             for seed in range(int(protocol["seeds"]))]
    specs.sort(key=lambda s: -s["group_size"] * s["iterations"] * (20 if s["eval"] == "rollouts" else 1))
    return specs


class InstructionQueryPolicy:
    """Wraps a tabular policy for WebShop: it cannot write text, so its ``search[<query>]`` template action is
    sent as a search for the task instruction itself. Everything else (ids, log-probs, parameters, slots) is the
    wrapped policy's, so the trainer can play with it (``Trainer.act_with``) and update the wrapped policy."""

    def __init__(self, policy) -> None:
        self.policy = policy

    def __getattr__(self, name: str):
        if name == "policy":  # not set yet (copy / unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.policy, name)

    def act(self, contexts, temperature: float = 1.0):
        out = self.policy.act(contexts, temperature=temperature)
        for k, ctx in enumerate(contexts):
            if out.actions[k] == SEARCH_TEMPLATE:
                query = ctx.task.replace("[", " ").replace("]", " ")[:200]
                out.actions[k] = f"search[{query}]"
        return out


def exact_success_and_return_std(env, policy, temperature: float, task_ids: Sequence[str]) -> tuple[float, float]:
    """Exact evaluation on a diagnostic MDP (tasks uniform over ``task_ids``): the success probability p (DP) and
    the std of the episode return. Non-terminal steps pay 0 and a tabular policy never acts invalidly, so the
    return is ``reward_success`` with probability p, else ``reward_failure``: its std is
    ``|reward_success - reward_failure| * sqrt(p (1 - p))``."""
    from ecpo_gym.diagnostic import exact_success

    success = float(exact_success(env, list(task_ids), lambda state, actions: policy.action_probabilities(
        state, actions, temperature=temperature)))
    spread = abs(float(env.reward_success) - float(env.reward_failure))
    return success, spread * math.sqrt(max(0.0, success * (1.0 - success)))


def best_actions(env) -> dict[str, set[str]]:
    """For a diagnostic MDP: the truly best action(s) of every anchor state, by DP under the optimal policy."""
    from ecpo_gym.diagnostic import action_values

    best: dict[str, set[str]] = {}
    for task_id in env.task_ids:
        q = action_values(env.transition_model(task_id), gamma=1.0, horizon=env.max_steps).q
        for state, row in q.items():
            best[state] = {a for a, v in row.items() if v >= max(row.values()) - 1e-12}
    return best


def best_action_probability(policy, actions_of: dict[str, list[str]], best: dict[str, set[str]]) -> float:
    """pi(best | s) at temperature 1, averaged over the anchor states ``actions_of`` (state -> admissible
    actions; states never visited count as uniform)."""
    values = [sum(p for a, p in policy.action_probabilities(state, actions).items() if a in best[state])
              for state, actions in actions_of.items()]
    return float(np.mean(values)) if values else float("nan")


def misranked_anchor_fraction(rows: dict[str, Any], advantages: np.ndarray, best: dict[str, set[str]]) -> float:
    """App. C's over-rewarding event (the report's Definitions): of the anchors where the truly best and a worse
    action were both sampled, the share where a worse one's mean advantage is the higher; NaN where none was."""
    taken: dict[tuple, list[float]] = {}
    for g, s, a, adv in zip(rows["group_ids"], rows["anchor_keys"], rows["action_keys"], advantages):
        if s in best:
            taken.setdefault((g, s, a), []).append(float(adv))
    by_anchor: dict[tuple, dict[str, list[float]]] = {}
    for (g, s, a), advs in taken.items():
        by_anchor.setdefault((g, s), {"best": [], "worse": []})["best" if a in best[s] else "worse"].append(
            sum(advs) / len(advs))
    compared = [v for v in by_anchor.values() if v["best"] and v["worse"]]
    return float(np.mean([max(v["worse"]) > max(v["best"]) for v in compared])) if compared else float("nan")


CURVE_KEYS = ("train_success", "train_return", "eval_success", "eval_return_std", "misranked_fraction",
              "best_action_prob", "divergent_fraction", "mean_rho", "mean_rho_strict_valid", "adv_std", "adv_range")
# curve -> the credit diagnostic of ``compute_advantages`` it records per batch (NaN where an estimator has none)
DIAGNOSTICS = {"divergent_fraction": "divergent_anchor_fraction", "mean_rho": "mean_rho",
               "mean_rho_strict_valid": "mean_rho_strict_valid", "adv_std": "advantage_std"}


def cell_config(spec: dict[str, Any], run_dir: str, task_pool: Sequence[str]):
    """The native trainer's ``TrainConfig`` for one cell; no validation, checkpoint or TensorBoard (the study's)."""
    from ecpo_train.runtime.config import TrainConfig

    seed, n, optim = spec["seed"], spec["group_size"], spec["optim"]
    return TrainConfig(
        run_dir=run_dir, seed=1_000_003 * seed + 7_919 * n + 17, iterations=spec["iterations"], device="cpu",
        env_id=spec["env_id"], env_kwargs=dict(spec["env_kwargs"]), train_tasks=list(task_pool),
        val_every=0, n_groups=spec["groups_per_batch"], group_size=n,
        rollout_temperature=spec["rollout_temperature"], val_temperature=spec["eval_temperature"],
        policy="tabular", estimator=spec["method"], credit=dict(spec["credit"]),
        lr=float(optim["learning_rate"]), weight_decay=0.0, kl_coef=float(optim["kl_coef"]),
        clip_eps=float(optim["clip_eps"]), num_epochs=int(optim["epochs"]),
        mini_batch_size=int(optim["mini_batch_size"]), micro_batch_size=int(optim["micro_batch_size"]),
        max_grad_norm=float(optim["max_grad_norm"]), checkpoint_every=0, tensorboard=False, progress=False,
    )


def train_run(spec: dict[str, Any]) -> dict[str, Any]:
    """One cell: a fresh tabular policy trained by the native trainer, its curves and its final success."""
    import contextlib
    import io
    import tempfile

    import torch

    import ecpo_gym  # noqa: F401
    from ecpo_gym.group import GroupVectorEnv
    from ecpo_gym.group_workers import make_env
    from ecpo_train.core.rollout import collect_rollout
    from ecpo_train.runtime.run import open_run
    from ecpo_train.runtime.trainer import Trainer

    torch.set_num_threads(1)
    started = time.perf_counter()
    probe = make_env(spec["env_id"], spec["env_kwargs"]).unwrapped  # for the exact model and DP values
    task_pool = [str(t) for t in probe.task_ids][: spec["tasks"]]  # (all where the protocol names no pool)
    exact = spec["eval"] == "exact"
    best = best_actions(probe) if exact else {}
    actions_of = ({state: list(actions) for task in task_pool for state, actions in probe.transition_model(task).items()}
                  if exact else {})
    eval_envs = None if exact else GroupVectorEnv(spec["env_id"], num_groups=spec["eval_episodes"], group_size=1,
                                                  num_workers=0, env_kwargs=spec["env_kwargs"])
    curves: dict[str, list[float]] = {k: [] for k in CURVE_KEYS}
    with tempfile.TemporaryDirectory(prefix="credit_study_cell_") as run_dir:
        run = open_run(Trainer, cell_config(spec, run_dir, task_pool))
        trainer = run.engine
        policy = trainer.policy
        trainer.act_with(actor := InstructionQueryPolicy(policy))  # acts as the tabular policy

        def evaluate(iteration: int, repeats: int = 1) -> tuple[float, float]:
            """Success and the std of episode returns: exact by DP, else ``repeats`` x ``eval_episodes`` episodes."""
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

        def measure(sampled: Any, learned: Any) -> None:
            """The observe hook: after each iteration's update, its ``CURVE_KEYS``."""
            curves["train_success"].append(float(sampled.metrics["success"]))
            curves["train_return"].append(float(sampled.metrics["reward_mean"]))
            credit = {k: float(v) for k, v in learned.credit.items()}
            for name, key in DIAGNOSTICS.items():
                curves[name].append(credit.get(key, float("nan")))
            curves["adv_range"].append(credit.get("advantage_max", math.nan) - credit.get("advantage_min", math.nan))
            curves["misranked_fraction"].append(
                misranked_anchor_fraction(sampled.played.batch.credit_arrays(), learned.advantages, best)
                if exact else float("nan"))
            success, return_std = evaluate(trainer.iteration)  # (the iterations done before this one)
            curves["eval_success"].append(success)
            curves["eval_return_std"].append(return_std)
            curves["best_action_prob"].append(best_action_probability(policy, actions_of, best) if exact
                                              else float("nan"))

        # the trainer warns on every all-zero-advantage iteration; on a sparse corridor that is most early
        # iterations of many cells, and the study records it anyway (adv_std = 0)
        with run, contextlib.redirect_stderr(io.StringIO()):
            run.train(observe=measure)
    # the final policy, evaluated once more with a larger sample where evaluation is sampled
    final_success = curves["eval_success"][-1] if exact else evaluate(
        spec["iterations"], repeats=max(1, spec["final_eval_episodes"] // spec["eval_episodes"]))[0]
    probe.close()
    if eval_envs is not None:
        eval_envs.close()
    return {key: spec[key] for key in ("env_name", "env_id", "method", "group_size", "seed", "iterations")} | {
        "curves": curves, "final_success": final_success, "seconds": time.perf_counter() - started}


def available_envs(protocol: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    """Envs of the protocol that can be built here, and why the others were skipped."""
    import gymnasium as gym

    import ecpo_gym  # noqa: F401
    from ecpo_gym.group_workers import make_env

    usable, skipped = [], {}
    for env in protocol["envs"]:
        try:
            make_env(env["id"], env.get("kwargs") or {}).close()
            usable.append(env["name"])
        except (ImportError, gym.error.Error, FileNotFoundError, ValueError, AttributeError) as exc:
            skipped[env["name"]] = f"{env['id']} could not be built: {type(exc).__name__}: {exc}"
    return usable, skipped


def reference_success(protocol: dict[str, Any], names: Sequence[str]) -> dict[str, dict[str, float]]:
    """Exact success of the uniform and of the optimal policy on the protocol's exactly evaluated envs."""
    import ecpo_gym  # noqa: F401
    from ecpo_gym.diagnostic import success_probability
    from ecpo_gym.group_workers import make_env

    out = {}
    for env_spec in protocol["envs"]:
        if env_spec["name"] not in names or env_spec.get("eval") != "exact":
            continue
        env = make_env(env_spec["id"], env_spec.get("kwargs") or {}).unwrapped
        tasks = list(env.task_ids)[: env_spec.get("tasks")]
        uniform, optimal = [], []
        for task in tasks:
            model, start = env.transition_model(task), env.initial_state(task)
            uniform.append(success_probability(model, start, horizon=env.max_steps,
                                               policy={s: dict.fromkeys(a, 1.0) for s, a in model.items()}))
            optimal.append(success_probability(model, start, horizon=env.max_steps))
        out[env_spec["name"]] = {"uniform": float(np.mean(uniform)), "optimal": float(np.mean(optimal))}
        env.close()
    return out


def run_study(protocol: dict[str, Any], env_names: Sequence[str] | None = None, workers: int | None = None
              ) -> list[dict[str, Any]]:
    """Every cell's run, trained over a process pool, sorted by cell."""
    specs = run_specs(protocol, env_names)
    runs, started = [], time.perf_counter()
    for k, run in enumerate(in_processes(train_run, specs, int(workers or protocol.get("workers", 2)),
                                         ordered=False), 1):
        runs.append(run)
        print(f"[{k}/{len(specs)}] {run['env_name']} {run['method']} N={run['group_size']} seed={run['seed']}: "
              f"final success {run['final_success']:.3f} ({run['seconds']:.1f}s, "
              f"{time.perf_counter() - started:.0f}s elapsed)", flush=True)
    return sorted(runs, key=operator.itemgetter("env_name", "method", "group_size", "seed"))


def write_outputs(runs: Sequence[dict[str, Any]], protocol: dict[str, Any], runtime: float, out: Path,
                  skipped: dict[str, str]) -> dict[str, Any]:
    """Summary, figures, JSON and markdown report of a finished study; returns the summary."""
    from benchmarks.credit_study_report import plot_study, render_report, summarize

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
    write_text(prefix.with_suffix(".json"), json.dumps(payload, separators=(",", ":"), allow_nan=True))
    write_text(prefix.with_suffix(".md"), report)
    print(f"wrote {prefix.with_suffix('.md')}, {prefix.with_suffix('.json')} and {len(images)} figures "
          f"({runtime:.0f}s)")
    for claim in summary["claims"]:
        print(f"  {claim['id']} [{claim['env']}] {claim['verdict']}: {claim['claim']}")
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    command = StudyCommand(__spec__.name, __doc__.split("\n\n")[0],
                           {"run": ("quick", "workers", "envs", "protocol"), "report": ("from_json",)},
                           "run: train every cell of the protocol, then the report; report: the report again from "
                           "a finished study's JSON (its runs and protocol), without training",
                           {"protocol": PROTOCOL_PATH, "quick": False})
    command.add("--quick", action="store_const", const=True, help="run: tiny budget smoke run (CI)")
    command.add("--protocol", type=Path, help="run: the protocol (default: the committed credit_study.yaml)")
    command.add("--out", type=Path, default=RESULTS, common=True)
    command.add("--workers", type=count, help="run: processes (default: the protocol's)")
    command.add("--envs", nargs="*", help="run: subset of the protocol's env names")
    command.add("--from-json", type=Path, help="report: a finished study's JSON")
    args = command.parse(argv)
    if args.stage == "report":
        if not args.from_json:
            return refused("report needs --from-json FILE")
        if not args.from_json.exists():
            return refused(f"no study results at {args.from_json}: run `python -m benchmarks.credit_study run` first")
        payload = read_json(args.from_json)
        write_outputs(payload["runs"], payload["protocol"], float(payload["runtime_s"]), args.out,
                      payload["summary"]["skipped_envs"])
        return 0
    protocol = load_protocol(args.protocol, quick=args.quick)
    declared = [env["name"] for env in protocol["envs"]]
    unknown = [name for name in args.envs or () if name not in declared]
    if unknown:  # (a misspelt name was dropped and the others ran)
        return refused(f"--envs: the protocol has no env {unknown[0][:80]!r}; its envs: {', '.join(declared)}")
    usable, skipped = available_envs(protocol)
    names = [n for n in usable if not args.envs or n in args.envs]
    for name, why in skipped.items():
        print(f"skipping env {name}: {why}", file=sys.stderr)
    if not names:
        return refused("no environment of the protocol can be built")
    started = time.perf_counter()
    runs = run_study(protocol, names, args.workers)
    write_outputs(runs, protocol, time.perf_counter() - started, args.out, skipped)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
