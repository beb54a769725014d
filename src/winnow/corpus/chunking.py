"""Splitting long text into passages of about ``max_words`` words that end at sentence boundaries.

Sentences are found with a simple rule, not a language model: a sentence ends after a word ending in
``.``, ``!`` or ``?`` (closing quotes or brackets may follow) when the next word starts with a
capital, a digit or a quote, and at every blank line. Abbreviations before a capital ("Dr. Smith")
therefore split; retrieval does not mind.

What :func:`split_into_passages` guarantees, for ``max_words >= 1``:

* Every word of the text appears exactly once, in order: ``" ".join(passages).split() == text.split()``.
  Whitespace inside a passage is normalised to single spaces.
* Every passage has between 1 and ``max_words`` words (a word is a run of non-space characters, so a
  single very long word still counts as one).
* Every passage except the last has at least half the budget (``2 * words >= max_words``).
* A passage ends mid-sentence only if it holds exactly ``max_words`` words: that happens when a
  sentence longer than the budget is cut, or when the next sentence does not fit and the passage is
  still under half full. So if no sentence is longer than half the budget, every passage ends at a
  sentence boundary.
"""

from __future__ import annotations

import re

_BLANK_LINE = re.compile(r"\n\s*\n")
_CLOSERS = "\"')]}»”’"
_SENTENCE_ENDS = (".", "!", "?")
_OPENING_QUOTES = "\"'«“‘„"


def split_into_passages(text: str, max_words: int) -> list[str]:
    """``text`` as passages of at most ``max_words`` words, packed greedily with whole sentences.

    A passage is closed when the next sentence would not fit and it already has at least half the
    budget; otherwise the next sentence is cut to fill it, so passages are never needlessly short.
    """
    if max_words < 1:
        raise ValueError(f"max_words must be at least 1, got {max_words}")
    passages: list[str] = []
    current: list[str] = []
    for sentence in sentence_words(text):
        words = sentence
        while len(words) > max_words - len(current):
            if 2 * len(current) >= max_words:
                passages.append(" ".join(current))
                current = []
            else:
                room = max_words - len(current)
                passages.append(" ".join(current + words[:room]))
                current, words = [], words[room:]
        current += words
    if current:
        passages.append(" ".join(current))
    return passages


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text``, each with its whitespace normalised to single spaces."""
    return [" ".join(words) for words in sentence_words(text)]


def sentence_words(text: str) -> list[list[str]]:
    """The sentences of ``text``, each as its list of words."""
    sentences = []
    for paragraph in _BLANK_LINE.split(text):
        words = paragraph.split()
        start = 0
        for i in range(len(words) - 1):
            if _ends_sentence(words[i]) and _starts_sentence(words[i + 1]):
                sentences.append(words[start:i + 1])
                start = i + 1
        if start < len(words):
            sentences.append(words[start:])
    return sentences


def _ends_sentence(word: str) -> bool:
    return word.rstrip(_CLOSERS).endswith(_SENTENCE_ENDS)


def _starts_sentence(word: str) -> bool:
    first = word[0]
    return first.isupper() or first.isdigit() or first in _OPENING_QUOTES
