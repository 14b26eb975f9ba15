"""Every error quotes input as a bounded prefix, through the Python API as well as the CLI (issue 70, item 16).

A 1,000,000-character value (or key) given to a public entry point -- the config loader, ``make_env`` with env
kwargs, the estimator registry, the policies -- is refused with a message of a few hundred characters that names
the setting (before: the whole value was quoted, a 1 MB error line; ``gymnasium.make`` appended every env kwarg to a
``TypeError``; a path too long for the OS came back as an ``OSError`` quoting it). One rule quotes input in an
error: ``ecpo_gym.kwargs.shown`` (``cut_long_words`` for a message another library wrote).
"""

from __future__ import annotations

import json

import pytest
from conftest import ENV_ID
from typer.testing import CliRunner

HUGE = "x" * 1_000_000
SHORT = 2_000  # an error line longer than this is not "a bounded prefix"


def refused(call, *words: str, errors=(ValueError, TypeError, KeyError, OSError)) -> str:
    """``call()`` raises one of ``errors`` whose message is short and names each of ``words``."""
    with pytest.raises(errors) as caught:
        call()
    text = str(caught.value)
    assert len(text) < SHORT, (len(text), text[:300])
    for word in words:
        assert word in text, (word, text[:300])
    return text


# ---------------------------------------------------------------------------------------------- the config loader
BASE = {"policy": "tabular", "env_id": ENV_ID}
SETTINGS = ["estimator", "task_draw", "anchor_key", "behaviour_correction", "prompt_style", "decoding",
            "mixed_precision", "policy_mode", "lr", "iterations", "seed", "val_temperature"]


@pytest.mark.parametrize("key", SETTINGS)
def test_a_huge_setting_is_a_short_error_naming_it(key):
    from ecpo_train.runtime.config import make_config

    refused(lambda: make_config({**BASE, key: HUGE}), key)


def test_huge_keys_and_values_in_a_config_file_and_its_overrides(tmp_path):
    from ecpo_train.runtime.config import load_config, make_config

    (tmp_path / "value.yaml").write_text(f"policy: tabular\nlr: {HUGE}\n")
    refused(lambda: load_config(tmp_path / "value.yaml"), "lr")
    (tmp_path / "key.yaml").write_text(f"policy: tabular\n? {HUGE}\n: 1\n")  # (an explicit key: no 1024 limit)
    refused(lambda: load_config(tmp_path / "key.yaml"), "unknown config key")
    (tmp_path / "extends.yaml").write_text(f"extends: {HUGE}\n")
    refused(lambda: load_config(tmp_path / "extends.yaml"), "extends", "is not a preset name")
    refused(lambda: load_config(HUGE), "not found")  # a preset name too long for a path
    refused(lambda: load_config("quickstart", [f"lr={HUGE}"]), "lr")
    refused(lambda: load_config("quickstart", [f"{HUGE}=1"]), "unknown config key")
    refused(lambda: make_config({**BASE, "credit": {HUGE: 1}}), "unknown credit hyperparameter")
    refused(lambda: make_config({**BASE, "credit": {"compat": HUGE}}), "compat")
    refused(lambda: make_config({**BASE, "credit": {"kappa": HUGE}}), "kappa")


# ---------------------------------------------------------------------------------------------- environments
ENV_CASES = {
    "a huge kwarg name": (ENV_ID, {HUGE: 1}, "unexpected keyword argument"),
    "render_mode": (ENV_ID, {"render_mode": HUGE}, "render_mode"),
    "num_tasks": (ENV_ID, {"num_tasks": HUGE}, "num_tasks"),
    "ALFWorldGen task_types": ("ecpo/ALFWorldGen-v0", {"task_types": [HUGE]}, "task_types"),
    "ALFWorld data_dir (a path too long)": ("ecpo/ALFWorld-v0", {"data_dir": HUGE}, "data_dir"),
    "SearchQAGen world_size": ("ecpo/SearchQAGen-v0", {"world_size": HUGE}, "world_size"),
    "WebShopGen search_backend": ("ecpo/WebShopGen-v0", {"search_backend": HUGE}, "search backend"),
    "WebShop task_source": ("ecpo/WebShop-v0", {"task_source": HUGE}, "task_source"),
    "SearchQA retriever": ("ecpo/SearchQA-v0", {"retriever": HUGE}, "retriever"),
    "SearchQA retriever_url": ("ecpo/SearchQA-v0", {"retriever": "http", "retriever_url": "http://" + HUGE}, "url"),
    "a huge env id": ("ecpo/" + HUGE, {}, "xxxx"),
}


