"""An opened BM25 index: Lucene BM25 (k1=0.9, b=0.4, Pyserini's defaults) over title and text.

``BM25Index.open`` checks the folder (manifest, format version, file sizes) before loading anything,
memory-maps bm25s's score arrays and the passage store (:mod:`.store`: passages are fetched from
disk as results need them, never all read), and checks the files against each other cheaply: the
vocabulary's size against the score arrays, the arrays' passage count against the store's, and a
few sampled passages' terms against the postings that should hold them (a vocabulary or passage
store from another index, even one resealed into the manifest, is refused). ``search`` answers one query and
``search_many`` a batch, by MaxScore (:mod:`.pruning`, sharded indexes by default) or in one sparse
product (:mod:`.scoring`), the same hits either way; both return
:class:`CandidateList` s whose candidates carry ``StageScore("bm25", score, rank)``.
"""

from __future__ import annotations

import json
import os
import threading
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import Stemmer

from ..cores import available_cores
from ..errors import IndexLoadError, WinnowError, WinnowWarning
from ..records import Candidate, CandidateList, Query, StageScore
from . import parallel
from .analysis import indexed_text, make_stemmer, stopword_list, tokenize_queries
from .build import BM25_DIR
from .impacts import SCALES, check_arrays, index_impacts, load_scales
from .manifest import BM25S_ARRAYS, BM25S_PARAMS, BM25S_VOCABULARY, read_manifest, rebuild_hint, verify_checksums
from .pruning import pruned_top_k
from .scoring import MAXIMA, Hits, TermScoreMatrix
from .shards import LAYOUT, ShardedScorer, load_maxima
from .store import PassagesById, PassageStore

TERMS_PER_ROW = 4


