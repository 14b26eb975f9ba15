"""Counterfactual credit updates, the protocol: concentration checkpoints, then one update per estimator per batch.

An arm is one policy on one corridor. :func:`make_checkpoints` trains it with GRPO (the native ``Trainer``) and saves
a ``Trainer.save`` (weights, AdamW state, RNGs) the first time the policy's mean pi(good door | room) at
T = 1 reaches each target concentration. :func:`measure_batch` then, for one checkpoint and one batch seed, loads
the checkpoint, samples one rollout batch (``Trainer.sample``, the iteration's step A), and for every estimator
reloads the checkpoint, computes that estimator's advantages on the *same* batch (``compute_advantages``) and applies
one update (``Trainer.update_policy``, the iteration's step E) with the same shuffle seed. Measured per estimator:

* ``delta_j``: change of the exact success probability (DP over the corridor's MDP) at the validation temperature;
* ``lucky``: mean change of log pi(rare | s) at T = 1 over the batch's lucky-singleton anchors: a non-good door
  taken exactly once in the group whose episode was won, beside the good door taken >= 2 times at least once in a
  lost episode (the paper's fig. 1 situation); ``lucky_sv`` the same over those that are StrictValid (first
  visited at step >= d_min, so ECPO's gate may open);
* ``rare_sv``: mean change of log pi(a | s) over every non-good door sampled at a StrictValid anchor;
* ``term_lucky``: the step term (the estimator's advantage minus GRPO's) at the lucky singleton's row.

Nothing here re-implements the rollout, the credit or the update: only the bookkeeping around them.
"""

from __future__ import annotations

import contextlib
import io
import math
from pathlib import Path
from typing import Any

import numpy as np

ESTIMATORS = ("grpo", "gigpo_std", "ecpo", "ecpo_anchor_scale", "ecpo_eca_only", "ecpo_anchor_scale_eca_only")

# Corridors where the good door itself sometimes fails (good_prob < 1 and, for "noisy", a per-step hazard), so a
# group often holds a failed good-door visit beside a rare door that got lucky.
TABULAR = {  # the two tabular arms' trainer settings and search: they differ only in the corridor
    "config": {"n_groups": 8, "group_size": 8, "lr": 0.3, "kl_coef": 0.01, "weight_decay": 0.0,
               "mini_batch_size": 100000, "micro_batch_size": 100000, "max_grad_norm": 1000.0, "credit": {"d_min": 1}},
    "targets": [0.5, 0.8, 0.95], "max_iterations": 2000,
}
ARMS: dict[str, dict[str, Any]] = {
    "tabular_corridor": {
        "policy": "tabular", "env_id": "ecpo/DivergentAnchor-v0",
        "env_kwargs": {"num_tasks": 1, "depth": 5, "good_prob": 0.85, "rare_prob": [0.4, 0.7]},
    } | TABULAR,
    "tabular_noisy_wide": {
        "policy": "tabular", "env_id": "ecpo/DivergentAnchorNoisy-v0",
        "env_kwargs": {"num_tasks": 1, "depth": 5, "branching": 5, "good_prob": 0.9, "rare_prob": [0.5, 0.8]},
    } | TABULAR,
    # SmolLM2-135M scoring the doors (the corridor_llm preset as it is: 4-room corridors, d_min 1, lr 2e-5, two
    # epochs), good door 0.85. GRPO does not get it to the targets on two cores: at lr 1e-4 one update already
    # lowered J (by 0.05 at pi(good) = 0.5) and GRPO drifted away from the good door; at the preset's 2e-5 it
    # moved pi(good) 0.59 -> 0.63 in 20 iterations (30 s each). So this arm reaches each target by supervised
    # steps toward the good door at lr 2e-6 (one step at 2e-5 jumped from below 0.5 to 0.74), then clears AdamW's
    # moments (the supervised momentum at the GRPO lr carried pi(good) from 0.5 to 0.82 in two iterations) and
    # settles with 2 GRPO iterations, so that the moments are GRPO's.
    "smollm2_corridor": {
        "policy": "llm", "preset": "corridor_llm", "env_id": "ecpo/DivergentAnchor-v0",
        "env_kwargs": {"num_tasks": 2, "depth": 4, "good_prob": 0.85, "rare_prob": [0.4, 0.7]},
        "config": {"device": "cpu", "save_optimizer": True},
        "targets": [0.5, 0.8, 0.95], "max_iterations": 200, "reach": "supervised", "reach_lr": 2.0e-6, "settle": 2,
    },
}


