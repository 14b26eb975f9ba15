"""``benchmarks/generation_profile.py``: the GPU measurement of eager against static-cache graphed decoding runs
end to end here on tiny sizes (``--device cpu --smoke``: static decoding, no graphs) and writes its figures beside
the device's name; bad input is one line."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks import generation_profile


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_without_cuda_it_refuses_in_one_line(capsys):
    assert generation_profile.main([]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_bad_parts_are_one_line(capsys):
    with pytest.raises(SystemExit) as exit_:
        generation_profile.main(["--device", "cpu", "--parts", "decode,warp"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: --parts 'decode,warp': choose from decode, paper, scoring"]


def test_smoke_writes_eager_and_static_figures_side_by_side(tmp_path, tiny_model_dir):
    out = tmp_path / "profile.json"
    assert generation_profile.main(["--device", "cpu", "--smoke", "--parts", "decode,scoring",
                                    "--scoring-model", str(tiny_model_dir), "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["environment"]["device"] == "cpu" and report["smoke"]
    decode = report["parts"]["decode"]
    assert set(decode["variants"]) == {"eager", "static"} and decode["step_speedup"] > 0
    for variant in decode["variants"].values():
        assert variant["tokens_per_s"] == pytest.approx(4 * 4 / variant["seconds"])
        assert variant["profile"]["top_by_host_time"]
    scoring = report["parts"]["scoring"]
    assert scoring["contexts"] == 8 and set(scoring["variants"]) == {"eager", "static"}
    assert all(v["decisions_per_s"] > 0 for v in scoring["variants"].values())
