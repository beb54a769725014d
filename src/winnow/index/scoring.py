"""Top-k BM25 hits for a batch of queries from bm25s's precomputed score matrix.

bm25s stores, for every term, the Lucene BM25 contribution of that term to every passage containing
it (a sparse term × passage matrix in CSC arrays ``data``/``indices``/``indptr``). A query's score
for a passage is the sum of its terms' rows, so a batch of queries is one sparse product
``Q @ S`` (Q: query × term counts). One scipy product per batch replaces bm25s's per-query Python
loop (``BM25.retrieve``, ~1,000 queries/s on 10k passages) and is several times faster; scores are
the same sums bm25s's ``get_scores`` computes (float32, up to summation order).

Only passages sharing at least one term with the query are stored in the product, so a passage
with no query term is never returned: bm25s's ``retrieve`` would pad the top k with score-0 passages.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import scipy.sparse as sp

# Upper bound on stored entries of one batch's query × passage product (~12 bytes each), so a big
# batch over a big corpus is cut into chunks instead of exhausting memory.
PRODUCT_BUDGET = 4_000_000
# Each term's largest impact, written beside the score arrays (``bm25/`` or a shard's folder).
MAXIMA = "maxima.npy"


@dataclass(frozen=True, slots=True)
class Hits:
    """The top hits of one query: passage rows (bm25s doc indices) and scores, best first."""

    rows: np.ndarray
    scores: np.ndarray


class TermScoreMatrix:
    """bm25s's term × passage score arrays as a scipy CSR matrix (no copy: memory-mapped stays so)."""

    def __init__(self, data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, num_docs: int,
                 vocabulary: dict[str, int], maxima: np.ndarray | None = None) -> None:
        self.num_docs = int(num_docs)
        self.vocabulary = vocabulary
        self.matrix = sp.csr_matrix((data, indices, indptr), shape=(len(indptr) - 1, self.num_docs), copy=False)
        # The CSR arrays (scipy's attributes are untyped): impacts, passage rows, each term's start.
        self.data: np.ndarray = self.matrix.data
        self.indices: np.ndarray = self.matrix.indices
        self.indptr: np.ndarray = self.matrix.indptr
        # Each term's largest impact, MaxScore's bound (:mod:`.pruning`): stored by the build (memory-
        # mapped), or NaN until a query first needs it (an index built before the bounds were stored).
        self.stored_maxima = maxima is not None
        self.maxima: np.ndarray = maxima if maxima is not None else np.full(len(indptr) - 1, np.nan, dtype=np.float32)

    def query_matrix(self, queries: Sequence[Sequence[str]]) -> sp.csr_matrix:
        """Query × term counts; a term repeated in a query counts once per occurrence, as in bm25s."""
        indptr = [0]
        columns: list[int] = []
        counts: list[int] = []
        for terms in queries:
            ids, per_term = self.query_terms(terms)
            columns += ids
            counts += per_term
            indptr.append(len(columns))
        index_dtype = self.matrix.indices.dtype
        return sp.csr_matrix((np.asarray(counts, dtype=self.matrix.dtype), np.asarray(columns, dtype=index_dtype),
                              np.asarray(indptr, dtype=index_dtype)), shape=(len(queries), self.matrix.shape[0]))

    def query_terms(self, terms: Sequence[str]) -> tuple[list[int], list[int]]:
        """A query's indexed terms (ids) and how often each occurs in it, in alphabetical term order.

        Alphabetical, so a query's sum (scipy adds in the order of the query's entries) runs in the
        same order whatever batch it is in, and whatever ids the index gave its terms: a sharded index
        (:mod:`.shards`) and the pruned search (:mod:`.pruning`) sum exactly as a single index.
        """
        per_term = Counter(t for t in terms if t in self.vocabulary)
        ordered = sorted(per_term)
        return [self.vocabulary[term] for term in ordered], [per_term[term] for term in ordered]

    def top_k(self, queries: Sequence[Sequence[str]], k: int) -> list[Hits]:
        """The ``k`` best-scoring passages per query (fewer if fewer share a term with it).

        Ties are broken by corpus order, so results are reproducible run to run. Each query's row
        of the product is computed independently of the others, so a query scores identically
        alone or in any batch.
        """
        chunk = max(1, min(1024, PRODUCT_BUDGET // max(self.num_docs, 1)))
        hits: list[Hits] = []
        for start in range(0, len(queries), chunk):
            product = self.query_matrix(queries[start:start + chunk]) @ self.matrix
            for row in range(product.shape[0]):
                begin, end = product.indptr[row], product.indptr[row + 1]
                hits.append(best(product.indices[begin:end], product.data[begin:end], k))
        return hits

    def postings_list(self, term_id: int, row: int) -> bool:
        """Whether the postings of ``term_id`` (sorted passage rows) hold the passage ``row``."""
        start, end = int(self.matrix.indptr[term_id]), int(self.matrix.indptr[term_id + 1])
        posting = self.matrix.indices[start:end]
        at = int(np.searchsorted(posting, row))
        return at < len(posting) and int(posting[at]) == row

    def postings_length(self, term_id: int) -> int:
        return int(self.matrix.indptr[term_id + 1]) - int(self.matrix.indptr[term_id])


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