class BM25Index(PassagesById):
    """A built index, opened read-only: ``search`` one query or ``search_many`` in a batch."""

    name = "bm25"  # the stage name on every candidate's StageScore
    passages: PassageStore  # Winnow's own store: read by row too

    def __init__(self, path: Path, manifest: dict[str, Any], scorer: TermScoreMatrix | ShardedScorer,
                 passages: PassageStore, *, exhaustive: bool | None = None, workers: int | None = None) -> None:
        if workers is not None and workers < 1:
            raise WinnowError(f"workers must be at least 1 (got {workers})")
        if workers is not None and workers > 1 and os.name != "posix":
            raise WinnowError("scoring workers need a POSIX system (their replies are waited on with select)",
                              "leave workers out: a batch is then scored in this process")
        self.path = path
        self.manifest = manifest
        self.passages = passages
        self._stemmer = make_stemmer(manifest["bm25"]["stemmer"])
        self._stopwords = stopword_list(manifest["bm25"].get("stopwords", "en"))
        self._scorer = scorer
        self._recent = RecentHits()
        # The hits are the same to the bit either way (tests/test_pruning.py), only the time differs.
        # By default a sharded index is pruned (MaxScore, :mod:`.pruning`: each shard starts from the
        # k-th score of those before it, 1.40x the single queries per CPU-second at 1M passages in 10
        # shards, docs/benchmarks.md) and one bm25s matrix, the layout of smaller indexes, is scored in
        # one sparse product (pruning it measured 0.95x single, 0.84x batched at 20,000 passages).
        self.exhaustive = not isinstance(scorer, ShardedScorer) if exhaustive is None else exhaustive
        # Processes that score a large batch beside this one (:mod:`.parallel`), started at the first.
        self.workers = (available_cores() if os.name == "posix" else 1) if workers is None else workers
        self._pool: parallel.ScoringPool | None = None

    @classmethod
    def open(cls, path: str | Path, *, exhaustive: bool | None = None, workers: int | None = None) -> BM25Index:
        """Open the index folder ``path`` (made by ``winnow index`` or :func:`build_bm25_index`).

        ``exhaustive``: True scores every posting of every query term; False prunes (MaxScore,
        :mod:`.pruning`: the same hits, most postings of common terms unread); None (the default)
        prunes a sharded index and scores a single bm25s matrix exhaustively, the faster of the two
        for each (docs/benchmarks.md).

        ``workers``: the cores a large ``search_many`` batch is scored on (:mod:`.parallel`: this
        process and ``workers - 1`` worker processes); None (the default) is every core this
        process may use, 1 keeps it in this process.

        Raises IndexLoadError, naming the folder or file and how to rebuild, if it is missing,
        incomplete, truncated, from another format version, or inconsistent.
        """
        path = Path(path)
        manifest = read_manifest(path)
        hint = rebuild_hint(path, manifest)
        recorded = manifest["counts"]["passages"]
        if manifest["bm25"].get("layout") == "lucene":
            raise WinnowError(f"{path} holds Lucene's postings (built with --bm25-engine lucene), not Winnow's BM25",
                              "search it with --retriever lucene")
        scorer: TermScoreMatrix | ShardedScorer
        if manifest["bm25"].get("layout") == LAYOUT:
            scorer = ShardedScorer.open(path, manifest, hint)
        else:
            try:
                data, indices, indptr, num_docs, vocabulary = read_bm25s_matrix(path / BM25_DIR)
            except (OSError, ValueError, KeyError, TypeError, EOFError) as exc:
                raise IndexLoadError(f"{path / BM25_DIR} is corrupt: {exc}", hint) from exc
            check_vocabulary(path, indptr, vocabulary, hint)
            impacts, terms = index_impacts(manifest), len(indptr) - 1
            check_arrays(str(path / BM25_DIR), data, indices, num_docs, impacts, hint)
            maxima = load_maxima(path, manifest, f"{BM25_DIR}/{MAXIMA}", terms, hint)
            scorer = TermScoreMatrix(data, indices, indptr, num_docs, vocabulary, maxima,
                                     load_scales(path, f"{BM25_DIR}/{SCALES}", impacts, terms, hint))
        passages = PassageStore.open(path, recorded, hint)
        if recorded != scorer.num_docs:
            raise IndexLoadError(f"{path} is inconsistent: {recorded} passages in the store and the manifest, "
                                 f"{scorer.num_docs} in {BM25_DIR}/", hint)
        check_postings(path, scorer, passages, make_stemmer(manifest["bm25"]["stemmer"]),
                       stopword_list(manifest["bm25"].get("stopwords", "en")), hint)
        return cls(path, manifest, scorer, passages, exhaustive=exhaustive, workers=workers)

    def verify(self) -> None:
        """Check every file against its recorded sha256 (reads every byte, unlike ``open``'s size checks)."""
        verify_checksums(self.path, self.manifest)


    def search(self, query: str | Query, k: int = 10) -> CandidateList:
        """The top ``k`` passages for ``query``, best first; fewer if fewer share a term with it.

        A query of only stop words or terms absent from the corpus gives an empty list.
        """
        return self.search_many([query], k)[0]

    def search_many(self, queries: Sequence[str | Query], k: int = 10) -> list[CandidateList]:
        """``search`` for each query, tokenised and scored as one batch (same results, much faster)."""
        if k < 1:
            raise WinnowError(f"k must be at least 1 (got {k})")
        items = [q if isinstance(q, Query) else Query(text=q) for q in queries]
        hits = self._top_k(tokenize_queries([q.search_text for q in items], self._stemmer, self._stopwords), k)
        return [
            CandidateList(query, [Candidate(self.passages[row], [StageScore(self.name, score, rank)])
                                  for rank, (row, score) in enumerate(
                                      zip(h.rows.tolist(), h.scores.tolist(), strict=True), start=1)])
            for query, h in zip(items, hits, strict=True)
        ]


    def score(self, queries: list[list[str]], k: int) -> list[Hits]:
        """The top ``k`` rows and scores of each tokenised query, scored here (no recent hits, no workers)."""
        return self._scorer.top_k(queries, k) if self.exhaustive else pruned_top_k(self._scorer, queries, k)

    def close(self) -> None:
        """Stop the scoring workers, if a large batch started them (the index stays usable)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def _score_on_every_core(self, queries: list[list[str]], k: int) -> list[Hits]:
        """:meth:`score` shared with the scoring workers, started at the first large batch; if they
        cannot start (no interpreter to run: an embedded Python), a warning, and this process alone."""
        if self._pool is None or not self._pool.alive:
            try:
                self._pool = parallel.ScoringPool(self.path, exhaustive=self.exhaustive, workers=self.workers - 1)
            except OSError as exc:
                warnings.warn(f"BM25 scoring workers could not start ({exc}): batches are scored in this "
                              "process", WinnowWarning, stacklevel=4)
                self.workers = 1
                return self.score(queries, k)
        return self._pool.top_k(queries, k, self.score)

    def _top_k(self, queries: list[list[str]], k: int) -> list[Hits]:
        """The scorer's top ``k`` per query, answered from :class:`RecentHits` where it can, a large
        batch scored on every core (:mod:`.parallel`)."""
        found = [self._recent.get(terms, k) for terms in queries]
        missing = [i for i, hits in enumerate(found) if hits is None]
        if missing:
            asked = [queries[i] for i in missing]
            if self.workers > 1 and len(asked) * self._scorer.num_docs >= parallel.PARALLEL_MIN_WORK:
                scored = self._score_on_every_core(asked, k)
            else:
                scored = self.score(asked, k)
            for i, hits in zip(missing, scored, strict=True):
                self._recent.put(queries[i], k, hits)
                found[i] = hits
        return [hits for hits in found if hits is not None]


class RecentHits:
    """The last searches' hits by query terms, so that ``winnow eval``'s first-stage list and the
    method's own retrieval of the same question cost one scoring, not two.

    Exact, not approximate: hits are ordered by score, then by row (:func:`.scoring.highest`), and
    a query scores the same alone or in any batch, so the top ``k`` is the first ``k`` of any deeper
    top list of the same terms, and a list shorter than its depth holds every passage that scores.
    """

    SIZE = 256

    def __init__(self) -> None:
        self._entries: OrderedDict[tuple[str, ...], tuple[int, Hits]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, terms: list[str], k: int) -> Hits | None:
        with self._lock:
            entry = self._entries.get(tuple(terms))
        if entry is None:
            return None
        depth, hits = entry
        if k > depth and len(hits.rows) == depth:
            return None  # deeper than asked before, and there may be more
        return Hits(hits.rows[:k], hits.scores[:k])

    def put(self, terms: list[str], k: int, hits: Hits) -> None:
        key = tuple(terms)
        with self._lock:
            if key in self._entries and self._entries[key][0] >= k:
                return
            self._entries[key] = (k, hits)
            self._entries.move_to_end(key)
            while len(self._entries) > self.SIZE:
                self._entries.popitem(last=False)


def read_bm25s_matrix(folder: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, dict[str, int]]:
    """The score matrix bm25s saved in ``folder`` (data, indices, indptr; memory-mapped), its number of
    documents and its vocabulary (term → row): what ``bm25s.BM25.load(folder, mmap=True)`` reads for
    searching, read without importing bm25s, which imports scipy.sparse where it is installed (a
    quarter of a second of every `winnow ask` and `eval` start) and is needed only to build."""
    data, indices, indptr = (np.load(folder / name, mmap_mode="r", allow_pickle=False) for name in BM25S_ARRAYS)
    params = json.loads((folder / BM25S_PARAMS).read_text(encoding="utf-8"))
    vocabulary = json.loads((folder / BM25S_VOCABULARY).read_text(encoding="utf-8"))
    if not isinstance(vocabulary, dict):
        raise ValueError(f"{BM25S_VOCABULARY} holds no term → row mapping")
    return data, indices, indptr, int(params["num_docs"]), vocabulary


def check_vocabulary(path: Path, indptr: np.ndarray, vocabulary: dict[str, int], hint: str) -> None:
    """The vocabulary has one term per row of the score arrays (bm25s also maps "" to the id just
    past them, or to a last, empty row), every id in range: a vocabulary from another index has
    another size or other ids. One vectorised pass over the ids, no per-term Python work."""
    rows = len(indptr) - 1
    terms = len(vocabulary) - ("" in vocabulary)
    ids = np.fromiter(vocabulary.values(), dtype=np.int64, count=len(vocabulary))
    if rows not in (terms, len(vocabulary)) or (len(ids) and not (int(ids.min()) >= 0 and int(ids.max()) <= rows)):
        raise IndexLoadError(f"{path} is inconsistent: {BM25_DIR}/vocab.index.json has {terms} terms, the "
                             f"score arrays {rows} rows", hint)


def check_postings(path: Path, scorer: TermScoreMatrix | ShardedScorer, passages: PassageStore,
                   stemmer: Stemmer.Stemmer, stopwords: str | list[str], hint: str) -> None:
    """A few passages (first, middle, last) each have their rarest terms' postings list them.

    A score array, vocabulary or passage store that does not belong with the others fails this
    almost surely; it reads a few pages whatever the index size, so it runs at every open.
    """
    vocabulary = scorer.vocabulary
    count = len(passages)
    for row in sorted({0, count // 2, count - 1}) if count else []:
        terms = set(tokenize_queries([indexed_text(passages[row])], stemmer, stopwords)[0])
        missing = sorted(term for term in terms if term not in vocabulary)
        if missing:
            raise IndexLoadError(f"{path} is inconsistent: passage row {row + 1} ({passages[row].id!r}) has terms "
                                 f"the vocabulary lacks ({', '.join(map(repr, missing[:3]))})", hint)
        rarest = sorted(terms, key=lambda term: scorer.postings_length(vocabulary[term]))
        for term in rarest[:TERMS_PER_ROW]:
            if not scorer.postings_list(vocabulary[term], row):
                raise IndexLoadError(f"{path} is inconsistent: passage row {row + 1} ({passages[row].id!r}) has "
                                     f"the term {term!r}, whose postings in {BM25_DIR}/ do not list it", hint)
