"""A policy kind declared from outside the package (docs/training.md, "Add a policy kind"): a text policy of its own
class, written here and declared with ``register_policy`` like the built-in kinds, warm-starts with ``ecpo sft``,
trains through both engines and is evaluated, with no change to the library."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import CORRIDOR, ENV_ID

from ecpo_train.policies.imitation import text_rows
from ecpo_train.policies.registry import Imitation, PolicySpec, register_policy, unregister_policy
from ecpo_train.policies.text import CONFIG_FILE, TextPolicy, check_text_policy_folder
from ecpo_train.policies.text_vocabulary import Vocabulary
from ecpo_train.runtime.config import POLICY_SETTINGS, make_config

KIND = "counting-text"


class CountingTextPolicy(TextPolicy):
    """The text policy, counting the steps it chose (on the class: the trainer's, a loaded one's, ...)."""

    steps = 0

    def act(self, contexts, temperature=1.0):
        type(self).steps += len(contexts)
        return super().act(contexts, temperature)


def build(config, **_placement):
    if config.model:
        return CountingTextPolicy.from_pretrained(config.model, seed=config.seed, env_name=config.env_id)
    return CountingTextPolicy(seed=config.seed, env_name=config.env_id)


def imitation(config, checkpointing):
    """Random weights over the words the expert saw, trained on the expert's command among the admissible ones."""

    def rows(demonstrations):
        texts = [text for demo in demonstrations
                 for text in (demo.context.task, demo.context.observation, *demo.context.admissible_actions)]
        policy = CountingTextPolicy(Vocabulary.build(texts), seed=config.seed, env_name=config.env_id)
        return (policy, *text_rows(policy, demonstrations))

    return Imitation("expert command cross-entropy", rows, lambda policy, folder: policy.save_pretrained(folder),
                     max_tokens=1 << 20)


SPEC = PolicySpec(build, settings=("model",), model="own", check_folder=check_text_policy_folder,
                  load=CountingTextPolicy.from_pretrained, folder_file=CONFIG_FILE, imitation=imitation, rllib=True)


@pytest.fixture
def counting_kind():
    register_policy(KIND, SPEC)
    CountingTextPolicy.steps = 0
    yield SPEC
    unregister_policy(KIND)  # the other tests see only the built-in kinds


def values(tmp_path, **changes):
    """One iteration of 2 groups of 4 on the corridors."""
    return {"policy": KIND, "env_id": ENV_ID, "env_kwargs": dict(CORRIDOR), "n_groups": 2, "group_size": 4,
            "history_length": 0, "val_every": 0, "credit": {"d_min": 1}, "lr": 3e-3, "kl_coef": 0.01, "seed": 5,
            "mini_batch_size": 8, "micro_batch_size": 8, "num_epochs": 1, "checkpoint_every": 0, "iterations": 1,
            "tensorboard": False, "progress": False, "device": "cpu", "run_dir": str(tmp_path / "run")} | changes


def test_the_config_reads_the_kind_from_its_declaration(counting_kind, tmp_path):
    """The declared settings and capabilities are the rules: what the kind does not read or cannot do is one line."""
    from ecpo_train.runtime.distributed import check_fsdp_run

    assert make_config(values(tmp_path)).policy == KIND and POLICY_SETTINGS[KIND] == ("model",)
    for changes, words in [({"command_set": "open"}, "read only by policy=text"),
                           ({"lora": {"r": 4}}, "lora adapts a transformers model: set policy=llm"),
                           ({"estimator": "ppo"}, f"needs a learned critic, which policy={KIND} does not have"),
                           ({"model": str(tmp_path)}, "not a text-policy folder")]:
        with pytest.raises(ValueError, match=words):
            make_config(values(tmp_path, **changes))
    with pytest.raises(ValueError, match="fsdp=true shards a transformers model: set policy=llm"):
        check_fsdp_run("ecpo", KIND)
    with pytest.raises(ValueError, match="already registered"):
        register_policy(KIND, SPEC)
    for name, spec, words in [("no-reference", dataclasses.replace(SPEC, reference=False),
                               "kl_coef=0.01 pulls toward a frozen reference copy, which policy=no-reference"),
                              ("typo", dataclasses.replace(SPEC, settings=("modle",)), "not config keys: modle")]:
        register_policy(name, spec)
        try:
            with pytest.raises(ValueError, match=words):
                make_config(values(tmp_path, policy=name))
        finally:
            unregister_policy(name)
    unregister_policy(KIND)
    with pytest.raises(ValueError, match=f"policy='{KIND}'; valid: llm, tabular, text"):
        make_config(values(tmp_path))


