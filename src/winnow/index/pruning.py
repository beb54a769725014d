"""Exact top-k BM25 without scoring every posting: MaxScore, term at a time over a dense accumulator.

MaxScore (Turtle & Flood, "Query evaluation: strategies and optimizations", IP&M 1995, §3.2; the
"essential / non-essential" split of Strohman, Turtle & Croft, SIGIR 2005, and of Lucene's
``MaxScoreBulkScorer``): every query term has an upper bound, its count in the query times its
largest impact in the index (:func:`query_maxima`). Terms are taken from the highest bound down; each
one's postings are added into a dense per-passage accumulator, whose ``k``-th largest partial score
is a lower bound ``θ`` of the final ``k``-th score (impacts are positive, so a partial sum never
exceeds the full one). Once the terms not yet read can together add less than ``θ``, a passage none
of the read terms lists cannot reach the top ``k``: those remaining terms — the common ones, whose
postings are the long ones — are never scanned. They are looked up (binary search in their sorted
postings) for the passages already found, dropping at each step those whose partial score plus the
bounds still to come falls below ``θ``. The survivors are scored exactly as the exhaustive product
does it (:class:`.scoring.TermScoreMatrix`): float32 products ``count × impact`` summed in float32
in the query's alphabetical term order, so ids, scores and the (score, row) tie order are
bit-for-bit the exhaustive ones. Bounds are widened and ``θ`` lowered by a relative slack covering
float32 rounding, so rounding can only keep a passage, never drop one that belongs.

A sharded index passes each shard's final ``k``-th score to the next shard as its starting ``θ``
(``floor``): later shards then skip from their first term. Comparisons are strict (a passage whose
bound equals ``θ`` is kept), so ties are decided by row as in the exhaustive merge.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .scoring import Hits, TermScoreMatrix, best, highest
from .shards import ShardedScorer

# float32's unit roundoff; the slack is a few of them per query term (see ``_slack``).
UNIT_ROUNDOFF = 2.0 ** -24
# Rows to look up in a posting, per posting entry, above which spreading the posting over a dense
# array beats a binary search per row (a search costs several times a write, measured with numpy 2.4).
DENSE_LOOKUP = 4


def pruned_top_k(scorer: TermScoreMatrix | ShardedScorer, queries: Sequence[Sequence[str]], k: int) -> list[Hits]:
    """``scorer.top_k(queries, k)``, the same hits to the bit, by MaxScore: most postings of a
    query's common terms are never read. A sharded index's shards are searched in order, each from
    the ``k``-th score of those before it (see the module notes)."""
    if isinstance(scorer, TermScoreMatrix):
        return [maxscore_top_k(scorer, *query_arrays(scorer, terms), k) for terms in queries]
    found = []
    for terms in queries:
        if not scorer.shards:
            found.append(Hits(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)))
            continue
        query = query_arrays(scorer.shards[0], terms)  # the shards share one vocabulary
        merged = Hits(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32))
        for shard, start in zip(scorer.shards, scorer.starts[:-1].tolist(), strict=True):
            floor = float(merged.scores[-1]) if len(merged.scores) == k else 0.0
            hits = maxscore_top_k(shard, *query, k, floor)
            if len(hits.rows):
                merged = highest(np.concatenate([merged.rows, hits.rows + start]),
                                 np.concatenate([merged.scores, hits.scores]), k)
        found.append(merged)
    return found


def query_arrays(matrix: TermScoreMatrix, terms: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """A query's distinct indexed term ids and their counts, in alphabetical term order, as arrays."""
    ids, counts = matrix.query_terms(terms)
    return np.asarray(ids, dtype=np.int64), np.asarray(counts, dtype=np.int64)


def query_maxima(matrix: TermScoreMatrix, term_ids: np.ndarray) -> np.ndarray:
    """The largest impact in each term's postings (0 for none), from the stored bounds when the index
    has them, else computed once per term on first use and kept (an index built before bounds were stored)."""
    if matrix.stored_maxima:
        stored: np.ndarray = matrix.maxima[term_ids].astype(np.float64)
        return stored
    cache = matrix.maxima
    found: np.ndarray = cache[term_ids]
    missing = np.flatnonzero(np.isnan(found))
    for at in missing.tolist():
        term = int(term_ids[at])
        start, end = int(matrix.indptr[term]), int(matrix.indptr[term + 1])
        value = matrix.data[start:end].max() if end > start else 0.0
        cache[term] = found[at] = value  # the same value from any thread: a race only repeats the work
    return np.asarray(found, dtype=np.float64)


def _slack(terms: int) -> float:
    """A relative bound on how far a float32 sum of ``terms`` positive float32 values (in any order)
    lies from their exact sum, doubled (two sums are compared), plus one rounding of a product."""
    return 4.0 * (terms + 2) * UNIT_ROUNDOFF


