"""WebShop products: the record model and the loading rules (``docs/environments.md``, data and loading).

A ``Product`` holds exactly what pages, search and the reward read. ``load_products`` applies the loading
rules in file order (prefix, ASIN filter, de-duplication, title/description/bullets, price parsing, options,
attributes, purchase price). Randomness (the purchase price of a range-priced product) comes from the
``random.Random`` passed in, so one seed gives the same prices in every process.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FALLBACK_PRICE = 100.0
DUMMY_ATTRIBUTE = "DUMMY_ATTR"
WEBSHOP_DATA_URL = "https://github.com/princeton-nlp/WebShop#-setup (setup.sh -d small|all downloads the data files)"
DATA_DIR_ENV = "ECPO_WEBSHOP_DATA"
BENCHMARK_DATA_ENV = "ECPO_DATA_DIR"  # the benchmark data folder every env reads (its webshop/)


@dataclass
class Product:
    """One loaded product: title, description, bullet points, price, options and attributes as loaded."""

    asin: str
    title: str
    description: str
    bullet_points: list[str]
    price_values: list[float]
    price_tag: str
    options: dict[str, list[str]]
    attributes: list[str]
    category: str = ""
    query: str = ""
    product_category: str = ""
    main_image: str | None = None
    option_to_image: dict[str, str] = field(default_factory=dict)
    purchase_price: float = FALLBACK_PRICE
    instruction_text: str | None = None
    instruction_attributes: list[str] = field(default_factory=list)
    human_instructions: list[dict[str, Any]] = field(default_factory=list)
    rating: str = "N.A."


def parse_price(pricing: Any) -> tuple[list[float], str]:
    """Rule 4: ``"$1,847.00"`` -> ``([1847.0], "$1847.0")``; ``""`` -> ``([100.0], "$100.0")``.

    Two or more ``$`` pieces keep the first two as a range tagged ``"$a to $b"``. A piece with no digits left
    (which the original would fail on) is skipped; if nothing parses the fallback price applies.
    """
    if not pricing or not isinstance(pricing, str):
        return [FALLBACK_PRICE], f"${FALLBACK_PRICE}"
    values: list[float] = []
    for piece in pricing.split("$")[1:]:
        digits = "".join(ch for ch in piece if ch.isdigit() or ch == ".")
        try:
            values.append(float(digits))
        except ValueError:
            continue
    if not values:
        return [FALLBACK_PRICE], f"${FALLBACK_PRICE}"
    if len(values) == 1:
        return values, f"${values[0]}"
    values = values[:2]
    return values, f"${values[0]} to ${values[1]}"


def normalize_option_value(value: str) -> str:
    """Rule 5: strip, ``/`` -> ``" | "``, lowercase."""
    return value.strip().replace("/", " | ").lower()


def parse_options(customization: Any) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Rule 5: ``{name.lower(): [normalised values]}`` skipping null lists, plus value -> image."""
    options: dict[str, list[str]] = {}
    option_to_image: dict[str, str] = {}
    if not isinstance(customization, Mapping):
        return options, option_to_image
    for name, entries in customization.items():
        if entries is None:
            continue
        values: list[str] = []
        for entry in entries:
            raw = entry.get("value") if isinstance(entry, Mapping) else entry
            if not isinstance(raw, str):
                continue
            value = normalize_option_value(raw)
            values.append(value)
            if isinstance(entry, Mapping) and entry.get("image"):
                option_to_image[value] = entry["image"]
        options[str(name).lower()] = values
    return options, option_to_image


def purchase_price(price_values: list[float], rng: random.Random) -> float:
    """Rule 7: the single value, or a uniform draw inside a range (fixed once at load)."""
    if not price_values:
        return FALLBACK_PRICE
    if len(price_values) == 1:
        return float(price_values[0])
    low, high = price_values[0], price_values[1]
    return rng.uniform(low, high)


def product_from_record(record: Mapping[str, Any], rng: random.Random,
                        attributes_by_asin: Mapping[str, Any] | None = None,
                        human_by_asin: Mapping[str, Any] | None = None) -> Product:
    """Rules 3-7 for one record that passed the ASIN filter."""
    small = record.get("small_description", [])
    bullets = list(small) if isinstance(small, list) else [small]
    bullets = [b if isinstance(b, str) else str(b) for b in bullets]
    price_values, price_tag = parse_price(record.get("pricing", ""))
    options, option_to_image = parse_options(record.get("customization_options", ""))
    images = record.get("images") or []
    asin = str(record["asin"])
    entry = (attributes_by_asin or {}).get(asin) or {}
    attributes = list(entry.get("attributes") or []) if "attributes" in entry else [DUMMY_ATTRIBUTE]
    return Product(
        asin=asin,
        title=str(record.get("name", "") or ""),
        description=str(record.get("full_description", "") or ""),
        bullet_points=bullets,
        price_values=price_values,
        price_tag=price_tag,
        options=options,
        option_to_image=option_to_image,
        attributes=attributes,
        category=str(record.get("category", "") or ""),
        query=str(record.get("query", "") or "").lower().strip(),
        product_category=str(record.get("product_category", "") or ""),
        main_image=images[0] if images else None,
        purchase_price=purchase_price(price_values, rng),
        instruction_text=entry.get("instruction"),
        instruction_attributes=list(entry.get("instruction_attributes") or []),
        human_instructions=list((human_by_asin or {}).get(asin) or []),
    )


