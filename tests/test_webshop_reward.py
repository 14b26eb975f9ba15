"""WebShop's reward and goal rules (``docs/environments.md``) on hand-built cases."""

import random
from collections import Counter

import pytest

from ecpo_gym.webshop.goals import (
    NO_PRICE_CEILING,
    Goal,
    build_goals,
    human_goals,
    sample_price_ceiling,
    split_indices,
)
from ecpo_gym.webshop.products import Product, parse_options, parse_price
from ecpo_gym.webshop.reward import (
    attribute_matches,
    fuzzy_match,
    fuzzy_score,
    normalize_color,
    option_matches,
    title_score,
    type_score,
    webshop_reward,
)


def make_product(**overrides) -> Product:
    fields = {"asin": "B000000001", "title": "Oak Console Table", "description": "A sturdy table for the hall.",
              "bullet_points": ["Solid wood top", "Easy assembly"], "price_values": [50.0], "price_tag": "$50.0",
              "options": {"color": ["black", "dark brown"], "size": ["large", "x-large"]},
              "attributes": ["solid wood", "easy assembly"], "category": "garden", "query": "console tables",
              "product_category": "Home \u203a Furniture \u203a Tables", "purchase_price": 50.0}
    fields.update(overrides)
    return Product(**fields)


def make_goal(**overrides) -> Goal:
    fields = {"asin": "B000000001", "category": "garden", "query": "console tables", "name": "Oak Console Table",
              "product_category": "Home \u203a Furniture \u203a Tables", "instruction_text": "i need a table",
              "attributes": ["solid wood"], "price_upper": 60.0, "goal_options": {"color": "dark brown"}}
    fields.update(overrides)
    return Goal(**fields)


# ---------------------------------------------------------------- type score
@pytest.mark.parametrize("query, category, title, expected", [
    (True, False, 1.0, 1.0),
    (False, True, 0.15, 1.0),      # category evidence keeps 1 while title >= 0.1
    (False, False, 0.25, 1.0),     # title > 0.2 is evidence on its own
    (False, False, 0.2, 0.5),      # exactly 0.2 is not > 0.2
    (False, False, 0.15, 0.5),
    (True, False, 0.05, 0.1),      # title < 0.1 overrides query evidence
    (False, False, 0.05, 0.1),
    (True, True, 0.0, 0.0),        # no shared noun at all
])
def test_type_score_thresholds(query, category, title, expected):
    assert type_score(query, category, title) == expected


def test_title_score_counts_duplicates_and_empty_goal():
    assert title_score(["chair"], ["chair", "chair"]) == 0.5
    assert title_score(["desk", "lamp"], ["lamp", "shade", "bulb", "cord"]) == 0.25
    assert title_score(["anything"], []) == 0.2


def test_title_score_uses_spacy_nouns():
    from ecpo_gym.webshop.nouns import title_nouns

    nouns = title_nouns("Wooden Console Table for the Living Room")
    assert "table" in nouns and "room" in nouns and "for" not in nouns and "the" not in nouns


# ---------------------------------------------------------------- colour normalisation and fuzzy matching
def test_normalize_color_strings_first_word_in_list_order():
    assert normalize_color("dark brown") == "brown"
    assert normalize_color("standard") == "tan"
    assert normalize_color("washed") == "ash"
    assert normalize_color("x-large") == "x-large"


def test_normalize_color_tuples_need_an_equal_element():
    assert normalize_color(("color", "black")) == "black"
    assert normalize_color(("color", "dark brown")) == ("color", "dark brown")


def test_fuzzy_threshold_is_strict_and_rounded():
    assert fuzzy_score("3 shelves", "4 shelves") == 89 and fuzzy_match("3 shelves", "4 shelves")
    assert fuzzy_match("small", "x-small") and fuzzy_match("x-small", "small")
    assert not fuzzy_match("", "")
    assert not fuzzy_match("2 pack", "3 pack")


def test_option_quirks_tuples_vs_lists():
    # synthetic (dict) goals compare against "size x large"-style strings: "large" matches ("size", "x-large")
    assert option_matches({"size": "x-large"}, {"size": "large"}) == 1
    # human (list) goals compare bare values
    assert option_matches(["x-small"], {"size": "small"}) == 1
    assert option_matches(["x-large"], {"size": "medium"}) == 0
    # colour normalisation: chosen "dark brown" -> "brown" matches ("color", "dark brown")
    assert option_matches({"color": "dark brown"}, {"color": "dark brown"}) == 1
    assert option_matches({"color": "black"}, {"color": "dark brown"}) == 0
    # each goal item counts once, whatever number of chosen values match it
    assert option_matches(["large"], {"a": "large", "b": "large"}) == 1
    assert option_matches([""], {"size": ""}) == 0


def test_attribute_matching_fuzzy_then_substrings():
    product = make_product(attributes=["solid woods"], title="Oak Table With Drawer",
                           bullet_points=["Easy assembly in minutes"], description="Made of reclaimed fir")
    assert attribute_matches(["solid wood"], product) == 1          # fuzzy against attributes
    assert attribute_matches(["with drawer"], product) == 1         # substring of the title
    assert attribute_matches(["easy assembly"], product) == 1       # substring of the bullets
    assert attribute_matches(["reclaimed fir"], product) == 1       # substring of the description
    assert attribute_matches(["glass top", "solid wood"], product) == 1


# ---------------------------------------------------------------- total
def nouns_by_split(title: str):
    return [w.lower() for w in title.split()]


