"""A deterministic WebShop-style catalogue generated from a seed (``ecpo/WebShopGen-v0``).

It writes records in WebShop's exact schemas (``items_shuffle`` product records and ``items_ins_v2``
attribute/instruction entries), which then go through the same loading and goal code as the real
benchmark. Many products share a product type, attribute pool and option palette, so a purchase wins
only with the right product type, the goal's attributes, the goal's options and a price under the
ceiling: search, option choice and price all matter, and random shopping rarely succeeds.
"""

from __future__ import annotations

import random
from typing import Any

# (category, product_category path, [(query, title noun)], attribute pool, option kinds)
CATEGORIES: list[tuple[str, str, list[tuple[str, str]], list[str], list[str]]] = [
    ("fashion", "Clothing, Shoes & Jewelry \u203a Women \u203a Clothing",
     [("women's dresses", "Dress"), ("women's blouses", "Blouse"), ("women's jeans", "Jeans"),
      ("women's cardigans", "Cardigan"), ("women's leggings", "Leggings"), ("women's jackets", "Jacket")],
     ["machine wash", "long sleeve", "short sleeve", "button closure", "elastic waist", "polyester spandex",
      "slim fit", "high waist", "hand wash", "soft material", "quality materials", "daily wear"],
     ["size", "color"]),
    ("fashion", "Clothing, Shoes & Jewelry \u203a Men \u203a Clothing",
     [("men's t-shirts", "T-Shirt"), ("men's hoodies", "Hoodie"), ("men's polos", "Polo Shirt"),
      ("men's shorts", "Shorts"), ("men's sweaters", "Sweater"), ("men's pants", "Pants")],
     ["machine wash", "cotton blend", "regular fit", "moisture wicking", "relaxed fit", "drawstring closure",
      "short sleeve", "long sleeve", "classic fit", "quick drying", "pull on", "button closure"],
     ["size", "color"]),
    ("fashion", "Clothing, Shoes & Jewelry \u203a Shoes",
     [("running shoes", "Running Shoe"), ("hiking boots", "Hiking Boot"), ("sandals", "Sandal"),
      ("loafers", "Loafer"), ("slippers", "Slipper"), ("sneakers", "Sneaker")],
     ["rubber sole", "non slip", "arch support", "memory foam", "lace up", "water resistant",
      "leather upper", "lightweight design", "breathable mesh", "slip resistant", "cushioned insole"],
     ["shoe size", "color"]),
    ("beauty", "Beauty & Personal Care \u203a Skin Care",
     [("face moisturizers", "Moisturizer"), ("facial cleansers", "Cleanser"), ("face serums", "Serum"),
      ("body lotions", "Lotion"), ("lip balms", "Lip Balm"), ("sunscreens", "Sunscreen")],
     ["paraben free", "cruelty free", "sensitive skin", "long lasting", "natural ingredients",
      "fragrance free", "hyaluronic acid", "vitamin c", "dry skin", "travel size", "easy to use", "alcohol free"],
     ["scent", "size"]),
    ("beauty", "Beauty & Personal Care \u203a Hair Care",
     [("shampoos", "Shampoo"), ("conditioners", "Conditioner"), ("hair oils", "Hair Oil"),
      ("hair masks", "Hair Mask"), ("hair extensions", "Hair Extension"), ("hair brushes", "Hair Brush")],
     ["sulfate free", "paraben free", "damaged hair", "hair growth", "natural looking", "argan oil",
      "tea tree", "dry hair", "long lasting", "high quality", "easy to use", "coconut oil"],
     ["scent", "size"]),
    ("grocery", "Grocery & Gourmet Food \u203a Snacks",
     [("protein bars", "Protein Bar"), ("granola", "Granola"), ("trail mix", "Trail Mix"),
      ("beef jerky", "Beef Jerky"), ("rice cakes", "Rice Cake"), ("dark chocolate", "Chocolate Bar")],
     ["gluten free", "low sugar", "high protein", "non gmo", "keto friendly", "low carb", "plant based",
      "individually wrapped", "dairy free", "ready to eat", "sugar free", "grass fed"],
     ["flavor name", "pack size"]),
    ("grocery", "Grocery & Gourmet Food \u203a Beverages",
     [("green tea", "Green Tea"), ("coffee beans", "Coffee Beans"), ("herbal tea", "Herbal Tea"),
      ("sparkling water", "Sparkling Water"), ("cold brew", "Cold Brew Coffee"), ("matcha powder", "Matcha")],
     ["caffeine free", "non gmo", "organic certified", "sugar free", "gluten free", "zero calorie",
      "fair trade", "low calorie", "natural flavor", "kosher certified", "bpa free"],
     ["flavor name", "pack size"]),
    ("garden", "Home & Kitchen \u203a Furniture \u203a Living Room Furniture",
     [("console tables", "Console Table"), ("coffee tables", "Coffee Table"), ("bookcases", "Bookcase"),
      ("tv stands", "TV Stand"), ("accent chairs", "Accent Chair"), ("ottomans", "Ottoman")],
     ["solid wood", "easy assembly", "storage space", "living room", "metal frame", "mid century",
      "space saving", "engineered wood", "high gloss", "assembly required", "wood finish"],
     ["color", "size"]),
    ("garden", "Home & Kitchen \u203a Bedding",
     [("sheet sets", "Sheet Set"), ("comforters", "Comforter"), ("pillows", "Pillow"),
      ("duvet covers", "Duvet Cover"), ("mattress toppers", "Mattress Topper"), ("blankets", "Blanket")],
     ["machine washable", "queen size", "super soft", "memory foam", "hypoallergenic", "deep pocket",
      "all season", "microfiber", "breathable cotton", "wrinkle free", "cooling gel"],
     ["bed size", "color"]),
    ("electronics", "Electronics \u203a Computers & Accessories",
     [("usb microphones", "USB Microphone"), ("wireless mice", "Wireless Mouse"), ("keyboards", "Keyboard"),
      ("laptop stands", "Laptop Stand"), ("webcams", "Webcam"), ("usb hubs", "USB Hub")],
     ["noise cancelling", "plug and play", "high speed", "easy install", "usb port", "fast charging",
      "long battery", "aluminum alloy", "high definition", "wireless bluetooth", "ergonomic design"],
     ["color", "style"]),
    ("electronics", "Electronics \u203a Headphones",
     [("wireless earbuds", "Wireless Earbuds"), ("over ear headphones", "Headphones"),
      ("bluetooth speakers", "Bluetooth Speaker"), ("sports earphones", "Sports Earphones")],
     ["noise cancelling", "long battery", "water resistant", "wireless bluetooth", "hands free",
      "fast charging", "stereo sound", "carrying case", "high fidelity", "deep bass"],
     ["color", "style"]),
]

