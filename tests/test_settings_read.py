"""A setting the run would not read is refused in one line, not silently ignored (issue 70, item 12): a policy
kind's own settings (``config.POLICY_SETTINGS``), an estimator's own (``ESTIMATOR_SETTINGS`` and the credit fields
its registration declares, ``EstimatorSpec.credit_keys``) and the RLlib engine's actor options."""

from __future__ import annotations

import pytest
from cli_refusals import FAST, refused, runner  # noqa: F401  (tests/cli_refusals.py)

from ecpo_train.core.credit import available_estimators, estimator_spec
from ecpo_train.core.credit.config import ESTIMATOR_CREDIT_KEYS
from ecpo_train.runtime.config import POLICY_SETTINGS, load_config, make_config


@pytest.mark.parametrize("override", ["explore_epsilon=0.1", "dtype=bfloat16", "prompt_style=compact",
                                      "max_prompt_length=100", "mixed_precision=bf16", "decoding=eager",
                                      "gradient_checkpointing=true", "vllm_kwargs={gpu_memory_utilization: 0.5}",
                                      "max_response_length=64", "policy_mode=score"])
def test_a_setting_the_text_policy_does_not_read_is_refused_naming_it(tmp_path, override):
    key = override.split("=")[0]
    line = refused(["train", "--config", "households_text", f"run_dir={tmp_path / 'run'}", *FAST, override])
    assert key in line and "policy=text" in line
    assert not (tmp_path / "run").exists()


def test_the_tabular_policy_refuses_a_model_and_the_llm_settings():
    for override in ("model=some/folder", "dtype=bfloat16", "lora={r: 4}"):
        with pytest.raises(ValueError, match=override.split("=")[0]):
            load_config("quickstart", [override])


def test_explore_epsilon_needs_policy_mode_score():
    with pytest.raises(ValueError, match="explore_epsilon=0.1 .* policy_mode=generate would ignore it"):
        load_config("quickstart", ["policy=llm", "model=x", "explore_epsilon=0.1"])
    assert load_config("quickstart", ["policy=llm", "model=x", "policy_mode=score",
                                      "explore_epsilon=0.1"]).explore_epsilon == 0.1


def test_every_policy_kind_reads_what_its_table_says():
    """policy=llm accepts a non-default value of each of its own settings (the table is not a blanket ban)."""
    values = {"model": "y", "policy_mode": "generate", "dtype": "bfloat16", "prompt_style": "compact",
              "max_prompt_length": 100, "max_response_length": 64, "generation_backend": "vllm",
              "vllm_kwargs": {"gpu_memory_utilization": 0.5}, "decoding": "eager", "lora": {},
              "gradient_checkpointing": True, "mixed_precision": "bf16", "explore_epsilon": 0.05}
    assert set(values) == set(POLICY_SETTINGS["llm"])
    for name, value in values.items():
        mode = {"policy_mode": "score"} if name == "explore_epsilon" else {}
        assert getattr(make_config({"policy": "llm", "model": "x", **mode, name: value}), name) == value


@pytest.mark.parametrize("key", ESTIMATOR_CREDIT_KEYS)
def test_an_estimator_specific_credit_key_is_refused_by_an_estimator_that_does_not_read_it(key):
    readers = [n for n in available_estimators() if key in (estimator_spec(n).credit_keys or ())]
    others = [n for n in available_estimators(needs_values=False) if n not in readers]
    assert readers and others
    value = {"compat": "verl-agent", "hgpo_std": "false", "hgpo_base_group": "true", "hgpo_history": "3",
             "pgpo_gamma": "0.5", "graph_gamma": "0.5", "pace_cosine": "0.5"}.get(key, "3.5")
    load_config("quickstart", [f"estimator={readers[0]}", f"credit.{key}={value}"])  # its reader takes it
    for other in others:
        with pytest.raises(ValueError, match=rf"credit.{key}=.* is read only by estimator=.*estimator={other} would "
                                             "ignore it"):
            load_config("quickstart", [f"estimator={other}", f"credit.{key}={value}"])


def test_gae_lambda_and_critic_lr_are_ppo_settings():
    for override in ("gae_lambda=0.9", "critic_lr=0.001"):
        line = refused(["train", "--config", "quickstart", *FAST, override])
        assert override.split("=")[0] in line and "estimator=ecpo" in line and "ppo" in line


