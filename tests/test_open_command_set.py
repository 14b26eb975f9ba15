"""The open command set (``command_set: open``, issue 71): the text policy chooses among ALFWorld's admissible
commands plus its command templates filled with what the episode named, so it sends invalid commands as an LLM
that writes its action does; the environment answers them as invalid actions (-0.1, ``<invalid>``, state
unchanged), on both engines and through ``ecpo sft``, ``ecpo train`` and ``ecpo leaderboard``."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
import torch

import ecpo_gym  # noqa: F401  (registers the ids)
from ecpo_gym.alfworld.commands import open_commands
from ecpo_gym.canonical import INVALID_ACTION
from ecpo_train.policies.base import StepContext
from ecpo_train.policies.text import TextPolicy

ROOM = "You are in the middle of a room. Looking quickly around you, you see a countertop 1, a fridge 1, a microwave 1."
AT_MICROWAVE = ["go to countertop 1", "go to fridge 1", "inventory", "look", "open microwave 1", "examine microwave 1"]


def test_the_templates_are_filled_with_what_the_episode_named():
    history = [(ROOM, "go to countertop 1"),
               ("You arrive at countertop 1. On the countertop 1, you see a apple 1, and a desklamp 1.", "go to microwave 1")]
    got = open_commands(AT_MICROWAVE, history, "You arrive at microwave 1. The microwave 1 is closed.")
    assert got == AT_MICROWAVE + [
        "go to microwave 1", "close microwave 1",  # open / examine are admissible already: listed once
        "take apple 1 from microwave 1", "move apple 1 to microwave 1", "heat apple 1 with microwave 1", "examine apple 1",
        "take desklamp 1 from microwave 1", "move desklamp 1 to microwave 1", "heat desklamp 1 with microwave 1",
        "examine desklamp 1", "use desklamp 1"]
    # before the first `go to` there is no location: only what needs none
    start = ["go to countertop 1", "go to fridge 1", "go to microwave 1", "look"]
    assert open_commands(start, [], ROOM) == start + ["inventory"]


def _midgame(env, steps: int = 3):
    """A generated household after ``steps`` `go to` commands: (observation, info, history)."""
    observation, info = env.reset(seed=11)
    history = []
    for _ in range(steps):
        action = [a for a in info["admissible_actions"] if a.startswith("go to")][-1]
        after, _, _, _, info = env.step(action)
        history.append((observation, action))
        observation = after
    return observation, info, history


def test_every_formed_command_is_an_invalid_action_that_leaves_the_state_unchanged():
    env = gym.make("ecpo/ALFWorldGen-v0")
    observation, info, history = _midgame(env)
    formed = [c for c in open_commands(info["admissible_actions"], history, observation)
              if c not in info["admissible_actions"]]
    assert formed
    state, admissible = info["state_key"], list(info["admissible_actions"])
    for command in formed:
        _, reward, terminated, _, after = env.step(command)
        assert (reward, after["action_key"], after["is_action_valid"]) == (-0.1, INVALID_ACTION, False), command
        assert after["state_key"] == state and after["admissible_actions"] == admissible and not terminated


def test_the_policy_scores_the_open_set_and_recomputes_what_it_sampled():
    env = gym.make("ecpo/ALFWorldGen-v0")
    observation, info, history = _midgame(env)
    ctx = StepContext(env_name="ecpo/ALFWorldGen-v0", task=info["task"], step_count=len(history), history=history,
                      observation=observation, admissible_actions=list(info["admissible_actions"]),
                      state_key=info["state_key"])
    closed = TextPolicy(seed=1, env_name="ecpo/ALFWorldGen-v0")
    opened = TextPolicy(seed=1, env_name="ecpo/ALFWorldGen-v0", command_set="open")
    candidates = opened.candidates(ctx)
    assert closed.candidates(ctx) == ctx.admissible_actions
    assert candidates[:len(ctx.admissible_actions)] == ctx.admissible_actions and len(candidates) > len(ctx.admissible_actions)
    assert list(opened.action_distributions([ctx], 1.0)[0]) == candidates
    picked = set()
    for draw in (0.01, 0.3, 0.6, 0.99):
        ctx.draw = draw
        out = opened.act([ctx], temperature=1.0)
        assert out.actions[0] == candidates[out.response_ids[0][0]]
        logp, mask, _ = opened.logprobs(out.prompt_ids, out.response_ids, temperature=1.0)
        assert mask.item() == 1.0 and torch.allclose(logp[0, 0], torch.tensor(out.logprobs[0][0]), atol=1e-6)
        picked.add(out.actions[0])
    assert picked - set(ctx.admissible_actions)  # uniform-ish random weights: some draws land on formed commands


def test_a_family_without_an_open_set_is_refused_in_one_line():
    from ecpo_train.runtime.config import load_config

    with pytest.raises(ValueError, match="declares no open command set"):
        load_config("households_text", ["command_set=open", "env_id=ecpo/WebShopGen-v0"])
    with pytest.raises(ValueError, match="read only by policy=text"):
        load_config("quickstart", ["command_set=open"])


@pytest.mark.slow
def test_the_open_set_through_sft_train_and_the_leaderboard(tmp_path, monkeypatch):
    """``ecpo sft`` learns the expert among the open set (recorded in the folder), ``ecpo train`` sends invalid
    commands (their rate in metrics.jsonl), and the leaderboard's checkpoint agent plays with the open set."""
    from typer.testing import CliRunner

    from ecpo_train.apps.cli import app

    def main(args):
        done = CliRunner().invoke(app, args)
        assert done.exit_code == 0, done.output[-2000:]
        return 0

    monkeypatch.chdir(tmp_path)
    assert main(["sft", "--config", "households_text", "command_set=open", "--out", "sft", "--episodes", "24",
                 "--epochs", "1", "--batch-size", "64"]) == 0
    assert json.loads((tmp_path / "sft" / "text_policy.json").read_text())["command_set"] == "open"
    assert main(["train", "--config", "households_text", "model=sft", "command_set=open", "run_dir=run",
                 "iterations=1", "n_groups=2", "group_size=4", "val_every=0", "progress=false", "threads=1"]) == 0
    metrics = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    assert metrics["invalid_action_rate"] > 0
    assert main(["leaderboard", "--agent", "checkpoint", "--checkpoint", "run", "--manifest", "alfworld_gen",
                 "--seeds", "1", "--limit", "6", "--out-dir", "lb", "--name", "open"]) == 0
    records = [json.loads(line) for path in (tmp_path / "lb").rglob("*.jsonl") for line in path.read_text().splitlines()]
    assert records and any(r["invalid_actions"] > 0 for r in records)
