"""benchmarks/paper_benchmarks.py: the warm start's task rule, the paper's table paired episode by episode, the
registered endpoint read from the stored episodes, one-line refusals, and a smoke run per environment in which
two arms start from one warm start and a second command continues the out folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks import paired_report as report_module
from benchmarks import paper_benchmarks as program

TOKENIZER_DIR = Path(os.environ.get("ECPO_TOKENIZER_DIR", "")).expanduser()
ROOT = Path(__file__).resolve().parents[1]


def episode(task: str, copy: int, won: int, type_: str = "Pick", set_: str = "valid_seen", invalid: int = 0,
            steps: int = 10, score: float | None = None) -> dict:
    return {"set": set_, "task": task, "copy": copy, "type": type_, "won": won,
            "score": float(won if score is None else score), "invalid": invalid, "steps": steps}


def test_warm_start_takes_k_games_of_each_task_type_in_a_fixed_order():
    ids = [f"{prefix}-X-{i}/trial_{i}/game.tw-pddl" for prefix in (
        "pick_and_place_simple", "look_at_obj_in_light", "pick_clean_then_place_in_recep",
        "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep", "pick_two_obj_and_place") for i in range(5)]
    chosen = program.warm_start_tasks(program.BENCHMARKS["alfworld"], ids, 2)
    assert chosen == program.warm_start_tasks(program.BENCHMARKS["alfworld"], ids, 2)  # fixed: seed 0
    from ecpo_gym.alfworld.game_files import subtask_of

    types = [subtask_of(g) for g in chosen]
    assert types == ["Pick", "Clean", "Cool", "Look", "Heat", "Pick2"] * 2  # interleaved in the paper's order
    assert len(set(chosen)) == 12
    goals = [f"goal_{i}" for i in range(100, 200)]
    assert len(program.warm_start_tasks(program.BENCHMARKS["webshop"], goals, 3)) == 18


def test_the_table_pairs_before_and_after_episode_by_episode_per_task_type():
    before = [episode("a", 0, 0), episode("a", 1, 1), episode("b", 0, 0, "Heat"), episode("c", 0, 1, "Look")]
    after = [episode("a", 0, 1), episode("a", 1, 1), episode("b", 0, 1, "Heat"), episode("c", 0, 0, "Look")]
    table = report_module.compare("alfworld", before, after)
    assert list(table) == ["Pick", "Look", "Heat", "All"]  # the paper's order; absent types left out
    assert (table["Pick"]["success_before"], table["Pick"]["success_after"]) == (0.5, 1.0)
    assert (table["All"]["episodes"], table["All"]["gained"], table["All"]["lost"]) == (4, 2, 1)
    assert table["All"]["diff"] == pytest.approx(0.25)
    with pytest.raises(ValueError, match="different episodes"):
        report_module.compare("alfworld", before, list(reversed(after)))


def test_the_endpoint_is_read_from_the_stored_episodes_and_a_failed_format_reports_its_invalid_rate():
    before = [episode(f"t{i}", 0, 0, invalid=8) for i in range(30)]
    after = [episode(f"t{i}", 0, int(i < 20), invalid=8) for i in range(30)]
    stored = {"benchmark": "searchqa", "arms": ["ecpo"], "episodes": {"before": before, "after_ecpo": after},
              "arm_results": {"ecpo": {"iterations_done": 3}}}
    point = report_module.score_table(stored)["endpoint"]
    assert point["after_minus_before"].startswith("+0.667 [") and "learning shown" in point["after_minus_before"]
    assert "invalid-action rate 0.80 before and 0.80 after" in point["format"]
    stored["episodes"]["after_ecpo"] = before  # the same episodes lost again: the endpoint follows them
    unchanged = report_module.score_table(stored)["endpoint"]["after_minus_before"]
    assert unchanged.startswith("+0.000 [-0.1") and "not shown" in unchanged  # Tango's interval holds 0 both ways


def test_arms_that_ran_different_iterations_are_not_compared():
    before = [episode("a", 0, 0), episode("b", 0, 0)]
    stored = {"benchmark": "alfworld", "arms": ["ecpo", "gigpo_std"],
              "episodes": {"before": before, "after_ecpo": before, "after_gigpo_std": before},
              "arm_results": {"ecpo": {"iterations_done": 3}, "gigpo_std": {"iterations_done": 2}}}
    scored = report_module.score_table(stored)
    assert "All" not in scored["comparisons"]["ecpo - gigpo_std"]
    assert "ecpo - gigpo_std" not in scored["endpoint"]


@pytest.mark.parametrize("argv, words", [
    (["run", "--device", "cpu", "--smoke"], "--out DIR"),
    (["run", "--device", "cpu", "--smoke", "--out", "x", "--arms", "ecpo", "ecpo"], "give different estimators"),
    (["run", "--device", "cpu", "--smoke", "--out", "x", "--arms", "ecpo", "nope"], "unknown estimator 'nope'"),
    (["run", "--env", "nope"], "invalid choice: 'nope'"),
    (["report", "--out", "x"], "report needs --from-json JSON"),
])
def test_bad_arguments_are_one_line(capsys, argv, words):
    with pytest.raises(SystemExit) as stop:
        program.main(argv)
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and len(err.splitlines()) == 1 and words in err, err


def test_a_refusal_of_the_library_is_one_line_not_a_traceback(capsys, tmp_path):
    # an out folder whose report.json is cut short, and a model folder that does not load (WebShop needs no data):
    # the ValueError/OSError the library raises is the command's one `error:` line and exit 2
    (tmp_path / "cut").mkdir()
    (tmp_path / "cut" / "report.json").write_text("{")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    for argv, words in ((["--smoke", "--out", str(tmp_path / "cut")], "report.json cannot be read"),
                        (["--env", "webshop", "--model", str(tmp_path / "model"), "--sft-per-type", "1",
                          "--out", str(tmp_path / "out")], "tokenizer")):
        with pytest.raises(SystemExit) as stop:
            program.main(["run", "--device", "cpu", *argv])
        err = capsys.readouterr().err.strip()
        assert stop.value.code == 2 and len(err.splitlines()) == 1 and err.startswith("error: ") and words in err, err


def _needs_tokenizer() -> None:
    if not os.environ.get("ECPO_TOKENIZER_DIR") or not (TOKENIZER_DIR / "tokenizer.json").exists():
        pytest.skip(f"no Qwen2.5 tokenizer at {TOKENIZER_DIR} (set ECPO_TOKENIZER_DIR)")


def _needs_alfworld_train() -> None:
    from ecpo_gym.alfworld.game_files import resolve_split_dir

    try:
        resolve_split_dir(None, "train")
        resolve_split_dir(None, "valid_seen")
    except FileNotFoundError as error:
        pytest.skip(f"real ALFWorld games not found: {str(error)[:120]}")


@pytest.mark.slow
def test_alfworld_smoke_pairs_both_arms_and_a_second_command_continues(tmp_path):
    _needs_tokenizer()
    _needs_alfworld_train()
    out = tmp_path / "alf"
    # a limit no smoke reaches: the plan is then the smoke's cap of 2 iterations, whatever the machine's load
    argv = ["run", "--env", "alfworld", "--device", "cpu", "--smoke", "--time-limit", "7200", "--out", str(out)]
    assert program.main(argv) == 0
    report = json.loads((out / "report.json").read_text())
    episodes = report["episodes"]
    keys = [(e["set"], e["task"], e["copy"]) for e in episodes["before"]]
    assert len(keys) == 6 and {e["type"] for e in episodes["before"]} == {"Pick", "Clean", "Cool", "Look", "Heat", "Pick2"}
    for arm in ("ecpo", "gigpo_std"):  # the same episodes after training, in the same order
        assert [(e["set"], e["task"], e["copy"]) for e in episodes[f"after_{arm}"]] == keys
        assert report["arm_results"][arm]["iterations_done"] == report["iterations_planned"] == 2
    # one warm start and one seed: the first iteration plays the same episodes in both arms
    first = [report["arm_results"][a]["per_iteration"][0] for a in ("ecpo", "gigpo_std")]
    assert first[0]["num_steps"] == first[1]["num_steps"] and first[0]["success"] == first[1]["success"]
    # the table and the endpoint are the stored episodes' (rescoring the JSON gives the same)
    assert report["tables"]["ecpo"]["All"]["episodes"] == 6
    rescored = tmp_path / "rescored.json"
    assert program.main(["report", "--from-json", str(out / "report.json"), "--out", str(rescored)]) == 0
    assert json.loads(rescored.read_text())["endpoint"] == report["endpoint"]
    assert "| before training |" in (out / "report.md").read_text()
    # a second command continues: nothing is redone
    stamps = {p: p.stat().st_mtime_ns for p in (out / "sft_model" / "sft.json", out / "arm_ecpo.json")}
    assert program.main(argv) == 0
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    assert json.loads((out / "report.json").read_text())["episodes"] == episodes


@pytest.mark.slow
@pytest.mark.parametrize("env", ["webshop", "searchqa"])
def test_webshop_and_searchqa_smokes_report_their_table(tmp_path, env, request):
    _needs_tokenizer()
    if env == "searchqa":
        request.getfixturevalue("data_dir")  # HotpotQA dev500: skipped without the data folder
    out = tmp_path / env
    assert program.main(["run", "--env", env, "--device", "cpu", "--smoke", "--arms", "ecpo", "--time-limit", "7200",
                         "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    before, after = report["episodes"]["before"], report["episodes"]["after_ecpo"]
    assert [(e["set"], e["task"], e["copy"]) for e in after] == [(e["set"], e["task"], e["copy"]) for e in before]
    sets = set(report["tables"]["ecpo"]) - {"All"}
    assert sets == set(program.BENCHMARKS[env].validation)
    assert all(0.0 <= report["tables"]["ecpo"]["All"][k] <= 1.0 for k in ("invalid_before", "invalid_after"))


# ------------------------------------------------------------------------------ issue 58.3: one owner, progress from the run folder
def _hold_lock(out: Path) -> subprocess.Popen:
    """Another process holding ``out``'s lock, as a running command of this program does."""
    script = ("import sys, time; from pathlib import Path; from ecpo_train.runtime.run_lock import acquire_run_lock; "
              "acquire_run_lock(Path(sys.argv[1]), 'paper_benchmarks'); print('held', flush=True); time.sleep(120)")
    holder = subprocess.Popen([sys.executable, "-c", script, str(out)], stdout=subprocess.PIPE, text=True,
                              env=os.environ | {"PYTHONPATH": str(ROOT)})
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_a_second_command_on_one_out_is_refused_in_one_line_and_writes_nothing(capsys, tmp_path):
    out = tmp_path / "out"
    holder = _hold_lock(out)
    try:
        before = sorted(p.name for p in out.iterdir())
        with pytest.raises(SystemExit) as stop:
            program.main(["run", "--device", "cpu", "--smoke", "--out", str(out)])
        err = capsys.readouterr().err.strip()
        assert stop.value.code == 2 and len(err.splitlines()) == 1, err
        assert f"--out {out} is in use by pid {holder.pid}" in err and "paper_benchmarks" in err, err
        assert sorted(p.name for p in out.iterdir()) == before
    finally:
        holder.kill()
        holder.wait()


