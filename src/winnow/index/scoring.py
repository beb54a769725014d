"""Top-k BM25 hits for a batch of queries from bm25s's precomputed score matrix.

bm25s stores, for every term, the Lucene BM25 contribution of that term to every passage containing
it (a sparse term × passage matrix in CSC arrays ``data``/``indices``/``indptr``). A query's score
for a passage is the sum of its terms' rows: numpy adds each query term's row (its slice of
``data``, times the term's count in the query) into one float32 buffer of passage scores, so a
query costs the length of its terms' postings, not the size of the corpus, and bm25s's per-query
Python loop (``BM25.retrieve``, ~1,000 queries/s on 10k passages) is not run. Scores are the same
sums bm25s's ``get_scores`` computes (float32, up to summation order).

No scipy: the product is one gather and add per query term (the rows of one term hold each passage
at most once, so a plain fancy-indexed ``+=`` is exact). The sums run in float32, one term after the
other in alphabetical order, the order a scipy CSR product of the same arrays takes, so the scores
are bit for bit those of the earlier scipy product (and of any batch, and of a sharded index).

An index may store its impacts as float16 or uint8 codes and its passage rows as uint16
(:mod:`.impacts`, chosen at build): the product widens the impacts it gathers to the float32 values
:mod:`.pruning` reads too, so both searches sum the same numbers in every format.

Only passages sharing at least one term with the query are scored, so a passage with no query term
is never returned: bm25s's ``retrieve`` would pad the top k with score-0 passages.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .impacts import widen

# Upper bound on one chunk's query × passage buffer of sums (float32, 16 MB), so a big batch over a big
# corpus is cut into chunks instead of exhausting memory.
SUMS_BUDGET = 4_000_000
# Each term's largest impact, written beside the score arrays (``bm25/`` or a shard's folder).
MAXIMA = "maxima.npy"


@dataclass(frozen=True, slots=True)
class Hits:
    """The top hits of one query: passage rows (bm25s doc indices) and scores, best first."""

    rows: np.ndarray
    scores: np.ndarray


class TermScoreMatrix:
    """bm25s's term × passage score arrays, read in place (no copy: memory-mapped stays so)."""

    def __init__(self, data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, num_docs: int,
                 vocabulary: dict[str, int], maxima: np.ndarray | None = None,
                 scales: np.ndarray | None = None) -> None:
        if len(data) != len(indices) or len(indptr) < 1:
            raise ValueError(f"score arrays of {len(data)} values, {len(indices)} passage rows and "
                             f"{len(indptr)} term offsets do not form a matrix")
        self.num_docs = int(num_docs)
        self.vocabulary = vocabulary
        # Plain ndarray views of the (memory-mapped) arrays: np.memmap's own indexing is slower.
        self.data, self.indices, self.indptr = np.asarray(data), np.asarray(indices), np.asarray(indptr)
        # Each term's largest impact, MaxScore's bound (:mod:`.pruning`): stored by the build (memory-
        # mapped), or NaN until a query first needs it (an index built before the bounds were stored).
        self.stored_maxima = maxima is not None
        self.maxima: np.ndarray = maxima if maxima is not None else np.full(len(indptr) - 1, np.nan, dtype=np.float32)
        # Impacts as stored (:mod:`.impacts`): float32, float16, or uint8 codes with a float32 step per term.
        self.scales = None if scales is None else np.asarray(scales)

    def impacts(self, term: int, start: int, end: int) -> np.ndarray:
        """The float32 impacts of postings ``start:end``, those of term ``term``, as every search adds them."""
        return self.widen(term, self.data[start:end])

    def widen(self, term: int, stored: np.ndarray) -> np.ndarray:
        """Stored impacts of term ``term`` as float32 (:func:`.impacts.widen`): the same values whichever
        of them are read, so the exhaustive product and the pruned search add the same numbers."""
        return widen(stored, None if self.scales is None else self.scales[term])

    def query_terms(self, terms: Sequence[str]) -> tuple[list[int], list[int]]:
        """A query's indexed terms (ids) and how often each occurs in it (a repeated term counts once
        per occurrence, as in bm25s), in alphabetical term order.

        Alphabetical, so a query's sum runs in the same order whatever batch it is in, and whatever
        ids the index gave its terms: a sharded index (:mod:`.shards`) and the pruned search
        (:mod:`.pruning`) sum exactly as a single index.
        """
        per_term = Counter(t for t in terms if t in self.vocabulary)
        ordered = sorted(per_term)
        return [self.vocabulary[term] for term in ordered], [per_term[term] for term in ordered]

    def top_k(self, queries: Sequence[Sequence[str]], k: int) -> list[Hits]:
        """The ``k`` best-scoring passages per query (fewer if fewer share a term with it).

        Ties are broken by corpus order, so results are reproducible run to run. Each query's sums
        are its own (a row of the chunk's buffer), so a query scores identically alone or in any batch.
        """
        chunk = max(1, min(1024, SUMS_BUDGET // max(self.num_docs, 1)))
        hits: list[Hits] = []
        for start in range(0, len(queries), chunk):
            hits.extend(self.score_chunk(queries[start:start + chunk], k))
        return hits

    def score_chunk(self, queries: Sequence[Sequence[str]], k: int) -> list[Hits]:
        """Top ``k`` of a few queries: every posting of their terms added into one query × passage buffer.

        ``np.add.at`` adds in the order of its entries (query by query, each query's terms in
        alphabetical order), in float32: the sums of a scipy CSR product of the same arrays.
        """
        owners: list[int] = []
        term_ids: list[int] = []
        counts: list[int] = []
        for number, terms in enumerate(queries):
            ids_of_query, counts_of_query = self.query_terms(terms)
            owners += [number] * len(ids_of_query)
            term_ids += ids_of_query
            counts += counts_of_query
        ids = np.asarray(term_ids, dtype=np.int64)
        begins = np.asarray(self.indptr[ids], dtype=np.int64)
        lengths = np.asarray(self.indptr[ids + 1], dtype=np.int64) - begins
        total = int(lengths.sum())
        # The postings of every (query, term) entry, one after the other: positions in data/indices.
        positions = np.repeat(begins - (np.cumsum(lengths) - lengths), lengths) + np.arange(total, dtype=np.int64)
        width = self.num_docs
        keys = np.repeat(np.asarray(owners, dtype=np.int64) * width, lengths) + self.indices[positions]
        values = widen(self.data[positions], None if self.scales is None else np.repeat(self.scales[ids], lengths))
        if any(count != 1 for count in counts):  # x × 1 is x: skip the pass when no term repeats
            values = values * np.repeat(np.asarray(counts, dtype=np.float32), lengths)
        sums = np.zeros(len(queries) * width, dtype=np.float32)  # calloc: untouched pages cost nothing
        np.add.at(sums, keys, values)
        # The cells with a positive sum (a zero is no evidence: not retrieved), by query then passage:
        # one scan of the buffer, or sorting the keys where they are few beside it (a big corpus).
        if total * 16 < len(sums):
            keys.sort()
            cells = keys[np.flatnonzero(sums[keys] > 0)]
            cells = cells[np.flatnonzero(np.diff(cells, prepend=-1))]
        else:
            cells = np.flatnonzero(sums > 0)
        bounds = np.searchsorted(cells, np.arange(len(queries) + 1, dtype=np.int64) * width).tolist()
        return [highest(cells[bounds[n]:bounds[n + 1]] - n * width, sums[cells[bounds[n]:bounds[n + 1]]], k)
                for n in range(len(queries))]

    def postings_list(self, term_id: int, row: int) -> bool:
        """Whether the postings of ``term_id`` (sorted passage rows) hold the passage ``row``."""
        start, end = int(self.indptr[term_id]), int(self.indptr[term_id + 1])
        posting = self.indices[start:end]
        at = int(np.searchsorted(posting, row))
        return at < len(posting) and int(posting[at]) == row

    def postings_length(self, term_id: int) -> int:
        return int(self.indptr[term_id + 1]) - int(self.indptr[term_id])


def term_maxima(data: np.ndarray, indptr: np.ndarray) -> np.ndarray:
    """Each term's largest impact (0 for a term without postings): the bounds :mod:`.pruning` needs,
    written beside the score arrays at build time (``MAXIMA``)."""
    maxima = np.zeros(len(indptr) - 1, dtype=np.float32)
    listed = np.flatnonzero(np.diff(indptr) > 0)
    if len(listed):
        maxima[listed] = np.maximum.reduceat(data, indptr[listed])
    return maxima


def best(rows: np.ndarray, scores: np.ndarray, k: int) -> Hits:
    """The top ``k`` of one query's (row, score) pairs with a positive score, highest first, then lowest row."""
    positive = scores > 0  # a stored zero would mean "no evidence": not retrieved
    return highest(rows[positive], scores[positive], k)


def highest(rows: np.ndarray, scores: np.ndarray, k: int) -> Hits:
    """The top ``k`` of (row, score) pairs, highest score first, then lowest row."""
    if len(scores) > k:
        keep = np.argpartition(-scores, k - 1)[:k]
        # argpartition splits ties at the k-th score arbitrarily; widen to every passage tied with
        # the k-th so that the stable ordering below, not argpartition, decides which ones stay.
        threshold = scores[keep].min()
        keep = np.flatnonzero(scores >= threshold)
        rows, scores = rows[keep], scores[keep]
    order = np.lexsort((rows, -scores))[:k]
    return Hits(rows[order].astype(np.int64), scores[order])
