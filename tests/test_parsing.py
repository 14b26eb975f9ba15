"""Response parsing: well-formed action blocks, search-QA replies read by the env's own protocol, hostile inputs."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ecpo_gym.searchqa.protocol import parse_turn, reply_action
from ecpo_train.policies.parsing import extract_think, format_reply, parse_action

ALF = "ecpo/ALFWorld-v0"
QA = "ecpo/SearchQA-v0"


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("<think>the mug is on the desk</think>\n<action>go to desk 1</action>", "go to desk 1"),
        ("<action>  take mug 1 from desk 1 \n</action>", "take mug 1 from desk 1"),
        ("<ACTION>look</Action>", "look"),
        ("<think>a</think><action>click[b07x4 buy now]</action> trailing words", "click[b07x4 buy now]"),
        ("<action>去 书桌 1</action>", "去 书桌 1"),  # returned as written; the env calls it invalid
        ("<action>go\x00 to\x1b desk 1</action>", "go\x00 to\x1b desk 1"),
    ],
)
def test_well_formed_action_block_returns_its_stripped_content(response, expected):
    assert parse_action(response, ALF) == expected


@pytest.mark.parametrize(
    "response",
    [
        "",
        "go to desk 1",  # no tags
        "<think>go to desk 1</think>",
        "<action>look</action><action>inventory</action>",  # two action blocks
        "<action><action>look</action></action>",  # nested action
        "<action>look <think>hmm</think></action>",  # another tag nested inside
        "<action>look <search>x</search></action>",
        "<action>look",  # unclosed
        "look</action>",  # no opening
        "</action>look<action>",  # closing before opening
        "<action>   </action>",  # blank
        "<think>I could say <action>look</action></think>",  # quoted inside reasoning
        "<think>unclosed reasoning <action>look</action>",
        "<action >look</action>",  # not the tag
    ],
)
def test_malformed_responses_give_none(response):
    assert parse_action(response, ALF) is None


def test_action_after_closed_think_is_taken_even_if_think_mentions_tags():
    assert parse_action("<think>use the action tag</think><action>look</action>", "ecpo/WebShop-v0") == "look"
    assert parse_action("<think>a</think><think>b</think><action>look</action>", ALF) == "look"


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("<think>need facts</think><search> first nobel prize physics </search>",
         "<search>first nobel prize physics</search>"),
        ("<think>known</think><answer> Wilhelm Röntgen </answer>", "<answer>Wilhelm Röntgen</answer>"),
        # tags match in any case, as the environment reads them
        ("<SEARCH>q</SEARCH>", "<search>q</search>"),
        ("<Answer>Paris</ANSWER>", "<answer>Paris</answer>"),
        ("<search>multi\nline</search>", "<search>multi\nline</search>"),
        # reasoning that mentions a tag does not spoil the action
        ("<think>maybe <answer>x</answer></think><search>q</search>", "<search>q</search>"),
        ("<search>q</search> and some trailing words", "<search>q</search>"),
    ],
)
def test_search_qa_replies_are_read_by_the_environment_protocol(response, expected):
    assert parse_action(response, QA) == expected


@pytest.mark.parametrize(
    "response",
    ["", "just text", "<action>look</action>", "<search>q", "<answer>a</search>", "<search></search>",
     "<search>q1</search><answer>a</answer>",  # both kinds: ambiguous
     "<search>q1</search><search>q2</search>"],  # a repeated tag
)
def test_search_qa_turns_the_environment_calls_invalid_give_none(response):
    assert parse_action(response, QA) is None
    assert not parse_turn(response).is_valid


_PIECES = st.sampled_from(["<search>", "</search>", "<answer>", "</answer>", "<SEARCH>", "</Answer>", "<think>",
                           "</think>", "q", " ", "\n", "<", ">", "/"])


@settings(max_examples=400, deadline=None)
@given(st.lists(_PIECES, max_size=14).map("".join))
def test_the_parsed_search_qa_action_is_the_turn_the_environment_reads(text):
    action = parse_action(text, QA)
    turn = parse_turn(text)
    assert (action is None) == (not turn.is_valid)
    if action is not None:  # stepping with the parsed action is stepping with the reply itself
        assert parse_turn(action) == turn


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_parsers_never_raise_on_any_text(text):
    for env in (ALF, QA, "ecpo/WebShop-v0", "diagnostic"):
        result = parse_action(text, env)
        assert result is None or isinstance(result, str)
    assert extract_think(text) is None or isinstance(extract_think(text), str)


@pytest.mark.parametrize(
    "response",
    [
        "<action>" * 12_500,  # 100 kB of openers
        "<search>" * 12_500 + "</answer>",  # every opener scans to the end with a naive lazy regex
        "<think>" * 14_000 + "<action>look</action>",
        ("中文" * 30_000) + "<action>look</action>",
        "<action" + " " * 100_000 + ">",
        "\x00\x01\x7f" * 34_000,
    ],
)
def test_100kb_adversarial_responses_finish_fast(response):
    start = time.perf_counter()
    for env in (ALF, QA):
        parse_action(response, env)
    extract_think(response)
    assert time.perf_counter() - start < 0.5


def test_long_valid_response_still_parses():
    response = "<think>" + "reasoning " * 10_000 + "</think><action>go to desk 1</action>"
    assert parse_action(response, ALF) == "go to desk 1"
    assert parse_action("<think>" + "x" * 100_000 + "</think><answer>Paris</answer>", QA) == "<answer>Paris</answer>"


def test_non_string_input_gives_none():
    assert parse_action(None, ALF) is None  # type: ignore[arg-type]
    assert parse_action(b"<action>look</action>", ALF) is None  # type: ignore[arg-type]


def test_extract_think():
    assert extract_think("<think> plan: go to desk </think><action>go to desk 1</action>") == "plan: go to desk"
    assert extract_think("<action>look</action>") is None
    assert extract_think("<think>unclosed") is None


# ---------------------------------------------------------------------------------------------- format_reply
@pytest.mark.parametrize(
    ("env", "action"),
    [
        (ALF, "go to desk 1"),
        ("ecpo/ALFWorldGen-v0", "put mug 1 in/on coffeemachine 1"),
        ("ecpo/WebShop-v0", "search[red running shoes size 9]"),
        ("ecpo/WebShop-v0", "click[b07x4 buy now]"),
        ("ecpo/DivergentAnchor-v0", "open red door"),
        ("diagnostic", "去 书桌 1"),
        (QA, "<search>who wrote hamlet</search>"),
        (QA, "<answer>William Shakespeare</answer>"),
    ],
)
def test_format_reply_is_parsed_back_to_its_action_in_every_family(env, action):
    reply = format_reply(action, env)
    assert parse_action(reply, env) == action


def test_format_reply_takes_the_search_block_of_an_expert_text():
    expert = "<think>I need evidence.</think><search>hamlet author</search>"
    assert format_reply(expert, QA) == "<search>hamlet author</search>" == parse_action(expert, QA)


@pytest.mark.parametrize(("env", "action"), [(ALF, ""), (ALF, "  \n"), (ALF, "look <think>"), (ALF, "</Action>"),
                                            (QA, "who wrote hamlet"), (QA, "<search>open")])
def test_format_reply_refuses_an_action_no_reply_can_carry(env, action):
    with pytest.raises(ValueError):
        format_reply(action, env)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60) | st.lists(_PIECES, max_size=10).map("".join))
def test_format_reply_round_trips_whatever_it_accepts(text):
    for env in (ALF, "ecpo/WebShop-v0", "diagnostic", QA):
        try:
            reply = format_reply(text, env)
        except ValueError:
            continue
        expected = reply_action(text) if env == QA else text.strip()
        assert parse_action(reply, env) == expected
