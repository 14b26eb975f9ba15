"""Static-cache decoding (``decoding=static``/``graph``, ``ecpo_train/policies/decoding.py``) samples what the eager
sampler samples.

Under the same seed the two paths draw from the same random stream, so they must return the same tokens, greedy and
sampled, with and without shared prefixes, with replies ending at different lengths; the log-probs returned for the
update are the learner's recomputed ones. The CUDA test checks the graphed path the same way on a GPU.
"""

from __future__ import annotations

import pytest
import torch

from ecpo_train.policies.decoding import SamplingCopy, bucket, resolve_decoding

PROMPTS = [[1, 2, 3], [4, 5], [1, 2, 3], [7, 8, 9, 10, 11], [1, 2, 3], [4, 5]]  # duplicates, three widths


@pytest.fixture(scope="module")
def policy(tiny_model_dir):
    from ecpo_train.policies.llm import TransformersPolicy

    return TransformersPolicy(str(tiny_model_dir), env_name="ecpo/ALFWorldGen-v0", max_response_length=6)


def sample(policy, decoding, temperature, share_prefix=True, seed=5):
    policy.decoding, policy.share_prefix = decoding, share_prefix
    try:
        torch.manual_seed(seed)
        return policy.sample(PROMPTS, temperature)
    finally:
        policy.decoding, policy.share_prefix = "eager", True


@pytest.fixture(scope="module")
def stops(policy):
    """End-of-reply ids that cut the eager replies at different lengths: row k's token at step k (0-based)."""
    tokens, _ = sample(policy, "eager", 1.0)
    original = policy.eos_token_ids
    chosen = {tokens[k][k] for k in (0, 2, 4)}
    policy.eos_token_ids = torch.tensor(sorted(set(original.tolist()) | chosen))
    yield policy.eos_token_ids
    policy.eos_token_ids = original


@pytest.mark.parametrize("share_prefix", [True, False])
@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_static_decoding_samples_what_eager_decoding_samples(policy, stops, temperature, share_prefix):
    eager = sample(policy, "eager", temperature, share_prefix)
    static = sample(policy, "static", temperature, share_prefix)
    assert static[0] == eager[0]
    for mine, theirs in zip(static[1], eager[1]):
        assert mine == pytest.approx(theirs, abs=1e-5)
    if temperature > 0:  # replies end at different lengths, some before the limit
        lengths = {len(reply) for reply in eager[0]}
        assert len(lengths) >= 3 and min(lengths) < policy.max_response_length
        assert sample(policy, "static", temperature, share_prefix, seed=6)[0] != static[0]  # the draws matter


def test_static_log_probs_are_the_learners(policy, stops):
    responses, logps = sample(policy, "static", 1.0)
    learner, mask, _ = policy.logprobs(PROMPTS, responses, temperature=1.0)
    for row, (reply, logp) in enumerate(zip(responses, logps)):
        assert mask[row].sum() == len(reply)
        assert learner[row, : len(reply)].tolist() == pytest.approx(logp, abs=1e-4)


def test_shapes_are_bucketed_so_a_run_builds_a_handful(policy):
    policy.decoding = "static"
    policy.__dict__["decoder"] = None
    try:
        policy.sample([[1, 2, 3]] * 5, 1.0)  # 5 rows -> 8, width 3 -> 4 columns + 6 for the reply
        for rows in ([[1, 2, 3]] * 3, [[1, 2, 3, 4]] * 4, [[5, 6, 7]] * 4):  # 3-4 rows, widths 3-4: one more shape
            policy.sample(rows, 1.0)
        assert list(policy.decoder.steps) == [(8, 10), (4, 10)]  # the smaller shape views the larger's storage
    finally:
        policy.decoding = "eager"
    assert [bucket(n) for n in (1, 2, 3, 4, 5, 128, 129)] == [1, 2, 4, 4, 8, 128, 256]


def test_the_sampling_copy_follows_the_trained_weights(policy):
    copy = SamplingCopy(torch.bfloat16)

    def equal_to_training() -> bool:
        weights = copy.of(policy).state_dict()
        return all(torch.equal(weights[name], value.to(torch.bfloat16))
                   for name, value in policy.generation_weights().items())

    assert equal_to_training()
    parameter = next(policy.model.parameters())
    before = parameter.detach().clone()
    optimizer = torch.optim.AdamW(policy.model.parameters(), lr=1e-2)
    policy.model.get_input_embeddings().weight.sum().backward()
    optimizer.step()  # in place: the version counters move and the next call copies again
    try:
        assert equal_to_training()
    finally:
        with torch.no_grad():
            parameter.copy_(before)
        policy.model.zero_grad(set_to_none=True)


