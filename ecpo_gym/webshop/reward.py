"""WebShop's purchase reward (``docs/environments.md``): type, attribute, option and price scores combined.

``R = r_type * (n_att + n_opt + r_price) / (len(attributes) + len(goal_options) + 1)``; a purchase wins when
``R == 1``. Fuzzy matching is ``token_set_ratio`` on default-processed strings with a strict ``> 85``
threshold on the integer-rounded score, as thefuzz returned it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

from ecpo_gym.webshop.goals import Goal
from ecpo_gym.webshop.products import Product

FUZZY_THRESHOLD = 85
TITLE_LOW, TITLE_HIGH = 0.1, 0.2
CATEGORY_OVERLAP = 2
CATEGORY_SEPARATOR = "\u203a"

# WebShop's normalize.py colour words, in its order: normalisation returns the FIRST word that is a
# substring of the value, so the order is behaviour ("standard" -> "tan", "washed" -> "ash").
COLOR_SET: tuple[str, ...] = ("alabaster", "apricot", "aqua", "ash", "asphalt", "azure", "banana", "beige", "black", "blue", "blush", "bordeaux", "bronze", "brown", "burgundy", "camel", "camo", "caramel", "champagne", "charcoal", "cheetah", "chestnut", "chocolate", "christmas", "coffee", "cognac", "copper", "coral", "cranberry", "cream", "crystal", "dark", "denim", "eggplant", "elephant", "espresso", "fuchsia", "gold", "granite", "grape", "graphite", "grass", "gray", "green", "grey", "heather", "indigo", "ivory", "ivy", "khaki", "lavender", "lemon", "leopard", "light", "lilac", "lime", "magenta", "maroon", "mauve", "merlot", "midnight", "mint", "mocha", "multicolor", "mushroom", "mustard", "natural", "navy", "nude", "olive", "orange", "peach", "pewter", "pink", "plum", "purple", "rainbow", "red", "rose", "royal", "rust", "sand", "sapphire", "seashell", "silver", "skull", "slate", "steel", "stone", "stonewash", "sunflower", "tan", "taupe", "teal", "tiger", "turquoise", "violet", "walnut", "wheat", "white", "wine", "yellow")

OptionItem = str | tuple[str, ...]


def normalize_color(value: OptionItem) -> OptionItem:
    """First colour word contained in ``value``: a substring test for a string, an element-equality test for
    a ``(name, value)`` tuple; ``value`` unchanged when none matches."""
    for color in COLOR_SET:
        if color in value:
            return color
    return value


def fuzzy_score(a: Any, b: Any) -> int:
    """thefuzz-style ``token_set_ratio``: ``str()`` of each side, default-processed, rounded to an int."""
    return round(fuzz.token_set_ratio(str(a), str(b), processor=default_process))


def fuzzy_match(a: Any, b: Any) -> bool:
    return fuzzy_score(a, b) > FUZZY_THRESHOLD


def category_parts(path: str) -> set[str]:
    return {part.strip() for part in path.split(CATEGORY_SEPARATOR)}


def title_score(product_nouns: Sequence[str], goal_nouns: Sequence[str]) -> float:
    """``|set(Lp) & set(Lg)| / len(Lg)`` (duplicates counted in the denominator); 0.2 when ``Lg`` is empty."""
    if not goal_nouns:
        return TITLE_HIGH
    return len(set(product_nouns) & set(goal_nouns)) / len(goal_nouns)


def type_score(query_match: bool, category_match: bool, title: float) -> float:
    """r_type: 1, else 0.5 when no query/category/title (> 0.2) evidence; then 0.1 below 0.1; 0 at 0."""
    score = 1.0
    if not (query_match or category_match or title > TITLE_HIGH):
        score = 0.5
    if title < TITLE_LOW:
        score = 0.1
    if title == 0.0:
        score = 0.0
    return score


def attribute_matches(goal_attributes: Sequence[str], product: Product) -> int:
    """n_att: a goal attribute matches a product attribute (fuzzy), else a substring of title, bullets or
    description (lowercased)."""
    title = product.title.lower()
    bullets = " ".join(product.bullet_points).lower()
    description = product.description.lower()
    matched = 0
    for wanted in goal_attributes:
        if any(fuzzy_match(have, wanted) for have in product.attributes) or wanted in title or wanted in bullets or wanted in description:
            matched += 1
    return matched


def goal_option_items(goal_options: Mapping[str, str] | Sequence[Any]) -> list[OptionItem]:
    """A dict's ``(name, value)`` tuples, or the list itself (human goals)."""
    if isinstance(goal_options, Mapping):
        return [(str(k), str(v)) for k, v in goal_options.items()]
    return [tuple(o) if isinstance(o, list) else o for o in goal_options]


def option_matches(goal_options: Mapping[str, str] | Sequence[Any], selected: Mapping[str, str]) -> int:
    """n_opt: each goal item (colour-normalised) counts once if some chosen value matches it (> 85)."""
    chosen = [normalize_color(v) for v in selected.values()]
    matched = 0
    for item in goal_option_items(goal_options):
        wanted = normalize_color(item)
        if any(fuzzy_match(have, wanted) for have in chosen):
            matched += 1
    return matched


@dataclass(frozen=True)
class RewardBreakdown:
    score: float
    r_type: float
    n_att: int
    n_opt: int
    r_price: bool
    title_score: float
    query_match: bool
    category_match: bool

    @property
    def won(self) -> bool:
        return self.score == 1.0


def webshop_reward(product: Product, goal: Goal, selected: Mapping[str, str], price: float,
                   nouns: Callable[[str], Sequence[str]] | None = None) -> RewardBreakdown:
    """WebShop's purchase score in [0, 1] (the combination formula in the module docstring)."""
    if nouns is None:
        from ecpo_gym.webshop.nouns import title_nouns as nouns
    query_match = product.query == goal.query
    category_match = len(category_parts(product.product_category) & category_parts(goal.product_category)) \
        >= CATEGORY_OVERLAP
    title = title_score(nouns(product.title), nouns(goal.name))
    r_type = type_score(query_match, category_match, title)
    n_att = attribute_matches(goal.attributes, product)
    n_opt = option_matches(goal.goal_options, selected)
    r_price = price <= goal.price_upper
    total = r_type * (n_att + n_opt + int(r_price)) / (len(goal.attributes) + len(goal.goal_options) + 1)
    return RewardBreakdown(score=total, r_type=r_type, n_att=n_att, n_opt=n_opt, r_price=bool(r_price),
                           title_score=title, query_match=query_match, category_match=category_match)
