"""Evaluation: answer metrics pinned against hand-computed cases, retrieval metrics, and real runs of
``winnow eval`` / ``winnow report`` (SmolLM2-135M, a tiny BM25 corpus), including kill-and-resume."""

from __future__ import annotations

import math

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
from winnow.evaluation.retrieval import answer_ranks, answer_recall, qrels_metrics, run_from_ranked

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


# --- retrieval metrics -----------------------------------------------------------------------------


def test_answer_ranks_and_recall_hand_computed():
    matcher = AnswerMatcher(["Uruguay"])
    texts = ["England won in 1966.", "Uruguay hosted and won in 1930.", "Italy won in 1934.", "uruguay again"]
    assert answer_ranks(texts, matcher) == [2, 4]
    # Three questions: first answer at rank 2, at rank 7, and never.
    per_question = [[2, 4], [7], []]
    assert answer_recall(per_question, ks=(1, 2, 5, 10)) == pytest.approx(
        {"R@1": 0.0, "R@2": 1 / 3, "R@5": 1 / 3, "R@10": 2 / 3})
    assert answer_recall([], ks=(5,)) == {"R@5": 0.0}


def test_qrels_metrics_hand_computed():
    qrels = {"q1": {"a": 1, "b": 2, "c": 0}, "q2": {"x": 1}, "q3": {"n": 0}, "q4": {"e": 1}}
    ranked = {"q1": ["c", "a", "d", "b"], "q2": ["y", "z"], "q3": ["n"], "q4": []}
    got = qrels_metrics(qrels, ranked, recall_ks=(1, 2, 4), capped=True)
    # q1: relevant a (1) at rank 2 and b (2) at rank 4; trec_eval's nDCG uses the grade as the gain:
    # DCG = 1/log2(3) + 2/log2(5), ideal = 2/log2(2) + 1/log2(3).
    ndcg_q1 = (1 / math.log2(3) + 2 / math.log2(5)) / (2 + 1 / math.log2(3))
    # q3 has no relevant document: left out. q2 finds nothing; q4's empty list scores 0, not skipped.
    assert got["judged_questions"] == 3 and got["unjudged_questions"] == 1
    assert got["nDCG@10"] == pytest.approx(ndcg_q1 / 3)
    assert got["MRR@10"] == pytest.approx(0.5 / 3)
    assert (got["R@1"], got["R@2"], got["R@4"]) == pytest.approx((0.0, 0.5 / 3, 1 / 3))
    # Capped: q1 at k=2 found 1 of min(2, 2) -> 0.5, same as plain recall here.
    assert got["R_cap@2"] == pytest.approx(0.5 / 3)


def test_capped_recall_divides_by_min_k_relevant():
    qrels = {"q": {f"d{i}": 1 for i in range(10)}}
    got = qrels_metrics(qrels, {"q": ["d0", "x", "d1", "d2"]}, recall_ks=(2, 4), capped=True)
    assert got["R@2"] == pytest.approx(1 / 10) and got["R_cap@2"] == pytest.approx(1 / 2)
    assert got["R@4"] == pytest.approx(3 / 10) and got["R_cap@4"] == pytest.approx(3 / 4)


def test_run_scores_follow_the_list_order_not_the_ids():
    # trec_eval re-sorts by score (ties by docid): the rank-derived scores must keep "z" first.
    assert run_from_ranked({"q": ["z", "a", "z", "m"]}) == {"q": {"z": 4.0, "a": 3.0, "m": 1.0}}
    got = qrels_metrics({"q": {"z": 1}}, {"q": ["z", "a"]}, recall_ks=(1,))
    assert got["MRR@10"] == 1.0 and got["R@1"] == 1.0
