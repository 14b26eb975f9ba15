"""The config declares its ranges on its fields and bounds every size by the machine; every check (task lists
included) runs before the run folder is written (issues 51 item 3, 52 items 5 and 8)."""

from __future__ import annotations

import dataclasses
import inspect
import re
import typing

import pytest
from typer.testing import CliRunner

from ecpo_train.apps.cli import app
from ecpo_train.runtime import config as config_module
from ecpo_train.runtime.config import TrainConfig, load_config, make_config
from ecpo_train.runtime.config_values import SHOWN_CHARS
from ecpo_train.runtime.limits import MAX_ENV_WORKERS, MAX_EPISODES, MAX_THREADS

runner = CliRunner()
FAST = ["iterations=1", "n_groups=2", "group_size=2", "val_every=0", "progress=false", "tensorboard=false"]
# 342 bytes that expand into 9**9 strings through aliases ("billion laughs")
LAUGHS = ('a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
          + "".join(f"{b}: &{b} [{','.join(['*' + a] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi")))


def refused(argv: list[str]) -> str:
    """The CLI's one error line for ``argv`` (exit 2, no traceback)."""
    result = runner.invoke(app, argv)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


def _bounds(hint):
    """(ge/gt, bound) pairs declared on a field's annotation, every option of a union."""
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, __import__("types").UnionType) \
        else (hint,)
    for option in options:
        if typing.get_origin(option) is typing.Annotated:
            base, *extras = typing.get_args(option)
            for info in extras:
                for item in getattr(info, "metadata", ()):
                    for name in ("ge", "gt", "le", "lt"):
                        if getattr(item, name, None) is not None and base in (int, float):
                            yield base, name, getattr(item, name)


def test_every_declared_bound_refuses_the_value_past_it_in_one_line_naming_the_key():
    hints = typing.get_type_hints(TrainConfig, include_extras=True)
    checked = 0
    for name, hint in hints.items():
        for base, kind, bound in _bounds(hint):
            step = 1 if base is int else 1e-9 * max(1.0, abs(bound))
            past = {"ge": bound - step, "gt": bound, "le": bound + step, "lt": bound}[kind]
            with pytest.raises(ValueError) as error:
                make_config({"policy": "tabular", name: base(past)})
            message = str(error.value)
            assert "\n" not in message and message.startswith(f"{name}=") and "it must be" in message, message
            checked += 1
    assert checked >= 31  # every range the hand-written table held, and the machine's upper bounds
    source = inspect.getsource(config_module)
    assert not re.search(r"\blambda\b", source) and "_RANGES" not in source  # declared on the fields, not re-checked by hand


def test_choices_are_literals_and_keep_their_one_line():
    assert typing.get_args(typing.get_type_hints(TrainConfig)["task_draw"]) == ("random", "cycle")
    with pytest.raises(ValueError, match=r"^anchor_key='x'; valid: state_key, observation_key$"):
        make_config({"policy": "tabular", "anchor_key": "x"})
    with pytest.raises(ValueError, match=r"^device='tpu' is invalid: it must be auto, cpu, cuda or cuda:N$"):
        make_config({"policy": "tabular", "device": "tpu"})


@pytest.mark.parametrize("old", ["update_epochs", "epochs"])
def test_an_old_name_points_to_the_new_one(tmp_path, old):
    line = refused(["train", "--config", "quickstart", f"run_dir={tmp_path}/run", f"{old}=2"])
    assert f"'{old}' is now 'num_epochs'" in line
    preset = tmp_path / "old.yaml"
    preset.write_text(f"policy: tabular\n{old}: 2\n")
    with pytest.raises(ValueError, match="is now 'num_epochs'"):
        load_config(preset)
    assert load_config("quickstart", ["num_epochs=2"]).num_epochs == 2


def test_the_rllib_config_reads_its_group_defaults_from_the_native_config():
    from ecpo_train.integrations.rllib.base_config import GroupCreditConfig

    rllib, native = GroupCreditConfig(), TrainConfig(policy="tabular")
    assert (rllib.group_size, rllib.groups_per_batch, rllib.estimator, rllib.anchor_key, rllib.num_epochs) == (
        native.group_size, native.n_groups, native.estimator, native.anchor_key, native.num_epochs)


@pytest.mark.parametrize(("override", "key"), [
    ("n_groups=100000000000", "n_groups"), ("group_size=1000000000", "group_size"),
    ("val_episodes_per_task=100000000", "val_episodes_per_task"), ("threads=1000000", "threads"),
    ("env_workers=100000", "env_workers"), (f"env_workers={MAX_ENV_WORKERS + 1}", "env_workers"),
    (f"threads={MAX_THREADS + 1}", "threads"), (f"n_groups={MAX_EPISODES // 2}", "n_groups x group_size"),
    # issue 58.9: accepted, then a RuntimeError traceback (lr) or a 409 GB allocation mid-run (a reply length)
    ("lr=1e308", "lr=1e+308 is invalid"), ("critic_lr=1e308", "critic_lr"),
    ("max_response_length=100000000", "max_response_length=100000000 is invalid"),
    ("max_response_length=1000000000000000000000000000000", "max_response_length"),
    ("max_prompt_length=100000000", "max_prompt_length"),
])
def test_sizes_past_what_the_machine_holds_are_one_line_before_any_file(tmp_path, override, key):
    line = refused(["train", "--config", "quickstart", f"run_dir={tmp_path}/run", override])
    assert key in line
    assert not (tmp_path / "run").exists()


