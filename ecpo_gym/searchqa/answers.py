"""Answer scoring of the Search-R1 protocol: answer normalisation, exact match and token F1.

Normalisation (Search-R1's), in order: lowercase; delete every ASCII ``string.punctuation`` character
(Unicode letters and Unicode punctuation stay); replace the whole words ``a``/``an``/``the`` by a space;
collapse whitespace runs to one space and strip.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable

_ASCII_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_WHITESPACE = re.compile(r"\s+")


def normalize_answer(text: str) -> str:
    """The standard QA answer normalisation (lowercase, no ASCII punctuation, no articles, single spaces)."""
    if not isinstance(text, str):
        return ""
    text = text.lower().translate(_ASCII_PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return _WHITESPACE.sub(" ", text).strip()


def exact_match(prediction: str, golden_answers: Iterable[str]) -> float:
    """1.0 when the normalised prediction equals any normalised golden answer, else 0.0."""
    predicted = normalize_answer(prediction)
    return float(any(predicted == normalize_answer(gold) for gold in golden_answers))


def token_f1(prediction: str, golden_answers: Iterable[str]) -> float:
    """Best SQuAD-style token F1 of the prediction over the golden answers (normalised tokens).

    As in HotpotQA's official metric, a yes/no answer only scores when it matches exactly, so "no" never
    earns partial credit against "yes".
    """
    predicted = normalize_answer(prediction)
    best = 0.0
    for gold in golden_answers:
        gold_norm = normalize_answer(gold)
        if predicted in ("yes", "no") or gold_norm in ("yes", "no"):
            best = max(best, float(predicted == gold_norm))
            continue
        predicted_tokens, gold_tokens = predicted.split(), gold_norm.split()
        common = sum((Counter(predicted_tokens) & Counter(gold_tokens)).values())
        if common == 0:
            continue
        precision = common / len(predicted_tokens)
        recall = common / len(gold_tokens)
        best = max(best, 2 * precision * recall / (precision + recall))
    return best
