"""``--engine rllib --resume`` with the text policy is exact (issue 70, item 5a): a run of N iterations equals the
same run stopped after k and resumed to N, metric for metric and weight for weight. (Before, the runner's text
policy sampled from its own generator, which the RLlib checkpoint did not keep: the resumed run diverged from the
first iteration after the checkpoint.)"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("ray")

import numpy as np
from conftest import run_values

from ecpo_train.runtime.config import make_config


def _text_values(tmp_path, run_dir, **changes):
    from ecpo_train.policies.text import TextPolicy

    folder = tmp_path / "text-policy"
    if not folder.is_dir():
        folder.mkdir()
        TextPolicy(seed=3).save_pretrained(folder)
    return run_values(folder, tmp_path, policy="text", policy_mode="generate", lr=3e-3, kl_coef=0.01,
                      run_dir=str(run_dir), checkpoint_every=1) | changes


def _weights(run_dir):
    """The learner's module weights in the run's RLlib checkpoint (name -> array)."""
    from ecpo_train.integrations.rllib.state_files import read_state

    found = {}

    def walk(value, where):
        if isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{where}/{key}")
        elif hasattr(value, "shape") and "rl_module" in where and "optimizer" not in where:
            found[where] = np.asarray(value)

    walk(read_state(run_dir / "rllib_checkpoint"), "")
    return found


def _metrics(run_dir):
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in line.items() if not k.startswith(("time/", "sampling/time"))} for line in lines]


@pytest.mark.slow
@pytest.mark.parametrize("runners", [0, 1])  # the driver's own runner, one runner actor
def test_text_policy_resume_is_exact_on_the_rllib_engine(runners, tmp_path, ray_session):
    from ecpo_train.integrations.rllib.llm.engine import RLlibEngine
    from ecpo_train.runtime.run import train

    whole, cut = tmp_path / "whole", tmp_path / "cut"
    train(RLlibEngine, make_config(_text_values(tmp_path, whole, iterations=3)), num_env_runners=runners)
    train(RLlibEngine, make_config(_text_values(tmp_path, cut, iterations=1)), num_env_runners=runners)
    train(RLlibEngine, make_config(_text_values(tmp_path, cut, iterations=3)), resume=True, num_env_runners=runners)
    assert _metrics(cut) == _metrics(whole)
    a, b = _weights(whole), _weights(cut)
    assert a and sorted(a) == sorted(b)
    assert all(np.array_equal(a[k], b[k]) for k in a)
