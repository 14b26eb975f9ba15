"""The scripted shopper: search the goal's query, open the goal's target product, pick its options, buy.

``expert_actions`` plans from the catalogue alone (no env stepping): it finds the results page that lists
the target for the goal's query (paging with ``Next >``) and falls back to searching the product's title
when the query does not rank the target in the top 50. On a generated goal the plan scores 1.
"""

from __future__ import annotations

from collections.abc import Mapping

from ecpo_gym.webshop.goals import Goal
from ecpo_gym.webshop.pages import PRODUCT_WINDOW, Shop
from ecpo_gym.webshop.search import normalize_query


def goal_option_values(goal: Goal) -> list[str]:
    if isinstance(goal.goal_options, Mapping):
        return [str(v) for v in goal.goal_options.values()]
    return [str(v) for v in goal.goal_options]


def expert_actions(shop: Shop, goal: Goal) -> list[str]:
    """The action strings that buy ``goal``'s target product with the goal's options."""
    product = shop.products.get(goal.asin)
    if product is None:
        raise ValueError(f"goal target {goal.asin} is not in the catalogue")
    for query in (goal.query, normalize_query(product.title)):
        if not query.strip():
            continue
        hits = shop.search_results(normalize_query(query))
        if goal.asin in hits:
            page = hits.index(goal.asin) // PRODUCT_WINDOW + 1
            break
    else:
        raise ValueError(f"neither the goal query nor the title of {goal.asin} retrieves it")
    actions = [f"search[{query}]"] + ["click[next >]"] * (page - 1) + [f"click[{goal.asin.lower()}]"]
    offered = {v for values in product.options.values() for v in values}
    actions += [f"click[{value}]" for value in goal_option_values(goal) if value in offered]
    return actions + ["click[buy now]"]


def expert_actions_for_task(env, task_id: str) -> list[str]:
    """The scripted shopper's actions for a task of a ``WebShopEnv`` (``env.unwrapped`` is used)."""
    base = env.unwrapped
    return expert_actions(base.shop, base.goal_of(task_id))
