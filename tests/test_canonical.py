"""The action canonicaliser (paper App. A) and ALFWorld's template-variant rules."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ecpo_gym.alfworld.env import ALFWORLD_REWRITES, ALFWorldGenEnv
from ecpo_gym.canonical import INVALID_ACTION, ActionCanonicalizer, normalize_text

ADMISSIBLE = [
    "go to desk 1", "go to drawer 10", "go to drawer 1", "open drawer 1", "close drawer 1",
    "take alarmclock 2 from desk 1", "move alarmclock 2 to desk 1", "use desklamp 1",
    "heat apple 1 with microwave 1", "clean mug 2 with sinkbasin 1", "cool tomato 1 with fridge 1",
    "examine desk 1", "inventory", "look",
]
alf = ActionCanonicalizer(rewrites=ALFWORLD_REWRITES)


def test_normalize_text():
    assert normalize_text("  Go To\tThe  Desk 1.\n") == "go to the desk 1"
    assert normalize_text('"look!"') == "look"
    assert normalize_text("click[Buy Now]") == "click[buy now]"
    assert normalize_text(None) == "" and normalize_text(3) == ""


@pytest.mark.parametrize("variant, canonical", [
    ("go to desk 1", "go to desk 1"),
    ("Go to the Desk 1.", "go to desk 1"),
    ("  GO   TO   DESK 1  ", "go to desk 1"),
    ("walk to desk1", "go to desk 1"),
    ("goto drawer 10", "go to drawer 10"),
    ("go to drawer 10!", "go to drawer 10"),
    ("put alarmclock 2 in/on desk 1", "move alarmclock 2 to desk 1"),
    ("Put the alarmclock 2 on the desk 1.", "move alarmclock 2 to desk 1"),
    ("place alarmclock 2 in desk 1", "move alarmclock 2 to desk 1"),
    ("move the alarmclock 2 into desk 1", "move alarmclock 2 to desk 1"),
    ("pick up the alarmclock 2 from the desk 1", "take alarmclock 2 from desk 1"),
    ("Take alarmclock 2 from desk 1", "take alarmclock 2 from desk 1"),
    ("get alarmclock 2 off desk 1", "take alarmclock 2 from desk 1"),
    ("turn on the desklamp 1", "use desklamp 1"),
    ("heat the apple 1 using microwave 1", "heat apple 1 with microwave 1"),
    ("wash mug 2 in sinkbasin 1", "clean mug 2 with sinkbasin 1"),
    ("cool tomato 1 in the fridge 1", "cool tomato 1 with fridge 1"),
    ("inspect desk 1", "examine desk 1"),
    ("check inventory", "inventory"),
    ("'look'", "look"),
    ("open the drawer 1", "open drawer 1"),
])
def test_alfworld_template_variants_meet_at_the_admissible_string(variant, canonical):
    assert alf(variant, ADMISSIBLE) == canonical


@pytest.mark.parametrize("garbage", [
    "", "   ", "go to desk 2", "go to drawer", "take alarmclock 2", "move alarmclock 2 to desk 2",
    "open drawer 10", "go to desk 1 and look", "I think I should go to desk 1", "<invalid>", "help",
    None, 42, ["look"],
])
def test_unmatched_or_non_text_is_invalid(garbage):
    assert alf(garbage, ADMISSIBLE) == INVALID_ACTION


def test_near_duplicates_stay_distinct():
    # drawer 1 and drawer 10 must never merge; invalid never merges with valid
    table = alf.index(ADMISSIBLE)
    assert alf("go to drawer 1", table) == "go to drawer 1" and alf("go to drawer 10", table) == "go to drawer 10"
    assert len(set(table.values())) == len(ADMISSIBLE)


def test_plain_canonicalizer_has_no_rewrites():
    plain = ActionCanonicalizer()
    assert plain("Look.", ["look"]) == "look"
    assert plain("put a in b", ["move a to b"]) == INVALID_ACTION


@pytest.fixture(scope="module")
def gen_env():
    env = ALFWorldGenEnv(num_tasks=6)
    env.reset(options={"task_id": "gen/Pick/0"})
    yield env
    env.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(action=st.one_of(st.text(max_size=80), st.binary(max_size=20), st.integers(), st.none(),
                        st.lists(st.text(max_size=5), max_size=3)))
def test_fuzzed_actions_never_raise_and_are_invalid(gen_env, action):
    key_before = gen_env.unwrapped._state_key()
    steps_before = gen_env.steps_taken
    if steps_before >= gen_env.max_steps - 1:
        gen_env.reset(options={"task_id": "gen/Pick/0"})
        key_before = gen_env._state_key()
    expected = gen_env.canonical_action(action)
    obs, reward, terminated, truncated, info = gen_env.step(action)
    assert info["action_key"] == expected
    if expected == INVALID_ACTION:
        assert reward == -0.1 and not info["is_action_valid"] and not terminated
        assert info["state_key"] == key_before and obs == "Nothing happens."
    if terminated or truncated:
        gen_env.reset(options={"task_id": "gen/Pick/0"})
