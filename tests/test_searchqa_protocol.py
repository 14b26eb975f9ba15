"""Search-R1 protocol pieces: answer normalisation / EM / F1, turn parsing, document formatting."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ecpo_gym.searchqa.answers import exact_match, normalize_answer, token_f1
from ecpo_gym.searchqa.protocol import format_documents, information_block, parse_turn


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The Beatles", "beatles"),                      # article + case
        ("a dog and an apple", "dog and apple"),          # every whole-word article
        ("Theatre", "theatre"),                           # "the" inside a word stays
        ("U.S.A.!", "usa"),                               # ASCII punctuation deleted, not spaced
        ("rock-n-roll", "rocknroll"),
        ("  New \t York\n City ", "new york city"),       # whitespace collapsed and stripped
        ("Wilhelm Conrad Röntgen", "wilhelm conrad röntgen"),  # unicode letters stay
        ("ÖSTERREICH", "österreich"),                     # unicode lowercasing
        ("1914–1918", "1914–1918"),                       # en dash is not ASCII punctuation
        ("«Paris»", "«paris»"),
        ("the", ""),
        ("", ""),
    ],
)
def test_normalize_answer(text, expected):
    assert normalize_answer(text) == expected


def test_exact_match_against_any_golden_answer():
    assert exact_match("the United States", ["USA", "United States"]) == 1.0
    assert exact_match("United  States.", ["united states"]) == 1.0
    assert exact_match("States", ["United States"]) == 0.0
    assert exact_match("anything", []) == 0.0
    assert exact_match("Rontgen", ["Röntgen"]) == 0.0  # no accent folding in the standard EM


def test_token_f1():
    assert token_f1("New York City", ["New York"]) == pytest.approx(0.8)  # p = 2/3, r = 1
    assert token_f1("Paris", ["London", "the Paris"]) == 1.0
    assert token_f1("no", ["yes"]) == 0.0
    assert token_f1("yes it is", ["yes"]) == 0.0  # yes/no only scores exactly
    assert token_f1("", ["x"]) == 0.0


@pytest.mark.parametrize(
    ("turn", "kind", "content"),
    [
        ("<think>I need facts.</think>\n<search> Kiss and Tell 1945 </search>", "search", "Kiss and Tell 1945"),
        ("<think>done</think><answer>Chief of Protocol</answer>", "answer", "Chief of Protocol"),
        ("<SEARCH>Upper</SEARCH>", "search", "Upper"),
        ("<think>maybe <answer>? no</think><search>q</search>", "search", "q"),  # tags inside think ignored
        ("<search>multi\nline</search> trailing text", "search", "multi\nline"),
    ],
)
def test_parse_valid_turns(turn, kind, content):
    parsed = parse_turn(turn)
    assert (parsed.kind, parsed.content) == (kind, content)


@pytest.mark.parametrize(
    ("turn", "reason_word"),
    [
        ("<search>q</search><answer>a</answer>", "both"),
        ("<answer>a</answer> then <search>q</search>", "both"),
        ("<search>a</search><search>b</search>", "repeats"),
        ("<answer>a</answer><answer>b</answer>", "repeats"),
        ("<search>unclosed query", "complete"),
        ("<answer>unclosed", "complete"),
        ("</search>", "complete"),
        ("no tags at all", "complete"),
        ("<search>   </search>", "empty"),
        ("<answer></answer>", "empty"),
        ("<search>mismatched</answer>", "complete"),
    ],
)
def test_parse_malformed_turns_are_invalid(turn, reason_word):
    parsed = parse_turn(turn)
    assert parsed.kind == "invalid" and not parsed.is_valid
    assert reason_word in parsed.reason


def test_parse_huge_and_non_string_inputs():
    assert parse_turn("x" * 1_000_000 + "<answer>y</answer>").content == "y"
    assert parse_turn("<think>" * 100_000).kind == "invalid"
    assert parse_turn("<search>" * 100_000).kind == "invalid"
    assert parse_turn(None).kind == "invalid"
    assert parse_turn(b"<answer>x</answer>").kind == "invalid"


_TAGS = st.sampled_from(["<search>", "</search>", "<answer>", "</answer>", "<think>", "</think>", "<SEARCH>",
                         "<information>", " ", "\n", "q", "é", "\x00"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_TAGS, st.text(max_size=8)), max_size=30).map("".join))
def test_parse_fuzz_never_raises_and_is_consistent(text):
    parsed = parse_turn(text)
    assert parsed.kind in {"search", "answer", "invalid"}
    if parsed.is_valid:
        assert parsed.content and parsed.content == parsed.content.strip()
    else:
        assert parsed.reason


def test_document_formatting_matches_search_r1():
    contents = ['"Kiss and Tell (1945 film)"\nKiss and Tell is a 1945 American comedy film.', '"Solo"\nline one\nline two']
    text = format_documents(contents)
    assert text == ('Doc 1(Title: "Kiss and Tell (1945 film)") Kiss and Tell is a 1945 American comedy film.\n'
                    'Doc 2(Title: "Solo") line one\nline two\n')
    assert information_block(text) == "\n\n<information>" + text.strip() + "</information>\n\n"