def _metrics_row(iteration: int) -> dict:
    return {"iteration": iteration, "num_steps": 8, "success": 0.5, "time/generation": 1.0, "time/env": 1.0,
            "time/update": 1.0, "time/iteration": 3.5}


def test_an_arms_progress_is_its_run_folders_up_to_its_checkpoint(tmp_path):
    """A line logged after the checkpoint (a kill before the checkpoint was written) is not counted: the arm's
    iterations are the checkpoint's, whatever a separate record says."""
    import torch

    from benchmarks.paper_benchmarks import arm_progress, arm_result

    run_dir = tmp_path / "run_ecpo"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(_metrics_row(k)) + "\n" for k in (1, 2, 3)))
    torch.save({"iteration": 2, "policy": {}}, run_dir / "checkpoint.pt")
    assert [row["wall"] for row in arm_progress(run_dir)] == [3.5, 3.5]
    (tmp_path / "arm_ecpo.json").write_text(json.dumps({"iteration": 3, "after": []}))  # a record ahead of the run
    result = arm_result(tmp_path, "ecpo")
    assert result["iterations_done"] == 2 and "after" not in result
    (tmp_path / "arm_ecpo.json").write_text(json.dumps({"iteration": 2, "after": []}))
    assert arm_result(tmp_path, "ecpo")["after"] == []


