"""Adversarial inputs on every registered environment id (issue #15).

Each registered id is driven with hypothesis-generated turns: huge strings, unicode, lone surrogates, NUL,
nested and unbalanced tags and brackets, and values that are not ``str`` at all. Every ``step`` must return
(never raise) and keep the contract; a *garbage* input (one that cannot be an action on any of our envs: it
holds a NUL or a lone surrogate outside any action syntax, breaks the action syntax, or is not a ``str``) must be
an invalid action; a *surface variant* of an admissible action (case, whitespace, quotes, backticks, a trailing
full stop) must canonicalise to the same action as the admissible string itself.

The embedded ids always run; ``ecpo/ALFWorld-v0``, ``ecpo/WebShop-v0`` and ``ecpo/SearchQA-v0`` run when
``ECPO_DATA_DIR`` is set. ``INPUTS_PER_ENV`` turns per embedded id (six ids) make more than 10,000 in all.
"""

from __future__ import annotations

import math
from pathlib import Path

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ecpo_gym
from ecpo_gym.canonical import INVALID_ACTION

STEP_KEYS = {"task_id", "task", "task_type", "state_key", "observation_key", "admissible_actions", "step",
             "action_key", "is_action_valid", "won"}

EMBEDDED = {
    "ecpo/ALFWorldGen-v0": {"num_tasks": 3},
    "ecpo/WebShopGen-v0": {"num_products": 150, "catalogue_seed": 3},
    "ecpo/SearchQAGen-v0": {},
    "ecpo/DivergentAnchor-v0": {},
    "ecpo/DivergentAnchorNoisy-v0": {},
    "ecpo/DivergentAnchorWide-v0": {},
}


def real_data_kwargs(env_id: str, root: Path, cache: Path) -> dict:
    return {
        "ecpo/ALFWorld-v0": {"task_types": ["Look"]},
        "ecpo/WebShop-v0": {"products_file": root / "webshop" / "sample" / "items_shuffle_sample.json",
                            "attributes_file": root / "webshop" / "items_ins_v2_1000.json"},
        "ecpo/SearchQA-v0": {"data_dir": root / "searchqa", "cache_dir": cache},
    }[env_id]


REAL_DATA = ("ecpo/ALFWorld-v0", "ecpo/WebShop-v0", "ecpo/SearchQA-v0")
EXAMPLES_PER_ENV = 60
TURNS_PER_EXAMPLE = (30, 40)
INPUTS_PER_ENV = EXAMPLES_PER_ENV * TURNS_PER_EXAMPLE[0]  # at least this many turns per id

# ---------------------------------------------------------------------- input strategies
NON_STR = [None, 0, -1, 3.5, math.nan, True, b"look", bytearray(b"click[buy now]"), ["look"], ("look",),
           {"action": "look"}, {"look"}, object(), 10**100]
# invalid on every env: broken or empty action syntax
BROKEN_SYNTAX = ["", " ", "\n\t ", "[]", "[[[]]]", "search[", "search[]", "click[", "click[]", "click[[", "click]]",
                 "[click[x]]", "<search>", "</search>", "<search></search>", "<search>   </search>",
                 "<answer></answer>", "<SEARCH></search>", "<search><search>q</search></search>",
                 "<answer>a</answer><search>q</search>", "<search>q</search><answer>a</answer>",
                 "<search>q<answer>a</answer></search>", "<answer><answer>a</answer></answer>", "\x00", "\ud800"]
JUNK = st.sampled_from(["\x00", "\ud800", "\udfff", "\x00\udc80", "\ud83d"])
ANY_CHAR = st.characters(exclude_categories=())  # every code point, lone surrogates included
NO_SYNTAX = st.text(st.characters(exclude_categories=(), exclude_characters="[]<>"), max_size=30)
TOKENS = ["<search>", "</search>", "<answer>", "</answer>", "<think>", "</think>", "<SEARCH>", "</Answer>", "[",
          "]", "click", "search", "buy now", "next >", "go to", "look", "open", "door", " ", "\n", "\t", "\x00",
          "\ud800", "é", "\u200b", "\u2028", '"', "'", "`", ".", "!", "Ω", "🛒", "{}", "\\"]

garbage = st.one_of(
    st.builds(lambda head, junk, tail: head + junk + tail, NO_SYNTAX, JUNK, NO_SYNTAX),
    st.sampled_from(BROKEN_SYNTAX),
    st.sampled_from(NON_STR),
    st.builds(lambda piece, n: (piece or "x") * n + "\x00", NO_SYNTAX, st.integers(100, 5000)),  # big
)
anything = st.one_of(
    st.text(ANY_CHAR, max_size=80),
    st.lists(st.sampled_from(TOKENS), max_size=25).map("".join),  # nested and unbalanced tags/brackets
    st.builds(lambda piece, n: piece * n, st.sampled_from(TOKENS), st.integers(1, 3000)),
)


def ascii_upper(text: str) -> str:
    return "".join(c.upper() if c.isascii() else c for c in text)


def ascii_title(text: str) -> str:
    return " ".join(w[:1].upper() + w[1:] if w.isascii() else w for w in text.split(" "))


