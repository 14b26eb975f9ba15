"""WebShop's real product sample: loading rules, page rendering and the real-data environment."""

import json

import pytest

from ecpo_gym.webshop.goals import build_goals
from ecpo_gym.webshop.pages import ITEM, RESULTS, SUB, PageState, Shop
from ecpo_gym.webshop.products import load_products
from ecpo_gym.webshop.search import BM25Retriever


@pytest.fixture(scope="module")
def sample(webshop_dir):
    records = json.loads((webshop_dir / "sample" / "items_shuffle_sample.json").read_text())
    attributes = json.loads((webshop_dir / "items_ins_v2_1000.json").read_text())
    return records, attributes, load_products(records, seed=42, attributes_by_asin=attributes)


def test_sample_loads_with_the_parsing_rules(sample):
    records, _, products = sample
    assert len(products) == 43
    singles = [p for p in products if len(p.price_values) == 1 and p.price_tag != "$100.0"]
    ranges = [p for p in products if len(p.price_values) == 2]
    empty = [r for r in records if not r["pricing"]]
    assert len(ranges) == 7 and len(empty) == 5
    for product in ranges:
        low, high = product.price_values
        assert product.price_tag == f"${low} to ${high}" and low <= product.purchase_price <= high
    for record, product in zip(records, products):
        if not record["pricing"]:
            assert product.price_values == [100.0] and product.price_tag == "$100.0"
    assert len(singles) + len(ranges) + len(empty) == 43
    by_asin = {p.asin: p for p in products}
    assert by_asin["B06Y3VLDFB"].price_tag == "$877.8"
    with_dict = [r for r in records if isinstance(r["customization_options"], dict)]
    null_lists = [r for r in with_dict if any(v is None for v in r["customization_options"].values())]
    assert len(with_dict) == 22 and len(null_lists) == 6
    for record in null_lists:
        nulls = {k.lower() for k, v in record["customization_options"].items() if v is None}
        assert not nulls & set(by_asin[record["asin"]].options)
    dress = by_asin["B08ZRR3DZT"]
    assert dress.options["size"] == ["x-small", "small", "medium", "large", "x-large"]
    assert "chocolate brown" in dress.options["color"]
    assert sum(p.bullet_points == [""] for p in products) == 5
    assert sum(p.description == "" for p in products) == 15
    assert sum(p.product_category == "" for p in products) == 1
    assert dress.attributes == ["polyester spandex", "daily wear"]
    assert dress.query == "women's dresses"


def test_item_pages_render_as_specified(sample):
    _, _, products = sample
    shop = Shop({p.asin: p for p in products}, BM25Retriever(products))
    dress = next(p for p in products if p.asin == "B08ZRR3DZT")
    item = PageState(kind=ITEM, keywords="dress", page=1, asin=dress.asin)
    text = shop.render(item, "i need a dress")
    expected_head = ("Instruction: [SEP] i need a dress [SEP] Back to Search [SEP] < Prev [SEP] size [SEP] "
                     "x-small [SEP] small [SEP] medium [SEP] large [SEP] x-large [SEP] color [SEP] black")
    assert text.startswith(expected_head)
    assert text.endswith(f"{dress.title} [SEP] Price: $19.99 to $27.99 [SEP] Rating: N.A. [SEP] Description "
                         "[SEP] Features [SEP] Reviews [SEP] Buy Now")
    clickables = list(shop.clickables(item))
    assert clickables[:6] == ["back to search", "< prev", "description", "features", "reviews", "buy now"]
    assert clickables[6:11] == dress.options["size"]
    empty_bullets = next(p for p in products if p.bullet_points == [""])
    features = shop.render(PageState(kind=SUB, asin=empty_bullets.asin, sub_page="Features"), "x")
    assert features == "Instruction: [SEP] x [SEP] Back to Search [SEP] < Prev [SEP] "
    no_description = next(p for p in products if p.description == "")
    description = shop.render(PageState(kind=SUB, asin=no_description.asin, sub_page="Description"), "x")
    assert description == "Instruction: [SEP] x [SEP] Back to Search [SEP] < Prev"
    attributes = shop.render(PageState(kind=SUB, asin=dress.asin, sub_page="Attributes"), "x")
    assert attributes.endswith("polyester spandex [SEP] daily wear [SEP] fashion [SEP] women's dresses [SEP] "
                               + dress.product_category)


