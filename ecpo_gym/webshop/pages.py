"""WebShop pages as models: state, clickables, transitions and text rendering (``docs/environments.md``).

A ``PageState`` is the page identity (kind, keywords, results page, product, selected options, sub-page);
``Shop`` turns a state into its text observation and its clickables, and applies a search or a click to
give the next state. No HTML is built: the ``text`` observation is the sequence of visible text nodes the
original's templates produce, joined with ``" [SEP] "``.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from ecpo_gym.webshop.products import Product
from ecpo_gym.webshop.search import SEARCH_RETURN_N, Retriever, normalize_query

PRODUCT_WINDOW = 10
SEP = " [SEP] "

HOME, RESULTS, ITEM, SUB, DONE = "home", "results", "item", "sub", "done"
BACK_TO_SEARCH, PREV, NEXT, BUY_NOW = "Back to Search", "< Prev", "Next >", "Buy Now"
SUB_PAGES = ("Description", "Features", "Reviews", "Attributes")
OBSERVATION_MODES = ("text", "text_rich")


MAX_CACHE_KEY_CHARS = 256


def search_cache_key(keywords: str) -> str:
    """The search cache's key of a query: the query itself up to ``MAX_CACHE_KEY_CHARS``, else a digest of it.

    Keys are capped so that ``cache_size`` entries hold a bounded number of bytes whatever the agent types
    (a cache of 4,096 full 1 MB queries would hold 4 GB).
    """
    if len(keywords) <= MAX_CACHE_KEY_CHARS:
        return keywords
    digest = hashlib.sha256(keywords.encode("utf-8", "surrogatepass")).hexdigest()
    return f"\0sha256:{digest}:{len(keywords)}"  # NUL-prefixed: never equal to a short query


@dataclass(frozen=True)
class PageState:
    """The page identity; equal states render equal pages whatever path led to them."""

    kind: str = HOME
    keywords: str | None = None
    page: int = 1
    asin: str | None = None
    options: tuple[tuple[str, str], ...] = ()
    sub_page: str | None = None

    @property
    def options_dict(self) -> dict[str, str]:
        return dict(self.options)

    def key(self) -> str:
        """The anchor key: only the fields that identify this page kind."""
        if self.kind == HOME:
            return "home"
        parts = [self.kind, f"q={self.keywords or ''}", f"p={self.page}"]
        if self.kind in (ITEM, SUB, DONE):
            parts.append(f"asin={self.asin}")
            parts.append("opts=" + ";".join(f"{n}={v}" for n, v in self.options))
        if self.kind == SUB:
            parts.append(f"sub={self.sub_page}")
        return "|".join(parts)


def with_option(options: tuple[tuple[str, str], ...], name: str, value: str) -> tuple[tuple[str, str], ...]:
    chosen = dict(options)
    chosen[name] = value
    return tuple(sorted(chosen.items()))


@dataclass
class ClickTarget:
    """What a clickable does: ``kind`` is button, product, sub_page or option."""

    kind: str
    value: str
    option_name: str | None = None


@dataclass
class Shop:
    """Pages over one catalogue and retriever, for one goal instruction."""

    products: Mapping[str, Product]
    retriever: Retriever
    show_attrs: bool = False
    search_cache: dict[str, list[str]] = field(default_factory=dict)
    cache_size: int = 4096

    # ------------------------------------------------------------------ search
    def search_results(self, keywords: str) -> list[str]:
        """Top ``SEARCH_RETURN_N`` loaded ASINs for ``keywords`` (cached per catalogue, bounded in bytes)."""
        key = search_cache_key(keywords)
        hits = self.search_cache.get(key)
        if hits is None:
            hits = [a for a in self.retriever.search(keywords, SEARCH_RETURN_N) if a in self.products]
            if len(self.search_cache) >= self.cache_size:
                self.search_cache.pop(next(iter(self.search_cache)))
            self.search_cache[key] = hits
        return hits

    def page_results(self, state: PageState) -> tuple[list[str], int]:
        hits = self.search_results(state.keywords or "")
        start = (state.page - 1) * PRODUCT_WINDOW
        return hits[start:start + PRODUCT_WINDOW], len(hits)

    # ------------------------------------------------------------------ clickables
    def clickables(self, state: PageState) -> OrderedDict[str, ClickTarget]:
        """Clickable keys in page order; a later duplicate key overwrites the earlier target."""
        table: OrderedDict[str, ClickTarget] = OrderedDict()
        if state.kind == HOME:
            table["search"] = ClickTarget("button", "search")
        elif state.kind == RESULTS:
            table["back to search"] = ClickTarget("button", BACK_TO_SEARCH)
            if state.page > 1:
                table["< prev"] = ClickTarget("button", PREV)
            table["next >"] = ClickTarget("button", NEXT)
            for asin in self.page_results(state)[0]:
                table[asin.lower()] = ClickTarget("product", asin)
        elif state.kind == ITEM:
            table["back to search"] = ClickTarget("button", BACK_TO_SEARCH)
            table["< prev"] = ClickTarget("button", PREV)
            for sub in self.sub_pages():
                table[sub.lower()] = ClickTarget("sub_page", sub)
            table["buy now"] = ClickTarget("button", BUY_NOW)
            product = self.products.get(state.asin or "")
            if product is not None:
                for name, values in product.options.items():
                    for value in values:
                        table[value] = ClickTarget("option", value, option_name=name)
        elif state.kind == SUB:
            table["back to search"] = ClickTarget("button", BACK_TO_SEARCH)
            table["< prev"] = ClickTarget("button", PREV)
        return table

    def sub_pages(self) -> tuple[str, ...]:
        return SUB_PAGES if self.show_attrs else SUB_PAGES[:3]

    @staticmethod
    def has_search_bar(state: PageState) -> bool:
        return state.kind == HOME

    # ------------------------------------------------------------------ transitions
    @staticmethod
    def search(state: PageState, query: str) -> PageState:
        """Any page: results page 1 for the query; the product and options are cleared."""
        return PageState(kind=RESULTS, keywords=normalize_query(query), page=1)

    def click(self, state: PageState, target: ClickTarget) -> PageState:
        if target.kind == "button":
            if target.value == BACK_TO_SEARCH:
                return PageState()
            if target.value == NEXT:
                return replace(state, page=state.page + 1)
            if target.value == PREV:
                if state.kind == RESULTS:
                    return replace(state, page=max(1, state.page - 1))
                if state.kind == ITEM:
                    return PageState(kind=RESULTS, keywords=state.keywords, page=state.page)
                if state.kind == SUB:
                    return replace(state, kind=ITEM, sub_page=None)
            if target.value == BUY_NOW:
                return replace(state, kind=DONE)
            return state
        if target.kind == "product":
            return replace(state, kind=ITEM, asin=target.value.upper(), sub_page=None)
        if target.kind == "sub_page":
            return replace(state, kind=SUB, sub_page=target.value)
        if target.kind == "option":
            return replace(state, options=with_option(state.options, target.option_name or "", target.value))
        return state

    # ------------------------------------------------------------------ rendering
    def render(self, state: PageState, instruction: str, *, mode: str = "text",
               visited: Sequence[str] = (), score: float | None = None) -> str:
        nodes = self.page_nodes(state, instruction, score=score)
        if mode == "text":
            return SEP.join(text.strip() for text, _ in nodes if not _newline_only(text))
        return render_rich(nodes, state, set(visited))

    def page_nodes(self, state: PageState, instruction: str, *, score: float | None = None
                   ) -> list[tuple[str, str]]:
        """Visible text nodes in page order, each tagged ``text``, ``button``, ``asin`` or ``option``."""
        head = [("Instruction:", "text"), (instruction, "text")]
        if state.kind == HOME:
            return [("WebShop", "text"), *head, ("Search", "button")]
        if state.kind == RESULTS:
            shown, total = self.page_results(state)
            nodes = [*head, (BACK_TO_SEARCH, "button"), (f"Page {state.page} (Total results: {total})", "text")]
            if state.page > 1:
                nodes.append((PREV, "button"))
            nodes.append((NEXT, "button"))
            for asin in shown:
                product = self.products[asin]
                nodes += [(asin, "asin"), (product.title, "text"), (product.price_tag, "text")]
            return nodes
        if state.kind == DONE:
            return [("Thank you for shopping with us!", "text"), ("Your score (min 0.0, max 1.0)", "text"),
                    (str(score), "text"), ("Reward Details", "text"), ("None", "text")]
        product = self.products.get(state.asin or "")
        nodes = [*head, (BACK_TO_SEARCH, "button"), (PREV, "button")]
        if product is None:
            return nodes
        if state.kind == ITEM:
            for name, values in product.options.items():
                nodes.append((name, "text"))
                nodes += [(value, "option") for value in values]
            nodes += [(product.title, "text"), (f"Price: {product.price_tag}", "text"),
                      (f"Rating: {product.rating}", "text")]
            nodes += [(sub, "button") for sub in self.sub_pages()]
            nodes.append((BUY_NOW, "button"))
            return nodes
        return nodes + sub_page_nodes(product, state.sub_page or "")


def sub_page_nodes(product: Product, sub_page: str) -> list[tuple[str, str]]:
    if sub_page == "Description":
        return [(product.description, "text")] if product.description else []
    if sub_page == "Features":
        return [(bullet, "text") for bullet in product.bullet_points]
    if sub_page == "Attributes":
        return [(a, "text") for a in product.attributes] + [
            (product.category, "text"), (product.query, "text"), (product.product_category, "text")]
    return []  # Reviews: always empty


def _newline_only(text: str) -> bool:
    """BeautifulSoup reduces whitespace runs holding a newline to ``"\\n"``, which the text mode drops."""
    return not text.strip() and "\n" in text


def render_rich(nodes: list[tuple[str, str]], state: PageState, visited: set[str]) -> str:
    """``text_rich``: each node followed by a newline, buttons bracketed, chosen options marked and
    announced first (the last rendered first)."""
    chosen = {value for _, value in state.options}
    lines: list[str] = []
    announced: list[str] = []
    for text, tag in nodes:
        if tag == "button":
            lines.append(f"[button] {text} [button_]\n")
        elif tag == "asin":
            clicked = "clicked " if text in visited else ""
            lines.append(f"\n[{clicked}button] {text} [{clicked}button_]\n")
        elif tag == "option":
            if state.kind == ITEM and text in chosen:
                lines.append(f"  [clicked button] {text} [clicked button_]\n")
                announced.insert(0, f"You have clicked {text}.\n")
            else:
                lines.append(f"  [button] {text} [button_]\n")
        else:
            lines.append(text + "\n")
    return "".join(announced) + "".join(lines)


