"""``ecpo demo``: a real small LM learns with ECPO on CPU, after a look at the credit itself.

Part 1 (well under a second): GRPO vs GiGPO_w/std vs ECPO credit at a divergent anchor, on a synthetic
branching task (below). Part 2 (about 10 minutes on two cores): SmolLM2-135M-Instruct, pulled from PyPI,
trained with ECPO on two divergent-anchor corridors as text (preset ``corridor_llm``: it scores the admissible
doors of each room), with the exact success before and after training, the time split and curves.
``ecpo demo --tabular`` instead trains the tabular policy with ECPO next to GiGPO_w/std (seconds).

Part 1's task:

A few groups of N rollouts walk a corridor of ``depth`` rooms (each rollout sees its own view of a room,
so these are not anchors), then reach the same junction: the divergent anchor. There a frequent good action
("take the stairs", success 0.85) and a rare lucky action ("jump the gap", success 0.3) compete; a step may
also be an invalid action (-0.1). Success pays 10. The table shows each method's advantage at the junction.
Only numpy and rich are needed; the run takes well under a second.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from ecpo_gym.canonical import INVALID_ACTION
from ecpo_train.core.credit import compute_advantages

JUNCTION = "you reach a junction: a staircase goes down, a narrow gap opens to the east"
GOOD, LUCKY = "take the stairs", "jump the gap"
METHODS = {"GRPO": "grpo", "GiGPO w/std": "gigpo_std", "ECPO": "ecpo"}


def roll_batch(groups: int = 3, rollouts: int = 8, depth: int = 7, seed: int = 3) -> dict[str, list]:
    """Synthetic rollouts: rows (group_ids, traj_ids, steps, anchor_keys, action_keys, rewards)."""
    rng = np.random.default_rng(seed)
    cols: dict[str, list] = {k: [] for k in ("group_ids", "traj_ids", "steps", "anchor_keys", "action_keys", "rewards")}

    def add(group: int, traj: int, step: int, state: str, action: str, reward: float) -> None:
        for key, value in zip(cols, (f"task-{group}", traj, step, state, action, reward)):
            cols[key].append(value)

    for group in range(groups):
        for traj in range(rollouts):
            for step in range(1, depth):
                invalid = rng.random() < 0.1
                add(group, traj, step, f"corridor room {step}, lamp flickers {traj}", INVALID_ACTION if invalid else "go north",
                    -0.1 if invalid else 0.0)
            # the divergent anchor: the frequent action for all but the last rollout, the rare one for it.
            # Group 0 is the paper's fig. 1 case (A: 6 of 7 succeed, the rare B gets lucky); the others draw.
            action = LUCKY if traj == rollouts - 1 else GOOD
            if group == 0:
                success = traj != rollouts - 2
            else:
                success = bool(rng.random() < (0.3 if action == LUCKY else 0.85))
            add(group, traj, depth, JUNCTION, action, 0.0)
            add(group, traj, depth + 1, f"{'the exit' if success else 'a dead end'} ({traj})", "open door",
                10.0 if success else 0.0)
    return cols


def _fmt(value: float) -> str:
    return f"{value:+.3f}"


def credit_table(cols: dict[str, list], estimator: Callable = compute_advantages) -> tuple[Table, dict]:
    """Rich table of each method's advantage at the junction rows, and each method's diagnostics."""
    results = {label: estimator(name, cols) for label, name in METHODS.items()}
    table = Table(title="Advantage at the divergent anchor (junction)", show_lines=False)
    for column in ("group", "rollout", "action", "won", *METHODS):
        table.add_column(column, justify="right" if column in METHODS else "left")
    junction_rows = [i for i, key in enumerate(cols["anchor_keys"]) if key == JUNCTION]
    won = {(cols["group_ids"][i], cols["traj_ids"][i]) for i, r in enumerate(cols["rewards"]) if r >= 10.0}
    for i in junction_rows:
        group, traj = cols["group_ids"][i], cols["traj_ids"][i]
        action = cols["action_keys"][i]
        style = "bold yellow" if action == LUCKY else None
        table.add_row(group, str(traj), action, "yes" if (group, traj) in won else "no",
                      *(_fmt(float(adv[i])) for adv, _ in results.values()), style=style)
    return table, {label: diag for label, (_, diag) in results.items()}


def diagnostics_table(diagnostics: dict[str, dict[str, float]]) -> Table:
    table = Table(title="Diagnostics")
    table.add_column("metric")
    for label in diagnostics:
        table.add_column(label, justify="right")
    names = list(dict.fromkeys(k for diag in diagnostics.values() for k in diag))
    for name in names:
        table.add_row(name, *(f"{diag[name]:.4g}" if name in diag else "-" for diag in diagnostics.values()))
    return table


def credit_section(console: Console) -> None:
    """Part 1: each method's advantage at one hand-built divergent anchor."""
    cols = roll_batch()
    table, diagnostics = credit_table(cols)
    console.print(
        "[bold]ECPO credit demo[/bold]: 3 groups x 8 rollouts meet at one junction at step 7; "
        f"'{GOOD}' is frequent, '{LUCKY}' rare (highlighted). Paper defaults: gamma 0.95, omega 1, kappa 2, "
        "tau 2, d_min 7, rho_min 0.5."
    )
    console.print(table)
    console.print(diagnostics_table(diagnostics))
    console.print(
        "GiGPO credits each occurrence from its own return, so the lucky singleton ranks with every success. "
        "ECPO gives one value per canonical action, shrinks a singleton's centred evidence by 1/(1+kappa) "
        "before normalising over actions (sigma_act), and weights the anchor by rho (0 below d_min or when "
        "not comparable, floored at rho_min otherwise)."
    )


