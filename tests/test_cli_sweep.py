"""A sweep over every ``ecpo`` verb with bad paths, wrong types and out-of-range numbers (issue 25): no case ends
in a traceback. Each is refused with one ``error: ...`` line and exit 2 (``usage``: click's own answer to a value
of the wrong type, also exit 2), or is a documented outcome (``ok``).

Runs the CLI in-process; no case trains, downloads or loads more than a tiny model.
"""

from __future__ import annotations

import json
import os

import pytest
import torch
from typer.testing import CliRunner

from ecpo_train.apps.cli import app

runner = CliRunner()
NO_CUDA = not torch.cuda.is_available()


@pytest.fixture(scope="module")
def paths(tmp_path_factory, tiny_model_dir):
    """A finished run and its damaged copies, a plain file, an empty folder, a garbage YAML and manifest."""
    root = tmp_path_factory.mktemp("sweep")
    run = root / "run"
    trained = runner.invoke(app, ["train", "--config", "quickstart", f"run_dir={run}", "iterations=2", "n_groups=2",
                                  "group_size=2", "val_every=0", "progress=false", "tensorboard=false"])
    assert trained.exit_code == 0, trained.output
    made = {"run": run, "root": root}
    for name, damage in (("random_ckpt", lambda d: (d / "checkpoint.pt").write_bytes(os.urandom(2000))),
                         ("empty_ckpt", lambda d: (d / "checkpoint.pt").write_bytes(b"")),
                         ("bad_metrics", lambda d: (d / "metrics.jsonl").write_text('{"iteration": 1}\n{oops\n'
                                                                                     '{"iteration": 2}\n')),
                         ("torn_metrics", lambda d: (d / "metrics.jsonl").open("a").write('{"iteration": 3, "su')),
                         ("empty_metrics", lambda d: (d / "metrics.jsonl").write_text("")),
                         ("bad_config", lambda d: (d / "config.yaml").write_text("env_id: [unclosed\n")),
                         ("list_config", lambda d: (d / "config.yaml").write_text("- a\n- b\n")),
                         ("no_env_config", lambda d: (d / "config.yaml").write_text("seed: 1\n"))):
        copy = root / name
        copy.mkdir()
        for item in run.iterdir():
            if item.is_file():
                (copy / item.name).write_bytes(item.read_bytes())
        damage(copy)
        made[name] = copy
    made["file"] = root / "a_file"
    made["file"].write_text("not a folder")
    made["empty"] = root / "empty"
    made["empty"].mkdir()
    made["png_dir"] = root / "folder.png"
    made["png_dir"].mkdir()
    made["garbage_yaml"] = root / "garbage.yaml"
    made["garbage_yaml"].write_text("iterations: [1,\n")
    made["list_yaml"] = root / "list.yaml"
    made["list_yaml"].write_text("- 1\n- 2\n")
    made |= _issue39_paths(root, run, tiny_model_dir)
    made["garbage_manifest"] = root / "manifest.json"
    made["garbage_manifest"].write_text("{not json")
    made["wrong_manifest"] = root / "wrong_manifest.json"
    made["wrong_manifest"].write_text(json.dumps({"name": "x", "groups": "nope"}))
    return made


LLM = ["n_groups=1", "group_size=2", "val_every=0", "progress=false", "tensorboard=false"]


