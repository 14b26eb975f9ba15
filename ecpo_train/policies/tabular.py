"""A tabular softmax policy over ``(state_key -> admissible canonical actions)`` for fast CPU experiments.

One logit per ``(state_key, action)`` pair, created lazily the first time the pair is seen and
initialised to zero (so an unseen state starts uniform). pi(a | s) is a softmax over the state's
admissible actions only. The policy speaks the same row format as the LLM policy: the "prompt" of a
step is the list of parameter slots of its admissible actions and the "response" is one token, the
position of the chosen action in that list, so the clipped objective of eq. ecpo_objective applies
unchanged with every action a one-token sequence. The choice is ``policies.choose``'s (the one candidate chooser:
``T <= 0`` is greedy, ties to the first admissible action; else a uniform from the step's common-random-number
draw or the policy's own seeded generator, by inverse CDF).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch

from ecpo_train.policies.base import Policy, PolicyOutput, StepContext
from ecpo_train.policies.choose import distribution, log_policy, pick


def swap_grown_parameter(optimizer: torch.optim.Optimizer, old: list[torch.nn.Parameter],
                         new: torch.nn.Parameter) -> None:
    """Replace any parameter of ``old`` in ``optimizer`` by ``new`` (a longer 1-D table), zero-padding its state."""
    if not old:
        return
    stale = {id(p) for p in old}
    for group in optimizer.param_groups:
        for i, param in enumerate(group["params"]):
            if id(param) in stale:
                group["params"][i] = new
                state = optimizer.state.pop(param, None)
                if state:
                    for name, value in state.items():
                        if torch.is_tensor(value) and value.dim() == 1 and value.numel() < new.numel():
                            state[name] = torch.cat([value, value.new_zeros(new.numel() - value.numel())])
                    optimizer.state[new] = state


class TabularSoftmaxPolicy(Policy):
    """Softmax over lazily created, zero-initialised logits per ``(state_key, action)``."""

    def __init__(self, seed: int = 0, initial_capacity: int = 4096) -> None:
        super().__init__()
        self.logits = torch.nn.Parameter(torch.zeros(int(initial_capacity)))
        self.slots: dict[tuple[str, str], int] = {}
        self._replaced: list[torch.nn.Parameter] = []
        self.generator = torch.Generator().manual_seed(int(seed))

    # ------------------------------------------------------------------ slots
    def slot(self, state_key: str, action: str) -> int:
        """The parameter index of ``(state_key, action)``, created (zero logit) on first sight."""
        key = (state_key, action)
        index = self.slots.get(key)
        if index is None:
            index = len(self.slots)
            self.slots[key] = index
            if index >= self.logits.numel():
                self._grow(2 * self.logits.numel())
        return index

    def _grow(self, capacity: int) -> None:
        # A new Parameter (resizing .data in place would break autograd's cached leaf shape); the optimizer
        # is pointed at it in grow_optimizer_state.
        extra = capacity - self.logits.numel()
        self._replaced.append(self.logits)
        self.logits = torch.nn.Parameter(torch.cat([self.logits.data, self.logits.data.new_zeros(extra)]))

    def grow_optimizer_state(self, optimizer: torch.optim.Optimizer) -> None:
        """Point the optimizer at the grown logit table, padding its per-parameter state (Adam moments)."""
        swap_grown_parameter(optimizer, self._replaced, self.logits)
        self._replaced = []

    def _padded_logits(self, slot_lists: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """``[rows, K]`` logits of each row's admissible slots (slots beyond the table read 0) and a mask."""
        width = max((len(s) for s in slot_lists), default=1) or 1
        index = torch.zeros(len(slot_lists), width, dtype=torch.long)
        valid = torch.zeros(len(slot_lists), width, dtype=torch.bool)
        for row, slots in enumerate(slot_lists):
            if slots:
                index[row, : len(slots)] = torch.as_tensor(list(slots), dtype=torch.long)
                valid[row, : len(slots)] = True
        in_table = valid & (index < self.logits.numel())
        gathered = self.logits[index.clamp(max=self.logits.numel() - 1)]
        logits = torch.where(in_table, gathered, torch.zeros((), dtype=gathered.dtype))
        return logits.masked_fill(~valid, float("-inf")), valid

    # ------------------------------------------------------------------ Policy API
    @torch.no_grad()
    def act(self, contexts: Sequence[StepContext], temperature: float = 1.0) -> PolicyOutput:
        slot_lists = [[self.slot(c.state_key, a) for a in c.admissible_actions] for c in contexts]
        out = PolicyOutput(actions=[], responses=[])
        if not contexts:
            return out
        logits, _ = self._padded_logits(slot_lists)
        logp = log_policy(logits, temperature)
        for row, ctx in enumerate(contexts):
            if not ctx.admissible_actions:  # nothing admissible: send text the env will treat as invalid
                out.actions.append("")
                out.responses.append("")
                out.prompt_ids.append([])
                out.response_ids.append([])
                out.logprobs.append([])
                continue
            n = len(ctx.admissible_actions)
            k = pick(logits[row, :n], logp[row, :n], temperature, draw=ctx.draw, generator=self.generator)
            action = ctx.admissible_actions[k]
            out.actions.append(action)
            out.responses.append(action)
            out.prompt_ids.append(slot_lists[row])
            out.response_ids.append([k])
            out.logprobs.append([float(logp[row, k])])
        return out

    def logprobs(
        self,
        prompt_ids: Sequence[Sequence[int]],
        response_ids: Sequence[Sequence[int]],
        *,
        temperature: float = 1.0,
        with_entropy: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        logits, valid = self._padded_logits(prompt_ids)
        logp_all = log_policy(logits, temperature)
        chosen = torch.as_tensor([r[0] if r else 0 for r in response_ids], dtype=torch.long)
        mask = torch.as_tensor([1.0 if r else 0.0 for r in response_ids]).unsqueeze(-1)
        token_logp = logp_all.gather(1, chosen.unsqueeze(-1))
        token_logp = torch.where(mask > 0, token_logp, torch.zeros_like(token_logp))
        entropy = None
        if with_entropy:
            p = logp_all.exp()
            entropy = -(torch.where(valid, p * logp_all, torch.zeros_like(p))).sum(-1, keepdim=True)
        return token_logp, mask, entropy

    def action_probabilities(self, state_key: str, admissible_actions: Sequence[str],
                             temperature: float = 1.0) -> dict[str, float]:
        """pi(. | state) at ``temperature`` over the admissible actions (without creating slots; ``T <= 0``: the
        greedy one-hot, ``choose.distribution``)."""
        slots = [self.slots.get((state_key, a), self.logits.numel()) for a in admissible_actions]
        with torch.no_grad():
            logits, _ = self._padded_logits([slots])
            probs = distribution(logits[0], temperature)
        return {a: float(p) for a, p in zip(admissible_actions, probs)}

    def frozen_copy(self) -> TabularSoftmaxPolicy:
        ref = copy.deepcopy(self)
        ref.requires_grad_(False)
        return ref

    # ------------------------------------------------------------------ checkpointing
    def get_extra_state(self) -> Any:
        return {"slots": list(self.slots.items()), "generator": self.generator.get_state()}

    def set_extra_state(self, state: Any) -> None:
        """The slots and sampling stream :meth:`get_extra_state` saved; a damaged state is one ``ValueError`` saying
        what is wrong with it (not ``KeyError: 'slots'`` or ``invalid literal for int()``)."""
        try:
            slots = {tuple(key): index for key, index in state["slots"]}
            generator = state["generator"]
        except (KeyError, TypeError, ValueError):
            raise ValueError("the tabular policy's saved state is damaged: it needs 'slots', a list of (key, index) "
                             "pairs, and 'generator'; restore the checkpoint from a copy") from None
        if not all(type(i) is int and 0 <= i < len(slots) for i in slots.values()) or \
                len(set(slots.values())) != len(slots):
            raise ValueError("the tabular policy's saved state is damaged: its slot indices are not 0..N-1; restore "
                             "the checkpoint from a copy")
        if not isinstance(generator, torch.Tensor) or generator.dtype != torch.uint8:
            raise ValueError("the tabular policy's saved state is damaged: its generator state is not a byte tensor; "
                             "restore the checkpoint from a copy")
        self.slots = slots
        self.generator.set_state(generator)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):  # type: ignore[override]
        stored = state_dict.get(prefix + "logits")
        if stored is not None and stored.shape != self.logits.shape:
            self._replaced.append(self.logits)  # an optimizer built before loading is re-pointed later
            self.logits = torch.nn.Parameter(torch.zeros_like(stored))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
