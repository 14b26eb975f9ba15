"""One candidate chooser (``policies/choose.py``) for every policy that picks among admissible commands: the text
policy, the LLM scoring policy (``policy_mode=score``) and the tabular policy mean the same by a temperature
(``T <= 0``: the highest score, ties to the first candidate), choose by the inverse CDF of one uniform per sampled
decision from their own seeded generator (never torch's global stream), sample ``softmax(score / T)`` (mixed with
the uniform under ``explore_epsilon``), and a native run of the scoring policy resumes its stream exactly."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter

import pytest
import torch

from ecpo_train.policies.base import StepContext, inverse_cdf_index
from ecpo_train.policies.choose import choose, distribution, log_policy

ALFWORLD = ["go to cabinet 1", "go to countertop 2", "take mug 1 from countertop 2", "open cabinet 1", "look",
            "put mug 1 in/on coffeemachine 1"]
DOORS = ["open red door", "open blue door", "open green door"]
TABULAR_LOGITS = [0.5, -0.3, 1.0, 0.0, 0.8]


# ------------------------------------------------------------------ the three policy kinds, behind one face
class Tabular:
    actions = tuple(f"a{i}" for i in range(len(TABULAR_LOGITS)))

    def policy(self, seed):
        from ecpo_train.policies.tabular import TabularSoftmaxPolicy

        policy = TabularSoftmaxPolicy(seed=seed)
        with torch.no_grad():
            for action, logit in zip(self.actions, TABULAR_LOGITS):
                policy.logits[policy.slot("s", action)] = logit
        return policy

    def context(self, draw=None, actions=None):
        return StepContext("ecpo/DivergentAnchor-v0", "t", 0, [], "obs", list(actions or self.actions), "s", draw=draw)

    def scores(self, policy, ctx):
        return policy.logits.detach()[[policy.slots[("s", a)] for a in ctx.admissible_actions]]

    def distributions(self, policy, ctx, temperature):
        return policy.action_probabilities(ctx.state_key, ctx.admissible_actions, temperature=temperature)


class Text:
    actions = ALFWORLD

    def policy(self, seed):
        from ecpo_train.policies.text import TextArchitecture, TextPolicy
        from ecpo_train.policies.text_vocabulary import Vocabulary

        vocab = Vocabulary.build(["put a clean mug in coffeemachine", *ALFWORLD, "you see a mug 1 and a apple 3"])
        policy = TextPolicy(vocab, TextArchitecture(embedding_dim=16, hidden_dim=32), seed=seed)
        with torch.no_grad():  # weights away from their start: the commands' scores differ
            for p in policy.parameters():
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(0)) * 0.3)
        return policy

    def context(self, draw=None, actions=None):
        return StepContext(env_name="ecpo/ALFWorld-v0", task="put a clean mug in coffeemachine", step_count=0,
                           history=[], observation="On the countertop 2, you see a mug 1, and a apple 3.",
                           admissible_actions=list(actions or self.actions), state_key="s", draw=draw)

    def scores(self, policy, ctx):
        with torch.no_grad():
            return policy._scores([(policy.context_ids(ctx), policy.command_ids(ctx))])[0]

    def distributions(self, policy, ctx, temperature):
        return policy.action_distributions([ctx], temperature)[0]


class Scoring:
    actions = DOORS
    model_dir = None

    def policy(self, seed):
        from ecpo_train.policies.scoring import ScoringPolicy

        return ScoringPolicy(str(self.model_dir), env_name="ecpo/DivergentAnchor-v0", history_length=0,
                             prompt_style="compact", seed=seed)

    def context(self, draw=None, actions=None):
        return StepContext(env_name="ecpo/DivergentAnchor-v0", task="walk through all 4 rooms", step_count=0,
                           history=[], observation="room 1/4. doors: red, blue, green.",
                           admissible_actions=list(actions or self.actions), state_key="corridor0:room0", draw=draw)

    def scores(self, policy, ctx):
        with torch.no_grad():
            return policy._scored_contexts([ctx])[0][2]

    def distributions(self, policy, ctx, temperature):
        return policy.action_distributions([ctx], temperature)[0]


@pytest.fixture(params=["tabular", "text", "scoring"])
def kind(request):
    if request.param == "scoring":
        scoring = Scoring()
        scoring.model_dir = request.getfixturevalue("tiny_model_dir")
        return scoring
    return {"tabular": Tabular, "text": Text}[request.param]()


def disturb_torchs_global_stream(i):
    """What else a process does between two choices: reseed and consume torch's global stream."""
    torch.manual_seed(1000 + i)
    torch.rand(97 * (i + 1))


