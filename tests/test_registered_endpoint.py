"""The one look at a pre-registered run: trained vs unseen episodes paired by position (Tango's interval, McNemar's
p, by task), and the pairings it refuses: another warm start, seed, task list, draws or temperature, a run against
itself, torn or short validation records, damaged configs."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from benchmarks import registered_endpoint as endpoint_module


def _run(tmp_path, before, after, tasks, trained):
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"algorithm": "ecpo", "seed": 0, "train_tasks": trained}))
    lines = [{"iteration": it, "task_ids": tasks, "copies": [0] * len(tasks), "won": won, "lengths": [1] * len(tasks)}
             for it, won in ((0, before), (10, after))]
    (tmp_path / "validation.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    metrics = [{"iteration": 0, "val/success": 0.1}] + [
        {"iteration": k, "success": 0.25 * k, "num_steps": 100, "update/rows_computed": 40,
         "credit/gated_fraction": 0.9, "credit/num_lucky_singletons": 2, "update/optimizer_steps": 2,
         "time/iteration": 60.0} for k in (1, 2)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in metrics))
    return tmp_path


def test_trained_and_unseen_episodes_pair_by_position_even_with_repeated_tasks(tmp_path):
    # a trained task listed twice (as the pool preset lists its tasks 8 times): 32 trained episodes, 8 unseen
    tasks = ["a", "b"] * 16 + ["u"] * 8
    before = [0] * 16 + [1] * 16 + [0] * 8
    after = [1] * 10 + [0] * 6 + [1] * 15 + [0] + [1, 0, 0, 0, 0, 0, 0, 0]
    result = endpoint_module.endpoint(_run(tmp_path, before, after, tasks, ["a", "b"]))
    trained, unseen = result["paired"]["trained"], result["paired"]["unseen"]
    assert (trained["gained"], trained["lost"], trained["episodes"], trained["tasks"]) == (10, 1, 32, 2)
    assert trained["diff"] == pytest.approx(9 / 32)
    assert trained["p"] == pytest.approx(24 / 2048)  # exact two-sided binomial: 2 * (1 + 11) / 2^11
    assert trained["shown"] and trained["low"] > 0 and trained["interval"] == "Tango score"
    assert trained["clustered"]["clusters"] == 2  # 2 tasks of 16 episodes each; the unseen task's 8 likewise
    assert (unseen["gained"], unseen["lost"], unseen["episodes"], unseen["shown"]) == (1, 0, 8, False)
    assert (trained["before"], trained["after"]) == (0.5, 25 / 32)
    t = result["training"]
    assert t["gate_open_share"] == [0.1, 0.1] and t["lucky_singletons"] == [2.0, 2.0]
    assert t["rows_with_advantage_share"] == [0.4, 0.4] and t["optimizer_steps"] == 4
    assert "learning shown" in endpoint_module.line("trained", trained)


def test_validations_of_different_episodes_are_refused_in_one_line(tmp_path, capsys):
    run = _run(tmp_path, [0, 1], [1, 1], ["a", "b"], ["a"])
    lines = (run / "validation.jsonl").read_text().splitlines()
    second = json.loads(lines[1]) | {"task_ids": ["b", "a"]}
    (run / "validation.jsonl").write_text(lines[0] + "\n" + json.dumps(second) + "\n")
    with pytest.raises(SystemExit) as stop:
        endpoint_module.main([str(run)])
    assert stop.value.code == 2
    assert capsys.readouterr().err.strip().startswith("error: validations at iterations 0 and 10 played different")


def test_regime_table_reads_the_gate_and_lucky_singletons_of_any_run(tmp_path):
    run = _run(tmp_path, [0], [1], ["a"], ["a"])
    table = endpoint_module.regime_table([run / "metrics.jsonl"])
    row = table.splitlines()[-1]
    assert row.endswith("| 2 | 0.100 | 2.000 | 0.400 | not recorded |")


def test_regime_table_names_a_run_without_training_iterations_and_a_run_without_a_gate(tmp_path):
    (tmp_path / "before.jsonl").write_text(json.dumps({"iteration": 0, "val/success": 0.2}) + "\n")
    (tmp_path / "gigpo.jsonl").write_text(json.dumps({"iteration": 1, "success": 0.5, "num_steps": 10,
                                                      "update/rows_computed": 5}) + "\n")
    rows = endpoint_module.regime_table([tmp_path / "before.jsonl", tmp_path / "gigpo.jsonl"]).splitlines()[2:]
    assert rows[0].endswith("| 0 | no training iteration | | | |")
    assert rows[1].endswith("| 1 | no gate | not recorded | 0.500 | not recorded |")


def test_versus_pairs_two_arms_last_validations_and_refuses_two_protocols(tmp_path, capsys):
    tasks = ["a"] * 8 + ["u"] * 4
    ecpo = _run(tmp_path / "ecpo", [0] * 12, [1] * 8 + [0] * 4, tasks, ["a"])
    gigpo = _run(tmp_path / "gigpo", [0] * 12, [1, 1, 0, 0, 0, 0, 0, 0] + [1, 0, 0, 0], tasks, ["a"])
    config = yaml.safe_load((gigpo / "config.yaml").read_text()) | {"algorithm": "gigpo_std"}
    (gigpo / "config.yaml").write_text(yaml.safe_dump(config))
    result = endpoint_module.main([str(ecpo), "--versus", str(gigpo)])[0]
    trained, unseen = result["paired"]["trained"], result["paired"]["unseen"]
    assert (trained["gained"], trained["lost"], trained["diff"]) == (6, 0, 0.75)  # ECPO won 6 that GiGPO lost
    assert (trained["before"], trained["after"]) == (0.25, 1.0)  # "before" is RUN_B, "after" RUN_A
    assert (unseen["gained"], unseen["lost"]) == (0, 1)
    out = capsys.readouterr().out
    assert "gigpo_std 0.250, ecpo 1.000; ecpo won 6 that gigpo_std lost, 0 the other way" in out
    assert "ecpo - gigpo_std +0.750" in out and "(ecpo better;" in out and "(not shown;" in out
    other = _run(tmp_path / "other", [0] * 12, [0] * 12, tasks, ["b"])
    with pytest.raises(SystemExit) as stop:
        endpoint_module.main([str(ecpo), "--versus", str(other)])
    assert stop.value.code == 2
    assert "are not two arms of one protocol" in capsys.readouterr().err


def test_before_from_reads_a_run_without_its_own_before_validation_against_its_partners(tmp_path, capsys):
    tasks = ["a"] * 8 + ["u"] * 4
    ecpo = _run(tmp_path / "ecpo", [1, 0, 0, 0, 0, 0, 0, 0] + [1, 1, 0, 0], [1] * 12, tasks, ["a"])
    gigpo = _run(tmp_path / "gigpo", [0] * 12, [1] * 6 + [0, 0] + [1, 0, 0, 0], tasks, ["a"])
    lines = (gigpo / "validation.jsonl").read_text().splitlines()
    (gigpo / "validation.jsonl").write_text(lines[1] + "\n")  # val_before_training=false: iteration 10 only
    with pytest.raises(SystemExit) as stop:  # its own folder has no before-validation
        endpoint_module.main([str(gigpo)])
    assert stop.value.code == 2 and "holds no validation before training" in capsys.readouterr().err
    result = endpoint_module.main([str(gigpo), "--before-from", str(ecpo)])[0]
    trained, unseen = result["paired"]["trained"], result["paired"]["unseen"]
    assert result["before_from"] == str(ecpo)
    assert (trained["before"], trained["after"], trained["gained"], trained["lost"]) == (1 / 8, 6 / 8, 5, 0)
    assert (unseen["before"], unseen["after"], unseen["gained"], unseen["lost"]) == (0.5, 0.25, 0, 1)
    assert "before-validation from" in capsys.readouterr().out
    other = _run(tmp_path / "other", [0] * 12, [0] * 12, tasks, ["b"])
    for argv, words in (([str(gigpo), "--before-from", str(other)], "not the same protocol"),
                        ([str(gigpo), "--before-from", str(ecpo), "--versus", str(ecpo)], "give one of them")):
        with pytest.raises(SystemExit) as stop:
            endpoint_module.main(argv)
        err = capsys.readouterr().err.strip()
        assert stop.value.code == 2 and len(err.splitlines()) == 1 and words in err, err


ROOT = Path(__file__).resolve().parents[1]


def _two_arms(tmp_path, **changes):
    """Two arms of one protocol (the second skipped its before-validation), the second's config changed."""
    tasks = ["a"] * 8 + ["u"] * 4
    first = _run(tmp_path / "first", [0] * 12, [1] * 12, tasks, ["a"])
    second = _run(tmp_path / "second", [0] * 12, [1] * 6 + [0] * 6, tasks, ["a"])
    config = yaml.safe_load((second / "config.yaml").read_text()) | changes
    (second / "config.yaml").write_text(yaml.safe_dump(config))
    return first, second