SURFACE_VARIANTS = {
    "upper": ascii_upper,
    "title": ascii_title,
    "inner_whitespace": lambda a: a.replace(" ", " \t  "),
    "outer_whitespace": lambda a: f"  \n\t{a} \n",
    "double_quotes": lambda a: f'"{a}"',
    "single_quotes": lambda a: f"'{a}'",
    "backticks": lambda a: f"`{a}`",
    "trailing_period": lambda a: f"{a}.",
    "all_of_them": lambda a: f' "{ascii_upper(a).replace(" ", "  ")}." ',
}

turn = st.one_of(
    garbage.map(lambda g: ("garbage", g)),
    anything.map(lambda a: ("any", a)),
    st.tuples(st.just("variant"), st.sampled_from(sorted(SURFACE_VARIANTS)), st.integers(0, 10**6)),
)


# ---------------------------------------------------------------------- the driver
def concrete_actions(env) -> list[str]:
    """Executable strings for the current state: the admissible set with open templates filled in."""
    actions = []
    for action in env.admissible_actions():
        if action == "search[<query>]":
            actions.append("search[red cotton shoes]")
        elif action == "<search>{query}</search>":
            actions.append("<search>who founded the city</search>")
        elif action == "<answer>{answer}</answer>":
            actions.append("<answer>the old city</answer>")
        else:
            actions.append(action)
    return actions


def check_contract(env, result) -> dict:
    obs, reward, terminated, truncated, info = result
    assert isinstance(obs, str) and env.observation_space.contains(obs)
    assert isinstance(reward, float) and math.isfinite(reward)
    assert isinstance(terminated, bool) and isinstance(truncated, bool)
    assert STEP_KEYS <= set(info)
    assert info["is_action_valid"] == (info["action_key"] != INVALID_ACTION)
    return info


def play(env, task_id: str, turns) -> int:
    """Play ``turns`` from a reset of ``task_id``; returns how many inputs were stepped."""
    env.reset(options={"task_id": task_id})
    done = False
    for kind, *payload in turns:
        if done:
            env.reset(options={"task_id": task_id})
        expected = None
        if kind == "variant":
            name, pick = payload
            options = concrete_actions(env)
            base = options[pick % len(options)] if options else "look"
            expected = env.canonical_action(base)
            action = SURFACE_VARIANTS[name](base)
            assert env.canonical_action(action) == expected, (name, base, action)
        else:
            action = payload[0]
        info = check_contract(env, env.step(action))
        if kind == "garbage":
            assert info["action_key"] == INVALID_ACTION and not info["is_action_valid"], repr(action)[:200]
        elif kind == "variant":
            assert info["action_key"] == expected, (name, base, action)
        done = env._done  # the episode ended: terminated or truncated
    return len(turns)


INPUT_COUNTS: dict[str, int] = {}


def fuzz(env_id: str, env) -> None:
    task_ids = list(env.task_ids[:3])

    @settings(max_examples=EXAMPLES_PER_ENV, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(task=st.sampled_from(task_ids),
           turns=st.lists(turn, min_size=TURNS_PER_EXAMPLE[0], max_size=TURNS_PER_EXAMPLE[1]))
    def run(task, turns):
        INPUT_COUNTS[env_id] = INPUT_COUNTS.get(env_id, 0) + play(env, task, turns)

    run()


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz_cache")


def test_every_registered_id_is_fuzzed():
    assert set(ecpo_gym.ENV_ENTRY_POINTS) == set(EMBEDDED) | set(REAL_DATA)


@pytest.mark.parametrize("env_id", sorted(EMBEDDED))
def test_embedded_env_survives_adversarial_turns(env_id):
    env = gym.make(env_id, **EMBEDDED[env_id]).unwrapped
    INPUT_COUNTS.pop(env_id, None)
    fuzz(env_id, env)
    assert INPUT_COUNTS[env_id] >= INPUTS_PER_ENV
    env.close()


@pytest.mark.slow
@pytest.mark.data
@pytest.mark.parametrize("env_id", REAL_DATA)
def test_real_data_env_survives_adversarial_turns(env_id, data_dir, cache_dir):
    env = gym.make(env_id, **real_data_kwargs(env_id, data_dir, cache_dir)).unwrapped
    fuzz(env_id, env)
    env.close()


def test_enough_adversarial_inputs_in_all():
    """Six embedded ids at ``INPUTS_PER_ENV`` each: at least 10,000 inputs whenever the embedded tests run."""
    assert len(EMBEDDED) * INPUTS_PER_ENV >= 10_000


@pytest.mark.parametrize("env_id", sorted(EMBEDDED))
def test_megabyte_inputs_are_invalid_and_cheap(env_id):
    env = gym.make(env_id, **EMBEDDED[env_id]).unwrapped
    env.reset(options={"task_id": env.task_ids[0]})
    for action in ("\x00" * (1 << 20), "[" * (1 << 20), "<search>" * (1 << 17), "\ud800" * (1 << 20),
                   "click[" + "x" * (1 << 20), "a" * (1 << 20) + "\x00"):
        info = check_contract(env, env.step(action))
        assert info["action_key"] == INVALID_ACTION
        if env._done:
            env.reset(options={"task_id": env.task_ids[0]})
    env.close()