# ------------------------------------------------------------------ the agreed semantics, for each kind
@pytest.mark.parametrize("temperature", [0.0, -1.0])
def test_a_temperature_at_or_below_zero_is_greedy_for_every_policy_kind(kind, temperature):
    """``T <= 0`` takes the highest score (the tabular policy refused it before), stores the ``T = 1`` log-prob the
    learner recomputes, ignores a step's draw, and its distribution is that one-hot."""
    policy = kind.policy(seed=0)
    ctx = kind.context()
    scores = kind.scores(policy, ctx)
    best = int(torch.argmax(scores))
    for draw in (None, 0.0, 0.999):
        out = policy.act([dataclasses.replace(ctx, draw=draw)], temperature=temperature)
        assert out.actions == [ctx.admissible_actions[best]] and out.response_ids == [[best]]
        assert out.logprobs[0][0] == pytest.approx(float(torch.log_softmax(scores, -1)[best]), abs=1e-5)
    relearned = policy.logprobs(out.prompt_ids, out.response_ids, temperature=temperature)[0]
    assert float(relearned[0, 0]) == pytest.approx(out.logprobs[0][0], abs=1e-5)
    probs = kind.distributions(policy, ctx, temperature)
    assert [probs[a] for a in ctx.admissible_actions] == [1.0 if i == best else 0.0 for i in range(len(scores))]


def test_greedy_ties_go_to_the_first_candidate():
    """Equal scores: the lowest index (the tabular policy's unseen state, all logits 0, takes its first action)."""
    from ecpo_train.policies.tabular import TabularSoftmaxPolicy

    assert choose(torch.tensor([0.1, 0.7, 0.7, 0.2]), 0.0, draw=None, generator=torch.Generator())[0] == 1
    assert distribution(torch.tensor([0.7, 0.7]), 0.0).tolist() == [1.0, 0.0]
    fresh = TabularSoftmaxPolicy(seed=3)
    ctx = StepContext("ecpo/DivergentAnchor-v0", "t", 0, [], "obs", ["c", "a", "b"], "unseen")
    assert fresh.act([ctx], temperature=0.0).actions == ["c"]
    assert fresh.action_probabilities("unseen2", ["c", "a", "b"], temperature=0.0) == {"c": 1.0, "a": 0.0, "b": 0.0}


def test_sampled_choices_are_the_inverse_cdf_of_one_uniform_per_decision_from_the_policys_own_generator(kind):
    """At ``T > 0`` every kind picks ``inverse_cdf_index(softmax(score / T), u)`` with ``u`` the next float64 uniform
    of a generator seeded with the policy's seed: the same uniforms for every kind (common random numbers), and
    torch's global stream, reseeded and consumed between calls, changes nothing (the scoring policy sampled from
    it before). The stored log-prob is ``log softmax(score / T)`` of the choice."""
    temperature, seed, decisions = 1.7, 11, 16
    policy = kind.policy(seed)
    ctx = kind.context()
    scores = kind.scores(policy, ctx)
    probs = torch.softmax(scores / temperature, -1)
    uniforms = torch.Generator().manual_seed(seed)
    chosen = []
    for i in range(decisions):
        disturb_torchs_global_stream(i)
        out = policy.act([ctx], temperature=temperature)
        u = float(torch.rand((), generator=uniforms, dtype=torch.float64))
        expected = inverse_cdf_index(probs, u)
        assert out.response_ids == [[expected]] and out.actions == [ctx.admissible_actions[expected]]
        assert out.logprobs[0][0] == pytest.approx(float(torch.log(probs[expected])), abs=1e-5)
        chosen.append(expected)
    assert len(set(chosen)) > 1  # (the distribution is not degenerate: the check has teeth)
    listed = kind.distributions(policy, ctx, temperature)
    assert torch.allclose(torch.tensor([listed[a] for a in ctx.admissible_actions]), probs, atol=1e-6)


def test_the_same_seed_gives_the_same_choices_and_a_step_draw_overrides_the_stream(kind):
    """Two policies of one seed choose alike whatever runs between their calls; another seed does not; a step's
    draw (validation's common random numbers) picks by its inverse CDF and leaves the policy's stream untouched."""
    contexts = [kind.context()] * 24
    policy, other = kind.policy(4), kind.policy(5)
    start = policy.generator.get_state()  # (a second policy of seed 4 starts here)

    def choices(policy, disturbed):
        out = []
        for i in range(2):
            if disturbed:
                disturb_torchs_global_stream(i)
            out += policy.act(contexts, temperature=1.5).actions
        return out

    quiet = choices(policy, disturbed=False)
    policy.generator.set_state(start)
    assert choices(policy, disturbed=True) == quiet
    assert choices(other, disturbed=False) != quiet

    policy.generator.set_state(start)
    probs = torch.softmax(kind.scores(policy, kind.context()) / 1.5, -1)
    draws = [0.02, 0.4, 0.77, 0.999]
    out = policy.act([kind.context(draw=d) for d in draws], temperature=1.5)
    assert out.response_ids == [[inverse_cdf_index(probs, d)] for d in draws]
    assert policy.act(contexts, temperature=1.5).actions == quiet[:len(contexts)]