OPTION_PALETTES: dict[str, list[str]] = {
    "size": ["X-Small", "Small", "Medium", "Large", "X-Large", "XX-Large", "3X-Large"],
    "shoe size": ["5", "6", "7", "8", "9", "10", "11", "12", "13"],
    "bed size": ["Twin", "Full", "Queen", "King", "California King"],
    "color": ["Black", "White", "Navy Blue", "Light Grey", "Dark Brown", "Red", "Olive Green", "Pink",
              "Beige", "Burgundy", "Teal", "Mustard Yellow", "Lavender", "Khaki", "Silver", "Coral"],
    "scent": ["Lavender", "Unscented", "Citrus", "Cedar", "Eucalyptus", "Vanilla", "Coconut",
              "Jasmine"],
    "flavor name": ["Vanilla", "Chocolate", "Strawberry", "Peanut Butter", "Cinnamon", "Sea Salt",
                    "Mixed Berry", "Honey", "Original"],
    "pack size": ["1 Pack", "2 Pack", "3 Pack", "6 Pack", "12 Pack"],
    "style": ["Basic", "Pro", "Mini", "Plus", "Deluxe Edition", "Travel Edition"],
}
OPTION_LABELS = {"size": "Size", "shoe size": "Size", "bed size": "Size", "color": "Color", "scent": "Scent",
                 "flavor name": "Flavor Name", "pack size": "Size", "style": "Style"}

MATERIALS = ["Organic", "Premium", "Classic", "Lightweight", "Deluxe", "Essential", "Vintage", "Modern",
             "Eco", "Ultra", "Everyday", "Signature", "Heritage", "Urban", "Coastal", "Nordic"]
SYLLABLES = ["lu", "na", "ro", "ve", "ka", "mi", "zo", "ta", "ri", "en", "sol", "mar", "bel", "dor", "fin",
             "gal", "hex", "ion", "jor", "kel", "lim", "mox", "nor", "pra", "qui", "ras", "sen", "tor", "ul",
             "vin", "wex", "yar", "zen"]
