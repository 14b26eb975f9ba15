"""The interface every policy offers the rollout and the learner.

A policy sees one ``StepContext`` per live environment copy and answers with a ``PolicyOutput``: the
text sent to the environment plus the token ids of the prompt and of the response and the response's
per-token log-probs under the sampling distribution. The learner later asks ``logprobs`` for the same
rows (with gradients) to form the ratio of eq. ecpo_objective. The LLM policy's tokens are real tokens;
the tabular policy's "prompt" is the list of parameter slots of the state's admissible actions and its
"response" is the one-token index of the chosen action, so both share the same objective code.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch


@dataclass
class StepContext:
    """What the agent knows at one step of one environment copy."""

    env_name: str  # prompt family: "alfworld", "webshop", "searchqa", "diagnostic", ...
    task: str
    step_count: int  # steps already taken in this episode
    history: list[tuple[str, str]]  # (observation, action text) of earlier steps, oldest first
    observation: str
    admissible_actions: list[str]
    state_key: str
    # A uniform in [0, 1) for this step's choice (common random numbers, ``collect_rollout(draws_seed=...)``);
    # None: the policy's own random stream. Policies choosing among candidates pick by ``inverse_cdf_index``
    # (``policies.choose``, the one candidate chooser).
    draw: float | None = None


def inverse_cdf_index(probs: torch.Tensor, draw: float) -> int:
    """The candidate a uniform ``draw`` picks from ``probs`` (inverse CDF, candidates in their given order).

    Two policies fed the same draw choose the same candidate wherever their cumulative distributions put the
    draw in the same interval, so validating two checkpoints with shared draws pairs their episodes (common
    random numbers). Candidates of probability 0 are never picked."""
    cdf = torch.cumsum(probs.detach().double().flatten(), 0)
    target = torch.tensor([draw * float(cdf[-1])], dtype=torch.float64)
    return min(int(torch.searchsorted(cdf, target, right=True)), len(cdf) - 1)


@dataclass
class PolicyOutput:
    """A batch of sampled actions, aligned with the contexts that produced them."""

    actions: list[str]  # what each environment copy receives
    responses: list[str]  # raw response text (the action itself for the tabular policy)
    prompt_ids: list[list[int]] = field(default_factory=list)
    response_ids: list[list[int]] = field(default_factory=list)
    logprobs: list[list[float]] = field(default_factory=list)  # per response token, at the sampling temperature


class Policy(torch.nn.Module, abc.ABC):
    """A trainable policy: ``act`` samples, ``logprobs`` scores stored rows with gradients."""

    @abc.abstractmethod
    def act(self, contexts: Sequence[StepContext], temperature: float = 1.0) -> PolicyOutput:
        """Sample one action per context (no gradients)."""

    @abc.abstractmethod
    def logprobs(
        self,
        prompt_ids: Sequence[Sequence[int]],
        response_ids: Sequence[Sequence[int]],
        *,
        temperature: float = 1.0,
        with_entropy: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """``(token_logp [rows, L], mask [rows, L], entropy [rows, L] | None)`` of the stored responses.

        ``L`` is the longest response of these rows; ``mask`` is 1 on response tokens, 0 on padding.
        """

    @abc.abstractmethod
    def frozen_copy(self) -> Policy:
        """A detached copy for the frozen reference pi_ref of eq. ecpo_objective."""

    def grow_optimizer_state(self, optimizer: torch.optim.Optimizer) -> None:
        """Called before each optimizer step; policies with lazily created parameters resize its state."""

    def sync_generation_weights(self) -> None:
        """Called after each policy update; a policy sampling through a separate engine (vLLM) syncs it here."""
