"""Hybrid retrieval: BM25 and dense lists fused by reciprocal rank fusion.

Reciprocal rank fusion (Cormack, Clarke & Büttcher, "Reciprocal Rank Fusion outperforms Condorcet
and individual Rank Learning Methods", SIGIR 2009): a document's fused score is
Σ_r 1 / (k + rank_r(d)) over the rankings r that contain it (rank 1-based), with k = 60, the value
the paper fixed in a pilot and used throughout. Only ranks count, so BM25 scores (unbounded) and
cosines (in [-1, 1]) need no calibration against each other.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from ..errors import WinnowError
from ..records import Candidate, CandidateList, Query, StageScore
from .bm25 import BM25Index
from .dense import DenseIndex

RRF_K = 60  # Cormack et al. 2009: fixed in a pilot, then used unchanged
Item = TypeVar("Item", bound=Hashable)


def reciprocal_rank_fusion(rankings: Sequence[Sequence[Item]], k: int = RRF_K) -> list[tuple[Item, float]]:
    """Every item of ``rankings`` (each best first) with its fused score Σ 1 / (k + rank), best first.

    An item absent from a ranking gets nothing from it. Equal scores keep the order in which the
    items first appear reading the rankings one after another, so the result is reproducible (and
    the first ranking wins ties between items each found by one ranking at the same rank).
    """
    if k < 0:
        raise ValueError(f"the RRF constant k must not be negative (got {k})")
    fused: dict[Item, float] = {}
    for ranking in rankings:
        seen: set[Item] = set()
        for rank, item in enumerate(ranking, start=1):
            if item in seen:
                raise ValueError(f"{item!r} occurs twice in one ranking")
            seen.add(item)
            fused[item] = fused.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(fused.items(), key=lambda pair: -pair[1])  # sorted() is stable: ties keep first appearance


@dataclass
class HybridIndex:
    """BM25 and dense search of one index, fused by RRF (Cormack et al. 2009, k = 60).

    Each list is taken ``depth`` deep (at least ``k``). Every candidate keeps the StageScores of
    the lists that found it (``bm25``, ``dense``, either or both, in that order), then
    ``StageScore("hybrid", rrf, rank)``, so a report shows where each passage came from.
    """

    bm25: BM25Index
    dense: DenseIndex
    k_rrf: int = RRF_K
    depth: int = 100

    name = "hybrid"

    def __post_init__(self) -> None:
        if self.depth < 1:
            raise WinnowError(f"depth must be at least 1 (got {self.depth})")
        if self.k_rrf < 0:
            raise WinnowError(f"k_rrf must not be negative (got {self.k_rrf})", "Cormack et al. (2009) use 60")

    def search(self, query: str | Query, k: int = 10) -> CandidateList:
        """The top ``k`` passages for ``query`` by fused rank, best first."""
        return self.search_many([query], k)[0]

    def search_many(self, queries: Sequence[str | Query], k: int = 10) -> list[CandidateList]:
        """``search`` for each query; both retrievers answer the whole batch at once."""
        if k < 1:
            raise WinnowError(f"k must be at least 1 (got {k})")
        items = [q if isinstance(q, Query) else Query(text=q) for q in queries]
        depth = max(self.depth, k)
        lexical = self.bm25.search_many(items, depth)
        semantic = self.dense.search_many(items, depth)
        return [self._fuse(query, (lexical_list, semantic_list), k)
                for query, lexical_list, semantic_list in zip(items, lexical, semantic, strict=True)]

    def _fuse(self, query: Query, lists: tuple[CandidateList, ...], k: int) -> CandidateList:
        found: dict[str, Candidate] = {}  # passage id → candidate carrying the component scores so far
        for ranked in lists:
            for candidate in ranked:
                entry = found.setdefault(candidate.passage.id, Candidate(candidate.passage))
                entry.scores.extend(candidate.scores)
        fused = reciprocal_rank_fusion([[c.passage.id for c in ranked] for ranked in lists], k=self.k_rrf)[:k]
        for rank, (passage_id, score) in enumerate(fused, start=1):
            found[passage_id].scores.append(StageScore(self.name, score, rank))
        return CandidateList(query, [found[passage_id] for passage_id, _ in fused])
