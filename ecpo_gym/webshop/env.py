"""``ecpo/WebShop-v0`` (WebShop's own data files) and ``ecpo/WebShopGen-v0`` (a generated catalogue).

Both run the same pages, search and reward. Actions follow WebShop's grammar ``name[argument]``:
``search[query]`` (accepted on every page, as in the original) and ``click[clickable]``. The canonical
action of a click is the clickable it names; a search canonicalises to ``search[<normalised query>]``.
Anything else is an invalid action (reward ``reward_invalid``; the page stays as it was). Buying ends the
episode with WebShop's score in ``info["score"]`` and ``won = score == 1``. The env reward follows
``reward_mode``: ``"success"`` (the default, as the paper) gives ``reward_success`` (10) for a win and
``reward_failure`` (0) for any other purchase; ``"score"`` gives ``reward_success * score`` for every purchase
(the original WebShop's reward, scaled), so a purchase right but for one option earns most of a win. Success
(``won``) is the same in both.

Tasks: ``goal_<i>`` (WebShop's shuffled goal list, split by ``split``) or, with ``task_source="fixed100"``,
the 100 fixed tasks ``fixed_<i>`` of ``expel_webshop.fixed100.json`` (see ``fixed_tasks``). ``reset()`` without
a ``task_id`` samples a task by WebShop's goal weights (synthetic goals: rarity of their attributes; human
and fixed goals: uniform) with ``np_random``, so it is deterministic under ``reset(seed=...)``.

Search: ``search_backend="bm25s"`` (default, in-process) or ``"lucene"`` (the original's pyserini/Lucene
engine; the ``lucene`` extra).

Seeding: ``seed`` (constructor) fixes the purchase prices of range-priced products and the price ceilings
of the goals, so one seed gives the same goals in every process. The original draws both before it seeds
anything, so its instructions and prices differ between processes.
"""

from __future__ import annotations

import bisect
import itertools
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ecpo_gym.canonical import INVALID_ACTION, normalize_text
from ecpo_gym.core import MAX_STEPS, TaskStart, TextAgentEnv, Transition, UnknownTaskError
from ecpo_gym.families import declared_max_steps
from ecpo_gym.kwargs import check_bool, check_choice, check_int, check_optional_int, check_real, shown
from ecpo_gym.webshop.catalogue import Catalogue, cached_catalogue, files_identity
from ecpo_gym.webshop.fixed_tasks import FIXED_TASKS_FILE, fixed_task_goals, load_fixed_tasks
from ecpo_gym.webshop.goals import GOAL_SHUFFLE_SEED, SPLITS, Goal, build_goals, goal_summary, split_indices
from ecpo_gym.webshop.pages import DONE, OBSERVATION_MODES, PageState, Shop
from ecpo_gym.webshop.products import load_product_files, load_products, resolve_data_files
from ecpo_gym.webshop.reward import webshop_reward

MAX_GENERATED_PRODUCTS = 50_000  # generating takes ~0.2 ms a product (12 s at the bound)


def check_shop_kwargs(*, seed: Any, shuffle_seed: Any, split: Any, split_convention: Any, observation_mode: Any,
                      show_attrs: Any, max_steps: Any, max_query_chars: Any = 1000, reward_mode: Any = "success",
                      **rewards: Any) -> None:
    """The arguments both WebShop ids share, checked before a catalogue is loaded or generated."""
    check_choice("reward_mode", reward_mode, REWARD_MODES)
    check_int("seed", seed, 0)
    check_optional_int("shuffle_seed", shuffle_seed, 0)
    check_choice("split", split, SPLITS)
    check_choice("split_convention", split_convention, ("original", "verl"))
    check_choice("observation_mode", observation_mode, OBSERVATION_MODES)
    check_bool("show_attrs", show_attrs)
    check_int("max_steps", max_steps, 1, MAX_STEPS)
    check_int("max_query_chars", max_query_chars, 1)
    for name, value in rewards.items():
        if name.startswith("reward_"):
            check_real(name, value)

ACTION_PATTERN = re.compile(r"([^\[\]]+)\[(.+)\]", re.DOTALL)  # matched against normalised text
_GOAL_ID = re.compile(r"goal_(0|[1-9][0-9]*)")
SEARCH_PLACEHOLDER = "search[<query>]"
TASK_SOURCES = ("goals", "fixed100")
REWARD_MODES = ("success", "score")


