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

from benchmarks.arms import Plan, arm_row, open_arm, train_arm
from benchmarks.gpu_learning import mean_figures

REPORT = "report.json"  # the program's stages so far (the arm reads its training tasks there)


def validate(run: Any, sets: dict[str, tuple[str, dict, list[str]]]) -> tuple[list[dict], float]:
    """Every validation set once, through the native validation pass (``builders.validation_outcome``: the
    validation temperature, the draws fixed by (seed, copy, step)), each set on its own environment; the
    episodes (``paper_benchmarks_report`` module docstring) and the seconds taken. Each set is also recorded
    in the run's ``validation.jsonl`` under its name (the run shell's log)."""
    from ecpo_gym.group import GroupVectorEnv
    from ecpo_train.core.tasks import validation_seed
    from ecpo_train.runtime.builders import validation_outcome

    started = time.perf_counter()
    trainer, cfg, episodes = run.engine, run.config, []
    for name, (env_id, env_kwargs, tasks) in sets.items():
        env_kwargs = {**env_kwargs, **{k: v for k, v in cfg.env_kwargs.items() if k == "max_steps"}}
        config = dataclasses.replace(cfg, env_id=env_id, env_kwargs=env_kwargs)
        envs = GroupVectorEnv(env_id, len(tasks), cfg.val_episodes_per_task, env_kwargs=env_kwargs)
        try:
            played, _ = validation_outcome(trainer.policy, config, envs, tasks, validation_seed(cfg.seed))
        finally:
            envs.close()
        run.log.append_validation(trainer.iteration, played, tasks=name)
        copies: dict[str, int] = {}
        for e in played:
            copies[e.task_id] = copies.get(e.task_id, -1) + 1
            graded = next((e.final_info[k] for k in ("score", "em") if e.final_info.get(k) is not None), e.won)
            episodes.append({"set": name, "task": e.task_id, "copy": copies[e.task_id], "type": e.task_type,
                             "won": int(e.won), "score": float(graded), "invalid": int(e.invalid_steps),
                             "steps": int(e.length)})
    return episodes, time.perf_counter() - started


def read_record(path: Path, keys: tuple[str, ...] = ()) -> dict[str, Any] | None:
    """The JSON object in ``path`` (``None`` where there is none) holding ``keys``; anything else (cut, empty, a
    list, a key missing) is one ``ValueError`` naming the file."""
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"{path} cannot be read ({type(error).__name__}); delete it to redo its stage") from None
    missing = [key for key in keys if not isinstance(record, dict) or key not in record]
    if not isinstance(record, dict) or missing:
        raise ValueError(f"{path} is not this program's record (no {', '.join(missing) or 'mapping'}); delete it to "
                         "redo its stage")
    return record


def arm_progress(run_dir: Path) -> list[dict[str, float]]:
    """An arm's iterations done, from its run folder alone: each iteration's :func:`benchmarks.arms.arm_row` that
    ``metrics.jsonl`` logged up to the checkpoint's iteration. A line logged after the checkpoint (a kill before
    the checkpoint was written) is not done: the resume trains it again."""
    from ecpo_train.runtime.checkpoint_io import checkpoint_iteration
    from ecpo_train.runtime.run_dir import RunFolder, read_metrics_file

    folder = RunFolder(run_dir)
    done = checkpoint_iteration(folder.checkpoint()) if folder.checkpoint().is_file() else 0
    if not done or not folder.metrics.is_file():
        return []
    rows = [row for row in read_metrics_file(folder.metrics)[0] if 0 < row.get("iteration", 0) <= done]
    if any("time/iteration" not in row for row in rows):
        raise ValueError(f"{folder.metrics} holds iterations without time/iteration: not an arm of this program; "
                         "give another --out")
    return [arm_row(row) for row in rows]


def arm_result(out: Path, arm: str) -> dict[str, Any]:
    """What the report holds of an arm: its iterations from its run folder (:func:`arm_progress`), why it stopped
    early and its closing validation where ``arm_<arm>.json`` recorded them at that same iteration."""
    rows = arm_progress(out / f"run_{arm}")
    record = read_record(out / f"arm_{arm}.json", ("iteration",)) or {"iteration": -1}
    current = record["iteration"] == len(rows)
    return ({"iterations_done": len(rows), "per_iteration": rows, "rates": mean_figures(rows)}
            | ({"stopped": record["stopped"]} if current and record.get("stopped") else {})
            | ({"after": record["after"]} if current and "after" in record else {}))


def run_arm(spec: dict[str, Any], plan: Plan) -> dict[str, Any]:
    """One arm, run by ``benchmarks.arms`` in a process of its own (``spec``: the arms' config, the out folder, the
    validation ``sets``): a run from the warm start in ``OUT/run_<arm>``, started or resumed by the run shell
    (``runtime.run.open_run``: its lock, its checkpoint, its metrics cut back to it), iterations up to the plan
    (decided once for every arm from their first iterations), each logged and checkpointed (``checkpoint_every``
    1), and the closing validation once the plan is done. The arm's progress is its run folder's
    (:func:`arm_progress`); ``OUT/arm_<arm>.json`` (written whole) only records, at an iteration, why the arm
    stopped or its closing validation. Returns the arm's result (:func:`arm_result`)."""
    from ecpo_train.policies.atomic import write_text
    from ecpo_train.runtime.resume import RESUME_OR_START
    from ecpo_train.runtime.run_dir import RunFolder, holds_run

    out, arm = Path(spec["out"]), spec["arm"]
    path, run_dir = out / f"arm_{arm}.json", out / f"run_{arm}"
    if "after" in arm_result(out, arm):
        return arm_result(out, arm)
    train_tasks = read_record(out / REPORT, ("train_tasks",))["train_tasks"]
    # a folder holding the arm's first lines but no checkpoint (killed in its first iteration) starts over
    fresh = holds_run(run_dir) and not RunFolder(run_dir).checkpoint().is_file()
    run, _ = open_arm(spec, resume=False if fresh else RESUME_OR_START, overwrite=fresh,
                      model=str(out / "sft_model"), estimator=arm, run_dir=str(run_dir), train_tasks=train_tasks,
                      checkpoint_every=1)

    def record(**fields: Any) -> dict[str, Any]:
        write_text(path, json.dumps({"iteration": run.engine.iteration} | fields, indent=1) + "\n")
        return arm_result(out, arm)

    with run:
        rows = arm_progress(run_dir)
        if len(rows) != run.engine.iteration:
            raise ValueError(f"{run_dir} logs {len(rows)} iterations and its checkpoint holds {run.engine.iteration}: "
                             "not an arm of this program; give another --out")
        train_arm(run, rows, 1, spec["deadline"], spec["reserve"])
        planned, _ = plan(rows[0]["wall"], 0.0)
        stopped = train_arm(run, rows, planned, spec["deadline"], spec["reserve"])
        if stopped:
            return record(stopped=f"{stopped}: run the command again to continue")
        after, _ = validate(run, spec["sets"])
        return record(after=after)
