"""The small text policy (``policy: text``): its log-probs are the distribution it samples from, it reads what a
step shows it, it saves and loads whole, and the whole pipeline (warm start, group RL, leaderboard row) runs on
real ALFWorld games."""

from __future__ import annotations

import json
import zlib
from collections import Counter

import numpy as np
import pytest
import torch

from ecpo_train.policies.base import StepContext
from ecpo_train.policies.text import TextArchitecture, TextPolicy
from ecpo_train.policies.text_vocabulary import SPECIAL, Vocabulary, words

COMMANDS = ["go to cabinet 1", "go to countertop 2", "take mug 1 from countertop 2", "open cabinet 1", "look",
            "put mug 1 in/on coffeemachine 1"]


def context(history=(), actions=COMMANDS, draw=None) -> StepContext:
    return StepContext(env_name="ecpo/ALFWorld-v0", task="put a clean mug in coffeemachine", step_count=len(history),
                       history=list(history), observation="On the countertop 2, you see a mug 1, and a apple 3.",
                       admissible_actions=list(actions), state_key="s", draw=draw)


def trained_a_little(seed=0) -> TextPolicy:
    """A policy whose weights are away from their initial values (scores differ across commands)."""
    vocab = Vocabulary.build(["put a clean mug in coffeemachine", *COMMANDS, "you see a mug 1 and a apple 3"])
    policy = TextPolicy(vocab, TextArchitecture(embedding_dim=16, hidden_dim=32), seed=seed)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(seed)) * 0.1)
    return policy


def test_vocabulary_words_known_ids_and_stable_buckets():
    assert words("You arrive at Cabinet 10. On it, you see a mug 1!") == \
        ["you", "arrive", "at", "cabinet", "10", "on", "it", "you", "see", "a", "mug", "1"]
    vocab = Vocabulary.build(["b a a", "c b a"], max_words=2, hash_buckets=8)
    assert vocab.known == ["a", "b"]  # by frequency, ties alphabetical; "c" falls to the buckets
    first = 1 + len(SPECIAL)
    assert vocab.encode("a b") == (first, first + 1)
    assert vocab.word_id("c") == first + 2 + zlib.crc32(b"c") % 8  # CRC-32: the same id on every machine
    assert Vocabulary.from_dict(vocab.to_dict()).encode("c a zebra") == vocab.encode("c a zebra")
    with pytest.raises(ValueError, match="hash_buckets"):
        Vocabulary(hash_buckets=0)


def test_logprobs_equal_the_distribution_act_samples_from():
    """Every stored row's log-prob, recomputed by the learner's ``logprobs``, is the sampling log-prob; each
    command's recomputed probability is ``action_distributions``' one; and sampled frequencies follow it."""
    policy = trained_a_little()
    ctxs = [context(), context(history=[("You are in a room.", "go to countertop 2")]),
            context(actions=COMMANDS[:3])]
    out = policy.act(ctxs, temperature=0.7)
    token_logp, mask, entropy = policy.logprobs(out.prompt_ids, out.response_ids, temperature=0.7, with_entropy=True)
    assert torch.allclose(token_logp[:, 0], torch.tensor([lp[0] for lp in out.logprobs]), atol=1e-6)
    assert mask.sum() == 3
    for row, ctx in enumerate(ctxs):
        probs = policy.action_distributions([ctx], 0.7)[0]
        every = [[k] for k in range(len(ctx.admissible_actions))]
        recomputed = policy.logprobs([out.prompt_ids[row]] * len(every), every, temperature=0.7)[0][:, 0].exp().detach()
        assert np.allclose(recomputed.numpy(), [probs[a] for a in ctx.admissible_actions], atol=1e-6)
        p = recomputed.numpy()
        assert entropy[row, 0].item() == pytest.approx(float(-(p * np.log(p)).sum()), abs=1e-5)
    probs = policy.action_distributions([ctxs[0]], 1.0)[0]
    counts = Counter(policy.act([ctxs[0]] * 4000, temperature=1.0).actions)
    for action, p in probs.items():  # 4000 draws: within 5 binomial standard deviations
        assert abs(counts[action] / 4000 - p) <= 5 * np.sqrt(p * (1 - p) / 4000) + 1e-3


