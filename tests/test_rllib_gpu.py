"""benchmarks/gpu_run.py's ``rllib`` stage: refuses without CUDA in one line; ``--device cpu --smoke`` runs every part
with only the packages the GPU machine will have (torch, transformers, peft, numpy, pandas, pyarrow and their requirements, the
native bundle's wheels and scripts/device_bundle_ray.py's Ray wheels), and what it reports holds: a checkpoint
round trip continues at the next iteration, each engine's time split adds up to its iteration, and lag 1 keeps its
rows within one update (the engines' equality is tests/test_rllib_llm_algorithm.py's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import TOKENIZER_DIR, device_allowed, device_site

from benchmarks import gpu_run
from benchmarks.gpu_run_report import PHASES, RLLIB_PARTS

ROOT = Path(__file__).resolve().parents[1]


def test_without_cuda_it_refuses_in_one_line(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert gpu_run.main(["rllib"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--device cpu --smoke" in err


def test_bad_parts_and_a_missing_model_are_one_line(tmp_path, capsys):
    assert gpu_run.main(["rllib", "--device", "cpu", "--parts", "2,9"]) == 2
    assert capsys.readouterr().err.strip() == "error: --parts '2,9': give part numbers 1-5 separated by commas"
    assert gpu_run.main(["rllib", "--device", "cpu", "--model", str(tmp_path / "absent")]) == 2
    assert capsys.readouterr().err.strip().startswith(f"error: no model folder at {tmp_path / 'absent'}")


def test_the_time_split_has_one_vocabulary_for_both_engines():
    native = {"time/generation": 2.0, "time/env": 0.5, "time/credit": 0.01, "time/update": 4.0, "time/iteration": 6.6}
    rllib = {"time/sampling": 2.6, "time/credit": 0.2, "time/update": 4.0, "time/sync": 0.3, "time/iteration": 7.2,
             "time/generation": 2.0}  # the runners' own generation seconds: not the driver's sampling phase
    assert gpu_run.time_split(native) == {"sampling": 2.5, "credit": 0.01, "update": 4.0, "sync": 0.0,
                                          "iteration": 6.6}
    assert gpu_run.time_split(rllib) == {"sampling": 2.6, "credit": 0.2, "update": 4.0, "sync": 0.3, "iteration": 7.2}
    lagged = gpu_run.time_split(rllib | {"time/sampling_wait": 0.1})
    assert lagged["sampling"] == 0.1  # lag 1: the driver's wait, the runners played during the previous update
    assert gpu_run.mean_split([{"iteration": 9.0}, {"iteration": 3.0}, {"iteration": 5.0}]) == {"iteration": 4.0}


@pytest.mark.slow
def test_smoke_runs_every_part_with_the_device_and_ray_bundle_packages_only(tiny_model_dir, tmp_path):
    if not (TOKENIZER_DIR / "tokenizer.json").exists():
        pytest.skip(f"Qwen2.5 tokenizer not found at {TOKENIZER_DIR}; set ECPO_TOKENIZER_DIR")
    out = tmp_path / "rllib_gpu.json"
    # python -S: no site-packages in the driver, only the device's packages and the bundle's (Ray's included)
    env = os.environ | {"ECPO_TOKENIZER_DIR": str(TOKENIZER_DIR),
                        "PYTHONPATH": os.pathsep.join([str(ROOT), str(device_site(tmp_path / "site", ray=True))])}
    command = [sys.executable, "-S", "-m", "benchmarks.gpu_run", "rllib", "--device", "cpu", "--smoke",
               "--model", str(tiny_model_dir), "--out", str(out)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env, timeout=1200, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    parts = json.loads(out.read_text())["parts"]
    assert set(parts) == set(RLLIB_PARTS)
    environment = parts["environment"]
    assert environment["device"] == "cpu" and environment["ray"] == pytest.importorskip("ray").__version__
    ray_folder = Path(pytest.importorskip("ray").__file__).parent
    vendored = {d.name.split("-")[0].lower() for d in (ray_folder / "thirdparty_files").glob("*.dist-info")}
    assert not set(environment["distributions"]) - {"ecpo"} - device_allowed(ray=True) - vendored  # colorama, psutil
    first = parts["first_iteration"]
    assert first["checkpoint"]["resumed_iteration"] == 2 and first["rows_per_iteration"] > 0
    for engine in ("native", "rllib"):
        split = first["time_split"][engine]
        assert all(split[phase] >= 0 for phase in PHASES), split
        assert sum(split[phase] for phase in PHASES) <= split["iteration"] * 1.01, split
    assert first["time_split"]["rllib"]["credit"] > 0  # the learners' credit step (the RLlib engine's time/credit)
    assert parts["lag"]["max_policy_lag"] == 1 and parts["lag"]["policy_lag_max"] <= 1
    assert parts["gpu_runners"]["max_policy_lag"] == 0 and parts["gpu_runners"]["runners"] == 1
    assert parts["cpu_runners"]["runners_on"] == "cpu"
    for name in ("gpu_runners", "lag", "cpu_runners"):
        assert len(parts[name]["iterations"]) == 2 and len(parts[name]["memory"]["runners"]) == parts[name]["runners"]
    assert out.with_suffix(".md").read_text().startswith("# The RLlib engine on one GPU (cpu)")


def test_the_gpu_shares_add_up_to_the_one_gpu():
    assert gpu_run.gpu_shares(1, 0.2) == (0.8, 0.2)
    assert gpu_run.gpu_shares(4, 0.2) == (0.2, 0.2)
    assert gpu_run.gpu_shares(0, 0.2) == (1.0, 0.0)  # CPU runners: the learner has the GPU to itself
    for runners in range(1, 9):
        learner, runner = gpu_run.gpu_shares(runners, 0.3)
        assert 0 < runner <= learner and learner + runners * runner == pytest.approx(1.0, abs=1e-3)