def maxscore_top_k(matrix: TermScoreMatrix, term_ids: np.ndarray, counts: np.ndarray, k: int,
                   floor: float = 0.0) -> Hits:
    """The exhaustive top ``k`` of one query on ``matrix`` (see the module notes), for the query's
    distinct terms ``term_ids`` in alphabetical term order with their ``counts``. ``floor``: a score
    the ``k``-th best is known to reach (0 when unknown); passages below it are not returned.
    """
    nothing = Hits(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32))
    if not len(term_ids):
        return nothing
    weights = counts.astype(np.float32)
    bounds = counts.astype(np.float64) * query_maxima(matrix, term_ids)
    order = np.argsort(-bounds, kind="stable")
    # after[j]: what the terms after the j-th (by bound) can add at most; after[-1]: the whole query.
    after = np.concatenate([np.cumsum(bounds[order][::-1])[::-1][1:], [0.0], [bounds.sum()]])
    widen, lower = 1 + _slack(len(term_ids)), 1 - _slack(len(term_ids))
    theta = floor if floor > 0 else _estimate(matrix, term_ids, weights, order, k) * lower
    if after[-1] * widen < theta:
        return nothing  # no passage here reaches the floor
    # The essential terms: the fewest, by bound, after which the others together cannot reach θ.
    enough = np.flatnonzero(after[:-1] * widen < theta)
    essential = 1 + int(enough[0]) if len(enough) else len(order)
    candidates, partial = _accumulate(matrix, term_ids[order[:essential]], weights[order[:essential]])
    theta = max(theta, _kth_of(partial, k) * lower)  # partial scores: lower bounds of the full ones
    for position in range(essential, len(order) + 1):
        keep = (partial + after[position - 1]) * widen >= theta
        candidates, partial = candidates[keep], partial[keep]
        if position == len(order) or not len(candidates):
            break
        partial += _lookup(matrix, int(term_ids[order[position]]), candidates, weights[order[position]])
        theta = max(theta, _kth_of(partial, k) * lower)
    scores = np.zeros(len(candidates), dtype=np.float32)
    for term, weight in zip(term_ids.tolist(), weights, strict=True):
        scores += _lookup(matrix, term, candidates, weight)  # alphabetical order: the exhaustive float32 sums
    return best(candidates.astype(np.int64), scores, k)


def _estimate(matrix: TermScoreMatrix, term_ids: np.ndarray, weights: np.ndarray, order: np.ndarray,
              k: int) -> float:
    """A lower bound of the ``k``-th best score: the ``k``-th best full score of a few likely passages,
    those with the largest impacts of the highest-bound terms (any ``k`` passages' scores bound the
    ``k``-th best from below). 0 when the terms list fewer than ``k`` passages."""
    wanted = 2 * k
    picked: list[np.ndarray] = []
    total = 0
    for term in order.tolist():
        start, end = int(matrix.indptr[term_ids[term]]), int(matrix.indptr[term_ids[term] + 1])
        if end - start > wanted:
            top = np.argpartition(matrix.data[start:end], end - start - wanted)[end - start - wanted:]
            picked.append(matrix.indices[start + top])
        else:
            picked.append(matrix.indices[start:end])
        total += len(picked[-1])
        if total >= wanted:
            break
    if total < k:
        return 0.0
    rows = np.sort(np.concatenate(picked))
    rows = rows[np.r_[True, rows[1:] != rows[:-1]]]  # the postings' dtype, so searchsorted copies none
    if len(rows) < k:
        return 0.0
    full = np.zeros(len(rows), dtype=np.float64)
    for term, weight in zip(term_ids.tolist(), weights, strict=True):
        full += _lookup(matrix, term, rows, weight)
    return _kth_of(full, k)


def _accumulate(matrix: TermScoreMatrix, term_ids: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every passage the terms list (sorted rows) and its partial score over them (float64)."""
    slices = [(int(matrix.indptr[term]), int(matrix.indptr[term + 1])) for term in term_ids.tolist()]
    if len(slices) == 1:
        (start, end), = slices
        return matrix.indices[start:end], (matrix.data[start:end] * weights[0]).astype(np.float64)
    docs = np.concatenate([matrix.indices[start:end] for start, end in slices])
    values = np.concatenate([matrix.data[start:end] * weight
                             for (start, end), weight in zip(slices, weights, strict=True)])
    if len(docs) * 8 < matrix.num_docs:  # few: sort them; many: one pass over a dense array
        order = np.argsort(docs, kind="stable")  # np.unique's hash path is several times slower here
        docs, values = docs[order], values[order].astype(np.float64)
        starts = np.flatnonzero(np.r_[True, docs[1:] != docs[:-1]])
        return docs[starts], np.add.reduceat(values, starts)
    dense = np.bincount(docs, weights=values, minlength=matrix.num_docs)
    # float nonzero() is slow; a comparison then a boolean one is not. Rows keep the postings' dtype,
    # or searchsorted would copy a whole posting to int64 at every lookup.
    rows = np.flatnonzero(dense > 0).astype(matrix.indices.dtype)
    return rows, dense[rows]


def _kth_of(values: np.ndarray, k: int) -> float:
    """The ``k``-th largest of ``values`` (0 if there are fewer)."""
    if len(values) < k:
        return 0.0
    return float(np.partition(values, len(values) - k)[len(values) - k])


def _lookup(matrix: TermScoreMatrix, term: int, rows: np.ndarray, weight: np.floating) -> np.ndarray:
    """``weight × impact`` of ``term`` for each of the sorted ``rows`` (0 where it does not occur), float32:
    the same float32 product the exhaustive search adds. A binary search per row when the rows are
    few beside the posting; else the posting spread over a dense array and the rows read from it."""
    start, end = int(matrix.indptr[term]), int(matrix.indptr[term + 1])
    if end == start:
        return np.zeros(len(rows), dtype=np.float32)
    posting = matrix.indices[start:end]
    if len(rows) * DENSE_LOOKUP > end - start:
        spread = np.zeros(matrix.num_docs, dtype=np.float32)
        spread[posting] = matrix.data[start:end] * weight
        found: np.ndarray = spread[rows]
        return found
    at = posting.searchsorted(rows)
    np.minimum(at, end - start - 1, out=at)
    values: np.ndarray = np.where(posting[at] == rows, matrix.data[start:end][at], np.float32(0)) * weight
    return values