def test_sampling_and_learning_forwards_give_the_same_scores():
    """``act`` scores without autograd (embedding_bag), the learner with it (segment_reduce): the same floats."""
    policy = trained_a_little()
    ctxs = [context(), context(history=[("You are in a room.", "go to countertop 2")] * 3)]
    items = [(policy.context_ids(c), policy.command_ids(c)) for c in ctxs]
    with torch.no_grad():
        sampled = policy._scores(items)
    learned = policy._scores(items)
    assert all(torch.equal(a, b.detach()) for a, b in zip(sampled, learned))


def test_draws_pick_by_inverse_cdf_and_greedy_takes_the_best():
    policy = trained_a_little()
    probs = policy.action_distributions([context()], 1.0)[0]
    cdf = np.cumsum([probs[a] for a in COMMANDS])
    for draw in (0.0, 0.3, 0.61, 0.999):
        expected = COMMANDS[min(int(np.searchsorted(cdf, draw * cdf[-1], side="right")), len(COMMANDS) - 1)]
        assert policy.act([context(draw=draw)], temperature=1.0).actions == [expected]
    assert policy.act([context()], temperature=0.0).actions == [max(probs, key=probs.get)]


def test_a_step_shows_goal_observation_last_pairs_and_repeat_counts():
    policy = TextPolicy(Vocabulary.build(["go to cabinet 1 look"]), TextArchitecture(context_pairs=1))
    history = [("obs one", "go to cabinet 1"), ("obs two", "look"), ("obs three", "go to cabinet 1")]
    ids = policy.context_ids(context(history=history))
    v = policy.vocabulary
    assert ids[0] == v.special("<history>")
    assert ids[1:4] == [*v.encode("obs three"), v.special("<act>")]  # only the last pair as text
    assert ids.index(v.special("<goal>")) < ids.index(v.special("<observation>"))
    commands = policy.command_ids(context(history=history, actions=["go to cabinet 1", "look", "open cabinet 1"]))
    assert [c[0] - v.special("<taken0>") for c in commands] == [2, 1, 0]  # sent twice, once, never (whole history)
    assert commands[0][1:] == list(v.encode("go to cabinet 1"))


def test_scores_do_not_depend_on_the_batch_they_are_computed_in():
    policy = trained_a_little()
    ctxs = [context(), context(history=[("a long observation " * 20, "look")] * 3), context(actions=["look"])]
    together = policy._scores([(policy.context_ids(c), policy.command_ids(c)) for c in ctxs])
    for ctx, score in zip(ctxs, together):
        alone = policy._scores([(policy.context_ids(ctx), policy.command_ids(ctx))])[0]
        assert torch.allclose(alone, score, atol=1e-6)


def test_saved_folder_and_checkpoint_state_give_the_same_policy(tmp_path):
    policy = trained_a_little(seed=3)
    policy.save_pretrained(tmp_path)
    loaded = TextPolicy.from_pretrained(tmp_path)
    out = policy.act([context()], temperature=0.0)
    assert loaded.act([context()], temperature=0.0).actions == out.actions
    assert torch.equal(loaded.logprobs(out.prompt_ids, out.response_ids)[0],
                       policy.logprobs(out.prompt_ids, out.response_ids)[0])
    # a trainer checkpoint (state_dict with the vocabulary as extra state) loads into the policy built from the folder
    rebuilt = TextPolicy.from_pretrained(tmp_path)
    rebuilt.load_state_dict(policy.state_dict())
    other = TextPolicy(Vocabulary(["zebra"]), policy.arch)
    with pytest.raises(ValueError, match="another vocabulary"):
        other.load_state_dict(policy.state_dict(), strict=False)
    with pytest.raises(ValueError, match="not a text-policy folder"):
        TextPolicy.from_pretrained(tmp_path / "missing")
    (tmp_path / "text_policy.json").write_text("{", encoding="utf-8")
    with pytest.raises(ValueError, match="text_policy.json does not match its sha256"):  # (its checksums.sha256)
        TextPolicy.from_pretrained(tmp_path)
    (tmp_path / "checksums.sha256").unlink()  # a folder saved before checksums: the json itself is refused
    with pytest.raises(ValueError, match="damaged text-policy folder"):
        TextPolicy.from_pretrained(tmp_path)


