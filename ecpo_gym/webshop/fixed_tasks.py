"""The 100 fixed WebShop tasks used by ExpeL and later agent papers (``expel_webshop.fixed100.json``).

Each entry is ``{"session_idx": "fixed_<i>", "task": "<instruction> \\n[Search]\\n", "key": {"asin", "query",
"name", "goal_options": [values]}}``: the first 100 human goals of the full catalogue (WebShop's
``fixed_<i>`` sessions). The file does not hold the goal attributes the reward needs or the product
categories; those come from the loaded catalogue: the product (category, product_category) and its
``items_human_ins.json`` entry whose instruction is the task's (``instruction_attributes``), so
``WebShop-v0`` with ``task_source="fixed100"`` needs the full product file and the human-instruction file.
The price ceiling is read back from the instruction's ``"price lower than X dollars"`` suffix (none: no
ceiling).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ecpo_gym.kwargs import shown
from ecpo_gym.webshop.goals import NO_PRICE_CEILING, Goal
from ecpo_gym.webshop.products import WEBSHOP_DATA_URL, Product

FIXED_TASKS_FILE = "expel_webshop.fixed100.json"
_PRICE_SUFFIX = re.compile(r", and price lower than (\d+(?:\.\d+)?) dollars$")
_SEARCH_MARKER = "[Search]"
_WHITESPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class FixedTask:
    task_id: str
    instruction: str
    asin: str
    query: str
    name: str
    goal_options: tuple[str, ...]

    @property
    def price_upper(self) -> float:
        match = _PRICE_SUFFIX.search(self.instruction)
        return float(match.group(1)) if match else NO_PRICE_CEILING

    @property
    def base_instruction(self) -> str:
        """The instruction without the price suffix (the human instruction it was made from)."""
        return _PRICE_SUFFIX.sub("", self.instruction)


class MissingFixedTaskProducts(LookupError):
    """Some fixed tasks name products that the loaded catalogue does not hold."""

    def __init__(self, missing: list[FixedTask], catalogue_size: int) -> None:
        self.missing = missing
        shown = ", ".join(f"{t.task_id} ({t.asin})" for t in missing[:10])
        more = f" and {len(missing) - 10} more" if len(missing) > 10 else ""
        super().__init__(
            f"{len(missing)} fixed WebShop task(s) name products not in the loaded catalogue of "
            f"{catalogue_size} products: {shown}{more}. The fixed tasks come from the full catalogue "
            f"(items_shuffle.json, small=False; get it from {WEBSHOP_DATA_URL}); pass "
            f"missing_fixed_tasks='skip' to play only the tasks whose products are loaded."
        )


def _instruction_text(task_text: str) -> str:
    text = task_text.strip()
    text = text.removesuffix(_SEARCH_MARKER)
    return text.strip()


def load_fixed_tasks(path: str | os.PathLike) -> list[FixedTask]:
    """Parse the fixed-task file; a missing file or malformed entry is one clear error."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"WebShop fixed tasks not found: {path}. It is ExpeL's {FIXED_TASKS_FILE} (100 tasks); pass "
            f"fixed_tasks_file=... or put it in the WebShop data folder."
        )
    entries = json.loads(path.read_text(encoding="utf-8"))
    tasks = []
    for i, entry in enumerate(entries if isinstance(entries, list) else []):
        try:
            key = entry["key"]
            tasks.append(FixedTask(
                task_id=str(entry.get("session_idx") or f"fixed_{i}"), instruction=_instruction_text(entry["task"]),
                asin=str(key["asin"]), query=str(key.get("query", "")).lower().strip(), name=str(key.get("name", "")),
                goal_options=tuple(str(v) for v in key.get("goal_options") or []),
            ))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{path}: entry {i} is not a fixed task ({{session_idx, task, key{{asin, ...}}}}): "
                             f"{shown(exc)}") from None
    if not tasks:
        raise ValueError(f"{path} holds no fixed tasks (expected a JSON list of entries)")
    return tasks


def _squash(text: str) -> str:
    return _WHITESPACE.sub(" ", text).strip().lower()


def task_attributes(task: FixedTask, product: Product) -> list[str] | None:
    """``instruction_attributes`` of the product's human instruction that the task was made from, if loaded."""
    wanted = _squash(task.base_instruction)
    for entry in product.human_instructions:
        if _squash(str(entry.get("instruction", "")).strip(".")) == wanted:
            return list(entry.get("instruction_attributes") or [])
    return None


@dataclass
class FixedTaskGoals:
    """The fixed tasks played against one catalogue."""

    task_ids: list[str]
    goals: list[Goal]
    missing: list[FixedTask]  # product not in the catalogue (skipped)
    without_attributes: list[str]  # task ids whose human instruction was not found (no goal attributes)


def fixed_task_goals(tasks: list[FixedTask], by_asin: Mapping[str, Product], *,
                     skip_missing: bool = False) -> FixedTaskGoals:
    """Goals of the fixed tasks over the loaded catalogue ``by_asin``.

    Raises :class:`MissingFixedTaskProducts` when a product is missing, unless ``skip_missing``. A task whose
    human instruction is not among its product's loaded ``human_instructions`` gets no goal attributes (the
    reward then scores type, options and price only) and is listed in ``without_attributes``.
    """
    missing = [t for t in tasks if t.asin not in by_asin]
    if missing and not skip_missing:
        raise MissingFixedTaskProducts(missing, len(by_asin))
    result = FixedTaskGoals([], [], missing, [])
    for task in tasks:
        product = by_asin.get(task.asin)
        if product is None:
            continue
        attributes = task_attributes(task, product)
        if attributes is None:
            result.without_attributes.append(task.task_id)
        result.goals.append(Goal(
            asin=task.asin, category=product.category, query=task.query or product.query,
            name=task.name or product.title, product_category=product.product_category,
            instruction_text=task.instruction, attributes=attributes or [], price_upper=task.price_upper,
            goal_options=list(task.goal_options),
        ))
        result.task_ids.append(task.task_id)
    return result
