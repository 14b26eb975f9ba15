"""benchmarks/gpu_run.py's ``native`` stage: refuses without CUDA in one line; an earlier command's parts are kept and a
failed part is recorded; the learning programs' paired test pairs the validations episode by episode;
``native --device cpu --smoke`` runs every part with only the packages the GPU machine will have (torch,
transformers, peft and their requirements, plus scripts/device_bundle.py's wheels) and writes every part's keys."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import TOKENIZER_DIR, device_allowed, device_site

from benchmarks import gpu_learning, gpu_run, gpu_run_report

ROOT = Path(__file__).resolve().parents[1]


def test_without_cuda_it_refuses_in_one_line(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert gpu_run.main(["native"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--device cpu --smoke" in err


@pytest.mark.parametrize("parts", ["1,7", "0", "-3", "1,,2", "3"])
def test_bad_parts_are_one_line(capsys, parts):
    assert gpu_run.main(["native", "--device", "cpu", "--parts", parts]) == 2
    assert capsys.readouterr().err.strip() == f"error: --parts {parts!r}: give part numbers 1-2 separated by commas"


def test_an_option_of_another_stage_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as stop:
        gpu_run.main(["native", "--device", "cpu", "--runners", "2"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: native does not take --runners")


def test_an_out_holding_a_json_list_is_one_line(tmp_path, capsys):
    out = tmp_path / "list.json"
    out.write_text("[1, 2]")
    assert gpu_run.main(["native", "--device", "cpu", "--smoke", "--parts", "2", "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip() == (f"error: --out {out} holds something other than this program's "
                                               "report: give another --out, or delete it")
    assert out.read_text() == "[1, 2]"


def test_adding_a_part_to_a_smoke_file_keeps_it_marked_smoke(tmp_path, monkeypatch):
    (tmp_path / "test_tiny.py").write_text("def test_cuda_stand_in():\n    pass\n")
    monkeypatch.setattr(gpu_run, "CUDA_TESTS", (str(tmp_path / "test_tiny.py"),))  # part 1's pytest, in a second
    out = tmp_path / "gpu_run.json"
    out.write_text(json.dumps({"smoke": True, "parts": {"paper_iteration": {"error": "kept"}}}))
    assert gpu_run.main(["native", "--device", "cpu", "--parts", "1", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["smoke"] is True and set(report["parts"]) == {"environment", "paper_iteration"}
    assert report["parts"]["environment"]["cuda_tests"]["summary"].startswith("1 passed")
    assert "(smoke sizes: not a measurement)" in out.with_suffix(".md").read_text()


def test_the_work_folders_of_killed_commands_are_removed_at_the_next_start(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    abandoned = tmp_path / f"gpu_run-{dead.stdout.strip()}-abc"
    (abandoned / "paper_model").mkdir(parents=True)
    (abandoned / "paper_model" / "model.safetensors").write_bytes(b"0" * 1000)
    live = tmp_path / f"gpu_run-{os.getpid()}-xyz"  # a command still running
    live.mkdir()
    other = tmp_path / "gpu_run-notes"
    other.mkdir()
    assert gpu_run.remove_abandoned_work(tmp_path) == [abandoned]
    assert not abandoned.exists() and live.is_dir() and other.is_dir()


def test_paired_test_pairs_by_task_and_copy_and_clusters_by_task():
    # 6 episodes; after training two are gained and one lost, listed in another order
    before = [["a", 0, 0], ["a", 1, 1], ["b", 0, 0], ["b", 1, 0], ["c", 0, 1], ["c", 1, 0]]
    after = [["c", 1, 0], ["c", 0, 0], ["b", 1, 1], ["b", 0, 1], ["a", 1, 1], ["a", 0, 0]]
    test = gpu_run_report.paired_test(before, after)
    assert (test["episodes"], test["gained"], test["lost"]) == (6, 2, 1)
    assert test["success_before"] == pytest.approx(2 / 6) and test["success_after"] == pytest.approx(3 / 6)
    assert test["diff"] == pytest.approx(1 / 6)
    # McNemar: 2 of 3 discordant pairs gained, exact two-sided p = 1; Tango's interval holds 0
    assert test["p"] == pytest.approx(1.0) and test["low"] < 0 < test["high"]
    assert test["clustered"]["clusters"] == 3  # each task validated twice: the interval by task stands beside it


def test_a_failed_part_is_recorded_and_the_command_says_so(tmp_path, capsys, monkeypatch):
    # one lease, one command: a part that raises must leave the JSON and markdown whole, with its error named
    monkeypatch.setenv("ECPO_TOKENIZER_DIR", str(tmp_path / "no-tokenizer"))
    monkeypatch.setattr(gpu_learning, "ROOT", tmp_path)  # no bundle copy of the tokenizer either: part 3 fails
    out = tmp_path / "gpu_run.json"
    tests = {"command": "python -m pytest -k cuda", "exit_code": 0, "summary": "2 passed in 9.1s"}
    out.write_text(json.dumps({"parts": {"environment": {"device": "cuda", "cuda_tests": tests}}}))
    assert gpu_run.main(["native", "--device", "cpu", "--parts", "2", "--out", str(out)]) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "error: part(s) paper_iteration failed; the JSON records each error, the others are complete")
    report = json.loads(out.read_text())
    assert report["parts"]["paper_iteration"]["error"].startswith("FileNotFoundError: no Qwen2.5 tokenizer")
    assert report["parts"]["environment"]["cuda_tests"] == tests  # the earlier command's part is kept
    text = out.with_suffix(".md").read_text()
    assert "**Part 2 (paper_iteration) failed:** `FileNotFoundError: no Qwen2.5 tokenizer" in text
    assert "- CUDA tests (`python -m pytest -k cuda`): 2 passed in 9.1s (exit 0)" in text


@pytest.mark.slow
def test_smoke_runs_every_part_with_the_device_packages_only(tmp_path):
    if not (TOKENIZER_DIR / "tokenizer.json").exists():
        pytest.skip(f"Qwen2.5 tokenizer not found at {TOKENIZER_DIR}; set ECPO_TOKENIZER_DIR")
    out = tmp_path / "gpu_run.json"
    # python -S: no site-packages, only the device's packages (and the working tree, as on the device)
    env = os.environ | {"ECPO_TOKENIZER_DIR": str(TOKENIZER_DIR),
                        "PYTHONPATH": os.pathsep.join([str(ROOT), str(device_site(tmp_path / "site"))])}
    command = [sys.executable, "-S", "-m", "benchmarks.gpu_run", "native", "--device", "cpu", "--smoke", "--out",
               str(out)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    parts = report["parts"]
    assert report["smoke"] is True
    assert set(parts) == {"environment", "paper_iteration"}
    environment = parts["environment"]
    assert environment["device"] == "cpu" and environment["torch"] == torch.__version__
    # no CUDA here: the suite's CUDA test is collected and skipped, never failed
    assert environment["cuda_tests"]["exit_code"] == 0, environment["cuda_tests"]
    summary = environment["cuda_tests"]["summary"]  # one skipped test per CUDA check (gpu_run.CUDA_TESTS)
    assert "2 skipped" in summary and "failed" not in summary and "error" not in summary, summary
    assert not set(environment["distributions"]) - {"ecpo"} - device_allowed()
    paper = parts["paper_iteration"]
    for key in ("time/generation", "time/env", "time/credit", "time/update", "generation_tokens_per_s",
                "update_tokens_per_s", "projected_iteration_seconds", "rows"):
        assert paper[key] >= 0, key
    assert paper["rows"] == 4  # 2 groups x 2 copies x 1 step
    assert out.with_suffix(".md").read_text().startswith("# The GPU run (cpu)")


def test_the_gpu_preset_keeps_the_cpu_recipe_and_validates_on_800_unseen_episodes():
    from ecpo_train.runtime.config import load_config

    gpu, cpu = load_config("alfworld_gpu"), load_config("alfworld_cpu")
    recipe = ("policy_mode", "prompt_style", "history_length", "explore_epsilon", "rollout_temperature", "lr",
              "lr_warmup_steps", "kl_coef", "mini_batch_size", "credit", "env_kwargs", "estimator")
    assert {k: getattr(gpu, k) for k in recipe} == {k: getattr(cpu, k) for k in recipe}
    assert (gpu.n_groups, gpu.group_size, gpu.val_episodes_per_task) == (16, 8, 2)
    assert len(set(gpu.val_tasks)) == len(gpu.val_tasks) == 400
    # unseen: training draws gen/<type>/<seed> for seeds below num_tasks, validation's seeds start at 10000
    assert min(int(t.rsplit("/", 1)[1]) for t in gpu.val_tasks) >= 10000 > gpu.env_kwargs["num_tasks"]
    assert {t.split("/")[1] for t in gpu.val_tasks} == {"Look", "Pick"}
