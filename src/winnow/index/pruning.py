"""Exact top-k BM25 without scoring every posting: MaxScore, vectorised term at a time with numpy.

MaxScore (Turtle & Flood, "Query evaluation: strategies and optimizations", IP&M 1995, §3.2; the
"essential / non-essential" split of Strohman, Turtle & Croft, SIGIR 2005, and of Lucene's
``MaxScoreBulkScorer``): every query term has an upper bound, its count in the query times its
largest impact in the index (:func:`query_maxima`). ``θ`` is a lower bound of the final ``k``-th
score: the ``k``-th best full score of a few likely passages (:func:`_estimate`), or the ``k``-th
score already found in earlier shards. The terms sorted by bound, the *essential* ones are the
fewest from the top after which the others together cannot reach ``θ``: a passage listed by none of
the essential terms cannot reach the top ``k``, so only their postings are read (summed per passage);
the others — the common terms, whose postings are the long ones — are never scanned. They are looked
up (binary search in their sorted postings) for the passages found, dropping at each step those whose
partial score plus the bounds still to come falls below ``θ``, which rises as partial scores (lower
bounds of full ones: impacts are positive) do. The survivors are scored exactly as the exhaustive product
does it (:class:`.scoring.TermScoreMatrix`): float32 products ``count × impact`` summed in float32
in the query's alphabetical term order, so ids, scores and the (score, row) tie order are
bit-for-bit the exhaustive ones. Bounds are widened and ``θ`` lowered by a relative slack covering
float32 rounding, so rounding can only keep a passage, never drop one that belongs.

A sharded index passes each shard's final ``k``-th score to the next shard as its starting ``θ``
(``floor``): later shards then skip from their first term. Comparisons are strict (a passage whose
bound equals ``θ`` is kept), so ties are decided by row as in the exhaustive merge.

Why numpy, not a library: PISA (``pyterrier-pisa``, block-max WAND) needs PyTerrier and Java and
builds its own index with its own quantised scores, so its hits cannot equal these; Seismic
(``pyseismic-lsr``) is approximate; ``retriv`` and ``bm25-pt`` score exhaustively; numba would compile a
document-at-a-time loop but brings LLVM into the core dependencies and a compile at the first query.
The cost here is numpy's per-call overhead (a few µs a call, tens of calls a query and shard), so
pruning pays where floors from earlier shards make most calls unnecessary: by default only sharded
indexes are pruned (:class:`.bm25.BM25Index`).

Impacts are read through the matrix (:meth:`.scoring.TermScoreMatrix.impacts`), widened to float32
from their stored format (:mod:`.impacts`: float32, the default, bm25s's own values; float16; or
uint8 codes times a per-term step), so whatever the format this search and the exhaustive product
add the same float32 numbers and return the same hits to the bit; the bounds are the maxima of the
widened impacts. A lossy format is exact against its own scores, not against float32's: it trades
some ranking (top-100 overlap in docs/benchmarks.md) for bytes, never for calls, and costs a
widening pass over every posting read. Passage rows may be uint16 (a matrix of at most 65,536
passages): the rows found keep the postings' type, so ``searchsorted`` copies none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .scoring import Hits, TermScoreMatrix, best, highest
from .shards import ShardedScorer

# float32's unit roundoff; the slack is a few of them per query term (see ``_slack``).
UNIT_ROUNDOFF = 2.0 ** -24
# Rows to look up in a posting, per posting entry, above which spreading the posting over a dense
# array beats a binary search per row (a search costs several times a write, measured with numpy 2.4).
DENSE_LOOKUP = 4


@dataclass(frozen=True, slots=True)
class Term:
    """One query term in one score matrix: its id, its postings' span, its count as a float32 weight, its bound."""

    term: int
    start: int
    end: int
    weight: np.float32
    bound: float


def pruned_top_k(scorer: TermScoreMatrix | ShardedScorer, queries: Sequence[Sequence[str]], k: int) -> list[Hits]:
    """``scorer.top_k(queries, k)``, the same hits to the bit, by MaxScore: most postings of a
    query's common terms are never read. A sharded index's shards are searched in order, each from
    the ``k``-th score of those before it (see the module notes)."""
    if isinstance(scorer, TermScoreMatrix):
        return [maxscore_top_k(scorer, *query_arrays(scorer, terms), k) for terms in queries]
    found = []
    for terms in queries:
        merged = _nothing()
        if scorer.shards:
            query = query_arrays(scorer.shards[0], terms)  # the shards share one vocabulary
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


def query_maxima(matrix: TermScoreMatrix, term_ids: np.ndarray) -> list[float]:
    """The largest impact in each term's postings (0 for none), from the stored bounds when the index
    has them, else computed once per term on first use and kept (an index built before bounds were stored)."""
    found: list[float] = matrix.maxima[term_ids].tolist()
    if matrix.stored_maxima:
        return found
    for at, value in enumerate(found):
        if value != value:  # NaN: not computed yet
            term = int(term_ids[at])
            start, end = int(matrix.indptr[term]), int(matrix.indptr[term + 1])
            found[at] = float(matrix.impacts(term, start, end).max()) if end > start else 0.0
            matrix.maxima[term] = found[at]  # the same value from any thread: a race only repeats the work
    return found


def _slack(terms: int) -> float:
    """A relative bound on how far a float32 sum of ``terms`` positive float32 values (in any order)
    lies from their exact sum, doubled (two sums are compared), plus one rounding of a product."""
    return 4.0 * (terms + 2) * UNIT_ROUNDOFF


def _nothing() -> Hits:
    return Hits(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32))


