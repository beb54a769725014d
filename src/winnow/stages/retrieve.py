"""First-stage retrieval: the top-N passages for each question of a batch from an index."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from ..details import RetrievalDetails
from ..records import CandidateList, Query
from .contract import ListStage, QuestionState, recording, round_settings


class SearchIndex(Protocol):
    name: str

    def search(self, query: str | Query, k: int = 10) -> CandidateList: ...


@dataclass
class Retriever(ListStage):
    """Retrieves the top ``n`` passages (RankRAG §4.3's R, MAIN-RAG's N=20, RRR's BM25 on q_t).

    It searches each question's ``search_text`` (the question, or RRR's rewrite q_t); the list it
    leaves belongs to the original question, so later stages judge passages against that.
    """

    index: SearchIndex
    n: int
    name: str = "retrieve"

    @property
    def kind(self) -> str:
        return getattr(self.index, "name", "retrieve")  # bm25, dense or hybrid: scores are recorded under it

    def run(self, batch: Sequence[QuestionState]) -> None:
        with recording(batch, self.name, self.kind, lambda s: {"n": self.n, **round_settings(s)},
                       with_input=False) as traces:
            for state, stage in zip(batch, traces, strict=True):
                searched = state.query if state.search_text == state.query.search_text else state.search_text
                state.candidates = CandidateList(state.query, self.index.search(searched, k=self.n).candidates)
                stage.details_as(RetrievalDetails).query = state.search_text
                stage.output = state.ranked.to_dicts()