def test_results_page_lists_asin_title_price(sample):
    _, _, products = sample
    shop = Shop({p.asin: p for p in products}, BM25Retriever(products))
    state = PageState(kind=RESULTS, keywords="console table", page=1)
    text = shop.render(state, "i need a table")
    hits = shop.search_results("console table")
    assert set(hits[:2]) == {"B06Y3VLDFB", "B09DG92LJL"}  # the two console tables rank first
    first = shop.products[hits[0]]
    assert text.startswith(f"Instruction: [SEP] i need a table [SEP] Back to Search [SEP] Page 1 (Total results: "
                           f"{len(hits)}) [SEP] Next > [SEP] {first.asin} [SEP] {first.title} [SEP] {first.price_tag}")
    assert "< Prev" not in text


def test_real_data_env_on_the_sample_and_missing_files(webshop_dir, tmp_path):
    from ecpo_gym.webshop.env import WebShopEnv
    from ecpo_gym.webshop.expert import expert_actions_for_task

    env = WebShopEnv(products_file=webshop_dir / "sample" / "items_shuffle_sample.json",
                     attributes_file=webshop_dir / "items_ins_v2_1000.json")
    assert len(env.task_ids) == len(env.catalogue.goals) > 0
    wins = 0
    for task_id in env.task_ids[:10]:
        env.reset(options={"task_id": task_id})
        for action in expert_actions_for_task(env, task_id):
            _, _, terminated, _, info = env.step(action)
        wins += info["won"]
        assert terminated and info["score"] > 0
    assert wins >= 8  # a few real goals are unwinnable by design of the original reward (colour quirks)
    with pytest.raises(FileNotFoundError, match="items_shuffle_1000.json"):
        WebShopEnv(data_dir=tmp_path)


def test_human_goals_with_a_synthetic_pairing(webshop_dir, sample):
    """The human sample's ASINs are not in the product sample: attach its entries to sample products."""
    records, attributes, _ = sample
    human = json.loads((webshop_dir / "sample" / "items_human_ins_sample.json").read_text())
    entries = list(human.values())
    paired = {r["asin"]: entries[i] for i, r in enumerate(records)}
    products = load_products(records, seed=42, attributes_by_asin=attributes, human_by_asin=paired)
    goals = build_goals(products, human=True, seed=42)
    used = [e for r in records for e in paired[r["asin"]]]
    assert len(goals) == sum(1 for e in used if e["instruction_attributes"])
    assert all(isinstance(g.goal_options, list) for g in goals)
    assert all(g.weight == 1.0 for g in goals)


def test_an_edited_product_file_is_not_served_from_the_catalogue_cache(webshop_dir, tmp_path):
    from ecpo_gym.webshop.env import WebShopEnv

    records = json.loads((webshop_dir / "sample" / "items_shuffle_sample.json").read_text())
    products_file = tmp_path / "items.json"
    products_file.write_text(json.dumps(records))
    files = {"products_file": products_file, "attributes_file": webshop_dir / "items_ins_v2_1000.json"}
    first = WebShopEnv(**files)
    assert WebShopEnv(**files).catalogue is first.catalogue  # unchanged file: built once
    products_file.write_text(json.dumps(records[:20]))  # same path, new content
    edited = WebShopEnv(**files)
    assert edited.catalogue is not first.catalogue
    assert len(edited.catalogue.products) == 20 and len(first.catalogue.products) == 43