def _issue39_paths(root, run, tiny_model_dir):
    """Issue 39's folders: a run without its checkpoint, a LoRA run, a folder of the RLlib engine whose checkpoint
    is a truncated pickle, a damaged ALFWorld split, a leaderboard folder, a folder of other files, a model."""
    made = {"tiny": tiny_model_dir, "blank": ""}
    no_ckpt = root / "no_ckpt"
    no_ckpt.mkdir()
    for item in run.iterdir():
        if item.is_file() and item.name != "checkpoint.pt":
            (no_ckpt / item.name).write_bytes(item.read_bytes())
    made["no_ckpt"] = no_ckpt
    for name, extra in (("lora_run", ["lora={r: 4, alpha: 8}"]), ("llm_run", [])):
        trained = runner.invoke(app, ["train", "--config", "corridor_llm", f"model={tiny_model_dir}",
                                      f"run_dir={root / name}", "iterations=1", *LLM, *extra])
        assert trained.exit_code == 0, trained.output
        made[name] = root / name
    rllib = root / "rllib_truncated"  # the RLlib engine's folder: engine: rllib, a checkpoint cut mid-write
    rllib.mkdir()
    for item in ("config.yaml", "metrics.jsonl", "history.jsonl"):
        (rllib / item).write_bytes((root / "llm_run" / item).read_bytes())
    (rllib / "config.yaml").write_text((rllib / "config.yaml").read_text() + "engine: rllib\n")
    (rllib / "rllib_checkpoint").mkdir()
    (rllib / "rllib_checkpoint" / "class_and_ctor_args.pkl").write_bytes(b"\x80\x05\x95\x10\x00\x00")
    made["rllib_truncated"] = rllib
    split = root / "damaged_alfworld" / "valid_seen" / "pick_and_place_simple-Apple-None-Fridge-1" / "trial_T1"
    split.mkdir(parents=True)
    (split / "game.tw-pddl").write_bytes(b'{"pddl_domain": "(define')
    made["damaged_alfworld"] = root / "damaged_alfworld" / "valid_seen"
    made["lb"] = root / "lb_depth3"
    first = runner.invoke(app, ["leaderboard", "--env", "ecpo/DivergentAnchor-v0", "--env-kwarg", "depth=3",
                                "--seeds", "1", "--limit", "1", "--out-dir", str(made["lb"])])
    assert first.exit_code == 0, first.output
    made["other_files"] = root / "other_files"
    made["other_files"].mkdir()
    (made["other_files"] / "config.json").write_text("{}")
    return made