def test_the_scoring_policys_exploration_mixture_is_the_chooser_one(tiny_model_dir):
    """``explore_epsilon``: sampling, the listed distribution and the learner's log-probs are
    ``(1 - eps) softmax(score / T) + eps / |A|``; a greedy choice is still the highest score."""
    kind = Scoring()
    kind.model_dir = tiny_model_dir
    policy = kind.policy(seed=2)
    policy.explore_epsilon = eps = 0.3
    ctx = kind.context()
    scores = kind.scores(policy, ctx)
    mixed = (1 - eps) * torch.softmax(scores / 0.5, -1) + eps / len(scores)
    listed = kind.distributions(policy, ctx, 0.5)
    assert torch.allclose(torch.tensor([listed[a] for a in DOORS]), mixed, atol=1e-6)
    uniforms = torch.Generator().manual_seed(2)
    out = policy.act([ctx] * 12, temperature=0.5)
    expected = [inverse_cdf_index(mixed, float(torch.rand((), generator=uniforms, dtype=torch.float64)))
                for _ in range(12)]
    assert [r[0] for r in out.response_ids] == expected
    relearned = policy.logprobs(out.prompt_ids, out.response_ids, temperature=0.5)[0][:, 0]
    assert torch.allclose(relearned, torch.log(mixed[expected]), atol=1e-5)
    assert policy.act([ctx], temperature=0.0).response_ids == [[int(torch.argmax(scores))]]


# ------------------------------------------------------------------ the chooser itself
@pytest.mark.parametrize("epsilon", [0.0, 0.25])
def test_chosen_frequencies_follow_the_tempered_softmax(epsilon):
    """20,000 choices from one seeded generator: each candidate's share is within 5 standard deviations of
    ``(1 - eps) softmax(score / T) + eps / |A|``; ``log_policy`` is that distribution's log."""
    scores, temperature, n = torch.tensor([1.0, -0.5, 2.0, 0.3]), 0.6, 20_000
    expected = (1 - epsilon) * torch.softmax(scores / temperature, -1) + epsilon / len(scores)
    assert torch.allclose(log_policy(scores, temperature, epsilon).exp(), expected, atol=1e-6)
    assert torch.allclose(distribution(scores, temperature, epsilon), expected, atol=1e-6)
    generator = torch.Generator().manual_seed(0)
    counts = Counter(choose(scores, temperature, draw=None, generator=generator, epsilon=epsilon)[0] for _ in range(n))
    for k, p in enumerate(expected.tolist()):
        assert abs(counts[k] / n - p) < 5 * math.sqrt(p * (1 - p) / n)


def test_a_greedy_choice_takes_no_uniform_and_a_sampled_one_exactly_one():
    """The generator's position depends on the sampled decisions only (one uniform each), so two policies of one
    seed that sampled equally many decisions hold the same stream."""
    generator, reference = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    choose(torch.tensor([0.0, 1.0]), 0.0, draw=None, generator=generator)
    choose(torch.tensor([0.0, 1.0]), 1.0, draw=0.5, generator=generator)
    assert torch.equal(generator.get_state(), reference.get_state())
    choose(torch.tensor([0.0, 1.0, 2.0]), 1.0, draw=None, generator=generator)
    torch.rand((), generator=reference, dtype=torch.float64)
    assert torch.equal(generator.get_state(), reference.get_state())


# ------------------------------------------------------------------ the scoring policy's stream in a checkpoint
def test_a_native_scoring_run_resumes_its_chooser_stream_exactly(tiny_model_dir, tmp_path):
    """The scoring policy's generator is in no state dict: the native checkpoint keeps it (``policy_rng``), so
    the iteration after a resume equals the uninterrupted one."""
    from conftest import run_values

    from ecpo_train.runtime.config import make_config
    from ecpo_train.runtime.run import open_run
    from ecpo_train.runtime.trainer import Trainer

    config = make_config(run_values(tiny_model_dir, tmp_path, iterations=2, num_epochs=1, n_groups=1))
    with open_run(Trainer, config) as first:
        first.train(1)  # ends with its checkpoint
        assert first.engine.checkpoint_state()["policy_rng"] is not None
        expected = first.engine.train_iteration()
    with open_run(Trainer, config, resume=True) as again:
        assert again.engine.iteration == 1
        got = again.engine.train_iteration()
    timeless = lambda m: {k: v for k, v in m.items() if not k.startswith("time/")}
    assert timeless(got) == timeless(expected)


def test_a_tabular_run_validates_greedily(tmp_path):
    """``val_temperature: 0`` on the tabular policy: validation plays the greedy choices and the exact success is
    that of the greedy policy (the tabular policy refused ``T <= 0`` before, so this run stopped with an error)."""
    from ecpo_train.runtime.config import load_config
    from ecpo_train.runtime.run import train
    from ecpo_train.runtime.trainer import Trainer

    config = load_config("quickstart", [f"run_dir={tmp_path}", "progress=false", "tensorboard=false", "iterations=1",
                                        "n_groups=2", "group_size=2", "val_episodes_per_task=2",
                                        "val_every=1", "checkpoint_every=0", "val_temperature=0"])
    (row,) = train(Trainer, config)
    assert 0.0 <= row["val/exact_success"] <= 1.0 and 0.0 <= row["val/success"] <= 1.0