def _refused(capsys, argv) -> str:
    with pytest.raises(SystemExit) as stop:
        endpoint_module.main(argv)
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize("changes, words", [({"val_temperature": 1.0}, "their val_temperature differ (null and 1.0)"),
                                            ({"seed": 3}, "their seed differ (0 and 3)"),
                                            ({"rollout_temperature": 0.7}, "their rollout_temperature differ"),
                                            ({"val_episodes_per_task": 4}, "their val_episodes_per_task differ"),
                                            ({"model": "/elsewhere/warm"}, "their warm starts differ")])
def test_arms_of_another_temperature_seed_draws_or_warm_start_are_refused_both_ways(tmp_path, capsys, changes, words):
    first, second = _two_arms(tmp_path, **changes)
    assert words in _refused(capsys, [str(second), "--before-from", str(first)])
    assert words.replace("(null and 1.0)", "") in _refused(capsys, [str(first), "--versus", str(second)])


def test_warm_starts_compare_by_their_weights_hash_where_the_weights_are_here(tmp_path, capsys):
    same_a, same_b, other = (tmp_path / name for name in ("warm_a", "warm_b", "warm_other"))
    for folder, weights in ((same_a, b"weights"), (same_b, b"weights"), (other, b"other weights")):
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(weights)
    first, second = _two_arms(tmp_path / "same", model=str(same_b))
    config = yaml.safe_load((first / "config.yaml").read_text()) | {"model": str(same_a)}
    (first / "config.yaml").write_text(yaml.safe_dump(config))
    result = endpoint_module.main([str(second), "--before-from", str(first)])[0]  # two paths, one set of weights
    assert result["warm_start"] == {"model": str(same_b), "weights_sha256": endpoint_module.warm_start(
        {"model": str(same_a)})["weights_sha256"]}
    _, changed = _two_arms(tmp_path / "other", model=str(other))
    assert "their warm starts' weights differ" in _refused(capsys, [str(changed), "--before-from", str(first)])