def arm_config(arm: dict[str, Any], run_dir: str, seed: int) -> Any:
    """The native ``TrainConfig`` of an arm (GRPO; the estimator is chosen per update, not here)."""
    from ecpo_train.runtime.config import load_config, make_config

    values = {"run_dir": run_dir, "seed": seed, "estimator": "grpo", "env_id": arm["env_id"],
              "env_kwargs": dict(arm["env_kwargs"]), "val_every": 0, "checkpoint_every": 0, "tensorboard": False,
              "progress": False, "val_temperature": 0.4, "rollout_temperature": 1.0, **arm["config"]}
    if arm["policy"] == "tabular":
        return make_config({"policy": "tabular", "device": "cpu", **values})
    base = load_config(arm["preset"])
    from ecpo_train.runtime.config import config_dict

    merged = config_dict(base) | values
    merged["credit"] = dict(config_dict(base)["credit"]) | dict(arm["config"].get("credit", {}))
    return make_config(merged)


def good_doors(env: Any) -> dict[str, str]:
    """state_key -> the good door of that room, for every room of every task of a corridor env."""
    out = {}
    for task in env.task_ids:
        layout = env.layout(task)
        for room, (doors, good) in enumerate(zip(layout.doors, layout.good_door)):
            out[f"{task}:room{room}"] = doors[good]
    return out


def state_distributions(policy: Any, env: Any, temperature: float, env_name: str = "") -> dict[str, dict[str, float]]:
    """pi(. | s) at ``temperature`` in every room: the tabular policy's table, or the scoring LM on the room's
    context as the env shows it (history-free prompts, as ``builders.exact_success`` uses them)."""
    from ecpo_train.runtime.builders import context_distributions

    states = [s for task in env.task_ids for s in env.transition_model(task)]
    if hasattr(policy, "action_probabilities"):
        return {s: policy.action_probabilities(s, env.state_view(s)["admissible_actions"], temperature=temperature)
                for s in states}
    return context_distributions(policy, env, env_name, states, temperature)


def concentration(policy: Any, env: Any, good: dict[str, str], env_name: str = "") -> float:
    """Mean over rooms of pi(good door | room) at T = 1."""
    dist = state_distributions(policy, env, 1.0, env_name)
    return float(np.mean([dist[s][good[s]] for s in good]))


def exact_j(trainer: Any) -> float:
    from ecpo_train.runtime.builders import exact_success

    cfg = trainer.config
    value = exact_success(trainer.policy, cfg.env_id, cfg.env_kwargs, trainer.train_tasks, cfg.val_temperature,
                          history_length=cfg.history_length)
    if value is None:
        raise ValueError(f"{cfg.env_id} with this policy has no exact success (needs history_length=0 for an LLM)")
    return float(value)


def supervised_step(trainer: Any, env: Any, good: dict[str, str], env_name: str, lr: float | None = None) -> float:
    """One step of the trainer's AdamW on -mean over rooms of log pi(good door | room) at T = 1 (the scoring LM on
    history-free prompts, through the learner's own ``logprobs``): a push toward the good door, for the
    concentrations that GRPO at a stable learning rate reaches too slowly. ``lr`` replaces the optimizer's
    learning rate for this step only (AdamW's first steps move every weight by about lr, so small steps are
    what lets a target be met closely). Returns the loss before the step."""
    from ecpo_train.runtime.builders import state_contexts
    from ecpo_train.runtime.sft import Demonstration, candidate_rows, reply_cross_entropy

    policy, states = trainer.policy, list(good)
    demos = [Demonstration(ctx, good[s]) for ctx, s in zip(state_contexts(env, env_name, states), states)]
    rows, chosen, _ = candidate_rows(policy, demos)  # the good door is always admissible: nothing is left out
    nll, count = reply_cross_entropy(policy, rows, chosen)
    loss = nll / count
    trainer.optimizer_step(loss, lr)
    return float(loss.detach())


