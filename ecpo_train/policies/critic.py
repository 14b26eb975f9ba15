"""The learned critic of the PPO baseline (the paper's actor-critic comparison; critic lr 1e-5 in App. A).

Two critics with one interface, ``values(prompt_ids, state_keys) -> [rows]``:
``TabularCritic`` keeps one value per ``state_key`` (lazily created, zero-initialised) for the tabular
policy; ``LLMValueCritic`` is a causal-LM backbone with a linear value head read at the last prompt token.
``critic_update`` fits the critic to the value targets of the ``ppo`` credit estimator (GAE, eq. gae, in
``ecpo_train/core/credit/``; mean squared error). The critic-free estimators (GRPO, RLOO, GiGPO, ECPO) never
touch this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch


class TabularCritic(torch.nn.Module):
    """V(s) as one parameter per ``state_key``, created on first sight with value 0."""

    def __init__(self, initial_capacity: int = 4096) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.zeros(int(initial_capacity)))
        self.index: dict[str, int] = {}
        self._replaced: list[torch.nn.Parameter] = []

    def _slot(self, state_key: str) -> int:
        slot = self.index.get(state_key)
        if slot is None:
            slot = self.index[state_key] = len(self.index)
            if slot >= self.table.numel():
                self._replaced.append(self.table)
                self.table = torch.nn.Parameter(torch.cat([self.table.data, torch.zeros_like(self.table.data)]))
        return slot

    def values(self, prompt_ids: Sequence[Sequence[int]], state_keys: Sequence[str]) -> torch.Tensor:
        slots = torch.as_tensor([self._slot(k) for k in state_keys], dtype=torch.long)
        return self.table[slots]

    def grow_optimizer_state(self, optimizer: torch.optim.Optimizer) -> None:
        from ecpo_train.policies.tabular import swap_grown_parameter

        swap_grown_parameter(optimizer, self._replaced, self.table)
        self._replaced = []

    def get_extra_state(self) -> Any:
        return {"index": list(self.index.items())}

    def set_extra_state(self, state: Any) -> None:
        self.index = {str(k): int(v) for k, v in state["index"]}

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):  # type: ignore[override]
        stored = state_dict.get(prefix + "table")
        if stored is not None and stored.shape != self.table.shape:
            self._replaced.append(self.table)  # an optimizer built before loading is re-pointed later
            self.table = torch.nn.Parameter(torch.zeros_like(stored))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


class LLMValueCritic(torch.nn.Module):
    """A causal-LM backbone with a linear value head on the hidden state of the last prompt token."""

    def __init__(self, model_name_or_path: str, *, pad_token_id: int, dtype: torch.dtype = torch.float32,
                 device: str = "cpu") -> None:
        super().__init__()
        from transformers import AutoModel

        self.backbone = AutoModel.from_pretrained(model_name_or_path, dtype=dtype).to(device)
        hidden = int(self.backbone.config.hidden_size)
        self.head = torch.nn.Linear(hidden, 1, dtype=dtype, device=device)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)
        self.pad_token_id = int(pad_token_id)
        self.device_name = device

    def values(self, prompt_ids: Sequence[Sequence[int]], state_keys: Sequence[str]) -> torch.Tensor:
        width = max(len(p) for p in prompt_ids)
        ids = torch.full((len(prompt_ids), width), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros(len(prompt_ids), width, dtype=torch.long)
        for row, p in enumerate(prompt_ids):
            ids[row, : len(p)] = torch.as_tensor(list(p), dtype=torch.long)
            attention[row, : len(p)] = 1
        ids, attention = ids.to(self.device_name), attention.to(self.device_name)
        hidden = self.backbone(input_ids=ids, attention_mask=attention).last_hidden_state
        last = attention.sum(dim=1) - 1
        return self.head(hidden[torch.arange(len(prompt_ids)), last]).squeeze(-1).float()

    def grow_optimizer_state(self, optimizer: torch.optim.Optimizer) -> None:
        """Fixed-size parameters: nothing to grow."""


@torch.no_grad()
def critic_values(critic: TabularCritic | LLMValueCritic, prompt_ids: Sequence[Sequence[int]],
                  state_keys: Sequence[str], micro_batch_size: int) -> np.ndarray:
    """``V(s)`` of every row, ``micro_batch_size`` rows at a time (what an estimator that needs values takes)."""
    return np.concatenate([critic.values(prompt_ids[i : i + micro_batch_size], state_keys[i : i + micro_batch_size])
                           .cpu().numpy() for i in range(0, len(state_keys), micro_batch_size)])


def critic_update(
    critic: TabularCritic | LLMValueCritic,
    optimizer: torch.optim.Optimizer,
    prompt_ids: Sequence[Sequence[int]],
    state_keys: Sequence[str],
    value_targets: np.ndarray,
    *,
    mini_batch_size: int,
    micro_batch_size: int,
    max_grad_norm: float,
    generator: np.random.Generator,
    epochs: int = 1,
) -> dict[str, float]:
    """Fit V to the GAE value targets: mean over rows of 0.5 (V(s) - target)^2, with accumulation."""
    targets = torch.as_tensor(np.asarray(value_targets), dtype=torch.float32)
    n_rows = len(targets)
    losses = []
    for _ in range(epochs):
        order = generator.permutation(n_rows)
        for start in range(0, n_rows, mini_batch_size):
            mini = order[start : start + mini_batch_size]
            optimizer.zero_grad(set_to_none=True)
            total = 0.0
            for micro_start in range(0, len(mini), micro_batch_size):
                rows = mini[micro_start : micro_start + micro_batch_size]
                predicted = critic.values([prompt_ids[i] for i in rows], [state_keys[i] for i in rows])
                loss = 0.5 * ((predicted - targets[rows].to(predicted.device)) ** 2).sum() / len(mini)
                loss.backward()
                total += float(loss.detach())
            critic.grow_optimizer_state(optimizer)
            torch.nn.utils.clip_grad_norm_(list(critic.parameters()), max_grad_norm)
            optimizer.step()
            losses.append(total)
    return {"value_loss": float(np.mean(losses)) if losses else 0.0}
