"""benchmarks/gpu_run.py's ``native`` and ``report`` stages: refuses without CUDA in one line; the report merges the
two device commands' files and pairs the validations episode by episode; ``native --device cpu --smoke`` runs every
part with only the packages the GPU machine will have (torch, transformers, peft and their requirements, plus
scripts/device_bundle.py's wheels) and writes every part's keys."""

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


@pytest.mark.parametrize("parts", ["1,7", "0", "-3", "2,,3", "4"])
def test_bad_parts_are_one_line(capsys, parts):
    assert gpu_run.main(["native", "--device", "cpu", "--parts", parts]) == 2
    assert capsys.readouterr().err.strip() == f"error: --parts {parts!r}: give part numbers 1-3 separated by commas"


def test_an_option_of_another_stage_is_refused_in_one_line(capsys):
    assert gpu_run.main(["native", "--device", "cpu", "--runners", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: native does not take --runners")


def test_an_out_holding_a_json_list_is_one_line(tmp_path, capsys):
    out = tmp_path / "list.json"
    out.write_text("[1, 2]")
    assert gpu_run.main(["native", "--device", "cpu", "--smoke", "--parts", "2", "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip() == (f"error: --out {out} holds something other than this program's "
                                               "report: give another --out, or delete it")
    assert out.read_text() == "[1, 2]"


def test_adding_a_part_to_a_smoke_file_keeps_it_marked_smoke(tmp_path):
    out = tmp_path / "gpu_run.json"
    out.write_text(json.dumps({"smoke": True, "parts": {"environment": {"device": "cpu"}}}))
    assert gpu_run.main(["native", "--device", "cpu", "--parts", "2", "--credit-reps", "1", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["smoke"] is True and set(report["parts"]) == {"environment", "credit"}
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


def test_the_two_commands_files_merge_and_render(tmp_path):
    first = {"smoke": False, "parts": {"environment": {"device": "cuda", "gpu": "NVIDIA H100 80GB HBM3",
                                                       "cuda_tests": {"summary": "1 passed, 6 deselected"}},
                                       "credit": {"device": "cuda", "rows": 5000, "cpu_seconds": 0.02,
                                                  "device_seconds": 0.004, "max_abs_difference": 0.0}}}
    won = [[f"gen/Look/{10000 + k}", c, int(k % 3 == 0)] for k in range(10) for c in (0, 1)]
    better = [[t, c, 1 if t.endswith("1") else w] for t, c, w in won]
    second = {"smoke": False, "parts": {"environment": {"device": "cuda", "gpu": "NVIDIA H100 80GB HBM3"},
                                        "learning": {"preset": "alfworld_gpu", "iterations_done": 3,
                                                     "outcomes": {"validation": {"before": won, "after": better}}}}}
    paths = []
    for k, report in enumerate((first, second)):
        paths.append(tmp_path / f"{k}.json")
        paths[-1].write_text(json.dumps(report))
    out = tmp_path / "merged.json"
    assert gpu_run.main(["report", "--from-json", *map(str, paths), "--out", str(out)]) == 0
    merged = json.loads(out.read_text())
    assert set(merged["parts"]) == {"environment", "credit", "learning"}
    assert merged["parts"]["learning"]["validation"]["gained"] == 2
    text = out.with_suffix(".md").read_text()
    assert text.startswith("# The GPU run (NVIDIA H100 80GB HBM3)")
    assert "- unseen validation tasks: 0.400 -> 0.500 on 20 paired episodes (2 gained, 0 lost)" in text


def test_the_validation_is_also_reported_without_the_tasks_the_cpu_recipe_was_chosen_on():
    # alfworld_cpu's 48 validation households (seeds 10000-10023) are among alfworld_gpu's 400
    tuned = gpu_run_report.recipe_tasks()
    assert len(tuned) == 48 and "gen/Look/10023" in tuned and "gen/Look/10024" not in tuned
    before = [["gen/Look/10000", 0, 0], ["gen/Look/10000", 1, 0], ["gen/Look/10100", 0, 0], ["gen/Pick/10150", 1, 1]]
    after = [["gen/Look/10000", 0, 1], ["gen/Look/10000", 1, 1], ["gen/Look/10100", 0, 1], ["gen/Pick/10150", 1, 1]]
    report = gpu_run_report.fill_tests({"parts": {"learning": {"outcomes": {"validation": {"before": before,
                                                                                          "after": after}}}}})
    learning = report["parts"]["learning"]
    assert (learning["validation"]["episodes"], learning["validation"]["gained"]) == (4, 3)
    untuned = learning["validation_untuned"]
    assert (untuned["episodes"], untuned["gained"], untuned["excluded_tasks"]) == (2, 1, ["gen/Look/10000"])
    assert "- the same without the 1 tasks the CPU recipe was chosen on: 0.500 -> 1.000 on 2 paired episodes" in \
        gpu_run_report.render(report)


def test_a_failed_part_is_recorded_and_the_command_says_so(tmp_path, capsys, monkeypatch):
    # one lease, one command: a part that raises must leave the JSON and markdown whole, with its error named
    monkeypatch.setenv("ECPO_TOKENIZER_DIR", str(tmp_path / "no-tokenizer"))
    monkeypatch.setattr(gpu_learning, "ROOT", tmp_path)  # no bundle copy of the tokenizer either: part 3 fails
    out = tmp_path / "gpu_run.json"
    out.write_text(json.dumps({"parts": {"credit": {"device": "cuda", "rows": 5, "cpu_seconds": 0.01,
                                                    "device_seconds": 0.01, "max_abs_difference": 0.0}}}))
    assert gpu_run.main(["native", "--device", "cpu", "--parts", "3", "--out", str(out)]) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "error: part(s) paper_iteration failed; the JSON records each error, the others are complete")
    report = json.loads(out.read_text())
    assert report["parts"]["paper_iteration"]["error"].startswith("FileNotFoundError: no Qwen2.5 tokenizer")
    assert report["parts"]["credit"]["rows"] == 5  # the earlier command's part is kept
    text = out.with_suffix(".md").read_text()
    assert "**Part 3 (paper_iteration) failed:** `FileNotFoundError: no Qwen2.5 tokenizer" in text
    assert "## 2. Credit on the device against numpy" in text


def test_a_file_that_is_not_json_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert gpu_run.main(["report", "--from-json", str(bad), "--out", str(tmp_path / "x.json")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


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
    assert set(parts) == {"environment", "credit", "paper_iteration"}
    environment = parts["environment"]
    assert environment["device"] == "cpu" and environment["torch"] == torch.__version__
    # no CUDA here: the suite's CUDA test is collected and skipped, never failed
    assert environment["cuda_tests"]["exit_code"] == 0, environment["cuda_tests"]
    summary = environment["cuda_tests"]["summary"]  # one skipped test per CUDA check (gpu_run.CUDA_TESTS)
    assert "2 skipped" in summary and "failed" not in summary and "error" not in summary, summary
    assert not set(environment["distributions"]) - {"ecpo"} - device_allowed()
    assert parts["credit"]["max_abs_difference"] < 1e-9
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
