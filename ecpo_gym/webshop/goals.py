"""WebShop goals (``docs/environments.md``): synthetic and human goals, price ceilings, shuffle and splits.

Unlike the original, every random draw here comes from a ``random.Random`` seeded by the caller, so the
same seed gives the same instructions, ceilings and order in every process (the original samples price
ceilings before seeding, so its instruction texts change between runs).
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ecpo_gym.kwargs import shown
from ecpo_gym.webshop.products import Product

PRICE_RANGE: tuple[int, ...] = tuple(range(10, 1000, 10))
NO_PRICE_CEILING = 1000000.0
GOAL_SHUFFLE_SEED = 233
SPLITS = ("all", "test", "eval", "train")


@dataclass
class Goal:
    """What the agent is asked to buy, and what the reward compares the purchase against."""

    asin: str
    category: str
    query: str
    name: str
    product_category: str
    instruction_text: str
    attributes: list[str]
    price_upper: float
    goal_options: dict[str, str] | list[str]
    weight: float = 1.0


def sample_price_ceiling(price: float, rng: random.Random) -> float:
    """First four ``PRICE_RANGE`` values above ``price``; the larger of two drawn without replacement."""
    candidates = [p for p in PRICE_RANGE if p > price][:4]
    if len(candidates) < 2:
        return NO_PRICE_CEILING
    return float(max(rng.sample(candidates, 2)))


def price_suffix(price_upper: float) -> str:
    return "" if price_upper >= NO_PRICE_CEILING else f", and price lower than {price_upper:.2f} dollars"


def synthetic_goals(products: Sequence[Product], rng: random.Random) -> list[Goal]:
    """One goal per option combination of each product with a synthetic instruction, weighted by rarity.

    The price ceiling is drawn once per product, so all of a product's goals share it (as in the original)."""
    goals: list[Goal] = []
    for product in products:
        if product.instruction_text is None or not product.instruction_attributes:
            continue
        price_upper = sample_price_ceiling(product.purchase_price, rng)
        names = sorted(product.options)
        combos = itertools.product(*(product.options[n] for n in names)) if names else [()]
        for combo in combos:
            goal_options = dict(zip(names, combo))
            text = product.instruction_text
            if goal_options:
                text += " with " + ", and ".join(f"{k}: {v}" for k, v in goal_options.items())
            goals.append(Goal(
                asin=product.asin, category=product.category, query=product.query, name=product.title,
                product_category=product.product_category, instruction_text=text + price_suffix(price_upper),
                attributes=list(product.instruction_attributes), price_upper=price_upper,
                goal_options=goal_options,
            ))
    counts = Counter(a for goal in goals for a in goal.attributes)
    for goal in goals:
        goal.weight = sum(1.0 / counts[a] for a in goal.attributes) / len(goal.attributes)
    return goals


def human_goals(products: Sequence[Product], rng: random.Random) -> list[Goal]:
    """One goal per human instruction entry with non-empty ``instruction_attributes`` (weight 1)."""
    goals: list[Goal] = []
    for product in products:
        for entry in product.human_instructions:
            attributes = list(entry.get("instruction_attributes") or [])
            if not attributes:
                continue
            price_upper = sample_price_ceiling(product.purchase_price, rng)
            text = str(entry.get("instruction", "")).strip(".")
            goals.append(Goal(
                asin=product.asin, category=product.category, query=product.query, name=product.title,
                product_category=product.product_category, instruction_text=text + price_suffix(price_upper),
                attributes=attributes, price_upper=price_upper,
                goal_options=list(entry.get("instruction_options") or []),
            ))
    return goals


def build_goals(products: Sequence[Product], *, human: bool = False, seed: int = 42,
                shuffle_seed: int | None = GOAL_SHUFFLE_SEED) -> list[Goal]:
    """Goals in WebShop's order: built, then shuffled with ``shuffle_seed`` (233 as the original; verl-agent
    uses its env seed). ``seed`` drives the price-ceiling draws."""
    rng = random.Random(seed)
    goals = human_goals(products, rng) if human else synthetic_goals(products, rng)
    if shuffle_seed is not None:
        random.Random(shuffle_seed).shuffle(goals)
    return goals


def split_indices(num_goals: int, split: str, *, convention: str = "original",
                  full_catalogue: bool = True) -> range:
    """Goal indices of a split.

    ``original``: with the full catalogue test = [0, 500), eval = [500, 1500), train = [1500, n); with a
    ``num_products`` subset every split is all goals. ``verl``: test = [0, 500), train = [500, n), no eval.
    """
    if split not in SPLITS:
        raise ValueError(f"split={shown(split)}; expected one of {SPLITS}")
    if split == "all":
        return range(num_goals)
    if convention == "original":
        if not full_catalogue:
            return range(num_goals)
        bounds = {"test": (0, 500), "eval": (500, 1500), "train": (1500, num_goals)}
    elif convention == "verl":
        if split == "eval":
            raise ValueError("the verl convention has no eval split (test = first 500, train = the rest)")
        bounds = {"test": (0, 500), "train": (500, num_goals)}
    else:
        raise ValueError(f"convention={shown(convention)}; expected 'original' or 'verl'")
    lo, hi = bounds[split]
    return range(min(lo, num_goals), min(max(hi, lo), num_goals))


def goal_summary(goal: Goal) -> dict[str, Any]:
    """A JSON-friendly view of a goal (for info dicts and logs)."""
    return {"asin": goal.asin, "query": goal.query, "name": goal.name, "price_upper": goal.price_upper,
            "attributes": list(goal.attributes), "goal_options": goal.goal_options}