def make_checkpoints(arm: dict[str, Any], folder: Path, seed: int = 0, log: Any = print) -> list[dict[str, Any]]:
    """Train the arm and save a checkpoint the first time mean pi(good) reaches each target.

    ``arm["reach"]`` is ``"grpo"`` (default: GRPO iterations until the target) or ``"supervised"``
    (:func:`supervised_step` at ``arm["reach_lr"]`` until the target, then AdamW's moments are cleared and
    ``arm["settle"]`` GRPO iterations rebuild them, so that the measured update continues GRPO's optimiser and
    not the supervised steps' momentum; the saved concentration is the one measured after them)."""
    from ecpo_train.runtime.run import open_run
    from ecpo_train.runtime.trainer import Trainer

    folder.mkdir(parents=True, exist_ok=True)
    run = open_run(Trainer, arm_config(arm, str(folder / "train"), seed), overwrite=True)  # (this search's own folder)
    trainer = run.engine
    env = _probe_env(arm)
    good = good_doors(env)
    supervised = arm.get("reach", "grpo") == "supervised"
    saved, targets, steps = [], list(arm["targets"]), 0

    def save(level: float) -> None:
        path = trainer.save(folder / f"pi{targets[0]:.2f}.pt")
        saved.append({"target": targets[0], "concentration": level, "iteration": trainer.iteration,
                      "supervised_steps": steps, "exact_success": exact_j(trainer), "path": str(path)})
        log(f"  checkpoint pi(good) >= {targets[0]}: {level:.3f} at GRPO iteration {trainer.iteration}"
            + (f", after {steps} supervised steps" if supervised else ""))
        targets.pop(0)

    def reached(_: dict[str, float]) -> bool:  # the run shell's stop hook: after each GRPO iteration
        level = concentration(trainer.policy, env, good, arm["env_id"])
        if trainer.iteration % 10 == 0:
            log(f"  GRPO iteration {trainer.iteration}: mean pi(good) = {level:.3f}")
        while targets and level >= targets[0]:
            save(level)
        return not targets

    with run, contextlib.redirect_stderr(io.StringIO()):
        if not supervised:
            run.train(arm["max_iterations"], stop=reached)
        while supervised and targets and steps < arm["max_iterations"]:
            supervised_step(trainer, env, good, arm["env_id"], arm.get("reach_lr"))
            steps += 1
            level = concentration(trainer.policy, env, good, arm["env_id"])
            if level >= targets[0]:  # settle, then save whatever concentration the settling left
                trainer.clear_optimizer_moments()  # no supervised momentum may carry into the GRPO steps
                if int(arm.get("settle", 0)):
                    run.train(int(arm["settle"]))
                save(concentration(trainer.policy, env, good, arm["env_id"]))
    for target in targets:
        log(f"  target pi(good) = {target} not reached in {arm['max_iterations']} iterations")
    return saved


def _probe_env(arm: dict[str, Any]) -> Any:
    import ecpo_gym  # noqa: F401
    from ecpo_gym.group_workers import make_env

    return make_env(arm["env_id"], dict(arm["env_kwargs"])).unwrapped


def lucky_singletons(batch: Any, good: dict[str, str], won: dict[int, bool], d_min: int) -> list[dict[str, Any]]:
    """The batch's lucky-singleton anchors: per (group, state), a non-good door with one visit, in a won episode,
    beside the good door with >= 2 visits, at least one in a lost episode. ``won``: traj id -> episode won."""
    visits: dict[tuple, list[tuple[str, int, int, int]]] = {}
    for row, (g, t, step, s, a) in enumerate(zip(batch.group_id, batch.traj_id, batch.step, batch.anchor_key,
                                                 batch.action_key)):
        visits.setdefault((int(g), str(s)), []).append((str(a), int(t), int(step), row))
    found = []
    for (g, s), rows in visits.items():
        if s not in good:
            continue
        first_step = min(step for _, _, step, _ in rows)
        good_rows = [r for r in rows if r[0] == good[s]]
        if len(good_rows) < 2 or all(won[t] for _, t, _, _ in good_rows):
            continue
        for action in {a for a, *_ in rows if a != good[s]}:
            taken = [r for r in rows if r[0] == action]
            if len(taken) == 1 and won[taken[0][1]]:
                found.append({"group": g, "state": s, "rare": action, "good": good[s], "row": taken[0][3],
                              "strict_valid": first_step >= d_min})
    return found


