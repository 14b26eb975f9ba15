"""An engine declared from outside the package (``runtime/engines.py``: ``register_engine(EngineSpec)``): a tiny
adapter written here, the native trainer under a name and a checkpoint file of its own, is offered by ``ecpo train
--engine``, trains, and its run resumes exactly through the run folder and the start checks, with no change to the
library; the run shell's modules read every engine fact from the registry."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import train

from ecpo_train.runtime.engines import NATIVE, EngineSpec, register_engine, unregister_engine
from ecpo_train.runtime.trainer import Trainer

ROOT = Path(__file__).resolve().parent.parent


class RenamedTrainer(Trainer):
    """The native trainer as another engine: everything but its name is the trainer's."""

    name = "renamed"


SPEC = EngineSpec(name="renamed", engine=RenamedTrainer, checkpoint="renamed.pt", read_config=NATIVE.read_config,
                  summary="the native trainer under another name", files="metrics.jsonl, renamed.pt")


@pytest.fixture
def renamed():
    register_engine(SPEC)
    yield SPEC
    unregister_engine(SPEC.name)


def one_error_line(result) -> str:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


def metrics(run_dir: Path) -> list[dict]:
    return [{key: value for key, value in json.loads(line).items() if not key.startswith("time/")}
            for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_an_outside_engine_is_offered_by_ecpo_train(renamed, tmp_path):
    line = one_error_line(train(tmp_path / "run", "--engine", "nope"))
    assert line == "error: --engine 'nope'; valid: native, rllib, renamed"
    assert not (tmp_path / "run").exists()


def test_an_outside_engines_run_resumes_exactly_and_no_other_engine_reads_it(renamed, tmp_path):
    run_dir, straight = tmp_path / "run", tmp_path / "straight"
    assert train(run_dir, "--engine", "renamed", "iterations=2").exit_code == 0
    assert (run_dir / "renamed.pt").is_file() and not (run_dir / "checkpoint.pt").exists()
    assert "engine: renamed" in (run_dir / "config.yaml").read_text()

    before = folder_bytes(run_dir)  # the default engine does not read another engine's state
    line = one_error_line(train(run_dir, "iterations=3", "--resume"))
    assert "holds a run of the renamed engine" in line and "--engine renamed" in line
    assert folder_bytes(run_dir) == before
    line = one_error_line(train(run_dir, "--engine", "renamed", "iterations=3", "--resume", "group_size=3"))
    assert "--resume cannot change group_size" in line  # compared with the checkpoint's own config (its reader)
    assert folder_bytes(run_dir) == before

    resumed = train(run_dir, "--engine", "renamed", "iterations=3", "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert f"run folder: {run_dir} (metrics.jsonl, renamed.pt)" in resumed.output
    assert train(straight, "--engine", "renamed", "iterations=3").exit_code == 0
    assert [row["iteration"] for row in metrics(run_dir)] == [1, 2, 3]
    assert metrics(run_dir) == metrics(straight)

    replaced = train(run_dir, "iterations=1", "--overwrite")  # its checkpoint is one of the run's files
    assert replaced.exit_code == 0, replaced.output
    assert not (run_dir / "renamed.pt").exists() and (run_dir / "checkpoint.pt").is_file()


def test_every_process_knows_the_shipped_engines_without_importing_ray():
    # a process that imports only the run folder still knows the RLlib engine's checkpoint (--overwrite deletes it,
    # a start in its folder is refused), declared from integrations/ without importing ray
    code = ("import sys; from ecpo_train.runtime.run_dir import run_files; "
            "print('rllib_checkpoint' in run_files(), 'ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.split() == ["True", "False"], out


def test_the_run_shell_names_no_engine():
    for path in ("ecpo_train/runtime/run_dir.py", "ecpo_train/runtime/resume.py", "ecpo_train/apps/cli.py"):
        source = (ROOT / path).read_text()
        assert re.search(r"rllib", source, re.IGNORECASE) is None, path
        assert '"native"' not in source, path
