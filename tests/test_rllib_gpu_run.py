"""The RLlib engine's GPU program (``benchmarks/rllib_gpu_run.py``): its refusals, and its every case on the CPU."""

from __future__ import annotations

import json

import pytest

from benchmarks.rllib_gpu_run import main

pytest.importorskip("ray")


def test_cuda_without_a_gpu_and_one_iteration_are_one_line_refusals(capsys):
    import torch

    if not torch.cuda.is_available():
        assert main(["--device", "cuda"]) == 2
        assert capsys.readouterr().err.strip().count("\n") == 0
    with pytest.raises(SystemExit) as raised:
        main(["--device", "cpu", "--smoke", "--iterations", "1"])
    assert raised.value.code == 2


@pytest.mark.slow
def test_cpu_smoke_runs_every_case_and_the_engines_agree(tmp_path):
    out = tmp_path / "rllib_gpu_run.json"
    assert main(["--device", "cpu", "--smoke", "--iterations", "2", "--out", str(out)]) == 0
    cases = json.loads(out.read_text())["cases"]
    assert sorted(cases) == ["checkpoint", "equality", "lag", "memory", "split"]
    # one runner, same seed: the native first iteration's rows and credit, its update to 1e-5
    assert cases["equality"]["differences"] == [] and cases["equality"]["update_within_1e-5"]
    assert cases["equality"]["values_compared"] > 10
    assert cases["checkpoint"]["differences"] == [] and cases["checkpoint"]["values_compared"] > 10
    for engine in ("native", "rllib, runner beside the learner", "rllib, runner on CPU cores"):
        assert cases["split"][engine]["iteration"] > 0 and cases["split"][engine]["update"] > 0
    assert "credit" in cases["split"]["native"] and "sync" in cases["split"]["rllib, runner beside the learner"]
    assert cases["lag"]["lag 1"]["iteration"] > 0
    assert cases["memory"]["driver (learner)"] > 0 and len(cases["memory"]["runners"]) == 1
