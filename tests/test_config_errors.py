"""Trainer configuration errors are one line naming the key, before any work starts (exit 2 on the CLI)."""

from __future__ import annotations

import pytest
import torch
import yaml
from typer.testing import CliRunner

from ecpo_train.apps.cli import app
from ecpo_train.runtime.config import load_config

BAD_OVERRIDES = [
    ("lr=-1", "lr=-1"),
    ("credit.gamma=2", "gamma"),
    ("credit.kappa=0", "kappa"),
    ("rollout_temperature=0", "rollout_temperature"),
    ("env_id=ecpo/Bogus-v0", "Bogus"),
    ("env_kwargs={depth: -1}", "depth"),
    ("lr=[1, 2", "not valid YAML"),
    ("env_kwargs.nosuch=3", "nosuch"),
    ("group_size=1", "group_size"),
    ("clip_eps=-1", "clip_eps"),
    ("checkpoint_every=-1", "checkpoint_every"),
    ("val_every=-3", "val_every"),
    ("kappa=3", "credit.kappa"),
    ("credit.nosuch=1", "nosuch"),
    ("credit.omega='1'", "omega"),
    ("loss_agg=seq-mean", "loss_agg"),
    ("prompt_style=tiny", "prompt_style"),
    ("dtype=banana", "dtype='banana'; valid: float32, float16, bfloat16"),
    ("task_draw=shuffle", "task_draw='shuffle'; valid: random, cycle"),
]


def test_make_config_refuses_a_bad_dtype_when_built():
    from ecpo_train.runtime.config import make_config

    with pytest.raises(ValueError, match=r"^dtype='banana'; valid: float32, float16, bfloat16$"):
        make_config({"dtype": "banana", "model": "x"})


@pytest.mark.parametrize(("override", "named"), BAD_OVERRIDES)
def test_bad_override_is_one_error_line_and_exit_2(tmp_path, override, named):
    result = CliRunner().invoke(app, ["train", "--config", "quickstart", f"run_dir={tmp_path}/run", override])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and named in lines[0], result.output
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # no work started


@pytest.mark.parametrize(("kind", "words"), [
    ("folder", "is a folder: give a YAML file or a preset name"), ("binary", "cannot be read: it is not UTF-8 text"),
    ("empty", "config '' not found (presets in"),
])
def test_a_config_that_is_not_a_readable_file_is_named(tmp_path, kind, words):
    """``--config DIR`` said '.../DIR: Is a directory' (``--config ''`` '.: Is a directory'), a binary file a
    'utf-8' codec error: neither named --config."""
    (tmp_path / "folder").mkdir()
    (tmp_path / "binary").write_bytes(b"lr: 1\n\xd0\xff\xfe\n")
    path = "" if kind == "empty" else str(tmp_path / kind)
    for verb in (["train", "--config", path], ["sft", "--config", path, "--out", str(tmp_path / "out")]):
        result = CliRunner().invoke(app, verb)
        lines = result.output.splitlines()
        assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: config "), result.output
        assert words in lines[0]
    assert not (tmp_path / "out").exists()


