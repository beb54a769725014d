"""How text becomes BM25 terms: lower-cased words, English stop words removed, stemmed.

Passages and queries must go through exactly the same analysis, or a query term never meets its
passage term; both the builder and the searcher call this module, with the stop words and stemmer
the index's manifest names. The word pattern is bm25s's (scikit-learn's ``\\b\\w\\w+\\b``). Two
profiles (:data:`PROFILES`), chosen at ``winnow index --bm25-profile``:

* ``default``: bm25s's English stop-word list and PyStemmer's Snowball English ("Porter2") stemmer;
* ``pyserini``: as close to Pyserini's default BM25 (Anserini's ``DefaultEnglishAnalyzer``: Lucene's
  33 English stop words and the original Porter stemmer, k1 = 0.9, b = 0.4; RRR, Glass et al. 2024,
  retrieves with it) as bm25s allows. bm25s 0.3's English list is those same 33 words, so the two
  profiles differ in the stemmer only; the pyserini profile names Lucene's list itself
  (:data:`LUCENE_STOPWORDS`) so that it stays Lucene's whatever bm25s's list becomes. What still
  differs from Lucene is listed in docs/reproducing.md: Lucene's StandardTokenizer keeps
  one-character tokens and ``3.14`` or ``u.s`` whole, and Lucene stores document lengths in one
  lossy byte, so scores differ in the last digits.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import Stemmer

from ..errors import IndexLoadError, WinnowError
from .passage_text import indexed_text as indexed_text  # where BM25 modules and tests have always found it

if TYPE_CHECKING:
    import bm25s

STOPWORDS = "en"
STEMMER = "english"
STEMMER_LABEL = f"snowball-{STEMMER}"  # as recorded in the manifest
FIELDS = ("title", "text")
# Lucene's EnglishAnalyzer.ENGLISH_STOP_WORDS_SET (the 33 words Anserini's default analyzer removes).
LUCENE_STOPWORDS = ("a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it",
                    "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these", "they",
                    "this", "to", "was", "will", "with")
STOPWORD_LISTS: dict[str, str | tuple[str, ...]] = {"en": "en", "lucene-en": LUCENE_STOPWORDS}
STEMMERS = {"snowball-english": "english", "porter": "porter"}  # manifest label -> PyStemmer algorithm


@dataclass(frozen=True, slots=True)
class Bm25Profile:
    """How an index analyses text and scores it: stop words and stemmer (manifest labels), k1, b."""

    name: str
    stopwords: str
    stemmer: str
    k1: float = 0.9
    b: float = 0.4


PROFILES = {
    "default": Bm25Profile("default", "en", STEMMER_LABEL),
    "pyserini": Bm25Profile("pyserini", "lucene-en", "porter"),
}


def bm25_profile(name: str) -> Bm25Profile:
    """The profile called ``name``; a WinnowError naming the choices otherwise."""
    if name not in PROFILES:
        raise WinnowError(f"unknown BM25 profile {name!r}", f"choose one of {', '.join(PROFILES)}")
    return PROFILES[name]


def stopword_list(label: str) -> str | list[str]:
    """The stop words a manifest's ``bm25.stopwords`` label names, as bm25s takes them."""
    if label not in STOPWORD_LISTS:
        raise IndexLoadError(f"unknown stop-word list {label!r} in the index manifest",
                             f"this Winnow knows {', '.join(STOPWORD_LISTS)}; rebuild the index with `winnow index`")
    words = STOPWORD_LISTS[label]
    return words if isinstance(words, str) else list(words)


def make_stemmer(label: str = STEMMER_LABEL) -> Stemmer.Stemmer:
    """The stemmer named by a manifest's ``bm25.stemmer`` (``snowball-english`` or ``porter``)."""
    if label not in STEMMERS:
        raise IndexLoadError(f"unknown stemmer {label!r} in the index manifest",
                             f"this Winnow knows {', '.join(STEMMERS)}; rebuild the index with `winnow index`")
    return Stemmer.Stemmer(STEMMERS[label])


def tokenize_corpus(texts: Sequence[str], stemmer: Stemmer.Stemmer,
                    stopwords: str | list[str] = STOPWORDS) -> bm25s.tokenization.Tokenized:
    """Term ids per text plus the vocabulary (term → id), the form ``bm25s.BM25.index`` takes."""
    import bm25s  # building only: see bm25s_english_stopwords

    return bm25s.tokenize(list(texts), stopwords=stopwords, stemmer=stemmer, return_ids=True,
                          show_progress=False)


def require_indexable_words(tokens: bm25s.tokenization.Tokenized, source: str) -> None:
    """Refuse a corpus none of whose passages has a term left after analysis: BM25 has nothing to
    index (and bm25s fails on the empty vocabulary with a bare ``ValueError``)."""
    if not tokens.vocab:
        raise WinnowError(f"{source}: no passage has a word to index: every word is a stop word, a single "
                          "character or punctuation", "BM25 indexes words of two or more letters or digits that "
                                                      "are not English stop words; check that the corpus holds text")


#: bm25s's word pattern (scikit-learn's CountVectorizer default).
WORD_PATTERN = re.compile(r"(?u)\b\w\w+\b")


@lru_cache(maxsize=1)
def bm25s_english_stopwords() -> frozenset[str]:
    """bm25s's English stop words (what ``stopwords="en"`` removes when bm25s tokenises), read from
    its ``stopwords`` module alone (a list, no imports). Importing it the usual way runs bm25s's
    ``__init__``, which imports scipy.sparse where it is installed: a quarter of a second of every
    query process's start, for a list of words."""
    spec = importlib.util.find_spec("bm25s")
    if spec is None or not spec.submodule_search_locations:
        raise WinnowError("bm25s is not installed", "pip install 'winnow-rag' installs it")
    location = Path(next(iter(spec.submodule_search_locations))) / "stopwords.py"
    module_spec = importlib.util.spec_from_file_location("winnow._bm25s_stopwords", location)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return frozenset(module.STOPWORDS_EN)


@lru_cache(maxsize=16)
def _stopword_set(stopwords: str | tuple[str, ...]) -> frozenset[str]:
    if isinstance(stopwords, str):
        if stopwords not in ("en", "english"):
            raise WinnowError(f"unknown stop-word list {stopwords!r}", "name en, or give the words as a list")
        return bm25s_english_stopwords()
    return frozenset(stopwords)


def tokenize_queries(texts: Sequence[str], stemmer: Stemmer.Stemmer,
                     stopwords: str | list[str] = STOPWORDS) -> list[list[str]]:
    """Stemmed terms per query (stop words removed), in order: the terms ``bm25s.tokenize(texts,
    return_ids=False)`` gives (tests/test_index.py compares them).

    Not bm25s's function itself: it makes three progress-bar objects a call even when they are
    hidden, and tqdm's class-wide lock then serialised the question threads of ``winnow eval``
    against a fast server (half their samples waited on it). A query is a few words: one pattern
    pass and one stemmer call.
    """
    stop = _stopword_set(stopwords if isinstance(stopwords, str) else tuple(stopwords))
    terms = []
    for text in texts:
        words = [word for word in WORD_PATTERN.findall(text.lower()) if word not in stop]
        terms.append(list(stemmer.stemWords(words)) if words else [])
    return terms
