"""TRL on an ``ecpo serve`` server: ``examples/trl/train_grpo.py`` trains a few steps (rewards from the server, a
finite loss), and ``ECPOGRPOTrainer``'s advantages inside TRL's own scoring equal ``compute_advantages("ecpo")``."""

from __future__ import annotations

import importlib.util
import math
import random
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("openenv")
pytest.importorskip("trl")
from openenv_serving import ROOT, served

from ecpo_train.credit import STEP_COLUMNS, compute_advantages
from ecpo_train.integrations.trl_credit import TURNS_FIELD

ANCHOR = "ecpo/DivergentAnchor-v0"
CORRIDOR = '{"depth": 3, "rare_prob": [0.4, 0.8]}'


def load_example():
    spec = importlib.util.spec_from_file_location("trl_train_grpo", ROOT / "examples" / "trl" / "train_grpo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_the_example_trains_through_the_server(tiny_model_dir: Path, tmp_path: Path) -> None:
    example = load_example()
    with served(ANCHOR, "--env-kwargs", CORRIDOR) as server:
        logs = example.main(["--url", server.url, "--model", str(tiny_model_dir), "--steps", "2", "--batch-size", "4",
                             "--num-generations", "2", "--max-turns", "3", "--max-new-tokens", "8",
                             "--out", str(tmp_path / "out"), "--log-file", str(tmp_path / "log.jsonl")])
    assert [entry["step"] for entry in logs] == [1, 2]
    for entry in logs:
        assert math.isfinite(entry["loss"])
        # every episode's return, summed from the server's step rewards: 3 turns of at least -0.1 (invalid) each
        assert -0.3 - 1e-6 <= entry["reward"] <= 10.0
        assert entry["rewards/env_return/mean"] == pytest.approx(entry["reward"])
    assert (tmp_path / "log.jsonl").read_text().count("\n") == 2


def scripted_rollout(url: str, tokenizer, seed: int = 0):
    """A ``rollout_func`` whose replies are ``<action>a</action>`` for a random admissible action (an invalid one
    now and then): the episodes vary, so ECPO has evidence to weigh; the tokens are real, and TRL scores them."""
    from ecpo_train.integrations.openenv.client import ECPOEnvClient

    rng = random.Random(seed)

    def rollout_func(prompts: list, trainer) -> dict:
        out = {"prompt_ids": [], "completion_ids": [], "logprobs": None, "env_mask": [], "env_return": [],
               TURNS_FIELD: []}
        for prompt in prompts:
            with ECPOEnvClient(base_url=url).sync() as env:
                result = env.reset(seed=int(prompt[-1]["content"].rsplit(" ", 1)[-1]))
                ids = tokenizer(result.observation.text, add_special_tokens=False)["input_ids"]
                completion, mask, turns, total = [], [], [], 0.0
                while not result.done:
                    action = "dance" if rng.random() < 0.1 else rng.choice(result.observation.admissible_actions)
                    reply = tokenizer(f"<action>{action}</action>", add_special_tokens=False)["input_ids"]
                    before = result.observation.state_key
                    result = env.step(action)
                    turns.append({"state_key": before, "action_key": result.observation.action_key,
                                  "reward": result.reward, "start": len(completion),
                                  "end": len(completion) + len(reply)})
                    total += result.reward
                    completion += reply
                    mask += [1] * len(reply)
                    feedback = tokenizer(result.observation.text, add_special_tokens=False)["input_ids"]
                    completion += feedback
                    mask += [0] * len(feedback)
                completion.append(tokenizer.eos_token_id)
                mask.append(0)
            out["prompt_ids"].append(ids)
            out["completion_ids"].append(completion)
            out["env_mask"].append(mask)
            out["env_return"].append(total)
            out[TURNS_FIELD].append(turns)
        return out

    return rollout_func


@pytest.mark.slow
def test_ecpo_advantages_inside_trl_equal_compute_advantages(tiny_model_dir: Path, tmp_path: Path) -> None:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig

    from ecpo_train.integrations.trl_credit import ecpo_grpo_trainer

    example = load_example()
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir, padding_side="left")
    group, seeds = 4, [11, 12, 13]
    options = {"d_min": 1}
    with served(ANCHOR, "--env-kwargs", CORRIDOR) as server:
        trainer = ecpo_grpo_trainer()(
            model=AutoModelForCausalLM.from_pretrained(tiny_model_dir), processing_class=tokenizer,
            reward_funcs=[example.env_return], train_dataset=Dataset.from_dict(
                {"prompt": [example.task_prompt(s) for s in seeds]}),
            args=GRPOConfig(output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=group * len(seeds),
                            num_generations=group, report_to=[], use_cpu=True, save_strategy="no", beta=0.0,
                            logging_steps=1, disable_tqdm=True),
            rollout_func=scripted_rollout(server.url, tokenizer), credit_options=options)
        inputs = [{"prompt": example.task_prompt(s)} for s in seeds for _ in range(group)]
        output = trainer._generate_and_score_completions(inputs)
        trainer.train()  # one real step on those advantages
    advantages = output["advantages"].double().numpy()
    episodes = [row[TURNS_FIELD] for row in inputs]
    rows = [(i // group, i, k + 1, t["state_key"], t["action_key"], t["reward"])
            for i, turns in enumerate(episodes) for k, t in enumerate(turns)]
    columns = list(zip(*rows, strict=True))
    expected, _ = compute_advantages("ecpo", dict(zip(STEP_COLUMNS, columns)), options)
    assert advantages.shape == tuple(output["completion_ids"].shape)
    wanted = np.zeros_like(advantages)
    for (_, row, step, *_), value in zip(rows, expected, strict=True):
        turn = episodes[row][step - 1]
        wanted[row, turn["start"]:turn["end"]] = value
    np.testing.assert_allclose(advantages, wanted, rtol=1e-6, atol=1e-6)  # float32 inside TRL
    assert np.count_nonzero(np.asarray(expected)) > 0
    tool_mask = output["tool_mask"].numpy()
    assert np.all(advantages[tool_mask == 0] == 0)  # the environment's tokens carry no advantage
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert losses and all(math.isfinite(v) for v in losses)
