"""The one candidate chooser: how every policy that picks among admissible commands turns scores into a choice.

The text policy, the LLM scoring policy (``policy_mode=score``) and the tabular policy each give one score per
candidate of a step (a logit); this module is what they do with it, so the three mean the same thing by a
temperature, a random stream and an exploration share:

- **The distribution.** ``pi(a | s) = softmax_a(score(a) / T)`` at ``T > 0``, mixed with the uniform distribution
  when an exploration share ``eps > 0`` is set: ``(1 - eps) pi + eps / |A|`` (``log_policy``, in log space: exact
  and differentiable; the learner's log-probs and the KL are those of the mixture).
- **Temperature ``T <= 0`` is greedy, everywhere**: the choice is the highest score, ties to the lowest index (the
  first candidate in the order the step lists them); ``distribution`` is then that one-hot. The log-prob a greedy
  choice is stored and learned under is the ``T = 1`` one (``log_policy`` reads ``T <= 0`` as 1), as a learner
  asked for ``T <= 0`` would otherwise divide by zero.
- **One uniform per sampled decision, by inverse CDF** (``inverse_cdf_index``): the uniform is the step's
  common-random-number draw when it has one (``StepContext.draw``, set by ``collect_rollout(draws_seed=...)``),
  else one ``float64`` uniform from the policy's own seeded ``torch.Generator`` (never torch's global stream, so
  what else runs in the process does not change the choices, and the generator's state, saved in checkpoints,
  is the whole sampling state). A greedy choice takes no uniform. Two policies fed the same uniforms (the same
  draws, or generators with the same seed and the same number of sampled decisions before) choose the same
  candidate wherever their cumulative distributions put the uniform in the same interval: paired comparisons share
  their randomness.
"""

from __future__ import annotations

import math

import torch

from ecpo_train.policies.base import inverse_cdf_index


def log_policy(scores: torch.Tensor, temperature: float, epsilon: float = 0.0) -> torch.Tensor:
    """``log pi`` over the last dimension of ``scores`` (module docstring): the log-softmax of ``scores / T``
    (``T <= 0``: of ``scores``), mixed with the uniform over the last dimension's candidates when ``epsilon > 0``
    (padding entries of ``-inf`` are only supported without the mixture)."""
    logp = torch.log_softmax(scores / temperature if temperature > 0 else scores, dim=-1)
    eps = float(epsilon)
    if eps <= 0:
        return logp
    uniform = torch.full_like(logp, math.log(eps / scores.shape[-1]))
    return torch.logaddexp(logp + math.log1p(-eps), uniform)


def greedy_index(scores: torch.Tensor) -> int:
    """The highest-scoring candidate of a 1-D ``scores``; ties go to the lowest index."""
    return int(torch.argmax(scores))


def distribution(scores: torch.Tensor, temperature: float, epsilon: float = 0.0) -> torch.Tensor:
    """``pi`` over a 1-D ``scores`` at ``temperature``: the (mixed) tempered softmax, or at ``T <= 0`` the one-hot of
    the greedy choice (what ``choose`` then picks, with probability 1)."""
    if temperature <= 0:
        return torch.nn.functional.one_hot(torch.tensor(greedy_index(scores)), scores.shape[-1]).float()
    if epsilon > 0:
        return log_policy(scores, temperature, epsilon).exp()
    return torch.softmax(scores / temperature, dim=-1)


def uniform(generator: torch.Generator) -> float:
    """One uniform in [0, 1) from ``generator`` (one per sampled decision)."""
    return float(torch.rand((), generator=generator, dtype=torch.float64))


def pick(scores: torch.Tensor, logp: torch.Tensor, temperature: float, *, draw: float | None,
         generator: torch.Generator) -> int:
    """The index chosen from a 1-D ``scores`` whose log-policy is ``logp`` (``log_policy``): greedy at ``T <= 0``,
    else the inverse CDF of ``draw`` (a step's common random number) or, without one, of a uniform from
    ``generator``."""
    if temperature <= 0:
        return greedy_index(scores)
    return inverse_cdf_index(logp.exp(), uniform(generator) if draw is None else draw)


def choose(scores: torch.Tensor, temperature: float, *, draw: float | None, generator: torch.Generator,
           epsilon: float = 0.0) -> tuple[int, torch.Tensor]:
    """``(index, log pi)`` for one step's 1-D candidate ``scores``: the choice (``pick``) and the log-policy it is
    stored and learned under (``log_policy``; the stored log-prob is ``log pi[index]``)."""
    logp = log_policy(scores, temperature, epsilon)
    return pick(scores, logp, temperature, draw=draw, generator=generator), logp


def own_generator(policy: object) -> torch.Generator | None:
    """The policy's own seeded generator, the stream its sampled choices draw from (``None``: a policy that has none,
    an LLM writing its text)."""
    own = getattr(policy, "generator", None)
    return own if isinstance(own, torch.Generator) else None


def seed_sampling(policy: object, seed: int) -> None:
    """Seed every stream the policy samples from: torch's and its own generator (:func:`own_generator`)."""
    torch.manual_seed(int(seed))
    own = own_generator(policy)
    if own is not None:
        own.manual_seed(int(seed))
