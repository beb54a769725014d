"""Evaluation: answer metrics pinned against hand-computed cases, retrieval metrics, and real runs of
``winnow eval`` / ``winnow report`` (SmolLM2-135M, a tiny BM25 corpus), including kill-and-resume."""

from __future__ import annotations

import pytest

from winnow.errors import WinnowError
from winnow.evaluation.answers import (
    AnswerMatcher,
    accuracy,
    dpr_tokens,
    exact_match,
    has_answer,
    normalize_answer,
    token_f1,
)

# --- answer metrics --------------------------------------------------------------------------------


def test_squad_normalisation():
    assert normalize_answer("The  Beatles!") == "beatles"
    assert normalize_answer("An apple, a day") == "apple day"
    # Articles only as whole words: "theatre" keeps its "the".
    assert normalize_answer("Theatre") == "theatre"
    assert normalize_answer("  ") == ""


def test_exact_match():
    assert exact_match("The Beatles.", ["beatles"]) == 1.0
    assert exact_match("Beatles band", ["beatles"]) == 0.0
    assert exact_match("Ringo", ["John", "ringo"]) == 1.0  # best over the gold answers
    assert exact_match("x", []) == 0.0
    # A bare string is one answer, not a list of characters.
    assert exact_match("b", "abc") == 0.0


def test_token_f1_hand_computed():
    # prediction "cat sat" (after dropping "the") vs gold "cat": overlap 1, P=1/2, R=1/1 -> F1 = 2/3.
    assert token_f1("the cat sat", ["a cat"]) == pytest.approx(2 / 3)
    # "new york city" vs "york new": overlap 2, P=2/3, R=1 -> 0.8.
    assert token_f1("New York City", ["York, New"]) == pytest.approx(0.8)
    # Multiset overlap: "a a b" -> tokens [b] after article removal; use non-articles instead.
    # "x x y" vs "x z": common x once, P=1/3, R=1/2 -> F1 = 0.4.
    assert token_f1("x x y", ["x z"]) == pytest.approx(0.4)
    assert token_f1("nothing shared", ["other"]) == 0.0
    # Best over golds: 0.4 and 1.0.
    assert token_f1("x z", ["x x y", "z x"]) == 1.0
    # Empty after normalisation: agree only with an empty gold.
    assert token_f1("the", ["a"]) == 1.0
    assert token_f1("the", ["cat"]) == 0.0


def test_accuracy_is_containment_on_normalised_text():
    assert accuracy("I believe it was The Beatles, in 1963.", ["the beatles"]) == 1.0
    assert accuracy("The Rolling Stones", ["Beatles", "Stones"]) == 1.0
    assert accuracy("The Rolling Stones", ["Beatles"]) == 0.0
    # An answer that normalises to nothing is ignored rather than matching everything.
    assert accuracy("anything", ["The"]) == 0.0


def test_regex_answers():
    pattern = [r"(Bill|William( Jefferson)?) Clinton"]
    assert exact_match("William Jefferson Clinton.", pattern, regex=True) == 1.0
    assert exact_match("President Bill Clinton", pattern, regex=True) == 0.0  # must match it all
    assert accuracy("It was President bill clinton.", pattern, regex=True) == 1.0
    assert accuracy("It was Hillary.", pattern, regex=True) == 0.0
    assert token_f1("bill clinton", pattern, regex=True) == 1.0
    assert has_answer("Clinton: Bill Clinton served two terms", pattern, regex=True)
    assert not has_answer("George Bush", pattern, regex=True)
    with pytest.raises(WinnowError, match="not a valid regular expression"):
        has_answer("text", ["(unclosed"], regex=True)


def test_dpr_tokens_and_has_answer():
    # Tokens come out NFD-decomposed: the accent stays inside the word as a combining mark.
    assert dpr_tokens("Caf\u00e9, Paris-France! 3.5") == ["cafe\u0301", ",", "paris", "-", "france", "!", "3", ".", "5"]
    assert has_answer("Paris, France is large.", ["paris"])
    # Token sequences, not substrings: "Paris" is not in "Parisian".
    assert not has_answer("A Parisian cafe", ["Paris"])
    assert has_answer("born in New  York City", ["new york"])
    assert not has_answer("York, New", ["new york"])
    # NFD on both sides: a composed é in the text matches a decomposed é in the answer.
    assert has_answer("Caf\u00e9 society", ["Cafe\u0301"])
    # Punctuation is tokenised the same on both sides, so "U.S." is found inside "the U.S. army".
    assert has_answer("the U.S. army", ["U.S."])
    assert not has_answer("anything", ["   "])
    matcher = AnswerMatcher(["1963", "Ringo Starr"])
    assert [matcher(t) for t in ("in 1963 they", "ringo  starr!", "Starr Ringo")] == [True, True, False]
