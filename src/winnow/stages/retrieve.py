"""First-stage retrieval: the top-N passages for a query from an index."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..records import CandidateList, Query, Trace
from .base import stage_record


class SearchIndex(Protocol):
    name: str

    def search(self, query: str | Query, k: int = 10) -> CandidateList: ...


@dataclass
class Retriever:
    """Retrieves the top ``n`` passages (RankRAG §4.3's R, MAIN-RAG's N=20, RRR's BM25)."""

    index: SearchIndex
    n: int
    name: str = ""  # the retriever kind, e.g. "bm25"; its scores are recorded under this name

    def __post_init__(self) -> None:
        self.name = self.name or getattr(self.index, "name", "retrieve")

    def run(self, query: Query, trace: Trace) -> CandidateList:
        with stage_record(trace, "retrieve", self.name, {"n": self.n}) as stage:
            candidates = self.index.search(query, k=self.n)
            stage.output = candidates.to_dicts()
        return candidates
