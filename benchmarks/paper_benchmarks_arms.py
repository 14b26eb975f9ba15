"""The arms of ``benchmarks/paper_benchmarks.py``: the validation pass every stage uses, and one arm (a trainer
from the warm start with one credit estimator, resumed from its checkpoint across commands), which
``benchmarks/arms.py`` runs side by side with the others.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from benchmarks.arms import Plan, build_trainer, train_arm
from benchmarks.gpu_learning import mean_figures

REPORT = "report.json"  # the program's stages so far (the arm reads its training tasks there)


def validate(trainer: Any, sets: dict[str, tuple[str, dict, list[str]]]) -> tuple[list[dict], float]:
    """Every validation set once, through the trainer's own validation pass (``builders.validation_outcome``:
    the validation temperature, the draws fixed by (seed, copy, step)), each set on its own environment; the
    episodes (``paper_benchmarks_report`` module docstring) and the seconds taken. Each set is also recorded
    in the arm's ``validation.jsonl`` under its name."""
    from ecpo_gym.group import GroupVectorEnv
    from ecpo_train.core.tasks import validation_seed
    from ecpo_train.runtime.builders import validation_outcome

    started = time.perf_counter()
    cfg, episodes = trainer.config, []
    for name, (env_id, env_kwargs, tasks) in sets.items():
        env_kwargs = {**env_kwargs, **{k: v for k, v in cfg.env_kwargs.items() if k == "max_steps"}}
        config = dataclasses.replace(cfg, env_id=env_id, env_kwargs=env_kwargs)
        envs = GroupVectorEnv(env_id, len(tasks), cfg.val_episodes_per_task, env_kwargs=env_kwargs)
        try:
            played, _ = validation_outcome(trainer.policy, config, envs, tasks, validation_seed(cfg.seed))
        finally:
            envs.close()
        trainer.metrics_log.append_validation(trainer.iteration, played, tasks=name)
        copies: dict[str, int] = {}
        for e in played:
            copies[e.task_id] = copies.get(e.task_id, -1) + 1
            graded = next((e.final_info[k] for k in ("score", "em") if e.final_info.get(k) is not None), e.won)
            episodes.append({"set": name, "task": e.task_id, "copy": copies[e.task_id], "type": e.task_type,
                             "won": int(e.won), "score": float(graded), "invalid": int(e.invalid_steps),
                             "steps": int(e.length)})
    return episodes, time.perf_counter() - started


def run_arm(spec: dict[str, Any], plan: Plan) -> dict[str, Any]:
    """One arm, run by ``benchmarks.arms`` in a process of its own (``spec``: the arms' config, the out folder, the
    validation ``sets``): a trainer from the warm start (resumed from its checkpoint where one exists), iterations
    up to the plan (decided once for every arm from their first iterations) with a checkpoint and
    ``OUT/arm_<arm>.json`` (written whole) after each, and the closing validation once the plan is done; returns
    the arm's result."""
    from ecpo_train.policies.atomic import write_text

    out, arm = Path(spec["out"]), spec["arm"]
    path = out / f"arm_{arm}.json"
    state = json.loads(path.read_text()) if path.is_file() else {"result": {"per_iteration": []}}
    if "after" in state:
        return state["result"]
    rows = state["result"]["per_iteration"]
    train_tasks = json.loads((out / REPORT).read_text())["train_tasks"]
    trainer, _ = build_trainer(spec, model=str(out / "sft_model"), algorithm=arm, run_dir=str(out / f"run_{arm}"),
                               train_tasks=train_tasks)

    def write(stopped: str | None = None) -> None:
        state["result"] = {"iterations_done": len(rows), "per_iteration": rows, "rates": mean_figures(rows)} | (
            {"stopped": stopped} if stopped else {})
        write_text(path, json.dumps(state, indent=1) + "\n")  # what a second command continues from

    def save() -> None:
        trainer.save_checkpoint()
        write()

    try:
        if trainer.folder.checkpoint().is_file():
            trainer.load_checkpoint()
        train_arm(trainer, rows, 1, spec["deadline"], spec["reserve"], save)
        planned, _ = plan(rows[0]["wall"], 0.0)
        stopped = train_arm(trainer, rows, planned, spec["deadline"], spec["reserve"], save)
        if stopped:
            write(f"{stopped}: run the command again to continue")
            return state["result"]
        state["after"], _ = validate(trainer, spec["sets"])
        write()
    finally:
        trainer.close()
    return state["result"]