@pytest.mark.parametrize("case", list(ENV_CASES))
def test_a_huge_env_kwarg_is_a_short_error_naming_it(case):
    """Through ``make_env`` (the project's one ``gymnasium.make``: training, eval and the env workers)."""
    import gymnasium as gym

    from ecpo_gym.group_workers import make_env

    env_id, kwargs, word = ENV_CASES[case]

    def make() -> None:
        make_env(env_id, kwargs).close()

    refused(make, word, errors=(ValueError, TypeError, OSError, gym.error.Error))


# ---------------------------------------------------------------------------------------------- estimators, policies
def test_huge_estimator_and_policy_settings_are_short_errors_naming_them(tmp_path):
    from ecpo_train.core.credit import estimator_spec
    from ecpo_train.core.tasks import draw_tasks
    from ecpo_train.policies.lora import check_lora_settings
    from ecpo_train.policies.text import TextPolicy
    from ecpo_train.runtime.models import check_model_folder

    refused(lambda: estimator_spec(HUGE), "unknown advantage estimator")
    refused(lambda: draw_tasks(["a"], 1, __import__("numpy").random.default_rng(0), 0, HUGE), "task_draw")
    refused(lambda: check_lora_settings({"r": HUGE}), "lora.r")
    refused(lambda: check_lora_settings({HUGE: 1}), "unknown lora key")
    refused(lambda: TextPolicy(command_set=HUGE), "command_set")
    refused(lambda: TextPolicy.from_pretrained("/" + HUGE), "model=", "not a text-policy folder")
    refused(lambda: check_model_folder("/" + HUGE), "does not exist")  # the LLM's model= (train, sft, eval)


def test_a_path_too_long_for_the_os_is_a_short_error_naming_the_setting(tmp_path):
    """A ``run_dir``, manifest or model name longer than the OS takes (its ``OSError`` quotes the path whole)."""
    from ecpo_train.evaluation.manifests import load_manifest
    from ecpo_train.runtime.config import load_config
    from ecpo_train.runtime.resume import plan_start
    from ecpo_train.runtime.run import train
    from ecpo_train.runtime.trainer import Trainer

    refused(lambda: train(Trainer, load_config("quickstart", [f"run_dir={HUGE}"])), "run_dir=", "cannot be a folder")
    refused(lambda: plan_start(tmp_path / HUGE, {}, resume=True), "run_dir=", "cannot be a folder")
    refused(lambda: load_manifest(HUGE), "manifest", "not found")


@pytest.mark.parametrize(("argv", "words"), [
    (["sft", "--config", "households_text", "--out", "/tmp/o\x00ut"], "--out '/tmp/o\\x00ut' cannot be a folder"),
    (["models", "tiny", "/tmp/o\x00ut"], "model folder '/tmp/o\\x00ut' cannot be a folder"),
    (["leaderboard", "--agent", "random", "--env", ENV_ID, "--out-dir", "/tmp/o\x00ut"],
     "--out-dir '/tmp/o\\x00ut' cannot be a folder"),
])
def test_an_output_folder_with_a_nul_character_is_named(argv, words):
    """Python's 'embedded null byte' named no setting, and the leaderboard's --out-dir passed its check (a missing
    folder) to fail while the results were written."""
    result = CliRunner().invoke(__import__("ecpo_train.apps.cli", fromlist=["app"]).app, argv)
    lines = result.output.splitlines()
    assert result.exit_code == 2 and lines == [f"error: {words} (it holds a NUL character)"], result.output


# ---------------------------------------------------------------------------------------------- the CLI
@pytest.mark.parametrize("override", [f"lr={HUGE}", f"estimator={HUGE}", f"{HUGE}=1",
                                      f"env_kwargs={json.dumps({HUGE: 1})}"])
def test_the_cli_refuses_a_huge_override_in_one_short_line(override, tmp_path):
    from ecpo_train.apps.cli import app

    result = CliRunner().invoke(app, ["train", "--config", "quickstart", f"run_dir={tmp_path / 'run'}", override])
    assert result.exit_code == 2, (result.exit_code, result.output[:500])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and len(lines[0]) < SHORT, result.output[:500]
    assert not (tmp_path / "run").exists()