# (case id, argv with {name} placeholders filled from ``paths``, expected outcome)
CASES = [
    # ---------------------------------------------------------------- train
    ("train-unknown-preset", "train --config nope", "error"),
    ("train-garbage-yaml", "train --config {garbage_yaml}", "error"),
    ("train-list-yaml", "train --config {list_yaml}", "error"),
    ("train-config-is-folder", "train --config {empty}", "error"),
    ("train-iterations-negative", "train --config quickstart run_dir={root}/t iterations=-1", "error"),
    ("train-iterations-text", "train --config quickstart run_dir={root}/t iterations=abc", "error"),
    ("train-lr-negative", "train --config quickstart run_dir={root}/t lr=-1", "error"),
    ("train-n-groups-zero", "train --config quickstart run_dir={root}/t n_groups=0", "error"),
    ("train-group-size-float", "train --config quickstart run_dir={root}/t group_size=1.5", "error"),
    ("train-n-groups-list", "train --config quickstart run_dir={root}/t n_groups=[1,2]", "error"),
    ("train-temperature-negative", "train --config quickstart run_dir={root}/t rollout_temperature=-1", "error"),
    ("train-kappa-negative", "train --config quickstart run_dir={root}/t credit.kappa=-1", "error"),
    ("train-kappa-misplaced", "train --config quickstart run_dir={root}/t kappa=2", "error"),
    ("train-unknown-key", "train --config quickstart run_dir={root}/t nope=1", "error"),
    ("train-not-key-value", "train --config quickstart run_dir={root}/t justaword", "error"),
    ("train-model-missing", "train --config quickstart run_dir={root}/t policy=llm model=/nonexistent", "error"),
    ("train-env-unknown", "train --config quickstart run_dir={root}/t env_id=ecpo/Nope-v0", "error"),
    ("train-env-kwarg-huge", "train --config quickstart run_dir={root}/t env_kwargs.depth=100000000", "error"),
    ("train-env-kwarg-text", "train --config quickstart run_dir={root}/t env_kwargs.depth=abc", "error"),
    ("train-env-kwarg-unknown", "train --config quickstart run_dir={root}/t env_kwargs.nope=1", "error"),
    ("train-score-on-tabular", "train --config quickstart run_dir={root}/t policy_mode=score", "error"),
    ("train-score-on-searchqa", "train --config searchqa run_dir={root}/t policy_mode=score model=x", "error"),
    ("train-policy-unknown", "train --config quickstart run_dir={root}/t policy=nope", "error"),
    ("train-nproc-one", "train --config quickstart --nproc 1", "error"),
    ("train-nproc-negative", "train --config quickstart --nproc -3", "error"),
    ("train-nproc-text", "train --config quickstart --nproc two", "usage"),
    ("train-run-dir-is-file", "train --config quickstart run_dir={file}", "error"),
    ("train-run-dir-under-file", "train --config quickstart run_dir={file}/run", "error"),
    ("train-run-dir-holds-run", "train --config quickstart run_dir={run}", "error"),
    ("train-resume-and-overwrite", "train --config quickstart run_dir={run} --resume --overwrite", "error"),
    ("train-resume-damaged", "train --config quickstart run_dir={random_ckpt} n_groups=2 group_size=2 --resume",
     "error"),
    ("train-resume-changed-key", ("train --config quickstart run_dir={run} n_groups=2 group_size=2 estimator=grpo "
                                 "--resume"), "error"),
    ("train-device-cuda", "train --config quickstart run_dir={root}/t device=cuda", "error" if NO_CUDA else None),
    ("train-device-unknown", "train --config quickstart run_dir={root}/t device=tpu", "error"),
    # ---------------------------------------------------------------- sft
    ("sft-unknown-preset", "sft --config nope --out {root}/sft", "error"),
    ("sft-episodes-zero", "sft --config quickstart --out {root}/sft --episodes 0", "error"),
    ("sft-lr-negative", "sft --config quickstart --out {root}/sft --lr -1", "error"),
    ("sft-epochs-text", "sft --config quickstart --out {root}/sft --epochs abc", "usage"),
    ("sft-batch-zero", "sft --config quickstart --out {root}/sft --batch-size 0", "error"),
    ("sft-model-missing", "sft --config corridor_llm --out {root}/sft model=/nonexistent", "error"),
    ("sft-bad-override", "sft --config corridor_llm --out {root}/sft model=x iterations=-1", "error"),
    ("sft-out-empty", "sft --config corridor_llm --out {blank} model={tiny}", "error"),
    ("sft-out-is-model", "sft --config corridor_llm --out {tiny} model={tiny}", "error"),
    ("sft-out-other-files", "sft --config corridor_llm --out {other_files} model={tiny}", "error"),
    ("sft-episodes-huge", "sft --config corridor_llm --out {root}/sft --episodes 100000000 model={tiny}", "error"),
    # ---------------------------------------------------------------- train: issue 39
    ("train-resume-no-checkpoint", "train --config quickstart run_dir={no_ckpt} n_groups=2 group_size=2 --resume",
     "error"),
    ("train-rllib-resume-native-run", ("train --config quickstart run_dir={run} n_groups=2 group_size=2 --engine rllib "
                                       "--resume"), "error"),
    ("train-native-resume-rllib-run", "train --config corridor_llm run_dir={rllib_truncated} model={tiny} --resume",
     "error"),
    ("train-rllib-truncated-checkpoint", ("train --config corridor_llm run_dir={rllib_truncated} model={tiny} "
                                          "iterations=2 " + " ".join(LLM) + " --engine rllib --env-runners 0 --resume"),
     "error"),
    ("train-resume-drops-lora", "train --config corridor_llm run_dir={lora_run} model={tiny} lora={{}} iterations=2 "
     + " ".join(LLM) + " --resume", "error"),
    ("train-resume-adds-env-kwarg", ("train --config quickstart run_dir={run} n_groups=2 group_size=2 iterations=3 "
                                     "env_kwargs.noise=0.9 --resume"), "error"),
    ("train-resume-drops-env-kwarg", ("train --config quickstart run_dir={run} n_groups=2 group_size=2 iterations=3 "
                                      "env_kwargs={{\"num_tasks\":4,\"depth\":8}} --resume"), "error"),
    ("train-task-types-empty", "train --config alfworld_cpu run_dir={root}/t env_kwargs.task_types=[]", "error"),
    ("train-rllib-nproc", "train --config quickstart run_dir={root}/t --engine rllib --nproc 2", "error"),
    ("train-rllib-runners-model-missing", ("train --config corridor_llm run_dir={root}/t model=/nonexistent "
                                           "--engine rllib --env-runners 2"), "error"),
    ("train-rllib-runners-env-kwarg-typo", ("train --config corridor_llm run_dir={root}/t model={tiny} "
                                            "env_kwargs.dpeth=3 --engine rllib --env-runners 2"), "error"),
    ("train-rllib-runners-depth-zero", ("train --config corridor_llm run_dir={root}/t model={tiny} "
                                        "env_kwargs.depth=0 --engine rllib --env-runners 2"), "error"),
    ("train-rllib-runners-over-cpus", ("train --config corridor_llm run_dir={root}/t model={tiny} " + " ".join(LLM)
                                       + " --engine rllib --env-runners 512"), "error"),
    # ---------------------------------------------------------------- plot
    ("plot-missing-folder", "plot {root}/nope", "error"),
    ("plot-file", "plot {file}", "error"),
    ("plot-empty-folder", "plot {empty}", "error"),
    ("plot-out-txt", "plot {run} --out {root}/x.txt", "error"),
    ("plot-out-missing-folder", "plot {run} --out /nonexistent/dir/x.png", "error"),
    ("plot-out-under-file", "plot {run} --out {file}/x.png", "error"),
    ("plot-out-is-folder", "plot {run} --out {png_dir}", "error"),
    ("plot-bad-metrics-line", "plot {bad_metrics}", "error"),
    ("plot-empty-metrics", "plot {empty_metrics}", "error"),
    ("plot-torn-last-line", "plot {torn_metrics} --out {root}/torn.png", "ok"),
    # ---------------------------------------------------------------- models
    ("models-pull-unknown", "models pull nope", "error"),
    ("models-pull-cache-is-file", "models pull smollm2-135m-instruct --cache-dir {file}", "error"),
    ("models-pull-cache-under-file", "models pull smollm2-135m-instruct --cache-dir {file}/sub", "error"),
    ("models-pull-cache-in-proc", "models pull smollm2-135m-instruct --cache-dir /proc/nope", "error"),
    ("models-tiny-out-is-file", "models tiny {file}", "error"),
    ("models-tiny-out-under-file", "models tiny {file}/sub", "error"),
    ("models-tiny-out-in-proc", "models tiny /proc/nope", "error"),
    ("models-tiny-seed-negative", "models tiny {root}/tiny --seed -1", "error"),
    ("models-tiny-seed-text", "models tiny {root}/tiny --seed abc", "usage"),
    ("models-tiny-tokenizer-missing", "models tiny {root}/tiny --tokenizer /nonexistent", "error"),
    ("models-tiny-tokenizer-empty", "models tiny {root}/tiny --tokenizer {empty}", "error"),
    # ---------------------------------------------------------------- leaderboard
    ("lb-agent-unknown", "leaderboard --agent nope --out-dir {root}/lb", "error"),
    ("lb-backend-unknown", "leaderboard --backend nope --out-dir {root}/lb", "error"),
    ("lb-seeds-zero", "leaderboard --seeds 0 --out-dir {root}/lb", "error"),
    ("lb-seeds-text", "leaderboard --seeds abc --out-dir {root}/lb", "usage"),
    ("lb-limit-zero", "leaderboard --limit 0 --out-dir {root}/lb", "error"),
    ("lb-limit-negative", "leaderboard --limit -1 --out-dir {root}/lb", "error"),
    ("lb-temperature-negative", "leaderboard --agent random --temperature -1 --out-dir {root}/lb", "error"),
    ("lb-temperature-nan", "leaderboard --agent random --temperature nan --out-dir {root}/lb", "error"),
    ("lb-trials-zero", "leaderboard --trials 0 --out-dir {root}/lb", "error"),
    ("lb-max-new-tokens-zero", "leaderboard --max-new-tokens 0 --out-dir {root}/lb", "error"),
    ("lb-dtype-unknown", "leaderboard --dtype int8 --out-dir {root}/lb", "error"),
    ("lb-device-cuda", "leaderboard --device cuda --out-dir {root}/lb", "error" if NO_CUDA else None),
    ("lb-device-unknown", "leaderboard --device tpu --out-dir {root}/lb", "error"),
    ("lb-env-unknown", "leaderboard --env ecpo/Nope-v0 --out-dir {root}/lb", "error"),
    ("lb-env-not-namespaced", "leaderboard --env Nope --out-dir {root}/lb", "error"),
    ("lb-env-and-manifest", "leaderboard --env ecpo/DivergentAnchor-v0 --manifest webshop_gen --out-dir {root}/lb",
     "error"),
    ("lb-manifest-unknown", "leaderboard --manifest nope --out-dir {root}/lb", "error"),
    ("lb-manifest-garbage", "leaderboard --manifest {garbage_manifest} --out-dir {root}/lb", "error"),
    ("lb-manifest-wrong-shape", "leaderboard --manifest {wrong_manifest} --out-dir {root}/lb", "error"),
    ("lb-out-dir-is-file", "leaderboard --manifest webshop_gen --limit 1 --seeds 1 --out-dir {file}", "error"),
    ("lb-out-dir-under-file", "leaderboard --manifest webshop_gen --limit 1 --out-dir {file}/sub", "error"),
    ("lb-env-kwarg-no-equals", "leaderboard --env ecpo/DivergentAnchor-v0 --env-kwarg depth --out-dir {root}/lb",
     "error"),
    ("lb-env-kwarg-huge", ("leaderboard --env ecpo/DivergentAnchor-v0 --env-kwarg depth=100000000 "
                          "--out-dir {root}/lb"), "error"),
    ("lb-env-kwarg-text", "leaderboard --env ecpo/DivergentAnchor-v0 --env-kwarg depth=abc --out-dir {root}/lb",
     "error"),
    ("lb-env-kwarg-unknown", "leaderboard --env ecpo/DivergentAnchor-v0 --env-kwarg nope=1 --out-dir {root}/lb",
     "error"),
    ("lb-model-missing", "leaderboard --agent prompting --model /nonexistent --out-dir {root}/lb", "error"),
    ("lb-model-required", "leaderboard --agent prompting --out-dir {root}/lb", "error"),
    ("lb-model-ignored", "leaderboard --agent expert --model x --out-dir {root}/lb", "error"),
    ("lb-checkpoint-ignored", "leaderboard --agent random --checkpoint {run} --out-dir {root}/lb", "error"),
    ("lb-base-url-ignored", "leaderboard --agent prompting --model x --base-url http://x --out-dir {root}/lb",
     "error"),
    ("lb-checkpoint-required", "leaderboard --agent checkpoint --out-dir {root}/lb", "error"),
    ("lb-checkpoint-missing", "leaderboard --agent checkpoint --checkpoint {root}/nope --out-dir {root}/lb",
     "error"),
    ("lb-checkpoint-random-bytes", "leaderboard --agent checkpoint --checkpoint {random_ckpt} --out-dir {root}/lb",
     "error"),
    ("lb-report-only-missing", "leaderboard --report-only --out-dir {root}/nope", "error"),
    ("lb-out-dir-other-env-kwargs", ("leaderboard --env ecpo/DivergentAnchor-v0 --env-kwarg depth=4 --seeds 1 "
                                     "--limit 1 --out-dir {lb}"), "error"),
    ("lb-out-dir-same-settings", ("leaderboard --env ecpo/DivergentAnchor-v0 --env-kwarg depth=3 --seeds 1 "
                                  "--limit 1 --out-dir {lb}"), "ok"),
    ("lb-task-types-empty", "leaderboard --env ecpo/ALFWorldGen-v0 --env-kwarg task_types=[] --out-dir {root}/lb",
     "error"),
    ("lb-receptacles-huge", ("leaderboard --env ecpo/ALFWorldGen-v0 --env-kwarg num_receptacles=[1000000000,1000000000] "
                             "--out-dir {root}/lb"), "error"),
    ("lb-gen-tasks-huge", "leaderboard --env ecpo/ALFWorldGen-v0 --env-kwarg num_tasks=1000000000 --out-dir {root}/lb",
     "error"),
    ("lb-damaged-game-file", ("leaderboard --env ecpo/ALFWorld-v0 --data-dir {damaged_alfworld} --seeds 1 --limit 1 "
                              "--no-progress --out-dir {root}/lb_damaged"), "error"),
    # ---------------------------------------------------------------- eval
    ("eval-missing", "eval {root}/nope", "error"),
    ("eval-file", "eval {file}", "error"),
    ("eval-no-run", "eval {empty}", "error"),
    ("eval-random-bytes-checkpoint", "eval {random_ckpt}", "error"),
    ("eval-empty-checkpoint", "eval {empty_ckpt}", "error"),
    ("eval-garbage-config", "eval {bad_config}", "error"),
    ("eval-list-config", "eval {list_config}", "error"),
    ("eval-config-without-env", "eval {no_env_config}", "error"),
    ("eval-limit-zero", "eval {run} --limit 0", "error"),
    ("eval-limit-negative", "eval {run} --limit -1", "error"),
    ("eval-seeds-zero", "eval {run} --seeds 0", "error"),
    ("eval-limit-text", "eval {run} --limit many", "usage"),
    ("eval-device-cuda", "eval {run} --device cuda", "error" if NO_CUDA else None),
    ("eval-out-dir-is-file", "eval {run} --out-dir {file}", "error"),
    ("eval-manifest-unknown", "eval {run} --manifest nope", "error"),
    # ---------------------------------------------------------------- bench
    ("bench-unknown", "bench nope", "error"),
    ("bench-arg-text", "bench speed credit --reps abc", "error"),
    ("bench-arg-unknown", "bench speed credit --nope", "error"),
    ("bench-reps-zero", "bench speed credit --reps 0", "error"),
    ("bench-out-missing-folder", "bench speed credit --out /nonexistent/dir/x.json", "error"),
    # ---------------------------------------------------------------- bench: issue 52.10
    ("bench-gpu-run-parts-zero", "bench gpu_run native --device cpu --parts 0", "error"),
    ("bench-gpu-run-parts-negative", "bench gpu_run native --device cpu --parts=-3", "error"),
    # ---------------------------------------------------------------- demo
    ("demo-tabular-overrides", "demo --tabular iterations=3", "error"),
    ("demo-unknown-key", "demo nope=1", "error"),
    ("demo-iterations-negative", "demo iterations=-1", "error"),
    ("demo-policy-mode-unknown", "demo policy_mode=nope", "error"),
    ("demo-not-key-value", "demo justaword", "error"),
]