def test_it_warm_starts_trains_natively_and_is_evaluated(counting_kind, tmp_path):
    """``ecpo sft`` writes the kind's folder, a native run starts from it, and the leaderboard plays both the warm
    start and the trained checkpoint: every one of them a ``CountingTextPolicy``."""
    from ecpo_train.evaluation.agents import load_checkpoint_policy
    from ecpo_train.evaluation.build import build_agent
    from ecpo_train.evaluation.manifests import manifest_from_env
    from ecpo_train.evaluation.runner import EvalSettings, collect_records, evaluate
    from ecpo_train.runtime.run import train
    from ecpo_train.runtime.sft import run_sft
    from ecpo_train.runtime.trainer import Trainer

    config = make_config(values(tmp_path))
    summary = run_sft(config, episodes=4, epochs=3, lr=3e-2, out=tmp_path / "warm", batch_size=8)
    assert summary["policy"] == KIND and summary["objective"] == "expert command cross-entropy"
    assert summary["loss_after"] < summary["loss_before"] and summary["steps_not_admissible"] == 0

    warm, recorded = load_checkpoint_policy(tmp_path / "warm")
    assert type(warm) is CountingTextPolicy and recorded["policy"] == KIND

    run = dataclasses.replace(config, model=str(tmp_path / "warm"))
    history = train(Trainer, run)
    assert len(history) == 1 and history[0]["update/optimizer_steps"] >= 1
    assert CountingTextPolicy.steps >= history[0]["num_steps"] > 0  # the run's rollout chose through the class
    trained, _ = load_checkpoint_policy(tmp_path / "run")
    assert type(trained) is CountingTextPolicy
    assert any((a != b).any() for a, b in zip(trained.parameters(), warm.parameters()))  # the update moved it

    before = CountingTextPolicy.steps
    agent = build_agent("checkpoint", checkpoint=str(tmp_path / "run"), temperature=0.4)
    evaluate(agent, [manifest_from_env(ENV_ID, dict(CORRIDOR))], tmp_path / "board",
             EvalSettings(seeds=[0], limit=2, progress=False))
    (board,) = [p for p in (tmp_path / "board").iterdir() if p.is_dir()]
    assert len(collect_records(board)) == 2 and CountingTextPolicy.steps > before


@pytest.mark.slow
def test_the_rllib_engine_trains_it_one_iteration(counting_kind, tmp_path, ray_session):
    """The RLlib engine builds the kind through the same declaration (its runner in this process: 0 runner actors)."""
    from ecpo_train.integrations.rllib.llm.engine import RLlibEngine
    from ecpo_train.runtime.run import train
    from ecpo_train.runtime.sft import run_sft

    config = make_config(values(tmp_path, run_dir=str(tmp_path / "rllib")))
    run_sft(config, episodes=4, epochs=1, lr=3e-2, out=tmp_path / "warm", batch_size=8)
    CountingTextPolicy.steps = 0
    history = train(RLlibEngine, dataclasses.replace(config, model=str(tmp_path / "warm")), num_env_runners=0)
    assert len(history) == 1 and history[0]["credit/num_groups"] == 2
    assert CountingTextPolicy.steps >= history[0]["num_steps"] > 0
