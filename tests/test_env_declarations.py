"""Each environment id is declared once (ecpo_gym.families); registration, constructors, prompting, parsing and the
trainer's config read that one entry, and search-QA replies mean the same step to the trainer and to the env."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import ecpo_gym
from ecpo_gym.families import ENV_DECLARATIONS, declaration_of, declared_history_length
from ecpo_gym.group import GroupVectorEnv
from ecpo_train.core.rollout import collect_rollout
from ecpo_train.policies.parsing import parse_action
from ecpo_train.policies.prompting import render_prompt, template_name
from ecpo_train.runtime.config import TrainConfig

EMBEDDED = ["ecpo/ALFWorldGen-v0", "ecpo/WebShopGen-v0", "ecpo/SearchQAGen-v0", "ecpo/DivergentAnchor-v0",
            "ecpo/DivergentAnchorNoisy-v0", "ecpo/DivergentAnchorWide-v0"]
QA = "ecpo/SearchQAGen-v0"


def test_registration_is_the_declaration():
    assert set(gym.registry) >= set(ENV_DECLARATIONS) and set(ecpo_gym.ENV_ENTRY_POINTS) == set(ENV_DECLARATIONS)
    for env_id, declared in ENV_DECLARATIONS.items():
        spec = gym.spec(env_id)
        assert (spec.entry_point, spec.kwargs, spec.max_episode_steps) == (declared.entry_point, dict(declared.kwargs),
                                                                           None)
        assert not hasattr(spec, "ecpo_family") and declaration_of(spec) is declared  # nothing patched on the spec
        assert declaration_of(f"ecpo_gym:{env_id}") is declared


@pytest.mark.parametrize("env_id", EMBEDDED)
def test_a_made_env_runs_to_its_declared_step_limit(env_id):
    env = gym.make(env_id)
    try:
        declared = declaration_of(env)
        assert declared is ENV_DECLARATIONS[env_id]
        expected = declared.max_steps if declared.max_steps is not None else 2 * env.unwrapped.depth
        assert env.unwrapped.max_steps == expected
    finally:
        env.close()


def test_real_data_constructors_default_to_the_declared_step_limit():
    import inspect

    from ecpo_gym.searchqa.env import SearchQABaseEnv
    from ecpo_gym.webshop.env import WebShopEnv

    for cls, env_id in ((WebShopEnv, "ecpo/WebShop-v0"), (SearchQABaseEnv, "ecpo/SearchQA-v0")):
        assert inspect.signature(cls.__init__).parameters["max_steps"].default == ENV_DECLARATIONS[env_id].max_steps


def test_prompt_template_and_history_default_come_from_the_declaration():
    history = [(f"obs {k}", f"<search>q{k}</search>") for k in range(1, 5)]
    for env_id, declared in ENV_DECLARATIONS.items():
        assert template_name(env_id) == declared.prompt
        assert declared_history_length(env_id) == declared.history_length
        assert TrainConfig(policy="tabular", env_id=env_id).history_length == declared.history_length
    assert declared_history_length("mylab/Clone-v0") == 2  # a user's own env: the general default
    prompt = render_prompt(QA, task="q?", step_count=4, history=history, observation="o", admissible_actions=[])
    assert all(f"Step {k}: <search>q{k}</search>" in prompt for k in range(1, 5))  # search-QA keeps 4 turns
    assert TrainConfig(policy="tabular", env_id=QA, history_length=1).history_length == 1  # a run may override it


# ---------------------------------------------------------------------------------------------- one reading of a reply
def _env_step(reply: str) -> tuple:
    env = gym.make(QA)
    try:
        env.reset(seed=3, options={"task_id": env.unwrapped.task_ids[0]})
        obs, reward, terminated, truncated, info = env.step(reply)
        return obs, reward, terminated, truncated, info["action_key"], info["is_action_valid"]
    finally:
        env.close()


@pytest.mark.parametrize("reply", ["<SEARCH>Lumen</SEARCH>", "<Search> Lumen </search>", "<think>hm</think><SEARCH>Lumen</SEARCH>"])
def test_any_spelling_of_a_search_is_the_same_step_in_the_env_and_after_parsing(reply):
    canonical = _env_step("<search>Lumen</search>")
    assert canonical[4].startswith("search[") and canonical[5]  # a valid search
    assert _env_step(reply) == canonical  # the env reads the reply itself
    assert parse_action(reply, QA) == "<search>Lumen</search>"  # the trainer's parse ...
    assert _env_step(parse_action(reply, QA)) == canonical  # ... steps the env the same way


class _FixedReply:
    """``sample`` of a real tokenizer-backed policy that always writes ``reply`` (the model's part is fixed)."""

    def __init__(self, tokenizer, reply: str) -> None:
        self.ids = tokenizer(reply, add_special_tokens=False)["input_ids"]

    def __call__(self, prompts, temperature):
        return [list(self.ids) for _ in prompts], [[0.0] * len(self.ids) for _ in prompts]


def test_upper_and_lower_case_search_give_the_same_step_on_the_trainer_path(tiny_model_dir, monkeypatch):
    from ecpo_train.policies.llm import TransformersPolicy

    torch.manual_seed(0)
    policy = TransformersPolicy(str(tiny_model_dir), env_name=QA, max_prompt_length=512, max_response_length=16)
    steps = {}
    for reply in ("<SEARCH>Lumen</SEARCH>", "<search>Lumen</search>"):
        monkeypatch.setattr(policy, "sample", _FixedReply(policy.tokenizer, reply))
        envs = GroupVectorEnv(QA, num_groups=1, group_size=2, env_kwargs={"max_steps": 1})
        try:
            task = envs.task_ids[0]
            rollout = collect_rollout(envs, policy, [task], env_name=QA, temperature=1.0, seed=3)
        finally:
            envs.close()
        batch = rollout.batch
        steps[reply] = (list(batch.action_key), batch.reward.tolist(), list(batch.extras["observation_key"]))
        assert [e.transcript[0][1] for e in rollout.episodes] == ["<search>Lumen</search>"] * 2  # the action sent
    assert steps["<SEARCH>Lumen</SEARCH>"] == steps["<search>Lumen</search>"]
    assert all(key.startswith("search[") for key in steps["<search>Lumen</search>"][0])
    assert np.isfinite(steps["<search>Lumen</search>"][1]).all()


def test_ecpo_gym_never_imports_ecpo_train():
    """The environments stand alone: registering, making and playing every embedded id (search-QA's reply parser
    included) loads no ecpo_train module, and no ecpo_gym source file names the package in an import."""
    import pathlib
    import re
    import subprocess
    import sys

    code = ("import sys, gymnasium as gym, ecpo_gym\n"
            "from ecpo_gym.families import ENV_DECLARATIONS\n"
            f"for env_id in {EMBEDDED!r}:\n"
            "    env = gym.make(env_id); obs, info = env.reset(seed=0); env.step('look'); env.close()\n"
            "    parser = ENV_DECLARATIONS[env_id].load_reply_parser()\n"
            "    parser and parser('<SEARCH>q</SEARCH>')\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'ecpo_train'))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    root = pathlib.Path(ecpo_gym.__file__).parent
    offenders = [str(path.relative_to(root)) for path in root.rglob("*.py")
                 if re.search(r"^\s*(from|import)\s+ecpo_train\b", path.read_text(encoding="utf-8"), re.MULTILINE)]
    assert offenders == []