def test_bad_yaml_file_and_unwritable_run_dir(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("lr: [1, 2\npolicy: tabular\n")
    result = CliRunner().invoke(app, ["train", "--config", str(bad)])
    assert result.exit_code == 2 and "not valid YAML" in result.output and len(result.output.splitlines()) == 1
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = CliRunner().invoke(app, ["train", "--config", "quickstart", f"run_dir={blocker}/run"])
    assert result.exit_code == 2 and "run_dir" in result.output, result.output


def test_damaged_checkpoint_on_resume_names_the_file(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoint.pt").write_bytes(b"PK\x03\x04 truncated")
    result = CliRunner().invoke(app, ["train", "--config", "quickstart", f"run_dir={run}", "--resume",
                                      "iterations=1", "progress=false", "tensorboard=false"])
    assert result.exit_code == 2, result.output
    assert "checkpoint.pt" in result.output and "damaged" in result.output and "Traceback" not in result.output


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a CPU-only torch")
def test_cuda_on_cpu_only_torch_is_one_line():
    config = load_config("quickstart", ["device=cuda"])
    with pytest.raises(ValueError, match="device=cpu"):
        config.resolved_device()
    assert load_config("quickstart", ["device=auto"]).resolved_device() == "cpu"


def test_every_credit_field_round_trips_from_yaml_and_cli(tmp_path):
    """compat, eps and every other CreditConfig field reach compute_advantages from a preset and an override (each
    with an estimator that reads it: another refuses it, test_settings_read)."""
    import dataclasses

    from ecpo_train.core.credit import available_estimators, estimator_spec
    from ecpo_train.credit import CreditConfig

    values = {"gamma": 0.9, "omega": 0.5, "kappa": 3.0, "tau": 1.5, "d_min": 2, "rho_min": 0.25, "eps": 0.001,
              "compat": "verl-agent", "pgpo_alpha": 1.0, "pgpo_beta": 0.5, "pgpo_gamma": 0.9, "hgpo_history": 3,
              "hgpo_alpha": 2.0, "hgpo_std": False, "hgpo_base_group": True, "graph_gamma": 0.2,
              "graph_success_return": 5.0, "pace_cosine": 0.9}
    assert set(values) == {f.name for f in dataclasses.fields(CreditConfig)}
    reached = set()
    for estimator in available_estimators(needs_values=False):  # each with the fields it reads
        spec = estimator_spec(estimator)
        read = {k: v for k, v in values.items() if spec.reads_credit_key(k)}
        preset = tmp_path / f"{estimator}.yaml"
        preset.write_text("policy: tabular\nenv_id: ecpo/DivergentAnchor-v0\n" + yaml.safe_dump(
            {"estimator": estimator, "credit": read}))
        from_yaml = load_config(str(preset)).credit_hyperparameters()
        assert {k: from_yaml[k] for k in read} == read
        overrides = [f"credit.{k}={yaml.safe_dump(v).split()[0]}" for k, v in read.items()]
        from_cli = load_config("quickstart", [f"estimator={estimator}", *overrides]).credit_hyperparameters()
        assert from_cli == from_yaml
        reached |= set(read)
    assert reached == set(values)


def test_credit_config_reaches_compute_advantages_in_the_trainer(tmp_path, monkeypatch):
    import ecpo_train.core.iteration as iteration_module  # the one credit step both engines call
    from ecpo_train.runtime.run import train
    from ecpo_train.runtime.trainer import Trainer

    seen = {}
    real = iteration_module.compute_advantages

    def spy(estimator, rows, credit, **kwargs):
        seen.update(kwargs, estimator=estimator, credit=credit)
        return real(estimator, rows, credit, **kwargs)

    monkeypatch.setattr(iteration_module, "compute_advantages", spy)
    config = load_config("quickstart", [f"run_dir={tmp_path}", "iterations=1", "val_every=0", "progress=false",
                                        "tensorboard=false", "estimator=gigpo_std", "credit.compat=verl-agent",
                                        "credit.eps=0.001", "credit.kappa=3", "n_groups=2"])
    train(Trainer, config)
    credit = seen["credit"]  # the trainer hands over its CreditConfig's fields (and the estimator's options)
    assert seen["estimator"] == "gigpo_std" and credit["compat"] == "verl-agent" and credit["eps"] == 0.001
    assert credit["kappa"] == 3.0 and credit["d_min"] == 3  # the preset's d_min


def test_loss_agg_reaches_the_update_in_the_trainer(tmp_path, monkeypatch):
    """``loss_agg: trajectory-mean`` scales the update's step advantages by the trajectory weights of the table's
    rows; the default leaves them as credit made them."""
    import numpy as np

    import ecpo_train.core.loss as loss_module
    from ecpo_train.runtime.run import train
    from ecpo_train.runtime.trainer import Trainer

    real_update, real_weights = loss_module.policy_update, loss_module.trajectory_mean_weights
    seen: dict = {}

    def update_spy(*args, **kwargs):
        seen.setdefault("advantages", []).append(args[6].clone())
        return real_update(*args, **kwargs)

    def weights_spy(traj_id):
        seen["weights"] = real_weights(traj_id)
        return seen["weights"]

    monkeypatch.setattr(loss_module, "policy_update", update_spy)
    monkeypatch.setattr(loss_module, "trajectory_mean_weights", weights_spy)
    for agg in ("token-mean", "trajectory-mean"):
        config = load_config("quickstart", [f"run_dir={tmp_path}/{agg}", "iterations=1", "val_every=0",
                                            "progress=false", "tensorboard=false", f"loss_agg={agg}"])
        train(Trainer, config)
    plain, weighted = seen["advantages"]  # the same seed: the same rollout and credit
    assert "weights" in seen and len(set(np.round(seen["weights"], 9))) > 1  # episodes of different lengths
    assert torch.allclose(weighted, plain * torch.as_tensor(seen["weights"], dtype=plain.dtype))


# ---------------------------------------------------------------------------------------------- scale keys
def test_lora_without_peft_is_one_clear_error(monkeypatch):
    import sys

    from ecpo_train.policies.lora import require_peft

    monkeypatch.setitem(sys.modules, "peft", None)
    with pytest.raises(ImportError, match=r"pip install 'ecpo\[peft\]'"):
        require_peft()


def test_scale_settings_are_checked_when_the_config_is_built(monkeypatch):
    import sys

    from ecpo_train.runtime.config import make_config

    base = {"model": "unused", "device": "cpu"}
    assert make_config(base | {"lora": {"r": 8}, "max_tokens_per_micro_batch": 4096}).lora == {"r": 8}
    with pytest.raises(ValueError, match="unknown lora key"):
        make_config(base | {"lora": {"rank": 8}})
    with pytest.raises(ValueError, match="mixed_precision"):
        make_config(base | {"mixed_precision": "fp8"})
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(ValueError, match="torchrun --nproc-per-node K"):
        make_config(base | {"fsdp": True})
    monkeypatch.setitem(sys.modules, "peft", None)
    with pytest.raises(ImportError, match="pip install"):
        make_config(base | {"lora": {"r": 8}})
    if not torch.cuda.is_available():  # CUDA on a CPU-only torch: one error naming the fix
        with pytest.raises(ValueError, match="install a CUDA build of torch"):
            make_config(base | {"device": "cuda"}).resolved_device()


def test_fsdp_on_one_process_is_one_clear_error(monkeypatch):
    from ecpo_train.runtime.distributed import check_fsdp_request

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(ValueError, match="torchrun --nproc-per-node K"):
        check_fsdp_request(True)
    check_fsdp_request(False)