def test_yaml_aliases_are_refused_in_one_line(tmp_path):
    laughs = tmp_path / "laughs.yaml"
    laughs.write_text(LAUGHS)
    line = refused(["train", "--config", str(laughs)])
    assert "alias" in line and "line 2" in line
    assert "alias" in refused(["train", "--config", "quickstart", f"run_dir={tmp_path}/r", "env_kwargs=[&x 1, *x]"])


def test_huge_values_are_echoed_cut(tmp_path):
    huge = "x" * 200_000  # the cut does not depend on the size: 200 kB echoes as few characters as 10 MB
    for override in (f"dtype={huge}", f"lr={huge}", f"{huge}=1", f"train_tasks=[{huge}]", f"env_kwargs.depth={huge}",
                     f"env_kwargs.{huge}=1", f"credit.compat={huge}", f"env_id={huge}", f"run_dir={tmp_path}/{huge}"):
        line = refused(["train", "--config", "quickstart", f"run_dir={tmp_path}/run", override])
        assert len(line) < SHOWN_CHARS + 1200, len(line)  # (the longest: the list of valid keys)
    assert "... (200004 characters) (list)" in refused(["train", "--config", "quickstart", f"history_length=[{huge}]"])


def test_vllm_kwargs_are_checked_whichever_backend_runs():
    for kwargs, named in (({"model": "x"}, "vllm_kwargs.model"), ({"gpu_memory_utilization": 2}, "in (0, 1]"),
                          ({"max_model_len": 0}, "max_model_len"), ({"not an argument": 1}, "argument name")):
        with pytest.raises(ValueError, match=named.replace("(", r"\(").replace("]", r"\]")):
            make_config({"policy": "tabular", "vllm_kwargs": kwargs})
    assert make_config({"policy": "llm", "model": "x", "vllm_kwargs": {"gpu_memory_utilization": 0.5}}).vllm_kwargs


@pytest.mark.parametrize(("override", "named"), [
    ("train_tasks=[1,1,1]", "train_tasks: ecpo/DivergentAnchor-v0 has no task '1'"),
    ("val_tasks=[corridor0,nope]", "val_tasks: ecpo/DivergentAnchor-v0 has no task 'nope'"),
    ("train_tasks=[]", "train_tasks=[] is invalid"),
])
def test_task_lists_are_checked_before_the_run_folder_is_written(tmp_path, override, named):
    run = tmp_path / "run"
    assert named in refused(["train", "--config", "quickstart", f"run_dir={run}", override, *FAST])
    assert not run.exists()  # no config.yaml, history.jsonl or metrics.jsonl: the corrected retry starts cleanly
    fixed = "train_tasks=[corridor1]" if override.startswith("train") else "val_tasks=[corridor0]"
    result = runner.invoke(app, ["train", "--config", "quickstart", f"run_dir={run}", fixed, *FAST])
    assert result.exit_code == 0, result.output
    assert (run / "metrics.jsonl").read_text().count("\n") == 1


def test_the_rllib_engine_checks_task_lists_before_an_actor_starts():
    from ecpo_train.runtime.builders import check_env_and_model

    config = load_config("quickstart", ["train_tasks=[corridor0, corridor7]"])
    with pytest.raises(ValueError, match="train_tasks: ecpo/DivergentAnchor-v0 has no task 'corridor7'"):
        check_env_and_model(config)
    check_env_and_model(dataclasses.replace(config, train_tasks=["corridor3"]))


def test_a_run_recorded_under_an_old_name_still_resumes_and_evaluates(tmp_path):
    from ecpo_train.runtime.config import config_dict, upgraded
    from ecpo_train.runtime.resume import resume_changes

    new = config_dict(load_config("quickstart", ["num_epochs=2"]))
    recorded = {("update_epochs" if key == "num_epochs" else key): value for key, value in new.items()}
    assert upgraded(recorded) == new and resume_changes(recorded, new) == {}
    with pytest.raises(ValueError, match="num_epochs"):  # the same run, epochs changed: still a change
        resume_changes(recorded, new | {"num_epochs": 3})


def test_a_recorded_config_with_aliases_is_refused_on_resume(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(LAUGHS)
    (run / "metrics.jsonl").write_text("")
    (run / "rllib_checkpoint").mkdir()  # an RLlib run: its config.yaml is what --resume reads
    line = refused(["train", "--config", "quickstart", f"run_dir={run}", "--resume", "--engine", "rllib"])
    assert "config.yaml is not valid YAML" in line


def test_a_static_cache_past_the_devices_memory_is_computed_and_refused_before_it_is_allocated():
    """Issue 58.9: where the limit is memory, the need is computed and said, before the allocator is asked."""
    import torch

    from ecpo_train.policies.decoding import StaticDecoder, device_memory_bytes

    kv = [(torch.zeros(1, 2, 1, 64), torch.zeros(1, 2, 1, 64))] * 4  # 4 layers, 2 heads of 64 (a tiny model)
    columns = 2**40  # a reply length no memory holds: 2 TiB of keys and values per row
    with pytest.raises(ValueError) as refused_cache:
        StaticDecoder(graphs=False).step_for(torch.nn.Linear(1, 1), kv, 4, columns)
    need = 4 * 2 * 4 * 2 * columns * 64 * 4  # layers x (k, v) x rows x heads x columns x head size x 4 bytes
    message = str(refused_cache.value)
    assert f"needs {need / 2**30:,.1f} GiB" in message and f"has {device_memory_bytes(kv[0][0].device) / 2**30:,.1f}" \
        in message and "\n" not in message
