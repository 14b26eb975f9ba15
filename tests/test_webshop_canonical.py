"""WebShop action canonicalisation (paper App. A: normalise, then match) and bounded search memory (issue #15)."""

from __future__ import annotations

import resource
import sys

import pytest

from ecpo_gym.canonical import INVALID_ACTION
from ecpo_gym.webshop.env import WebShopGenEnv
from ecpo_gym.webshop.pages import MAX_CACHE_KEY_CHARS, search_cache_key

SMALL = {"num_products": 150, "catalogue_seed": 3}


@pytest.fixture(scope="module")
def env():
    return WebShopGenEnv(**SMALL)


def on_results_page(env):
    env.reset(options={"task_id": env.task_ids[0]})
    env.step("search[shoes]")
    assert "click[back to search]" in env.admissible_actions()


@pytest.mark.parametrize("surface", ['"click[next >]"', "'click[next >]'", "`click[next >]`", "click[next >].",
                                     "  CLICK[Next >]! ", '"Click[ Next  > ]."', "click [next >]"])
def test_quoted_backticked_and_punctuated_clicks_are_the_admissible_click(env, surface):
    on_results_page(env)
    assert env.canonical_action(surface) == "click[next >]"
    _, _, _, _, info = env.step(surface)
    assert info["is_action_valid"] and info["state_key"].endswith("|p=2")


@pytest.mark.parametrize("extra", ["click[next >] now please", "please click[next >]", "click[next >] click[b0]",
                                   "click[next >]]", "click[next >] [x]"])
def test_extra_words_around_the_action_make_it_invalid(env, extra):
    on_results_page(env)
    _, reward, _, _, info = env.step(extra)
    assert info["action_key"] == INVALID_ACTION and not info["is_action_valid"] and reward < 0
    assert info["state_key"].endswith("|p=1")


def test_buy_now_with_trailing_words_does_not_buy(env):
    task_id = env.task_ids[0]
    env.reset(options={"task_id": task_id})
    env.step("search[shoes]")
    product = next(a for a in env.admissible_actions() if a.startswith("click[b0"))
    env.step(product)
    _, _, terminated, _, info = env.step("click[buy now] now please")
    assert not terminated and info["action_key"] == INVALID_ACTION
    assert env.canonical_action("`Click[Buy Now]`.") == "click[buy now]"


def test_search_queries_stay_free_text(env):
    env.reset(options={"task_id": env.task_ids[0]})
    assert env.canonical_action("search[usb [type-c] cable]") == "search[usb [type-c] cable]"
    assert env.canonical_action('"search[Red  Shoes]".') == "search[red shoes]"
    assert env.canonical_action("search[red shoes] and more") == INVALID_ACTION


def test_search_cache_keys_are_capped():
    short = "red shoes"
    assert search_cache_key(short) == short
    long_a, long_b = "a" * 10_000, "a" * 9_999 + "b"
    assert len(search_cache_key(long_a)) < 100 and search_cache_key(long_a) != search_cache_key(long_b)
    assert search_cache_key(long_a) == search_cache_key("a" * 10_000)
    assert search_cache_key("x" * MAX_CACHE_KEY_CHARS) == "x" * MAX_CACHE_KEY_CHARS
    assert search_cache_key("\ud800" * 1000)  # lone surrogates hash too


def rss_mb() -> float:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads RSS from /proc")
def test_rss_stays_flat_over_ten_thousand_one_megabyte_queries():
    env = WebShopGenEnv(**SMALL)
    env.reset(options={"task_id": env.task_ids[0]})
    words = ["shoes", "red", "cotton", "wireless", "lamp", "pack", "size", "blue"]
    before = None
    for step in range(10_000):
        if env._done:  # keep searching: 15-step episodes truncate
            env.reset(options={"task_id": env.task_ids[0]})
        # 1 MB and distinct every step; the filler is punctuation, so the cost is the string, not BM25 tokens
        query = f"{words[step % len(words)]} q{step} " + "-" * (1 << 20)
        _, _, _, _, info = env.step(f"search[{query}]")
        assert info["is_action_valid"]
        if step == 200:
            before = rss_mb()
    growth = rss_mb() - before
    assert len(env.shop.search_cache) <= env.shop.cache_size
    assert growth < 64, f"RSS grew {growth:.0f} MB over 9,800 one-megabyte searches"


def test_data_dir_may_be_the_benchmark_data_folder(tmp_path):
    from ecpo_gym.webshop.products import resolve_data_files

    (tmp_path / "webshop").mkdir()
    assert resolve_data_files(tmp_path)["products"] == tmp_path / "webshop" / "items_shuffle_1000.json"
    assert resolve_data_files(tmp_path / "webshop")["products"] == tmp_path / "webshop" / "items_shuffle_1000.json"


def test_without_data_dir_webshop_reads_the_benchmark_data_folder(tmp_path, monkeypatch):
    """ECPO_DATA_DIR is where every env finds its data: WebShop reads its webshop/ when nothing nearer is named;
    $ECPO_WEBSHOP_DATA and data_dir= still win."""
    from ecpo_gym.webshop.products import resolve_data_files

    (tmp_path / "bench" / "webshop").mkdir(parents=True)
    (tmp_path / "own").mkdir()
    monkeypatch.delenv("ECPO_WEBSHOP_DATA", raising=False)
    monkeypatch.setenv("ECPO_DATA_DIR", str(tmp_path / "bench"))
    assert resolve_data_files()["attributes"] == tmp_path / "bench" / "webshop" / "items_ins_v2_1000.json"
    monkeypatch.setenv("ECPO_WEBSHOP_DATA", str(tmp_path / "own"))
    assert resolve_data_files()["attributes"] == tmp_path / "own" / "items_ins_v2_1000.json"
    assert resolve_data_files(tmp_path / "bench")["products"] == tmp_path / "bench" / "webshop" / "items_shuffle_1000.json"
    monkeypatch.delenv("ECPO_WEBSHOP_DATA")
    monkeypatch.delenv("ECPO_DATA_DIR")
    with pytest.raises(FileNotFoundError, match="ECPO_DATA_DIR"):
        resolve_data_files()