TRAINED_METHODS = {"ECPO": "ecpo", "GiGPO w/std": "gigpo_std"}


def training_section(console: Console, run_root: str = "runs/demo", iterations: int | None = None) -> dict:
    """Part 2: train the tabular policy with ECPO and with GiGPO_w/std on the quick-start corridors."""
    import time

    from ecpo_train.runtime.config import load_config
    from ecpo_train.runtime.plotting import plot_comparison
    from ecpo_train.runtime.run import train
    from ecpo_train.runtime.trainer import Trainer

    histories, seconds = {}, {}
    for label, estimator in TRAINED_METHODS.items():
        overrides = [f"estimator={estimator}", f"run_dir={run_root}/{estimator}", "tensorboard=false"]
        if iterations is not None:
            overrides.append(f"iterations={iterations}")
        config = load_config("quickstart", overrides)
        if label == next(iter(TRAINED_METHODS)):
            console.print(
                f"\n[bold]Training[/bold] a tabular softmax policy on {config.env_id} {config.env_kwargs} "
                f"({config.n_groups} groups x {config.group_size} rollouts, {config.iterations} iterations, "
                f"lr {config.lr}; validation at temperature 0.4 after iteration 1, every {config.val_every} and at the "
                f"end; uniform random play succeeds {optimal_success(config, uniform=True):.3f}, the best policy "
                f"{optimal_success(config):.2f}):"
            )
        started = time.perf_counter()
        histories[label] = train(Trainer, config, overwrite=True)  # the demo replaces its own earlier run
        seconds[label] = time.perf_counter() - started
    console.print(progress_table(histories))
    console.print(summary_table(histories, seconds))
    plot = plot_comparison({label: f"{run_root}/{alg}" for label, alg in TRAINED_METHODS.items()},
                           f"{run_root}/curves.png", title="ECPO vs GiGPO w/std, tabular policy, DivergentAnchor-v0")
    console.print(f"Curves: {plot}  (per-run metrics.jsonl and checkpoint.pt under {run_root}/)")
    return histories


def optimal_success(config, uniform: bool = False) -> float:
    """Exact mean success over the corridors of the best policy (or of uniform random play), by DP."""
    from ecpo_gym.diagnostic import DivergentAnchorEnv, success_probability

    env = DivergentAnchorEnv(**config.env_kwargs)
    wins = []
    for task_id in env.task_ids:
        model = env.transition_model(task_id)
        policy = {state: {a: 1.0 for a in actions} for state, actions in model.items()} if uniform else None
        wins.append(success_probability(model, env.initial_state(task_id), horizon=env.max_steps, policy=policy))
    return float(np.mean(wins))


def _val(metrics: dict, key: str) -> str:
    return f"{metrics[key]:.2f}" if key in metrics else "-"


def progress_table(histories: dict[str, list[dict]]) -> Table:
    """Validation success at every validated iteration: exact (DP) where available, and sampled."""
    table = Table(title="Validation success at T=0.4 by iteration: exact probability (sampled, 16 episodes/corridor)")
    table.add_column("iteration", justify="right")
    for label in histories:
        table.add_column(label, justify="right")
    by_iteration = {label: {int(m["iteration"]): m for m in history if "val/success" in m}
                    for label, history in histories.items()}
    for iteration in sorted(set().union(*by_iteration.values())):
        row = [str(iteration)]
        for rows in by_iteration.values():
            m = rows.get(iteration, {})
            row.append(f"{_val(m, 'val/exact_success')} ({_val(m, 'val/success')})" if m else "-")
        table.add_row(*row)
    return table


def summary_table(histories: dict[str, list[dict]], seconds: dict[str, float]) -> Table:
    """Per method: validation success after the first vs the final iteration, train success, wall time."""
    table = Table(title="Success rising, first vs final iteration (same hyperparameters for both methods); "
                        "val = exact at T=0.4, train = rollouts at T=1.0 (mean of 5 iterations)")
    # val = exact success at T=0.4 after iteration 1 / the last one (sampled: 16 episodes per corridor);
    # train = mean success of the T=1.0 rollouts over the first / last 5 iterations
    for column in ("method", "val 1", "val end", "sampled 1", "sampled end", "train 1-5", "train end", "time"):
        table.add_column(column, justify="left" if column == "method" else "right")
    for label, history in histories.items():
        validated = [m for m in history if "val/success" in m]
        first, last = (validated[0], validated[-1]) if validated else ({}, {})
        train = [m["success"] for m in history]
        table.add_row(label, _val(first, "val/exact_success"), _val(last, "val/exact_success"),
                      _val(first, "val/success"), _val(last, "val/success"),
                      f"{np.mean(train[:5]):.2f}", f"{np.mean(train[-5:]):.2f}", f"{seconds[label]:.0f}s")
    return table


