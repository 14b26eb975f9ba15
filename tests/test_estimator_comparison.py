"""Issue 57's registered comparison: the seed count is the pilot's by the registered rule, and each cell's verdict
is Holm's on the paired difference with GiGPO w/std."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from benchmarks import estimator_comparison as ec
from benchmarks.stats import mde, seeds_for_mde


def rule_seeds(sds: list[float], protocol: dict) -> int:
    """The protocol's registered rule (the pilots that applied it are finished, their code gone): the fewest seeds
    whose exact-power MDE at level alpha / m (m = the testbed's comparisons) is at most the target for the largest
    pilot SD of (arm - reference), and never below 10."""
    alpha = protocol["alpha"] / (len(protocol["arms"]) - 1)
    return max(10, seeds_for_mde(max(sds), protocol["mde_target"], alpha, protocol["power"]))


def test_the_protocols_seed_count_is_the_pilots_by_the_registered_rule():
    protocol = ec.load_protocol()
    pilot = json.loads((ec.RESULTS / "estimator_comparison_pilot.json").read_text())
    success = {(r["env_name"], r["method"], r["seed"]): r["final_success"] for r in pilot["runs"]}
    seeds = sorted({seed for _, _, seed in success})
    sds = {arm: np.std([success[("corridor", arm, s)] - success[("corridor", "gigpo_std", s)] for s in seeds], ddof=1)
           for arm in protocol["arms"] if arm != "gigpo_std"}
    assert pilot["seed_count"]["sd"] == pytest.approx({f"corridor|{arm}": sd for arm, sd in sds.items()})
    assert rule_seeds(list(sds.values()), protocol) == pilot["seed_count"]["seeds"] == protocol["seeds"]
    sd, alpha = pilot["seed_count"]["largest_sd"], protocol["alpha"] / (len(protocol["arms"]) - 1)
    n = protocol["seeds"]
    assert mde(sd / math.sqrt(n), n - 1, alpha) <= 0.10 < mde(sd / math.sqrt(n - 1), n - 2, alpha)


def test_verdicts_are_holms_on_the_paired_difference():
    protocol = ec.load_protocol() | {"arms": ["gigpo_std", "better", "same"], "reference": "gigpo_std"}
    rng = np.random.default_rng(0)
    base = rng.uniform(0.5, 0.9, size=20)
    runs = [{"env_name": "corridor", "method": m, "group_size": 8, "seed": s, "final_success": v}
            for m, values in (("gigpo_std", base), ("better", base + 0.05 + rng.normal(0, 0.01, 20)),
                              ("same", base + rng.normal(0, 0.05, 20)))
            for s, v in enumerate(values)]
    table = ec.compare(runs, protocol)
    assert table["better"]["corridor"]["verdict"] == "better" and table["better"]["corridor"]["m"] == 2
    assert table["same"]["corridor"]["verdict"] == "no difference shown"
    assert table["gigpo_std"]["corridor"]["reference"]


@pytest.mark.parametrize(("name", "pilot", "seeds"), [("alfworld_text", "alfworld_text.json", 10),
                                                     ("households", "households_text.json", 21)])
def test_a_program_columns_seed_count_is_its_pilots_by_the_same_rule(name, pilot, seeds):
    """A program testbed's pilot (``benchmarks.alfworld_text``'s report: ecpo, gigpo_std, grpo on seeds 1-5; for
    real ALFWorld the registered alfworld_text study) sizes its column by the corridor's rule: the SD of each arm it
    ran minus GiGPO w/std (the floor of 10 stands in for the arms it did not run); its seeds are 101 on."""
    protocol = ec.load_protocol()
    study = json.loads((ec.RESULTS / pilot).read_text())
    success = {arm: [part["seeds"][str(s)]["by_type"]["All"] for s in range(1, 6)] for arm, part in study["arms"].items()}
    sds = [np.std(np.subtract(success[arm], success["gigpo_std"]), ddof=1) for arm in ("ecpo", "grpo")]
    written = json.loads((ec.RESULTS / f"estimator_comparison_{name}_pilot.json").read_text())
    assert written["largest_sd"] == pytest.approx(max(sds))
    assert rule_seeds(sds, protocol) == written["seeds"] == ec.testbed(protocol, name)["seeds"] == seeds
    assert ec.program_seeds(ec.testbed(protocol, name)) == list(range(101, 101 + seeds))


def test_a_program_testbeds_runs_are_read_from_its_leaderboard_logs():
    """``program_runs`` reads each (arm, seed) from its valid_seen episode log (here the pilot study's raw logs,
    seeds 1-5): the share of the warm start's games won, the cells ``compare`` pairs by seed."""
    protocol = ec.load_protocol() | {"arms": ["grpo", "gigpo_std", "ecpo"]}
    bed = ec.testbed(protocol, "alfworld_text") | {"seeds": 5, "seed_offset": 0}
    protocol["testbeds"] = [bed]
    runs = ec.program_runs(protocol, "alfworld_text", ec.RESULTS / "raw" / "alfworld_text")
    study = json.loads((ec.RESULTS / "alfworld_text.json").read_text())
    assert {(r["method"], r["seed"]): r["final_success"] for r in runs} == {
        (arm, int(s)): part["by_type"]["All"] for arm, entry in study["arms"].items()
        for s, part in entry["seeds"].items()}
    table = ec.compare(runs, protocol)
    assert table["ecpo"]["alfworld_text"]["diff"] == pytest.approx(
        study["comparisons"]["ecpo - gigpo_std"]["diff"])


def _households_protocol() -> dict:
    """The registered protocol with three arms and the households entry given 2 seeds (its pilot has not run)."""
    protocol = ec.load_protocol() | {"arms": ["grpo", "gigpo_std", "ecpo"]}
    protocol["testbeds"] = [t | {"seeds": 2} if t["name"] == "households" else t for t in protocol["testbeds"]]
    return protocol