def test_reward_total_formula_and_price_ceiling():
    product, goal = make_product(), make_goal(attributes=["solid wood", "glass top"],
                                              goal_options={"color": "dark brown", "size": "x-large"})
    full = webshop_reward(product, goal, {"color": "dark brown", "size": "x-large"}, 50.0, nouns_by_split)
    assert (full.r_type, full.n_att, full.n_opt, full.r_price) == (1.0, 1, 2, True)
    assert full.score == pytest.approx((1 + 2 + 1) / (2 + 2 + 1)) and not full.won
    at_ceiling = webshop_reward(product, make_goal(), {"color": "dark brown"}, 60.0, nouns_by_split)
    assert at_ceiling.score == 1.0 and at_ceiling.won
    above = webshop_reward(product, make_goal(), {"color": "dark brown"}, 60.01, nouns_by_split)
    assert above.score == pytest.approx(2 / 3) and not above.r_price


def test_reward_type_score_scales_everything():
    other = make_product(title="Blue Yoga Mat", query="yoga mats", product_category="Sports \u203a Yoga")
    result = webshop_reward(other, make_goal(), {}, 50.0, nouns_by_split)
    assert result.title_score == 0.0 and result.r_type == 0.0 and result.score == 0.0
    related = make_product(title="Console Desk Lamp Stand Set", query="desk lamps", attributes=["led bulb"],
                           bullet_points=["Bright light"], description="",
                           product_category="Home \u203a Furniture \u203a Lamps")
    result = webshop_reward(related, make_goal(name="Oak Console Table Extra"), {"color": "black"}, 10.0,
                            nouns_by_split)
    # category overlap {Home, Furniture} >= 2, title 1/4 -> r_type 1; attributes 0, options 0, price 1
    assert result.category_match and result.r_type == 1.0
    assert result.score == pytest.approx(1 / 3)


def test_reward_with_spacy_on_the_goal_product_wins():
    product = make_product()
    assert webshop_reward(product, make_goal(), {"color": "dark brown"}, 50.0).won


# ---------------------------------------------------------------- prices, options, goals
def test_parse_price_rules():
    assert parse_price("$1,847.00") == ([1847.0], "$1847.0")
    assert parse_price("$34.00") == ([34.0], "$34.0")
    assert parse_price("") == ([100.0], "$100.0")
    assert parse_price("$19.99$27.99") == ([19.99, 27.99], "$19.99 to $27.99")
    assert parse_price("$1.00$2.00$3.00") == ([1.0, 2.0], "$1.0 to $2.0")


def test_parse_options_skips_null_lists_and_normalises_values():
    options, images = parse_options({"Color": None, "Size": [{"value": " XL/Tall ", "image": "u"}]})
    assert options == {"size": ["xl | tall"]} and images == {"xl | tall": "u"}
    assert parse_options("") == ({}, {})


def test_price_ceiling_distribution_and_no_ceiling():
    rng = random.Random(0)
    draws = Counter(sample_price_ceiling(12.0, rng) for _ in range(12000))
    assert set(draws) == {30.0, 40.0, 50.0}  # candidates 20, 30, 40, 50; the larger of two
    assert draws[30.0] / 12000 == pytest.approx(1 / 6, abs=0.02)
    assert draws[40.0] / 12000 == pytest.approx(1 / 3, abs=0.02)
    assert draws[50.0] / 12000 == pytest.approx(1 / 2, abs=0.02)
    assert sample_price_ceiling(975.0, rng) == 990.0
    assert sample_price_ceiling(985.0, rng) == NO_PRICE_CEILING


def test_synthetic_goals_cover_every_option_combination_sorted_by_name():
    product = make_product(instruction_text="Find me console tables with solid wood",
                           instruction_attributes=["solid wood"],
                           options={"size": ["large", "x-large"], "color": ["black", "dark brown"]})
    goals = build_goals([product], seed=1, shuffle_seed=None)
    assert len(goals) == 4
    assert goals[0].goal_options == {"color": "black", "size": "large"}
    assert goals[0].instruction_text.startswith(
        "Find me console tables with solid wood with color: black, and size: large, and price lower than ")
    assert all(g.weight == 1 / 4 for g in goals)
    assert len({g.price_upper for g in goals}) == 1  # one ceiling per product, shared by its combinations
    assert goals == build_goals([product], seed=1, shuffle_seed=None)  # seeded: same goals every time


def test_human_goals_use_lists_skip_empty_attributes():
    entries = [{"instruction": "i want a table.", "instruction_attributes": ["solid wood"],
                "instruction_options": ["black"]},
               {"instruction": "skip me", "instruction_attributes": [], "instruction_options": []}]
    product = make_product(purchase_price=990.0, human_instructions=entries)
    goals = human_goals([product], random.Random(0))
    assert len(goals) == 1 and goals[0].goal_options == ["black"] and goals[0].weight == 1.0
    assert goals[0].instruction_text == "i want a table" and goals[0].price_upper == NO_PRICE_CEILING


def test_split_conventions():
    assert split_indices(2000, "test") == range(500)
    assert split_indices(2000, "eval") == range(500, 1500)
    assert split_indices(2000, "train") == range(1500, 2000)
    assert split_indices(2000, "test", full_catalogue=False) == range(2000)
    assert split_indices(2000, "train", convention="verl") == range(500, 2000)
    with pytest.raises(ValueError):
        split_indices(10, "dev")
