"""How text becomes BM25 terms: lower-cased words, English stop words removed, Snowball English stems.

Passages and queries must go through exactly the same analysis, or a query term never meets its
passage term; both the builder and the searcher call this module. The word pattern and stop-word
list are bm25s's (scikit-learn's ``\\b\\w\\w+\\b`` and bm25s's English list); the stemmer is PyStemmer's
Snowball English, as in Pyserini's default Lucene analyzer.
"""

from __future__ import annotations

from typing import Sequence

import bm25s
import Stemmer

from ..errors import WinnowError
from ..records import Passage

STOPWORDS = "en"
STEMMER = "english"
STEMMER_LABEL = f"snowball-{STEMMER}"  # as recorded in the manifest
FIELDS = ("title", "text")


def indexed_text(passage: Passage) -> str:
    """The text a passage is indexed under: its title, a newline, then its text."""
    return f"{passage.title}\n{passage.text}"


def make_stemmer(label: str = STEMMER_LABEL) -> Stemmer.Stemmer:
    """The stemmer named by a manifest's ``bm25.stemmer`` (``snowball-english``)."""
    return Stemmer.Stemmer(label.removeprefix("snowball-"))


def tokenize_corpus(texts: Sequence[str], stemmer: Stemmer.Stemmer) -> bm25s.tokenization.Tokenized:
    """Term ids per text plus the vocabulary (term → id), the form ``bm25s.BM25.index`` takes."""
    return bm25s.tokenize(list(texts), stopwords=STOPWORDS, stemmer=stemmer, return_ids=True,
                          show_progress=False)


def require_indexable_words(tokens: bm25s.tokenization.Tokenized, source: str) -> None:
    """Refuse a corpus none of whose passages has a term left after analysis: BM25 has nothing to
    index (and bm25s fails on the empty vocabulary with a bare ``ValueError``)."""
    if not tokens.vocab:
        raise WinnowError(f"{source}: no passage has a word to index: every word is a stop word, a single "
                          "character or punctuation", "BM25 indexes words of two or more letters or digits that "
                                                      "are not English stop words; check that the corpus holds text")


def tokenize_queries(texts: Sequence[str], stemmer: Stemmer.Stemmer) -> list[list[str]]:
    """Stemmed terms per query (stop words removed); one bm25s call for the whole batch."""
    terms: list[list[str]] = bm25s.tokenize(list(texts), stopwords=STOPWORDS, stemmer=stemmer, return_ids=False,
                                            show_progress=False)
    return terms
