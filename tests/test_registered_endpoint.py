"""The one look at a pre-registered run: trained vs unseen episodes paired by position, McNemar's exact figures."""

import json

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
    assert trained["shown"] and trained["low"] > 0
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