def load_products(records: Iterable[Mapping[str, Any]], *, seed: int = 42, num_products: int | None = None,
                  attributes_by_asin: Mapping[str, Any] | None = None,
                  human_by_asin: Mapping[str, Any] | None = None) -> list[Product]:
    """Rules 1-7 in file order: first ``num_products`` records, ASIN filter, first duplicate wins."""
    rng = random.Random(seed)
    records = list(records)
    if num_products is not None:
        records = records[:num_products]
    products: list[Product] = []
    seen: set[str] = set()
    for record in records:
        asin = record.get("asin")
        if not isinstance(asin, str) or asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        products.append(product_from_record(record, rng, attributes_by_asin, human_by_asin))
    return products


# ---------------------------------------------------------------------------------------------- files
def _read_json(path: Path, what: str) -> Any:
    if not path.is_file():
        raise FileNotFoundError(
            f"WebShop {what} not found: {path}. Get WebShop's data files from {WEBSHOP_DATA_URL} and pass "
            f"their folder as data_dir=... (or set ${DATA_DIR_ENV})."
        )
    with path.open(encoding="utf-8") as handle:
        return json.load(handle)


def resolve_data_files(data_dir: str | os.PathLike | None = None, *, small: bool = True,
                       products_file: str | os.PathLike | None = None,
                       attributes_file: str | os.PathLike | None = None,
                       human_file: str | os.PathLike | None = None) -> dict[str, Path | None]:
    """Paths of the product, attribute and (optional) human-instruction files.

    Explicit file paths win; otherwise they are looked up in ``data_dir`` (WebShop's folder, or the benchmark
    data folder holding ``webshop/``), else ``$ECPO_WEBSHOP_DATA`` (either), else ``$ECPO_DATA_DIR/webshop``, as
    every env reads the benchmark data folder (``items_shuffle_1000.json`` / ``items_ins_v2_1000.json`` when
    ``small``, else the full files).
    """
    base = data_dir or os.environ.get(DATA_DIR_ENV) or os.environ.get(BENCHMARK_DATA_ENV)
    if base is not None and (Path(base) / "webshop").is_dir():  # the benchmark data folder, as for every env
        base = Path(base) / "webshop"
    if base is None and (products_file is None or attributes_file is None):
        raise FileNotFoundError(
            f"WebShop data location unknown: pass data_dir=... or set ${DATA_DIR_ENV} to the folder holding "
            f"items_shuffle{'_1000' if small else ''}.json and items_ins_v2{'_1000' if small else ''}.json "
            f"(or ${BENCHMARK_DATA_ENV} to the folder holding webshop/; get them from {WEBSHOP_DATA_URL})."
        )
    suffix = "_1000" if small else ""
    root = Path(base) if base is not None else Path(".")
    human = Path(human_file) if human_file else root / "items_human_ins.json"
    return {
        "products": Path(products_file) if products_file else root / f"items_shuffle{suffix}.json",
        "attributes": Path(attributes_file) if attributes_file else root / f"items_ins_v2{suffix}.json",
        "human": human if (human_file or human.is_file()) else None,
    }


def load_product_files(files: Mapping[str, Path | None], *, seed: int = 42, num_products: int | None = None,
                       human_goals: bool = False) -> list[Product]:
    """Load products from WebShop's files (each missing file is one clear error naming it)."""
    records = _read_json(Path(files["products"]), "product file")
    attributes = _read_json(Path(files["attributes"]), "attribute/instruction file")
    human = None
    if human_goals:
        if files.get("human") is None:
            raise FileNotFoundError(
                f"WebShop human instructions (items_human_ins.json) not found; human_goals=True needs it. "
                f"Get it from {WEBSHOP_DATA_URL}."
            )
        human = _read_json(Path(files["human"]), "human instruction file")
    return load_products(records, seed=seed, num_products=num_products, attributes_by_asin=attributes,
                         human_by_asin=human)