def test_the_config_refuses_what_the_text_policy_cannot_do(tmp_path):
    from ecpo_train.runtime.config import make_config

    make_config({"policy": "text", "env_id": "ecpo/ALFWorldGen-v0"})  # random weights: accepted
    with pytest.raises(ValueError, match="search-QA"):
        make_config({"policy": "text", "env_id": "ecpo/SearchQAGen-v0"})
    with pytest.raises(ValueError, match="critic"):
        make_config({"policy": "text", "estimator": "ppo"})
    with pytest.raises(ValueError, match="not a text-policy folder"):
        make_config({"policy": "text", "model": str(tmp_path)})


@pytest.mark.data
def test_warm_start_two_iterations_and_a_leaderboard_row_on_real_alfworld(tmp_path):
    """The pipeline of the real-ALFWorld preset, small: expert warm start on a few training games (the expert's
    commands are what the warm start learns to pick), 2 iterations of group RL from it, then a leaderboard row of
    the trained checkpoint on valid_seen games."""
    from ecpo_train.evaluation.build import build_agent
    from ecpo_train.evaluation.manifests import load_manifest
    from ecpo_train.evaluation.runner import EvalSettings, collect_records, evaluate
    from ecpo_train.runtime.config import load_config
    from ecpo_train.runtime.run import train
    from ecpo_train.runtime.sft import run_sft
    from ecpo_train.runtime.trainer import Trainer

    games = ["look_at_obj_in_light-AlarmClock-None-DeskLamp-301/trial_T20190907_174127_043461/game.tw-pddl",
             "pick_and_place_simple-AlarmClock-None-Desk-307/trial_T20190907_072303_146844/game.tw-pddl"]
    config = load_config("alfworld_text", [f"run_dir={tmp_path / 'run'}", "n_groups=2", "group_size=4",
                                           "iterations=2", "val_num_tasks=2", "val_every=1", "progress=false",
                                           "tensorboard=false", "env_kwargs.max_steps=12", "task_draw=cycle",
                                           f"train_tasks={json.dumps(games)}", "lr=1e-3", "rollout_temperature=3"])
    summary = run_sft(config, episodes=8, epochs=6, lr=3e-3, out=tmp_path / "warm", batch_size=8)
    assert summary["steps"] > 20 and summary["steps_not_admissible"] == 0
    assert summary["loss_after"] < summary["loss_before"] - 0.5  # the expert's commands became likelier
    assert (tmp_path / "warm" / "text_policy.safetensors").is_file()

    import dataclasses

    history = train(Trainer, dataclasses.replace(config, model=str(tmp_path / "warm")))
    assert [h["iteration"] for h in history] == [1, 2]
    # the warm start sampled hot (T = 3: about a quarter of its episodes won, so not every group's returns can be
    # equal by luck of the stream) wins some episodes of a group and loses others, so the run updates; one update
    # over the whole iteration: its ratio is the learner's recomputed probability over the sampling one, 1
    updated = [h for h in history if h["update/optimizer_steps"] >= 1]
    assert updated and all(h["update/ratio_max_dev"] < 1e-5 for h in updated)
    lines = [json.loads(line) for line in (tmp_path / "run" / "validation.jsonl").read_text().splitlines()]
    assert len(lines) == 2

    agent = build_agent("checkpoint", checkpoint=str(tmp_path / "run"), temperature=0.4)
    manifest = load_manifest("alfworld_valid_seen_by_type")
    evaluate(agent, [manifest], tmp_path / "lb", EvalSettings(seeds=[0], limit=1, progress=False))
    (run,) = [p for p in (tmp_path / "lb").iterdir() if p.is_dir()]
    records = collect_records(run)
    assert len(records) == 6  # one game of each of the six task types
    assert {r["task_type"] for r in records} == {"Pick", "Clean", "Heat", "Cool", "Look", "Pick2"}