def llm_section(console: Console, run_root: str = "runs/demo-llm", overrides: list[str] | None = None) -> dict:
    """Part 2: the real small LM trained with ECPO on the corridors; success before/after, time split, curves."""
    import time

    from ecpo_train.runtime.config import load_config
    from ecpo_train.runtime.models import DEMO_MODEL, pull_model
    from ecpo_train.runtime.run import open_run
    from ecpo_train.runtime.trainer import Trainer

    started = time.perf_counter()
    model_dir = pull_model(DEMO_MODEL)
    pull_seconds = time.perf_counter() - started
    # threads=auto: torch's threads follow the cores other processes leave free (runtime/threads.py); with torch's
    # default, one competing busy process made the demo 6.8x slower than idle (issue 22)
    config = load_config("corridor_llm", [f"model={model_dir}", f"run_dir={run_root}", "threads=auto",
                                          *(overrides or [])])
    console.print(
        f"\n[bold]Training SmolLM2-135M-Instruct with ECPO[/bold] on {config.env_id} {config.env_kwargs}: "
        f"{config.n_groups} groups x {config.group_size} rollouts, {config.iterations} iterations, lr {config.lr}. "
        "The LM scores each admissible door as the continuation of the room's prompt (policy_mode=score). Success "
        f"is exact (DP over the corridors with the LM's action distribution at T={config.val_temperature}), so it "
        "carries no sampling noise; the sampled validation success is shown with its 95 % binomial interval. "
        f"Uniform random doors succeed {optimal_success(config, uniform=True):.3f}, the best policy "
        f"{optimal_success(config):.3f}."
    )
    with open_run(Trainer, config, overwrite=True) as run:  # the demo replaces its own earlier run
        history = run.train()
    plot = Path(config.run_dir) / "curves.png"  # (the run shell plots a run that trained)
    episodes = config.val_episodes_per_task * len(run.engine.val_tasks)
    console.print(llm_summary_table(history, episodes))
    validated = [m for m in history if "val/success" in m]
    if len(validated) >= 2:
        first, last = validated[0], validated[-1]
        exact = ""
        if "val/exact_success" in first and "val/exact_success" in last:
            gain = last["val/exact_success"] - first["val/exact_success"]
            exact = (f"exact success {first['val/exact_success']:.3f} -> {last['val/exact_success']:.3f} "
                     f"({gain:+.3f}; no sampling noise); ")
        console.print(f"[bold]Before vs after[/bold] (iteration {int(first['iteration'])} vs "
                      f"{int(last['iteration'])}): {exact}sampled {first['val/success']:.2f} ± "
                      f"{binomial_interval(first['val/success'], episodes):.2f} -> {last['val/success']:.2f} ± "
                      f"{binomial_interval(last['val/success'], episodes):.2f} over {episodes} episodes.")
    totals = {stage: sum(m.get(f"time/{stage}", 0.0) for m in history)
              for stage in ("generation", "env", "credit", "update", "validation")}
    trained = [m for m in history if "time/iteration" in m]
    total = sum(m["time/iteration"] for m in trained)
    split = ", ".join(f"{stage} {seconds:.0f}s ({seconds / max(total, 1e-9):.0%})" for stage, seconds in totals.items())
    console.print(f"Time: {total:.0f}s training ({total / max(len(trained), 1):.1f}s per iteration): {split}; model pull "
                  f"{pull_seconds:.0f}s. Curves: {plot}; metrics: {config.run_dir}/metrics.jsonl")
    return {"history": history, "seconds": total}


def binomial_interval(p: float, n: int) -> float:
    """Half-width of the 95 % normal-approximation interval of a success rate over ``n`` episodes."""
    return 1.96 * float(np.sqrt(max(p * (1 - p), 0.0) / max(n, 1)))


def llm_summary_table(history: list[dict], episodes: int) -> Table:
    table = Table(title="SmolLM2-135M + ECPO: validation success at T=0.4, before training vs after")
    for column in ("iteration", "exact success", f"sampled ({episodes} episodes)", "train success (T=1)"):
        table.add_column(column, justify="right")
    for m in history:
        if "val/success" not in m:
            continue
        sampled = m["val/success"]
        table.add_row(str(int(m["iteration"])), _val(m, "val/exact_success"),
                      f"{sampled:.2f} ± {binomial_interval(sampled, episodes):.2f}",
                      f"{m['success']:.2f}" if "success" in m else "- (before training)")
    return table


def main(iterations: int | None = None, tabular: bool = False, overrides: list[str] | None = None) -> None:
    console = Console()
    credit_section(console)
    if tabular:
        training_section(console, iterations=iterations)
    else:
        llm_section(console, overrides=(overrides or []) + ([f"iterations={iterations}"] if iterations else []))


if __name__ == "__main__":
    main()