def test_a_run_against_itself_is_refused(tmp_path, capsys):
    first, _ = _two_arms(tmp_path)
    assert "that is the run itself" in _refused(capsys, [str(first), "--versus", str(first / ".." / "first")])


@pytest.mark.parametrize("damage, words", [
    (lambda line: line[: len(line) // 2], "line 2: the validation of iteration 10 is torn"),
    (lambda line: json.dumps(json.loads(line) | {"won": json.loads(line)["won"][:-1]}),
     "line 2: the validation of iteration 10 is short")])
def test_a_torn_or_short_validation_record_names_its_iteration(tmp_path, capsys, damage, words):
    run = _run(tmp_path, [0, 1], [1, 1], ["a", "b"], ["a"])
    lines = (run / "validation.jsonl").read_text().splitlines()
    earlier = json.dumps(json.loads(lines[1]) | {"iteration": 5})  # dropping the last line would read this one
    (run / "validation.jsonl").write_text("\n".join([lines[0], earlier, damage(lines[1])]) + "\n")
    assert words.replace("line 2", "line 3") in _refused(capsys, [str(run)])


@pytest.mark.parametrize("config, words", [("- a\n- b\n", "is not a run's config (a mapping of settings; found list)"),
                                           ("seed: [0\n", "is not valid YAML")])
def test_a_damaged_config_is_one_line(tmp_path, capsys, config, words):
    run = _run(tmp_path, [0, 1], [1, 1], ["a", "b"], ["a"])
    (run / "config.yaml").write_text(config)
    assert words in _refused(capsys, [str(run)])


def test_a_damaged_config_is_one_line_under_ecpo_bench_too(tmp_path):
    run = _run(tmp_path, [0, 1], [1, 1], ["a", "b"], ["a"])
    (run / "config.yaml").write_text("- a\n- b\n")
    words = "is not a run's config (a mapping of settings; found list)"
    done = subprocess.run([sys.executable, "-m", "ecpo_train.apps.cli", "bench", "registered_endpoint", str(run)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and words in done.stderr


def test_a_start_records_its_warm_starts_hash_which_pairs_runs_whose_weights_are_elsewhere(tmp_path, capsys):
    from ecpo_train.runtime.resume import warm_start as resume_warm_start
    from ecpo_train.runtime.run_dir import MetricsLog, begin_run

    warm = tmp_path / "warm"
    warm.mkdir()
    (warm / "model.safetensors").write_bytes(b"weights")
    run = tmp_path / "started"
    log = MetricsLog(run, tensorboard=False)
    begin_run(log, "start", 0, warm_start=resume_warm_start({"model": str(warm)}))
    log.close()
    (record,) = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    assert record["warm_start"] == {"model": str(warm), "weights_sha256": endpoint_module.warm_start(
        {"model": str(warm)})["weights_sha256"]}
    assert record["warm_start"]["weights_sha256"] is not None
    # two arms naming one path that is not on this machine: the hashes their starts recorded decide
    first, second = _two_arms(tmp_path / "moved", model="/elsewhere/warm")
    for arm, digest in ((first, "a" * 64), (second, "b" * 64)):
        (arm / "history.jsonl").write_text(json.dumps({"event": "start", "iteration": 0,
                                                       "warm_start": {"weights_sha256": digest}}) + "\n")
    assert "their warm starts' weights differ" in _refused(capsys, [str(second), "--before-from", str(first)])


def test_a_config_with_yaml_aliases_is_refused_in_one_line_not_expanded(tmp_path, capsys):
    """Issue 58.6: a 734-byte config.yaml of nested aliases took 102 s and 5.3 GB here (``yaml.safe_load``); every
    YAML the project reads goes through its one loader, which refuses aliases."""
    run = _run(tmp_path, [0, 1], [1, 1], ["a", "b"], ["a"])
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"] + [f"a{k}: &a{k} [{', '.join([f'*a{k - 1}'] * 9)}]"
                                                        for k in range(1, 5)]
    (run / "config.yaml").write_text("\n".join(levels) + "\nseed: 0\n")
    assert "aliases are not supported" in _refused(capsys, [str(run)])


def test_no_module_reads_yaml_but_through_the_one_loader():
    """Issue 58.6, the class: ``yaml.safe_load``/``yaml.load`` appear only in ``config_values.read_yaml``."""
    import re

    hits = [f"{path.relative_to(ROOT)}:{number}" for folder in ("ecpo_train", "ecpo_gym", "benchmarks", "scripts",
                                                                "examples")
            for path in sorted((ROOT / folder).rglob("*.py"))
            for number, text in enumerate(path.read_text().splitlines(), 1)
            if re.search(r"\byaml\.(safe_load|load|full_load|unsafe_load)\b", text)]
    assert hits == ["ecpo_train/runtime/config_values.py:" + str(next(
        number for number, text in enumerate((ROOT / "ecpo_train/runtime/config_values.py").read_text().splitlines(), 1)
        if "yaml.load(" in text))]


@pytest.mark.parametrize("won, words", [(["x", 1], 'holds won "x"'), ([None, 1], "holds won null"),
                                        ([7, -3], "holds won 7")])
def test_a_validation_outcome_that_is_not_0_or_1_is_one_line(tmp_path, capsys, won, words):
    """Issue 58 (low): won ["x"] or [null] gave a traceback, won [7, -3] a success rate of 1.25."""
    run = _run(tmp_path, [0, 1], won, ["a", "b"], ["a"])
    err = _refused(capsys, [str(run)])
    assert words in err and "each episode's outcome is 0 or 1" in err


def test_a_regime_of_non_numeric_metrics_is_one_line(tmp_path, capsys):
    run = _run(tmp_path, [0, 1], [1, 1], ["a", "b"], ["a"])
    (run / "metrics.jsonl").write_text(json.dumps({"iteration": 1, "success": "high"}) + "\n")
    assert "holds success \"high\", not a finite number" in _refused(capsys, ["--regime", str(run / "metrics.jsonl")])
    assert "not a finite number" in _refused(capsys, [str(run)])