def rare_at_strict_valid(batch: Any, good: dict[str, str], d_min: int) -> set[tuple[str, str]]:
    """(state, non-good door) pairs sampled at anchors (>= 2 visits, >= 2 distinct doors) first visited at step
    >= d_min in their group: where ECPO's gate can open."""
    visits: dict[tuple, list[tuple[str, int]]] = {}
    for g, step, s, a in zip(batch.group_id, batch.step, batch.anchor_key, batch.action_key):
        visits.setdefault((int(g), str(s)), []).append((str(a), int(step)))
    pairs = set()
    for (_, s), rows in visits.items():
        if s in good and len(rows) >= 2 and len({a for a, _ in rows}) >= 2 and min(t for _, t in rows) >= d_min:
            pairs |= {(s, a) for a, _ in rows if a != good[s]}
    return pairs


def _mean_delta(before: dict, after: dict, pairs: Any) -> float:
    values = [math.log(after[s][a]) - math.log(before[s][a]) for s, a in pairs]
    return float(np.mean(values)) if values else float("nan")


def one_update_each(trainer: Any, checkpoint: str, rollout: Any, advantages: dict[str, np.ndarray],
                    probe: Any, shuffle_seed: int = 12345) -> dict[str, Any]:
    """For each estimator: reload ``checkpoint`` (weights + optimizer state), apply ONE update (step E,
    ``Trainer.update_policy``, as the iteration's) with its advantages and the same shuffle seed, and return
    ``probe(trainer)`` of the updated policy. Identical advantage vectors give an identical (deterministic) update,
    so their probe is computed once."""
    done: dict[bytes, Any] = {}
    out = {}
    for name, adv in advantages.items():
        key = np.asarray(adv, dtype=np.float64).tobytes()
        if key not in done:
            trainer.load(Path(checkpoint))
            with contextlib.redirect_stderr(io.StringIO()):
                trainer.update_policy(rollout.batch, adv, np.random.default_rng(shuffle_seed))
            done[key] = probe(trainer)
        out[name] = done[key]
    return out


def measure_batch(trainer: Any, checkpoint: str, batch_seed: int, env: Any, good: dict[str, str],
                  estimators: tuple[str, ...] = ESTIMATORS, shuffle_seed: int = 12345) -> dict[str, Any]:
    """One batch (seeded by ``batch_seed``) at one checkpoint: every estimator's one-update effects."""
    from ecpo_train.core.credit import compute_advantages
    from ecpo_train.core.iteration import draw_iteration

    cfg = trainer.config
    trainer.load(Path(checkpoint))
    tasks, env_seed = draw_iteration(cfg, trainer.train_tasks, np.random.default_rng(batch_seed), iteration=0)
    rollout = trainer.sample(tasks, env_seed, sampling_seed=batch_seed)
    batch = rollout.batch
    won = {int(e.traj_id): bool(e.won) for e in rollout.episodes}
    d_min = int(cfg.credit.d_min)
    lucky = lucky_singletons(batch, good, won, d_min)
    pairs = {"lucky": {(x["state"], x["rare"]) for x in lucky},
             "lucky_sv": {(x["state"], x["rare"]) for x in lucky if x["strict_valid"]},
             "rare_sv": rare_at_strict_valid(batch, good, d_min)}
    before = state_distributions(trainer.policy, env, 1.0, cfg.env_id)
    j_before = exact_j(trainer)
    rows = batch.credit_rows()
    hyper = cfg.credit_hyperparameters()
    advantages = {name: np.asarray(compute_advantages(name, rows, hyper)[0]) for name in estimators}

    def probe(updated: Any) -> dict[str, float]:
        after = state_distributions(updated.policy, env, 1.0, cfg.env_id)
        return {"delta_j": exact_j(updated) - j_before} | {k: _mean_delta(before, after, v) for k, v in pairs.items()}

    effects = one_update_each(trainer, checkpoint, rollout, advantages, probe, shuffle_seed)
    out: dict[str, Any] = {"seed": batch_seed, "j_before": j_before, "n_lucky": len(lucky),
                           "n_lucky_sv": sum(x["strict_valid"] for x in lucky), "n_rare_sv": len(pairs["rare_sv"]),
                           "success": float(np.mean(list(won.values()))), "estimators": {}}
    for name in estimators:
        term = advantages[name] - advantages["grpo"]
        out["estimators"][name] = dict(effects[name]) | {
            "term_lucky": float(np.mean([term[x["row"]] for x in lucky])) if lucky else float("nan"),
            "term_lucky_sv": float(np.mean([term[x["row"]] for x in lucky if x["strict_valid"]]))
            if any(x["strict_valid"] for x in lucky) else float("nan")}
    return out