def test_the_sweep_has_at_least_60_cases_over_every_verb():
    verbs = {argv.split()[0] for _, argv, _ in CASES}
    assert len(CASES) >= 60
    assert verbs == {"train", "sft", "plot", "models", "leaderboard", "eval", "bench", "demo"}


@pytest.mark.parametrize("case,argv,outcome", CASES, ids=[c[0] for c in CASES])
def test_no_case_ends_in_a_traceback(paths, case, argv, outcome):
    if outcome is None:
        pytest.skip("this torch has CUDA: the case is valid here")
    args = [part.format(**paths) for part in argv.split()]
    result = runner.invoke(app, args)
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    lines = [line for line in result.output.splitlines() if line.strip()]
    if outcome == "ok":
        assert result.exit_code == 0, result.output
        return
    assert result.exit_code == 2, result.output
    if outcome == "error":  # our rule: exactly one line, "error: <what and why>"
        errors = [line for line in lines if line.startswith("error: ")]
        assert len(errors) == 1 and len(errors[0]) > len("error: ") + 10, result.output
        assert [line for line in lines if not line.startswith(("error: ", "warning: "))] == [], result.output
    else:  # click's answer to a value of the wrong type: its usage line and the option named
        assert "Usage:" in result.output or "usage:" in result.output, result.output


