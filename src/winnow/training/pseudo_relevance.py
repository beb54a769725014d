"""Pseudo relevance pairs from conversational QA (RankRAG §4.2 part 4, second paragraph).

"We cut each document into 150-word chunks (c1, c2, ..., cn). We compute the 4-gram recall score
between each chunk ci and the ground-truth answer a, considering segments with a recall score above
0.5 as relevant and those below 0.1 as irrelevant." Chunks in between are left out.

Recall is the share of the answer's word 4-grams found in the chunk, over SQuAD-normalised words.
An answer shorter than four words uses n-grams of its own length (a two-word answer is judged on
its one bigram), since a 4-gram of a short answer does not exist.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..answers import normalize_answer

CHUNK_WORDS = 150
N = 4
RELEVANT_ABOVE = 0.5
IRRELEVANT_BELOW = 0.1


def word_chunks(document: str, size: int = CHUNK_WORDS) -> list[str]:
    """The document cut into consecutive ``size``-word chunks (the last may be shorter)."""
    words = document.split()
    return [" ".join(words[start:start + size]) for start in range(0, len(words), size)]


def _ngrams(words: Sequence[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]


def ngram_recall(chunk: str, answer: str, n: int = N) -> float:
    """Share of the answer's n-grams (n capped at the answer's length) that occur in ``chunk``."""
    answer_words = normalize_answer(answer).split()
    if not answer_words:
        return 0.0
    n = min(n, len(answer_words))
    wanted = _ngrams(answer_words, n)
    present = set(_ngrams(normalize_answer(chunk).split(), n))
    return sum(gram in present for gram in wanted) / len(wanted)


def label_chunks(document: str, answer: str) -> list[tuple[str, bool]]:
    """(chunk, relevant) for each chunk the paper's thresholds decide; undecided chunks are left out."""
    labelled = []
    for chunk in word_chunks(document):
        recall = ngram_recall(chunk, answer)
        if recall > RELEVANT_ABOVE:
            labelled.append((chunk, True))
        elif recall < IRRELEVANT_BELOW:
            labelled.append((chunk, False))
    return labelled