@pytest.mark.parametrize("text", ["[]", "{}", "{\"iter", "", "7"])
@pytest.mark.parametrize("name", ["plan.json", "arm_ecpo.json", "report.json"])
def test_a_program_record_that_is_not_one_is_one_line_naming_it(tmp_path, name, text):
    """plan.json, an arm's record, report.json holding [], {}, a cut object: one ValueError naming the file."""
    (tmp_path / name).write_text(text)
    if name == "report.json" and text == "{}":
        return  # (an empty report is a program that has not run a stage yet)
    with pytest.raises(ValueError) as refused:
        if name == "plan.json":
            program.Stages(tmp_path).plan()
        elif name == "arm_ecpo.json":
            from benchmarks.paper_benchmarks import arm_result

            arm_result(tmp_path, "ecpo")
        else:
            program.Stages(tmp_path)
    assert str(tmp_path / name) in str(refused.value) and "\n" not in str(refused.value)


SITE_KILL = '''import os, sys
if any(arg.endswith(os.environ.get("ECPO_KILL_ARM", "-") + ".spec") for arg in sys.argv):
    from fault_injection import _hook  # tests/ is on the first command's PYTHONPATH
    sys.setprofile(_hook(os.environ["ECPO_KILL_AT"], "kill"))
'''


@pytest.mark.slow
def test_arms_killed_between_checkpoint_and_record_or_run_twice_end_on_the_planned_iterations(tmp_path):
    """Issue 58.3, the fault-injection test of the arms' windows. (1) A second command on the same --out while the
    first runs is refused in one line. (2) The ECPO arm is killed (SIGKILL) after its last checkpoint, inside the
    write of its record ``arm_ecpo.json``; the same command again: both arms end on the plan's iterations (ECPO
    trained no extra one), each iteration logged once, and the report compares them, without the first command's
    arm error."""
    _needs_tokenizer()
    out = tmp_path / "ws"
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITE_KILL)
    argv = ["run", "--env", "webshop", "--device", "cpu", "--smoke", "--time-limit", "7200", "--out", str(out)]
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(site), str(ROOT), str(ROOT / "tests")]),
                        "ECPO_KILL_ARM": "ecpo", "ECPO_KILL_AT": "arm_ecpo.json"}
    first = subprocess.Popen([sys.executable, "-m", "benchmarks.paper_benchmarks", *argv], env=env, cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while not (out / "run.lock").exists() and first.poll() is None:
        time.sleep(0.2)
    second = subprocess.run([sys.executable, "-m", "benchmarks.paper_benchmarks", *argv], cwd=ROOT, text=True,
                            capture_output=True, env=os.environ | {"PYTHONPATH": str(ROOT)}, check=False)
    assert second.returncode == 2 and second.stderr.count("\n") == 1 and "is in use by pid" in second.stderr, \
        second.stderr
    _, err = first.communicate(timeout=1200)
    assert first.returncode == 1 and "arm ecpo: its process exited -9" in err, err[-2000:]
    assert not (out / "arm_ecpo.json").exists()
    again = subprocess.run([sys.executable, "-m", "benchmarks.paper_benchmarks", *argv], cwd=ROOT, text=True,
                           capture_output=True, env=os.environ | {"PYTHONPATH": str(ROOT)}, check=False)
    assert again.returncode == 0, again.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    assert report["iterations_planned"] == 2 and "arm_errors" not in report
    for arm in ("ecpo", "gigpo_std"):
        assert report["arm_results"][arm]["iterations_done"] == 2, arm
        logged = [json.loads(line)["iteration"] for line in (out / f"run_{arm}" / "metrics.jsonl").read_text().splitlines()]
        assert logged == [1, 2], (arm, logged)
    assert "All" in report["comparisons"]["ecpo - gigpo_std"]
