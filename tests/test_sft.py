"""Expert warm start (``ecpo sft``): expert steps become the RL run's own token rows, and SFT teaches the format.

The tiny random model writes no parseable reply before SFT; after a few epochs on the corridors' expert
steps its reply loss on held-out corridors falls and its greedy replies parse. The saved folder loads as a
``TransformersPolicy`` (what ``ecpo train model=DIR`` does).
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ecpo_train.apps.cli import app
from ecpo_train.policies.parsing import parse_action
from ecpo_train.runtime.config import make_config
from ecpo_train.runtime.models import weights_sha256

CORRIDOR = "ecpo/DivergentAnchor-v0"
CORRIDOR_KWARGS = {"num_tasks": 6, "depth": 3}
TRAIN_TASKS = ["corridor0", "corridor1", "corridor2", "corridor3"]
HELD_OUT_TASKS = ["corridor4", "corridor5"]




def corridor_policy(model_dir):
    from ecpo_train.policies.llm import TransformersPolicy

    return TransformersPolicy(str(model_dir), env_name=CORRIDOR, max_response_length=16, history_length=0,
                              prompt_style="compact")


def test_expert_steps_become_the_rows_a_sampled_step_holds(tiny_model_dir):
    from ecpo_train.runtime.sft import end_of_turn_token, expert_demonstrations, reply_rows

    policy = corridor_policy(tiny_model_dir)
    demos = expert_demonstrations(CORRIDOR, episodes=3, task_ids=TRAIN_TASKS, env_kwargs=CORRIDOR_KWARGS, seed=0,
                                  history_length=0)
    assert demos and all(d.action.startswith("open ") for d in demos)
    prompts, replies = reply_rows(policy, demos)
    assert prompts == policy.encode_prompts([d.context for d in demos])
    for demo, reply in zip(demos, replies):
        assert reply[-1] == end_of_turn_token(policy) and reply[-1] in policy.eos_token_ids.tolist()
        text = policy.tokenizer.decode(reply, skip_special_tokens=True)  # as TransformersPolicy.act decodes
        assert parse_action(text, CORRIDOR) == demo.action


def test_alfworld_gen_expert_replies_parse_back_with_the_paper_prompt(tiny_model_dir):
    from ecpo_train.policies.llm import TransformersPolicy
    from ecpo_train.runtime.sft import expert_demonstrations, reply_rows

    env_id = "ecpo/ALFWorldGen-v0"
    policy = TransformersPolicy(str(tiny_model_dir), env_name=env_id, max_response_length=32, history_length=2)
    demos = expert_demonstrations(env_id, episodes=1, seed=0, history_length=2)
    assert len(demos) >= 2 and [d.context.step_count for d in demos] == list(range(len(demos)))
    assert demos[-1].context.history[-1][1] == demos[-2].action  # the loop's history holds the expert's actions
    prompts, replies = reply_rows(policy, demos)
    assert "<think>" in policy.tokenizer.decode(prompts[0])  # the paper template, as the RL run renders it
    for demo, reply in zip(demos, replies):
        assert parse_action(policy.tokenizer.decode(reply, skip_special_tokens=True), env_id) == demo.action


def test_sft_lowers_held_out_loss_and_teaches_the_reply_format(tiny_model_dir, tmp_path):
    from ecpo_train.runtime.sft import (
        expert_demonstrations,
        mean_reply_loss,
        reply_rows,
        run_sft,
        well_formed_rate,
    )

    config = make_config({"policy": "llm", "model": str(tiny_model_dir), "env_id": CORRIDOR,
                          "env_kwargs": CORRIDOR_KWARGS, "train_tasks": TRAIN_TASKS, "prompt_style": "compact",
                          "history_length": 0, "max_response_length": 16, "device": "cpu"})
    held_out = expert_demonstrations(CORRIDOR, episodes=4, task_ids=HELD_OUT_TASKS, env_kwargs=CORRIDOR_KWARGS,
                                     seed=100, history_length=0)
    contexts = [d.context for d in held_out]

    before = corridor_policy(tiny_model_dir)
    loss_before = mean_reply_loss(before, *reply_rows(before, held_out))
    formed_before = well_formed_rate(before, contexts)

    out = tmp_path / "sft"
    summary = run_sft(config, episodes=12, epochs=10, lr=5e-3, out=out)
    assert summary["loss_after"] < summary["loss_before"]
    assert json.loads((out / "sft.json").read_text())["steps"] == summary["steps"] > 0
    assert summary["model_weights_sha256"] == weights_sha256(tiny_model_dir)  # the base it started from, by hash

    after = corridor_policy(out)  # the saved folder loads as the RL run's policy
    loss_after = mean_reply_loss(after, *reply_rows(after, held_out))
    formed_after = well_formed_rate(after, contexts)
    assert loss_after < 0.5 * loss_before, (loss_before, loss_after)
    assert formed_after > formed_before, (formed_before, formed_after)
    assert formed_after >= 0.8


@pytest.mark.parametrize("args", [
    ["--config", "corridor_llm", "--out", "OUT", "--episodes", "0"],
    ["--config", "corridor_llm", "--out", "OUT", "--lr", "-1"],
    ["--config", "quickstart", "--out", "OUT"],  # policy=tabular: nothing to fine-tune
    ["--config", "corridor_llm", "--out", "OUT", "model=/no/such/model"],
    ["--config", "no_such_preset", "--out", "OUT"],
])
def test_sft_bad_input_is_one_error_line_and_exit_2(args, tmp_path):
    args = [str(tmp_path / "out") if a == "OUT" else a for a in args]
    result = CliRunner().invoke(app, ["sft", *args])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output


def test_sft_command_writes_a_model_folder(tiny_model_dir, tmp_path):
    out = tmp_path / "sft"
    result = CliRunner().invoke(app, ["sft", "--config", "corridor_llm", "--out", str(out), "--episodes", "2",
                                      "--epochs", "1", "--lr", "1e-4", f"model={tiny_model_dir}", "device=cpu",
                                      "max_response_length=16"])
    assert result.exit_code == 0, result.output
    assert (out / "config.json").is_file() and (out / "tokenizer.json").is_file()
    summary = json.loads((out / "sft.json").read_text())
    assert summary["episodes"] == 2 and summary["checkpointing"] and summary["max_tokens"] == 4096
    # not a terminal: the progress is plain lines, each stage's last one its total
    steps = -(-summary["steps"] // 8)
    for line in ("expert episodes: 2/2", f"loss before: {summary['steps']}/{summary['steps']}",
                 f"optimizer steps: {steps}/{steps}", f"loss after: {summary['steps']}/{summary['steps']}"):
        assert line in result.output, result.output


# ---------------------------------------------------------------- policy_mode: score
def scoring_policy(model_dir, env_id=CORRIDOR, explore_epsilon=0.0):
    from ecpo_train.policies.scoring import ScoringPolicy

    policy = ScoringPolicy(str(model_dir), env_name=env_id, max_response_length=16, history_length=0,
                           prompt_style="compact")
    policy.explore_epsilon = explore_epsilon
    return policy


def expert_choice(policy, rows, chosen):
    """(mean -log pi(expert | s), fraction of steps where the expert's candidate scores highest)."""
    from ecpo_train.policies.scoring import unpack_candidates
    from ecpo_train.runtime.sft import mean_reply_loss

    scores, order = policy._unique_scores([unpack_candidates(r) for r in rows])
    top = sum(int(scores[slot].argmax()) == c[0] for slot, c in zip(order, chosen)) / len(rows)
    return mean_reply_loss(policy, rows, chosen), top


def test_scoring_sft_rows_are_the_rows_the_scoring_policy_stores(tiny_model_dir):
    """With policy_mode=score SFT trains what the scoring policy scores: its own prompt (ending in <action>),
    every admissible candidate, the expert's candidate chosen, and the learner's log-prob of that choice."""
    from ecpo_train.policies.scoring import unpack_candidates
    from ecpo_train.runtime.sft import candidate_rows, expert_demonstrations

    env_id = "ecpo/ALFWorldGen-v0"
    policy = scoring_policy(tiny_model_dir, env_id)
    demos = expert_demonstrations(env_id, episodes=2, seed=0, history_length=0,
                                  env_kwargs={"task_types": ["Look", "Pick"], "num_tasks": 4})
    rows, chosen, left_out = candidate_rows(policy, demos)
    assert left_out == 0 and len(rows) == len(demos) >= 4
    stored = policy.act([d.context for d in demos], temperature=1.0).prompt_ids  # what a sampled step stores
    assert rows == stored
    for demo, row, (index,) in zip(demos, rows, chosen):
        prompt, candidates = unpack_candidates(row)
        assert policy.tokenizer.decode(prompt).endswith("<action>")
        assert len(candidates) == len(demo.context.admissible_actions)
        text = policy.tokenizer.decode(candidates[index], skip_special_tokens=True)
        assert text == demo.action + "</action>"
    logp, mask, _ = policy.logprobs(rows, chosen)
    assert logp.shape == mask.shape == (len(rows), 1) and bool((logp < 0).all())


def test_expert_action_filling_a_free_slot_matches_the_slot_candidate():
    from ecpo_train.runtime.sft import _expert_index

    admissible = ["click[back to search]", "search[<query>]"]
    assert _expert_index("search[red shoes, size 9]", admissible) == 1
    assert _expert_index("click[back to search]", admissible) == 0
    assert _expert_index("click[buy now]", admissible) is None


def test_scoring_sft_makes_the_expert_choice_the_scoring_policys_choice(tiny_model_dir, tmp_path):
    """The corridors' right door is not written in the observation (held-out corridors cannot be inferred), so
    the check is on the imitated steps: the candidate cross-entropy falls and the scoring policy's top choice
    becomes the expert's."""
    from ecpo_train.runtime.sft import candidate_rows, expert_demonstrations, run_sft

    demos = expert_demonstrations(CORRIDOR, episodes=12, task_ids=TRAIN_TASKS, env_kwargs=CORRIDOR_KWARGS, seed=0,
                                  history_length=0)  # the steps run_sft imitates (same tasks, order, seeds)
    before = scoring_policy(tiny_model_dir)
    rows, chosen, _ = candidate_rows(before, demos)
    loss_before, top_before = expert_choice(before, rows, chosen)

    config = make_config({"policy": "llm", "policy_mode": "score", "explore_epsilon": 0.3,
                          "model": str(tiny_model_dir), "env_id": CORRIDOR, "env_kwargs": CORRIDOR_KWARGS,
                          "train_tasks": TRAIN_TASKS, "prompt_style": "compact", "history_length": 0,
                          "max_response_length": 16, "device": "cpu"})
    summary = run_sft(config, episodes=12, epochs=5, lr=5e-3, out=tmp_path / "sft")
    assert summary["objective"].startswith("expert candidate cross-entropy")
    assert summary["steps"] == len(rows) and summary["steps_not_admissible"] == 0
    # the LM's own candidate softmax is imitated, not the exploration mixture (eps = 0.3 would add a floor)
    assert abs(summary["loss_before"] - loss_before) < 1e-4

    after = scoring_policy(tmp_path / "sft")  # the saved folder loads as the RL run's scoring policy
    loss_after, top_after = expert_choice(after, rows, chosen)
    assert abs(summary["loss_after"] - loss_after) < 1e-4
    assert loss_after < 0.4 * loss_before, (loss_before, loss_after)
    assert top_before < 0.4 and top_after > 0.7, (top_before, top_after)  # chance: 1 in 3 doors


# ---------------------------------------------------------------- memory: bounded forwards
@pytest.mark.data
@pytest.mark.parametrize("mode", ["score", "generate"])
def test_bounded_checkpointed_forwards_give_the_one_forward_loss_and_gradient(tiny_model_dir, mode):
    """Real ALFWorld steps (valid_seen, ~60 admissible actions each): cut into forwards of a few hundred tokens
    and run through checkpointed layers, a batch has the loss and gradient of one plain forward of it all."""
    from ecpo_train.policies.llm import TransformersPolicy
    from ecpo_train.policies.scaling import enable_gradient_checkpointing
    from ecpo_train.runtime.sft import (
        accumulate_gradient,
        candidate_rows,
        expert_demonstrations,
        forward_chunks,
        mean_reply_loss,
        reply_cross_entropy,
        reply_rows,
        row_tokens,
    )

    env_id = "ecpo/ALFWorld-v0"
    demos = expert_demonstrations(env_id, episodes=1, seed=0, history_length=0)[:4]

    def load():
        kind = scoring_policy if mode == "score" else None
        if kind is not None:
            return kind(tiny_model_dir, env_id)
        return TransformersPolicy(str(tiny_model_dir), env_name=env_id, max_response_length=32, history_length=0,
                                  prompt_style="compact")

    plain, bounded = load(), load()
    rows, chosen = candidate_rows(plain, demos)[:2] if mode == "score" else reply_rows(plain, demos)
    tokens = row_tokens(rows, chosen)
    max_tokens = int(tokens.max()) + 1  # one row a forward
    assert len(forward_chunks(range(len(rows)), tokens, max_tokens)) == len(rows) == 4
    assert enable_gradient_checkpointing(bounded.model) > 0
    plain.model.train()
    bounded.model.train()

    nll, count = reply_cross_entropy(plain, rows, chosen)
    (nll / count).backward()
    bounded_nll, bounded_count = accumulate_gradient(bounded, rows, chosen, range(len(rows)), max_tokens)
    assert bounded_count == float(count) and bounded_nll == pytest.approx(float(nll.detach()), rel=1e-5)
    for (name, p), q in zip(plain.model.named_parameters(), bounded.model.parameters()):
        assert float((p.grad - q.grad).norm()) <= 1e-5 * float(p.grad.norm()), name  # float rounding only
    assert mean_reply_loss(bounded, rows, chosen, max_tokens) == pytest.approx(float(nll.detach() / count), rel=1e-5)