def _squash(text: str) -> str:
    return " ".join(text.split()).lower()


class WebShopEnv(TextAgentEnv):
    """WebShop over its own files (``items_shuffle(_1000).json``, ``items_ins_v2(_1000).json``)."""

    def __init__(
        self,
        *,
        data_dir: str | os.PathLike | None = None,
        products_file: str | os.PathLike | None = None,
        attributes_file: str | os.PathLike | None = None,
        human_file: str | os.PathLike | None = None,
        small: bool = True,
        num_products: int | None = None,
        human_goals: bool = False,
        seed: int = 42,
        shuffle_seed: int | None = GOAL_SHUFFLE_SEED,
        split: str = "all",
        split_convention: str = "original",
        observation_mode: str = "text",
        show_attrs: bool = False,
        search_backend: str = "bm25s",
        task_source: str = "goals",
        fixed_tasks_file: str | os.PathLike | None = None,
        missing_fixed_tasks: str = "error",
        max_steps: int = declared_max_steps("ecpo/WebShop-v0"),
        **kwargs: Any,
    ) -> None:
        check_shop_kwargs(seed=seed, shuffle_seed=shuffle_seed, split=split, split_convention=split_convention,
                          observation_mode=observation_mode, show_attrs=show_attrs, max_steps=max_steps, **kwargs)
        check_optional_int("num_products", num_products, 1)
        check_bool("small", small)
        check_bool("human_goals", human_goals)
        if task_source not in TASK_SOURCES:
            raise ValueError(f"task_source={shown(task_source)}; expected one of {TASK_SOURCES}")
        if missing_fixed_tasks not in ("error", "skip"):
            raise ValueError(f"missing_fixed_tasks={shown(missing_fixed_tasks)}; expected 'error' or 'skip'")
        fixed = task_source == "fixed100"
        files = resolve_data_files(data_dir, small=small, products_file=products_file,
                                   attributes_file=attributes_file, human_file=human_file)
        with_human = human_goals or fixed  # fixed tasks take their goal attributes from items_human_ins.json
        key = ("files", tuple(str(v) for v in files.values()), files_identity(files.values()), num_products,
               with_human, human_goals, fixed, seed, shuffle_seed)

        def build():
            products = load_product_files(files, seed=seed, num_products=num_products, human_goals=with_human)
            if fixed:
                return products, []  # fixed goals are made per env from the catalogue (cheap)
            return products, build_goals(products, human=human_goals, seed=seed, shuffle_seed=shuffle_seed)

        catalogue = cached_catalogue(key, build, search_backend)
        full = num_products is None and not small
        self.missing_fixed_tasks: list[str] = []
        self.fixed_tasks_without_attributes: list[str] = []
        if not fixed:
            self._setup(catalogue, split, split_convention, full, observation_mode, show_attrs, max_steps,
                        **kwargs)
            return
        if split not in ("all", "test"):
            raise ValueError(f"the fixed tasks are one test set; split={shown(split)} must be 'all' or 'test'")
        path = Path(fixed_tasks_file) if fixed_tasks_file else Path(files["products"]).parent / FIXED_TASKS_FILE
        made = fixed_task_goals(load_fixed_tasks(path), catalogue.by_asin,
                                skip_missing=missing_fixed_tasks == "skip")
        self.missing_fixed_tasks = [t.task_id for t in made.missing]
        self.fixed_tasks_without_attributes = made.without_attributes
        self._setup(catalogue, split, split_convention, full, observation_mode, show_attrs, max_steps,
                    fixed_goals=dict(zip(made.task_ids, made.goals)), **kwargs)

    # ------------------------------------------------------------------ construction shared by both ids
    def _setup(self, catalogue: Catalogue, split: str, split_convention: str, full_catalogue: bool,
               observation_mode: str, show_attrs: bool, max_steps: int,
               fixed_goals: dict[str, Goal] | None = None, max_query_chars: int = 1000,
               reward_mode: str = "success", **kwargs: Any) -> None:
        super().__init__(max_steps=max_steps, **kwargs)
        self.reward_mode = reward_mode
        if max_query_chars < 1:
            raise ValueError(f"max_query_chars must be >= 1, got {max_query_chars}")
        self.max_query_chars = int(max_query_chars)
        if observation_mode not in OBSERVATION_MODES:
            raise ValueError(f"observation_mode={shown(observation_mode)}; expected one of {OBSERVATION_MODES}")
        if fixed_goals is not None and not fixed_goals:
            raise ValueError("none of the fixed WebShop tasks has its product in the loaded catalogue")
        if fixed_goals is None and not catalogue.goals:
            raise ValueError("this WebShop catalogue has no goals (no product with an instruction)")
        self.catalogue = catalogue
        self.observation_mode = observation_mode
        self.shop = Shop(catalogue.by_asin, catalogue.retriever, show_attrs=show_attrs,
                         search_cache=catalogue.search_cache)
        self.split = split
        self._fixed_goals = fixed_goals
        if fixed_goals is not None:
            self._task_ids = list(fixed_goals)
        else:
            indices = split_indices(len(catalogue.goals), split, convention=split_convention,
                                    full_catalogue=full_catalogue)
            self._task_ids = [f"goal_{i}" for i in indices]
        self._cumulative_weights: list[float] | None = None
        self.goal: Goal | None = None
        self.page = PageState()
        self.visited: list[str] = []
        self.score: float | None = None

    # ------------------------------------------------------------------ TextAgentEnv hooks
    @property
    def task_ids(self) -> Sequence[str]:
        return self._task_ids

    def goal_of(self, task_id: str) -> Goal:
        """The goal behind a task id (``goal_<index in the shuffled goal list>``, or ``fixed_<i>``)."""
        if self._fixed_goals is not None:
            if task_id not in self._fixed_goals:
                raise UnknownTaskError(f"unknown fixed WebShop task id {shown(task_id)}; ids look like 'fixed_0'")
            return self._fixed_goals[task_id]
        match = _GOAL_ID.fullmatch(str(task_id))
        if match is None or int(match.group(1)) >= len(self.catalogue.goals):
            raise UnknownTaskError(f"unknown WebShop task id {shown(task_id)}; ids look like 'goal_0' "
                                   f"({len(self.catalogue.goals)} goals)")
        return self.catalogue.goals[int(match.group(1))]

    def sample_task_id(self) -> str:
        """A task drawn by goal weight, as WebShop's reset without a session: ``bisect`` of
        ``uniform(0, total)`` on the cumulative weights of this env's tasks, drawn from ``np_random``."""
        if self._cumulative_weights is None:
            weights = (self.goal_of(t).weight for t in self._task_ids)
            self._cumulative_weights = list(itertools.accumulate(weights))
        total = self._cumulative_weights[-1]
        index = bisect.bisect(self._cumulative_weights, float(self.np_random.uniform(0.0, total)))
        return self._task_ids[min(index, len(self._task_ids) - 1)]

    def _sample_task_id(self) -> str:
        return self.sample_task_id()

    def _resolve_task_id(self, task_id: str) -> str:
        self.goal_of(task_id)  # raises UnknownTaskError
        return task_id

    def _load_task(self, task_id: str) -> TaskStart:
        self.goal = self.goal_of(task_id)
        self.page = PageState()
        self.visited = []
        self.score = None
        return TaskStart(observation=self._render(), task=self.goal.instruction_text,
                         task_type=self.goal.category, extra_info={"goal": goal_summary(self.goal)})

    def _admissible_actions(self) -> list[str]:
        actions = [SEARCH_PLACEHOLDER] if self.shop.has_search_bar(self.page) else []
        actions += [f"click[{key}]" for key in self.shop.clickables(self.page) if key != "search"]
        return actions

    def _state_key(self) -> str:
        return self.page.key()

    def parse_action(self, action: Any) -> tuple[str, Any]:
        """WebShop's grammar after the paper's normalisation (App. A): normalise, then match.

        The action is lowercased, its whitespace collapsed and trimmed, and the punctuation that wraps or ends
        it stripped (quotes, backticks, a trailing full stop: ``"click[Buy Now]".`` is ``click[buy now]``, as
        in ALFWorld). What is left must be the whole of ``name[argument]``: text after the closing bracket
        (``click[buy now] now please``) makes it a different string from every admissible action, so it is
        invalid rather than executed. The argument runs to the last ``]``, so a search query is free text
        (``search[usb [type-c] cable]`` searches ``usb [type-c] cable``), cut to its first ``max_query_chars``
        (1000) characters.
        """
        if not isinstance(action, str) or self.page.kind == DONE:
            return INVALID_ACTION, None
        match = ACTION_PATTERN.fullmatch(normalize_text(action))
        if match is None:
            return INVALID_ACTION, None
        name, argument = match.group(1).strip(), match.group(2).strip()  # already normalised
        if not argument:
            return INVALID_ACTION, None
        if name == "search":
            argument = argument[: self.max_query_chars].strip()  # as search-QA: bounded keys, pages, cache
            return f"search[{argument}]", ("search", argument)
        if name == "click" and argument != "search":
            table = self.shop.clickables(self.page)
            target = table.get(argument)
            if target is None:
                for key, candidate in table.items():  # option values may hold runs of spaces
                    if _squash(key) == argument:
                        argument, target = key, candidate
                        break
            if target is not None and argument != "search":
                return f"click[{argument}]", ("click", target)
        return INVALID_ACTION, None

    def _execute(self, command: Any) -> Transition:
        kind, payload = command
        if kind == "search":
            self.page = self.shop.search(self.page, payload)
            return Transition(self._render(), metrics={"score": 0.0})
        previous = self.page
        self.page = self.shop.click(previous, payload)
        if payload.kind == "product":
            self.visited.append(payload.value)
        elif self.page.kind == "home":
            self.visited = []
        if self.page.kind != DONE:
            return Transition(self._render(), metrics={"score": 0.0})
        return self._buy()

    def _invalid_observation(self) -> str:
        return self._observation  # the original's no-op: the page stays as it was

    # ------------------------------------------------------------------ helpers
    def _buy(self) -> Transition:
        assert self.goal is not None
        product = self.catalogue.by_asin.get(self.page.asin or "")
        won, metrics = False, {"score": 0.0}
        self.score = 0.0
        if product is not None:
            breakdown = webshop_reward(product, self.goal, self.page.options_dict, product.purchase_price)
            self.score, won = breakdown.score, breakdown.won
            metrics = {"score": breakdown.score, "r_type": breakdown.r_type, "n_att": breakdown.n_att,
                       "n_opt": breakdown.n_opt, "r_price": breakdown.r_price,
                       "purchased_asin": product.asin, "selected_options": self.page.options_dict}
        reward = self.reward_success * self.score if self.reward_mode == "score" else None
        return Transition(self._render(), terminated=True, won=won, metrics=metrics, reward=reward)

    def _render(self) -> str:
        assert self.goal is not None
        return self.shop.render(self.page, self.goal.instruction_text, mode=self.observation_mode,
                                visited=self.visited, score=self.score)


