"""Issue 58, the low items: each bad input below gave a traceback (or was accepted) and is now one line, exit 2,
before any work: a CLI's counts, an output file that is not the program's, a run FSDP cannot shard."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ecpo_train.apps.cli import app


def one_line(capsys, main, argv) -> str:
    """The one ``error:`` line (exit 2) of a benchmark program's ``main(argv)``, returned or raised."""
    try:
        code = main(argv)
    except SystemExit as stop:
        code = stop.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("error: "), (code, err)
    return err


def cli_line(argv: list[str]) -> str:
    result = CliRunner().invoke(app, argv)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    return lines[0]


@pytest.mark.parametrize("parts", ["0", "-4", "1,9", "x"])
def test_rllib_gpu_refuses_part_numbers_out_of_range(capsys, parts):
    from benchmarks import gpu_run

    assert "give part numbers 1-5" in one_line(capsys, gpu_run.main,
                                               ["rllib", "--device", "cpu", "--smoke", "--parts", parts])


@pytest.mark.parametrize("held", ["[]", "{\"parts\": [1]}", "{cut"])
def test_rllib_gpu_refuses_an_out_file_that_is_not_its_report(capsys, tmp_path, held):
    from benchmarks import gpu_run

    (tmp_path / "model").mkdir()
    (tmp_path / "out.json").write_text(held)
    err = one_line(capsys, gpu_run.main, ["rllib", "--device", "cpu", "--smoke", "--parts", "1", "--model",
                                          str(tmp_path / "model"), "--out", str(tmp_path / "out.json")])
    assert f"--out {tmp_path / 'out.json'} holds something other than this program's report" in err
    assert (tmp_path / "out.json").read_text() == held


@pytest.mark.parametrize("flag", ["--rows", "--tokens", "--repeats"])
def test_generation_profile_refuses_a_count_below_one_before_any_part(capsys, flag):
    from benchmarks import generation_profile

    assert f"{flag} 0: give a count >= 1" in one_line(capsys, generation_profile.main,
                                                       ["--device", "cpu", "--smoke", flag, "0"])


def test_nproc_with_a_tabular_preset_is_one_line_before_any_process(tmp_path):
    line = cli_line(["train", "--config", "quickstart", f"run_dir={tmp_path / 'run'}", "--nproc", "2"])
    assert "fsdp=true shards a transformers model" in line and not (tmp_path / "run").exists()


@pytest.mark.parametrize("flag, value, words", [("--epochs", str(10**12), "at most 1000 passes"),
                                                ("--lr", "1e308", "(0, 10]")])
def test_sft_refuses_an_epoch_count_or_lr_past_any_use(tmp_path, flag, value, words):
    line = cli_line(["sft", "--config", "corridor_llm", "--out", str(tmp_path / "out"), flag, value])
    assert words in line and not (tmp_path / "out").exists()


def test_every_benchmark_record_reader_names_the_file(tmp_path):
    """(paper_benchmarks' records: tests/test_paper_benchmarks.py; this is the shared reader's contract.)"""
    from benchmarks.paper_benchmarks import read_record

    (tmp_path / "r.json").write_text(json.dumps({"a": 1}))
    assert read_record(tmp_path / "r.json", ("a",)) == {"a": 1}
    assert read_record(Path(tmp_path / "missing.json")) is None
    with pytest.raises(ValueError, match="r.json is not this program's record"):
        read_record(tmp_path / "r.json", ("b",))
