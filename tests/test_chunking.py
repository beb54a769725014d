"""The sentence splitter and passage packer: every word kept in order, budgets and boundaries kept."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from winnow.corpus.chunking import sentence_words, split_into_passages, split_sentences


def test_sentences_end_at_punctuation_before_a_capital_digit_or_quote():
    text = 'It rained. Then it stopped! Did it? 3 more came. "Yes," she said, e.g. this. and that.'
    assert split_sentences(text) == ["It rained.", "Then it stopped!", "Did it?", "3 more came.",
                                     '"Yes," she said, e.g. this. and that.']


def test_closing_quotes_and_brackets_stay_with_their_sentence():
    assert split_sentences('He said "Stop." Then he left (it was late.) Nobody minded.') == [
        'He said "Stop."', "Then he left (it was late.)", "Nobody minded."]


def test_blank_lines_end_sentences_and_single_newlines_do_not():
    text = "# Heading\n\nFirst line\ncontinues here\n \n\n\nlast paragraph"
    assert split_sentences(text) == ["# Heading", "First line continues here", "last paragraph"]


def test_capitals_outside_ascii_start_sentences():
    assert split_sentences("Il pleut. Étonnant. Ça va.") == ["Il pleut.", "Étonnant.", "Ça va."]


def test_short_sentences_are_packed_whole_up_to_the_budget():
    text = "One two three. Four five six. Seven eight nine. Ten eleven twelve."
    assert split_into_passages(text, 7) == ["One two three. Four five six.", "Seven eight nine. Ten eleven twelve."]


def test_a_passage_under_half_full_is_filled_from_the_next_sentence():
    text = "One two. Three four five six seven eight nine ten eleven twelve."
    assert split_into_passages(text, 6) == ["One two. Three four five six", "seven eight nine ten eleven twelve."]


def test_a_sentence_longer_than_the_budget_is_cut_on_word_boundaries():
    text = "Short one here. " + " ".join(f"W{i}" for i in range(25)) + "."
    passages = split_into_passages(text, 6)
    assert passages[0] == "Short one here."  # half the budget: closed rather than filled
    assert [len(p.split()) for p in passages] == [3, 6, 6, 6, 6, 1]


def test_empty_and_blank_text_give_no_passages():
    assert split_into_passages("", 10) == []
    assert split_into_passages(" \n\n\t ", 10) == []


def test_budget_must_be_positive():
    with pytest.raises(ValueError, match="max_words"):
        split_into_passages("text", 0)


# Texts built from words that end sentences, start them, both or neither, with all kinds of spacing.
WORDS = st.sampled_from(["the", "cat", "Sat.", "on", "It", "mat!", "42", "why?", '"Quote', 'end."', "e.g.",
                         "Éa", "x" * 40, "(aside)", "Done.)"])
SPACES = st.sampled_from([" ", "  ", "\n", "\t", "\n\n", " \n \n"])
TEXTS = st.lists(st.tuples(WORDS, SPACES), max_size=120).map(lambda pairs: "".join(w + s for w, s in pairs))


@settings(max_examples=300)
@given(text=TEXTS, max_words=st.integers(min_value=1, max_value=40))
def test_passages_keep_every_word_in_order_within_the_budget(text, max_words):
    passages = split_into_passages(text, max_words)
    assert " ".join(passages).split() == text.split()
    sizes = [len(p.split()) for p in passages]
    assert all(1 <= size <= max_words for size in sizes)
    assert all(2 * size >= max_words for size in sizes[:-1])


@settings(max_examples=300)
@given(text=TEXTS, max_words=st.integers(min_value=1, max_value=40))
def test_passages_end_mid_sentence_only_when_full(text, max_words):
    sentence_ends, total = set(), 0
    for sentence in sentence_words(text):
        total += len(sentence)
        sentence_ends.add(total)
    end = 0
    for passage in split_into_passages(text, max_words):
        size = len(passage.split())
        end += size
        assert end in sentence_ends or size == max_words


@settings(max_examples=200)
@given(lengths=st.lists(st.integers(min_value=1, max_value=10), min_size=1, max_size=40),
       max_words=st.integers(min_value=20, max_value=60))
def test_sentences_no_longer_than_half_the_budget_are_never_cut(lengths, max_words):
    text = " ".join("Start" + " w" * (n - 1) + "." for n in lengths)
    sentence_ends = {sum(lengths[:i + 1]) for i in range(len(lengths))}
    end = 0
    for passage in split_into_passages(text, max_words):
        end += len(passage.split())
        assert end in sentence_ends
        assert passage.startswith("Start") and passage.endswith(".")
