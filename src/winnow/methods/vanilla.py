"""Plain RAG, the baseline every paper measures against: retrieve top-k, read."""

from __future__ import annotations

from ..llm.client import LLM
from ..records import CandidateList, Query, Trace
from ..stages import Reader, Retriever
from ..stages.retrieve import SearchIndex
from .base import Method, MethodSettings


class VanillaRAG(Method):
    name = "vanilla"
    summary = "retrieve the top k passages and answer from them with the RankRAG RAG prompt (D.2)"
    stages = ("retrieve(k)", "generate")

    def __init__(self, index: SearchIndex, llm: LLM, settings: MethodSettings) -> None:
        super().__init__(settings)
        self.retriever = Retriever(index, n=settings.k)
        self.reader = Reader(llm, max_tokens=settings.max_answer_tokens)

    def _run(self, query: Query, trace: Trace) -> tuple[str, CandidateList]:
        passages = self.retriever.run(query, trace)
        return self.reader.run(passages, trace), passages