def test_the_decoding_switch_refuses_what_the_device_cannot_run():
    from ecpo_train.runtime.config import make_config

    cpu = torch.device("cpu")
    assert resolve_decoding("auto", cpu) == "eager"
    assert resolve_decoding("static", cpu) == "static"
    assert resolve_decoding("auto", torch.device("cuda")) == "graph"
    with pytest.raises(ValueError, match="needs a CUDA device"):
        resolve_decoding("graph", cpu)
    for bad in ({"decoding": "fast"}, {"decoding": "graph", "device": "cpu"}):
        with pytest.raises(ValueError, match="decoding"):
            make_config({"policy": "tabular", **bad})


def test_the_config_key_reaches_the_policy_and_the_cpu_samples_in_float32(tiny_model_dir):
    from ecpo_train.runtime.builders import build_policy
    from ecpo_train.runtime.config import make_config

    for decoding, expected in (("auto", "eager"), ("static", "static")):
        policy = build_policy(make_config({"model": str(tiny_model_dir), "device": "cpu", "decoding": decoding,
                                           "mixed_precision": "bf16", "env_id": "ecpo/ALFWorldGen-v0"}))
        assert policy.decoding == expected
        assert policy.sampling_model() is policy.model  # no bf16 copy on the CPU: the model samples as it is


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_graphed_decoding_samples_what_uncaptured_steps_sample(tiny_model_dir):
    """On a GPU, bf16 sampling weights (as under mixed_precision=bf16): the graph replays the same kernels as the
    uncaptured static step, so tokens are equal and log-probs equal to 1e-3; against the learner's recomputation
    (float32 master weights under bf16 autocast) the log-probs agree to the bf16 tolerance, 0.05 nats on average."""
    from ecpo_train.policies.llm import TransformersPolicy
    from ecpo_train.policies.scaling import enable_autocast

    policy = TransformersPolicy(str(tiny_model_dir), env_name="ecpo/ALFWorldGen-v0", max_response_length=16,
                                device="cuda", decoding="graph")
    enable_autocast(policy.model, "bf16")
    policy.set_sampling_dtype(torch.bfloat16)
    runs = []
    for decoding in ("static", "graph", "graph"):  # the second graphed call replays the graphs the first captured
        if decoding != policy.decoding:
            policy.decoding = decoding
            policy.__dict__["decoder"] = None
        torch.manual_seed(3)
        runs.append(policy.sample(PROMPTS, 1.0))
    assert policy.decoder.graphs and all(step.graph is not None for step in policy.decoder.steps.values())
    for tokens, logps in runs[1:]:
        assert tokens == runs[0][0]
        for mine, theirs in zip(logps, runs[0][1]):
            assert mine == pytest.approx(theirs, abs=1e-3)
    learner, mask, _ = policy.logprobs(PROMPTS, runs[2][0], temperature=1.0)
    sampled = torch.zeros_like(learner)
    for row, logp in enumerate(runs[2][1]):
        sampled[row, : len(logp)] = torch.tensor(logp, device=learner.device)
    assert float(((learner - sampled).abs() * mask).sum() / mask.sum()) < 0.05


def test_scoring_with_fast_sampling_picks_what_eager_scoring_picks(tiny_model_dir):
    """policy_mode=score: with decoding other than eager, sampling scores up to 128 distinct contexts per packed
    forward (not 8) on the sampling weights; the same draws pick the same actions with the same log-probs."""
    from ecpo_train.policies.base import StepContext
    from ecpo_train.policies.scoring import ScoringPolicy

    scorer = ScoringPolicy(str(tiny_model_dir), env_name="ecpo/DivergentAnchor-v0", history_length=0,
                           prompt_style="compact")
    doors = ["open red door", "open blue door", "open green door", "open the small yellow door on the left"]
    contexts = [StepContext(env_name="ecpo/DivergentAnchor-v0", task=f"walk through all {n} rooms", step_count=0,
                            history=[], observation=f"room 1/{n}. doors: red, blue.",
                            admissible_actions=doors[: 2 + n % 3], state_key=f"c{n}", draw=(n * 0.37) % 1.0)
                for n in range(2, 14)]  # 12 distinct contexts: two batches eagerly, one packed batch otherwise
    outputs = {}
    for decoding in ("eager", "static"):
        scorer.decoding = decoding
        outputs[decoding] = scorer.act(contexts, temperature=1.0)
    assert outputs["static"].response_ids == outputs["eager"].response_ids
    assert outputs["static"].prompt_ids == outputs["eager"].prompt_ids
    for mine, theirs in zip(outputs["static"].logprobs, outputs["eager"].logprobs):
        assert mine == pytest.approx(theirs, abs=1e-5)
