"""The rerank use case: a query and passages in the caller's order in, the same passages reranked out.

Winnow as a reranker inside someone else's pipeline: ``winnow rerank`` (a JSONL file), ``POST
/v1/rerank`` (a hosted-rerank-API body) and the Python API all come here, so the four methods, their
defaults and the shape of the result are defined once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Sequence

from .errors import WinnowError
from .records import Candidate, CandidateList, Passage, Query, StageScore, Trace

RERANK_METHODS = {
    "pointwise": "RankRAG P(\"True\") per document (one forward pass each)",
    "graded": "RRR relevance grade 1-5, expected over the next-token probabilities",
    "listwise": "RankGPT sliding-window permutation (window, step)",
    "embedding": "all-MiniLM-L6-v2 cosine; no LLM",
}


def check_rerank_method(method: str) -> str:
    if method not in RERANK_METHODS:
        raise WinnowError(f"unknown rerank method {method!r}", f"choose one of: {', '.join(RERANK_METHODS)}")
    return method


def reranker(method: str, *, llm: Any = None, embedder: Any = None, keep: int | None = None, window: int = 10,
             step: int = 5) -> Any:
    """The stage that reranks by ``method``: an LLM for the three LLM methods, an embedder for ``embedding``."""
    from .stages import EmbeddingReranker, GradedRelevanceReranker, ListwiseReranker, PointwiseTrueReranker

    check_rerank_method(method)
    if method == "embedding":
        return EmbeddingReranker(embedder, keep=keep)
    if method == "pointwise":
        return PointwiseTrueReranker(llm, keep=keep)
    if method == "graded":
        return GradedRelevanceReranker(llm, keep=keep)
    return ListwiseReranker(llm, window=window, step=step, keep=keep)


def as_candidates(query: str, passages: Sequence[Passage]) -> CandidateList:
    """The caller's order as the first stage ("input": score n for the first passage down to 1)."""
    count = len(passages)
    return CandidateList(Query(query), [Candidate(p, [StageScore("input", float(count - i), i + 1)])
                                        for i, p in enumerate(passages)])


@dataclass
class Reranked:
    """The reranked passages, best first, and the trace of the stage that ranked them."""

    ranked: CandidateList
    trace: Trace


def rerank(query: str, passages: Sequence[Passage], method: str = "pointwise", *, llm: Any = None,
           embedder: Any = None, keep: int | None = None, window: int = 10, step: int = 5) -> Reranked:
    """Rerank ``passages`` for ``query`` with ``method`` (see :data:`RERANK_METHODS`)."""
    stage = reranker(method, llm=llm, embedder=embedder, keep=keep, window=window, step=step)
    trace = Trace()
    started = time.perf_counter()
    ranked = stage.rank(as_candidates(query, passages), trace)
    trace.seconds = time.perf_counter() - started
    return Reranked(ranked, trace)


def relevance_score(method: str, score: float, rank: int, count: int) -> float:
    """The stage's score on a 0-1 scale where the method has one (hosted rerank APIs' convention)."""
    if method == "graded":
        return (score - 1.0) / 4.0
    if method == "listwise":
        return 1.0 - (rank - 1) / count
    return score