def _episode_log(out, name, won, games=12):
    """One evaluated policy's leaderboard episode log, as ``benchmarks.alfworld_text`` writes it for the households
    testbed: ``alfworld_gen/<name>/alfworld_gen.jsonl``, one record per held-out household."""
    folder = out / "alfworld_gen" / name
    folder.mkdir(parents=True)
    kinds = ["Pick", "Clean", "Cool", "Look", "Heat", "Pick2"]
    folder.joinpath("alfworld_gen.jsonl").write_text("".join(
        json.dumps({"manifest": "alfworld_gen", "group": "gen", "task_id": f"gen/{kinds[k % 6]}/{100000 + k // 6}",
                    "seed": 0, "task_type": kinds[k % 6], "success": k < won}) + "\n" for k in range(games)),
        encoding="utf-8")


def test_a_households_study_folder_gives_its_runs(tmp_path):
    """``program_runs`` reads the households testbed's episode logs (``alfworld_gen/``, not ``valid_seen/``): each
    (arm, seed) that played every household the warm start did; one that played fewer is left out."""
    protocol = _households_protocol()
    assert ec.program_testbeds(protocol) == ["alfworld_text", "households"]
    _episode_log(tmp_path, "warm-start", 3)
    won = {("grpo", 101): 4, ("gigpo_std", 101): 5, ("ecpo", 101): 6, ("grpo", 102): 3, ("gigpo_std", 102): 6}
    for (arm, seed), count in won.items():
        _episode_log(tmp_path, f"{arm}-s{seed}", count)
    _episode_log(tmp_path, "ecpo-s102", 12, games=6)  # stopped half-way: not a run
    runs = ec.program_runs(protocol, "households", tmp_path)
    assert {(r["method"], r["seed"]): r["final_success"] for r in runs} == {key: n / 12 for key, n in won.items()}
    assert {r["env_name"] for r in runs} == {"households"}
    with pytest.raises(ValueError, match="has no testbed 'corridor'"):
        ec.program_runs(protocol, "corridor", tmp_path)


def test_a_kept_jobs_machine_is_carried_to_the_report(tmp_path):
    """A kept job's ``machine.json`` (``study_keep``) names the CPU of its run; the report says which seeds ran on
    which CPU and names a seed whose arms (the pairing unit's members) span machines."""
    protocol = _households_protocol()
    _episode_log(tmp_path, "warm-start", 3)
    cpus = {("grpo", 101): "Xeon", ("gigpo_std", 101): "Xeon", ("ecpo", 101): "Xeon",
            ("grpo", 102): "EPYC", ("gigpo_std", 102): "EPYC", ("ecpo", 102): "Xeon"}
    for (arm, seed), cpu in cpus.items():
        _episode_log(tmp_path, f"{arm}-s{seed}", 4)
        (tmp_path / "alfworld_gen" / f"{arm}-s{seed}" / "machine.json").write_text(json.dumps({"cpu": cpu}))
    runs = ec.program_runs(protocol, "households", tmp_path)
    assert {(r["method"], r["seed"]): r["cpu"] for r in runs} == cpus
    assert ec.machines_line(runs, "households") == (
        "households was played on Xeon (seed 101); the arms of seeds 102 span machines.")
    whole = [r | {"cpu": "EPYC"} for r in runs if r["seed"] == 102] + [r for r in runs if r["seed"] == 101]
    assert ec.machines_line(whole, "households") == (
        "households was played on Xeon (seed 101); EPYC (seed 102); every seed's arms on one machine.")
    assert ec.machines_line(runs, "corridor") is None


def test_program_testbed_options_refuse_bad_input_in_one_line(tmp_path, capsys):
    for argv, message in ((["report", "--program-out", "households"], "give TESTBED=DIR"),
                          (["report", "--program-out", f"kitchen={tmp_path}"], "'kitchen' is not a program testbed"),
                          (["report", "--program-out", f"households={tmp_path}"], "report needs --from-json"),
                          (["report", "--from-json", str(tmp_path), "--program-out", f"households={tmp_path}",
                            "--program-out", f"households={tmp_path}"], "testbed households is given twice"),
                          (["run", "--from-json", str(tmp_path)], "invalid choice: 'run'")):  # (retired)
        try:  # refused by argparse (SystemExit) or by the stage's options (exit status returned)
            code = ec.main(argv)
        except SystemExit as exit_:
            code = exit_.code
        err = capsys.readouterr().err
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_the_report_stage_writes_the_committed_comparison_again(tmp_path, monkeypatch, capsys):
    """The documented rerun: ``report --from-json`` on the committed JSON with both program columns (real ALFWorld
    from its kept folder, households restored from its kept jobs) writes the committed JSON and report byte for
    byte."""
    from benchmarks import alfworld_text
    from benchmarks.study_keep import restore_kept

    monkeypatch.chdir(ec.RESULTS.parent.parent)
    households = tmp_path / "households-study"
    restore_kept(ec.RESULTS / "raw" / "estimators_households", households, alfworld_text.testbed_named("households"))
    monkeypatch.setattr(ec, "RESULT_JSON", tmp_path / "estimator_comparison.json")
    assert ec.main(["report", "--from-json", "benchmarks/results/estimator_comparison.json",
                    "--program-out", "alfworld_text=benchmarks/results/raw/estimators_alfworld",
                    "--program-out", f"households={households}"]) == 0
    for name in ("estimator_comparison.json", "estimator_comparison.md"):
        assert (tmp_path / name).read_bytes() == (ec.RESULTS / name).read_bytes(), name