INSTRUCTION_TEMPLATES = [
    "i need {attrs} {query}",
    "find me {attrs} {query}",
    "i am looking for {query} that are {attrs}",
    "i want to buy {query}, {attrs}",
    "find me {query} with {attrs}",
]
DESCRIPTION_TEMPLATES = [
    "{brand} {noun} designed for everyday use. It is {a1} and {a2}.",
    "Meet the {brand} {noun}: {a1}, {a2} and made to last.",
    "Our {noun} combines {a1} with {a2} for the best experience.",
]
ASIN_CHARS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
TYPE_PRICE_RANGES = {"fashion": (8.0, 90.0), "beauty": (5.0, 60.0), "grocery": (3.0, 45.0),
                     "garden": (25.0, 950.0), "electronics": (10.0, 400.0)}


def _asin(rng: random.Random, taken: set[str]) -> str:
    while True:
        asin = "B0" + "".join(rng.choice(ASIN_CHARS) for _ in range(8))
        if asin not in taken:
            taken.add(asin)
            return asin


def _brand(rng: random.Random) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()


def _pricing(rng: random.Random, category: str) -> str:
    lo, hi = TYPE_PRICE_RANGES[category]
    roll = rng.random()
    if roll < 0.05:
        return ""
    low = round(rng.uniform(lo, hi), 2)
    if roll < 0.2:
        return f"${low:.2f}${round(low * rng.uniform(1.1, 1.6), 2):.2f}"
    return f"${low:,.2f}"


def _options(rng: random.Random, kinds: list[str], asin: str) -> Any:
    count = rng.choices([0, 1, 2], weights=[0.2, 0.4, 0.4])[0]
    if count == 0:
        return "" if rng.random() < 0.7 else {OPTION_LABELS[kinds[0]]: None}
    chosen = kinds[:count] if rng.random() < 0.5 else list(reversed(kinds))[:count]
    options: dict[str, Any] = {}
    for kind in chosen:
        palette = OPTION_PALETTES[kind]
        values = rng.sample(palette, rng.randint(2, min(5, len(palette))))
        if kind in ("size", "shoe size", "bed size", "pack size"):
            values.sort(key=palette.index)
        options[OPTION_LABELS[kind]] = [
            {"is_selected": i == 0, "value": v, "asin": asin,
             "image": f"https://example.invalid/images/{asin}/{i}.jpg"} for i, v in enumerate(values)]
    return options


def generate_records(num_products: int = 1000, seed: int = 0,
                     instruction_rate: float = 0.6) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``(items_shuffle records, items_ins_v2 dict)`` for a catalogue of ``num_products`` products."""
    if num_products < 1:
        raise ValueError(f"num_products must be >= 1, got {num_products}")
    rng = random.Random(seed)
    brands = [_brand(rng) for _ in range(max(8, num_products // 4))]
    taken: set[str] = set()
    records: list[dict[str, Any]] = []
    instructions: dict[str, Any] = {}
    for _ in range(num_products):
        category, path, types, pool, kinds = rng.choice(CATEGORIES)
        query, noun = rng.choice(types)
        asin = _asin(rng, taken)
        brand = rng.choice(brands)
        attrs = rng.sample(pool, rng.randint(3, 5))
        title = f"{brand} {rng.choice(MATERIALS)} {noun} {attrs[0].title()}"
        if rng.random() < 0.5:
            title += f" with {attrs[1].title()}"
        description = "" if rng.random() < 0.3 else rng.choice(DESCRIPTION_TEMPLATES).format(
            brand=brand, noun=noun.lower(), a1=attrs[0], a2=attrs[1])
        bullets = [""] if rng.random() < 0.05 else [
            f"{a.capitalize()}: this {noun.lower()} is {a}." for a in attrs[1:]] + [f"Brand: {brand}"]
        records.append({
            "asin": asin, "name": title, "full_description": description, "small_description": bullets,
            "pricing": _pricing(rng, category), "customization_options": _options(rng, kinds, asin),
            "images": [f"https://example.invalid/images/{asin}/main.jpg"], "category": category,
            "query": query, "product_category": f"{path} \u203a {query.title()}", "average_rating": "",
        })
        entry: dict[str, Any] = {"attributes": attrs}
        if rng.random() < instruction_rate:
            wanted = rng.sample(attrs, rng.randint(1, min(3, len(attrs))))
            template = rng.choice(INSTRUCTION_TEMPLATES)
            entry["instruction"] = template.format(query=query, attrs=", and ".join(wanted))
            entry["instruction_attributes"] = wanted
        instructions[asin] = entry
    return records, instructions