class WebShopGenEnv(WebShopEnv):
    """WebShop over a catalogue generated from ``catalogue_seed`` (no download; same code as WebShop-v0)."""

    def __init__(
        self,
        *,
        num_products: int = 1000,
        catalogue_seed: int = 0,
        seed: int = 42,
        shuffle_seed: int | None = GOAL_SHUFFLE_SEED,
        split: str = "all",
        split_convention: str = "original",
        observation_mode: str = "text",
        show_attrs: bool = False,
        search_backend: str = "bm25s",
        max_steps: int = declared_max_steps("ecpo/WebShopGen-v0"),
        **kwargs: Any,
    ) -> None:
        from ecpo_gym.webshop.generator import generate_records

        # the catalogue is generated here: its size is bounded so a typo is refused instead of building for hours
        check_int("num_products", num_products, 1, MAX_GENERATED_PRODUCTS)
        check_int("catalogue_seed", catalogue_seed, 0)
        check_shop_kwargs(seed=seed, shuffle_seed=shuffle_seed, split=split, split_convention=split_convention,
                          observation_mode=observation_mode, show_attrs=show_attrs, max_steps=max_steps, **kwargs)
        key = ("generated", num_products, catalogue_seed, seed, shuffle_seed)

        def build():
            records, instructions = generate_records(num_products, catalogue_seed)
            products = load_products(records, seed=seed, attributes_by_asin=instructions)
            return products, build_goals(products, seed=seed, shuffle_seed=shuffle_seed)

        catalogue = cached_catalogue(key, build, search_backend)
        self._setup(catalogue, split, split_convention, False, observation_mode, show_attrs, max_steps,
                    **kwargs)