CLICK_USAGE = [c for c in CASES if c[2] == "usage"]


@pytest.mark.parametrize("case,argv,outcome", CLICK_USAGE, ids=[c[0] for c in CLICK_USAGE])
def test_the_console_script_reports_click_usage_errors_in_one_line(paths, capsys, case, argv, outcome):
    """What click answers to a value of the wrong type or an unknown option goes, through the ``ecpo`` console
    script (``cli.main``), by the rule every verb follows: one ``error: ...`` line, exit 2 (``ecpo bench``: the
    benchmark script's argparse refusal, in one line)."""
    from ecpo_train.apps.cli import main

    with pytest.raises(SystemExit) as exited:
        main([part.format(**paths) for part in argv.split()])
    assert exited.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), lines


def test_a_huge_value_is_echoed_cut_in_the_one_error_line(tmp_path):
    """Issue 52.10: a 10 MB config value is named, not echoed whole."""
    huge = "x" * 10_000_000
    result = runner.invoke(app, ["train", "--config", "quickstart", f"run_dir={tmp_path / 'r'}", f"estimator={huge}"])
    assert result.exit_code == 2, result.output[:300]
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "estimator" in lines[0], result.output[:300]
    assert len(lines[0]) < 2100 and "characters)" in lines[0]  # the value cut to its head and its length
    assert not (tmp_path / "r").exists()