def maxscore_top_k(matrix: TermScoreMatrix, term_ids: np.ndarray, counts: np.ndarray, k: int,
                   floor: float = 0.0) -> Hits:
    """The exhaustive top ``k`` of one query on ``matrix`` (see the module notes), for the query's
    distinct terms ``term_ids`` in alphabetical term order with their ``counts``. ``floor``: a score
    the ``k``-th best is known to reach (0 when unknown); passages below it may be left out.
    """
    if not len(term_ids):
        return _nothing()
    spans = matrix.indptr[term_ids].tolist(), matrix.indptr[term_ids + 1].tolist()
    terms = [Term(term, start, end, np.float32(count), count * maximum) for term, start, end, count, maximum in
             zip(term_ids.tolist(), *spans, counts.tolist(), query_maxima(matrix, term_ids), strict=True)]
    ranked = sorted(terms, key=lambda term: -term.bound)
    after = [0.0] * len(ranked)  # after[j]: what the terms ranked after the j-th can add at most
    for j in range(len(ranked) - 2, -1, -1):
        after[j] = after[j + 1] + ranked[j + 1].bound
    widen, lower = 1 + _slack(len(terms)), 1 - _slack(len(terms))
    theta = floor if floor > 0 else _estimate(matrix, terms, ranked, k) * lower
    if (after[0] + ranked[0].bound) * widen < theta:
        return _nothing()  # no passage here reaches the floor
    # The essential terms: the fewest, by bound, after which the others together cannot reach θ.
    essential = next((j + 1 for j, rest in enumerate(after) if rest * widen < theta), len(ranked))
    rows, partial = _accumulate(matrix, ranked[:essential])
    theta = max(theta, _kth_of(partial, k) * lower)  # partial scores: lower bounds of the full ones
    for position in range(essential, len(ranked) + 1):
        keep = partial >= theta / widen - after[position - 1]
        rows, partial = rows[keep], partial[keep]
        if position == len(ranked) or not len(rows):
            break
        partial += _lookup(matrix, ranked[position], rows)
        theta = max(theta, _kth_of(partial, k) * lower)
    if not len(rows):
        return _nothing()
    scores = _lookup(matrix, terms[0], rows)
    for term in terms[1:]:  # alphabetical order, from 0: the exhaustive product's float32 sums
        scores += _lookup(matrix, term, rows)
    return best(rows.astype(np.int64), scores, k)


def _estimate(matrix: TermScoreMatrix, terms: list[Term], ranked: list[Term], k: int) -> float:
    """A lower bound of the ``k``-th best score: the ``k``-th best full score of a few likely passages,
    those with the largest impacts of the highest-bound terms (any ``k`` passages' scores bound the
    ``k``-th best from below). 0 when the terms list fewer than ``k`` passages."""
    wanted = 2 * k
    picked: list[np.ndarray] = []
    total = 0
    for term in ranked:
        length = term.end - term.start
        if length > wanted:
            # stored values: in a term's postings they order as its impacts do, in every format
            top = np.argpartition(matrix.data[term.start:term.end], length - wanted)[length - wanted:]
            picked.append(matrix.indices[term.start + top])
        else:
            picked.append(matrix.indices[term.start:term.end])
        total += len(picked[-1])
        if total >= wanted:
            break
    if total < k:
        return 0.0
    rows = np.sort(np.concatenate(picked))
    rows = rows[np.r_[True, rows[1:] != rows[:-1]]]  # the postings' dtype, so searchsorted copies none
    full = np.zeros(len(rows), dtype=np.float64)
    for term in terms:
        full += _lookup(matrix, term, rows)
    return _kth_of(full, k)


def _accumulate(matrix: TermScoreMatrix, terms: list[Term]) -> tuple[np.ndarray, np.ndarray]:
    """Every passage the terms list (sorted rows, the postings' dtype) and its partial score over them (float64)."""
    if len(terms) == 1:
        term, = terms
        return matrix.indices[term.start:term.end], (_impacts(matrix, term) * term.weight).astype(np.float64)
    docs = np.concatenate([matrix.indices[term.start:term.end] for term in terms])
    values = np.concatenate([_impacts(matrix, term) * term.weight for term in terms])
    if not len(docs):  # none of the terms in this matrix (a small shard), and no floor to skip it by
        return docs, values.astype(np.float64)
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


def _impacts(matrix: TermScoreMatrix, term: Term) -> np.ndarray:
    return matrix.impacts(term.term, term.start, term.end)


def _kth_of(values: np.ndarray, k: int) -> float:
    """The ``k``-th largest of ``values`` (0 if there are fewer)."""
    if len(values) < k:
        return 0.0
    return float(np.partition(values, len(values) - k)[len(values) - k])


def _lookup(matrix: TermScoreMatrix, term: Term, rows: np.ndarray) -> np.ndarray:
    """``weight × impact`` of ``term`` for each of the sorted ``rows`` (0 where it does not occur), float32:
    the same float32 product the exhaustive search adds. A binary search per row when the rows are
    few beside the posting; else the posting spread over a dense array and the rows read from it."""
    if term.end == term.start:
        return np.zeros(len(rows), dtype=np.float32)
    posting, stored = matrix.indices[term.start:term.end], matrix.data[term.start:term.end]
    if len(rows) * DENSE_LOOKUP > term.end - term.start:
        spread = np.zeros(matrix.num_docs, dtype=np.float32)
        spread[posting] = matrix.widen(term.term, stored)
        values: np.ndarray = spread[rows]
    else:
        at = posting.searchsorted(rows)  # only the values found are widened: the same floats as all of them
        values = np.where(posting.take(at, mode="clip") == rows, matrix.widen(term.term, stored.take(at, mode="clip")),
                          np.float32(0))
    return values if term.weight == 1 else values * term.weight  # x × 1 is x: skip the pass
