"""``max_policy_lag=0`` against the code before pipelining: the same RLlib run, iteration by iteration.

Issue 38 asks that lag 0 (the default) reproduce the lock-step iterations of the code before the pipelined
iteration existed. This runs one RLlib ECPO run (the tiny random 2-layer Qwen2 scoring the corridors' doors, one
env-runner actor, a local learner, 3 iterations, seed 5: the setting of ``tests/test_rllib_pipelined.py``) twice,
each in a fresh process on its own Ray session: once with a baseline checkout's code (``--baseline``, default
the parent of the commit that added ``max_policy_lag``, unpacked by ``git archive``) and once with this
checkout's, on the same model folder, and compares every non-timing number of ``result["ecpo"]`` that both
report: equal bit for bit, or the first difference. Writes JSON::

    python -m benchmarks.lag0_identity [--baseline 56ef19a^] [--iterations 3] [--out FILE.json]
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import RESULTS, ArgumentParser
from ecpo_train.policies.atomic import write_text

ROOT = Path(__file__).resolve().parents[1]
RUN = """
import json, sys
import ray
from ecpo_train.integrations.rllib import ECPOConfig
from ecpo_train.runtime.config import TrainConfig, make_config
values = json.loads(sys.argv[1])
if "num_epochs" not in TrainConfig.__dataclass_fields__:  # the baseline predates the key's rename
    values["update_epochs"] = values.pop("num_epochs")
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
algo = ECPOConfig.from_train_config(make_config(values)).env_runners(num_env_runners=1).build_algo()
rows = []
try:
    for _ in range(int(sys.argv[2])):
        rows.append({k: v for k, v in algo.train()["ecpo"].items() if isinstance(v, (int, float))})
finally:
    algo.stop()
    ray.shutdown()
print("RESULT " + json.dumps(rows))
"""


def run_values(model: Path, run_dir: Path) -> dict:
    return {"run_dir": str(run_dir), "policy": "llm", "policy_mode": "score", "model": str(model), "device": "cpu",
            "env_id": "ecpo/DivergentAnchor-v0", "env_kwargs": {"num_tasks": 2, "depth": 4, "rare_prob": [0.4, 0.7]},
            "n_groups": 2, "group_size": 4, "history_length": 0, "prompt_style": "compact", "val_every": 0,
            "credit": {"d_min": 1}, "lr": 1e-3, "kl_coef": 0.0, "mini_batch_size": 8, "micro_batch_size": 4,
            "num_epochs": 2, "seed": 5, "checkpoint_every": 0, "tensorboard": False, "progress": False,
            "iterations": 3, "threads": 1}


def run_checkout(checkout: Path, model: Path, folder: Path, iterations: int) -> list[dict]:
    env = os.environ | {"PYTHONPATH": str(checkout)}
    done = subprocess.run([sys.executable, "-c", RUN, json.dumps(run_values(model, folder)), str(iterations)],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=1800, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{checkout}: exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(lines[-1][len("RESULT "):])


def compare(baseline: list[dict], current: list[dict]) -> dict:
    """Every numeric key both report, outside ``time/``: equal bit for bit, iteration by iteration."""
    compared, differences = 0, []
    for k, (old, new) in enumerate(zip(baseline, current), 1):
        for key in sorted(set(old) & set(new)):
            if key.startswith("time/"):
                continue
            compared += 1
            same = old[key] == new[key] or (isinstance(old[key], float) and math.isnan(old[key])
                                            and isinstance(new[key], float) and math.isnan(new[key]))
            if not same:
                differences.append({"iteration": k, "key": key, "baseline": old[key], "current": new[key]})
    only = sorted({key for row in current for key in row} - {key for row in baseline for key in row})
    return {"values_compared": compared, "differences": differences, "keys_only_in_current": only}


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(__spec__.name, description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default="56ef19a^", help="a commit of this repository (before pipelining)")
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS / "lag0_identity.json")
    args = parser.parse_args(argv)
    from ecpo_train.runtime.models import write_tiny_model

    commit = subprocess.run(["git", "rev-parse", "--short", args.baseline], cwd=ROOT, capture_output=True,
                            text=True, check=False)
    if commit.returncode != 0:
        print(f"error: --baseline {args.baseline!r} is not a commit of this repository", file=sys.stderr)
        return 2
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=False).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="lag0-") as tmp:
        tmp_path = Path(tmp)
        baseline_tree = tmp_path / "baseline"
        baseline_tree.mkdir()
        archive = subprocess.run(["git", "archive", args.baseline], cwd=ROOT, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(baseline_tree)], input=archive.stdout, check=True)
        model = write_tiny_model(tmp_path / "tiny", seed=0)
        runs = {}
        for label, checkout in (("baseline", baseline_tree), ("current", ROOT)):
            folder = tmp_path / f"run_{label}"
            folder.mkdir()
            runs[label] = run_checkout(checkout, model, folder, args.iterations)
            print(f"{label}: {args.iterations} iterations, success "
                  f"{[round(r['success'], 4) for r in runs[label]]}", flush=True)
    result = {"baseline": commit.stdout.strip(), "current": head, "iterations": args.iterations,
              "setting": "tiny 2-layer Qwen2 on ecpo/DivergentAnchor-v0, 1 env runner, local learner, seed 5"}
    result |= compare(runs["baseline"], runs["current"]) | {"runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text(args.out, json.dumps(result, indent=1) + "\n")
    verdict = "identical" if not result["differences"] else f"{len(result['differences'])} values differ"
    print(f"lag 0 at {head} against {result['baseline']}: {result['values_compared']} values compared, {verdict}; "
          f"wrote {args.out}")
    return 0 if not result["differences"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