@pytest.mark.parametrize("option", [["--env-runners", "3"], ["--learners", "1"], ["--actor-cpus", "nan"],
                                    ["--actor-cpus", "-4"], ["--env-runners", "2"]])
def test_the_native_engine_refuses_the_rllib_actor_options(tmp_path, option):
    line = refused(["train", "--config", "quickstart", *option, f"run_dir={tmp_path / 'run'}", *FAST])
    assert option[0] in line and "--engine rllib" in line
    assert not (tmp_path / "run").exists()


def test_hgpo_history_is_bounded_when_the_config_is_built():
    line = refused(["train", "--config", "quickstart", "estimator=hgpo", f"credit.hgpo_history={10**30}", *FAST])
    assert "credit.hgpo_history=" in line and "[0, 100000]" in line


@pytest.mark.parametrize(("agent", "option"), [
    (["--agent", "expert"], ["--trials", "5"]), (["--agent", "random"], ["--temperature", "0.9"]),
    (["--agent", "expert"], ["--greedy"]), (["--agent", "random"], ["--max-new-tokens", "64"]),
    (["--agent", "expert"], ["--dtype", "bfloat16"]), (["--agent", "random"], ["--backend", "openai"]),
    (["--agent", "prompting", "--model", "m", "--backend", "openai"], ["--dtype", "bfloat16"]),
    (["--agent", "checkpoint", "--checkpoint", "run"], ["--trials", "2"]),
])
def test_a_leaderboard_option_the_agent_does_not_read_is_refused(tmp_path, agent, option):
    line = refused(["leaderboard", *agent, *option, "--out-dir", str(tmp_path / "lb")])
    assert line == f"error: {option[0]} would be ignored by --agent {agent[1]}: leave it out"
    assert not (tmp_path / "lb").exists()


@pytest.mark.parametrize("option", [["--agent", "random"], ["--seeds", "7"], ["--manifest", "webshop_gen"],
                                    ["--limit", "2"], ["--env-kwarg", "max_steps=3"], ["--name", "mine"]])
def test_report_only_refuses_an_option_of_an_evaluation(tmp_path, option):
    """``--report-only`` only rebuilds the tables: it used to ignore every evaluation option given with it."""
    (tmp_path / "lb").mkdir()
    line = refused(["leaderboard", "--report-only", *option, "--out-dir", str(tmp_path / "lb")])
    assert line == (f"error: --report-only only rebuilds the tables of --out-dir: {option[0]} would be ignored; "
                    "leave it out")


@pytest.mark.parametrize("where", [["--env", "ecpo/DivergentAnchor-v0"], ["--manifest", "webshop_gen"]])
def test_a_data_dir_no_evaluated_environment_reads_is_refused(tmp_path, where):
    """The generated environments take no data folder: ``--data-dir`` with them was silently dropped."""
    line = refused(["leaderboard", *where, "--data-dir", str(tmp_path), "--out-dir", str(tmp_path / "lb")])
    assert "--data-dir" in line and "would be ignored" in line
    assert not (tmp_path / "lb").exists()


@pytest.mark.parametrize("option", ["--env", "--name", "--data-dir", "--checkpoint"])
def test_an_empty_leaderboard_option_is_refused_not_taken_for_left_out(tmp_path, option):
    """``--env ''`` evaluated the default manifests and ``--name ''`` kept the default label, silently."""
    agent = ["--agent", "checkpoint"] if option == "--checkpoint" else []
    line = refused(["leaderboard", *agent, option, "", "--out-dir", str(tmp_path / "lb")])
    assert line == f"error: {option} '' is empty: give a value, or leave the option out"
    assert not (tmp_path / "lb").exists()


def test_sft_refuses_no_checkpointing_for_a_policy_without_decoder_layers(tmp_path, monkeypatch):
    """``ecpo sft --no-checkpointing`` of the text policy (no transformer layers to recompute) was ignored."""
    from ecpo_train.runtime import sft

    monkeypatch.setattr(sft, "_run_sft", lambda *a, **k: (_ for _ in ()).throw(AssertionError("sft ran")))
    line = refused(["sft", "--config", "households_text", "--out", str(tmp_path / "out"), "--no-checkpointing"])
    assert line == ("error: --no-checkpointing: policy=text has no decoder layers to recompute (only policy=llm), so "
                    "it would be ignored; leave it out")
    assert not (tmp_path / "out").exists()
