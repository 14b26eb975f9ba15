"""Which validation episodes belong to the tasks a run trained on and which to the others.

A preset with a training pool (``alfworld_cpu_pool``) validates on its pool's tasks (the primary endpoint) and on
unseen tasks (secondary). Every report that splits a validation -- ``registered_endpoint`` for a finished run
folder, ``gpu_comparison`` for the GPU pairs, ``comparison_seeds`` over seeds -- takes the split from here, so
the parts carry one pair of names everywhere. No scipy: the GPU machine imports this too.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

PARTS = ("trained", "unseen")


def label(part: str) -> str:
    """How a report heads a part: "trained tasks", "unseen tasks" (other names as they are)."""
    return f"{part} tasks" if part in PARTS else part


def split(task_ids: Sequence[str], trained: Collection[str]) -> dict[str, list[int]]:
    """The positions of the episodes of trained tasks and of the others, in validation order; a part that holds
    no episode is left out."""
    positions: dict[str, list[int]] = {part: [] for part in PARTS}
    for i, task in enumerate(task_ids):
        positions["trained" if task in trained else "unseen"].append(i)
    return {part: idx for part, idx in positions.items() if idx}
