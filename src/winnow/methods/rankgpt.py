"""RankGPT (Sun et al., 2023): retrieve N, rerank listwise with a sliding window, answer from the top k.

This is RRR without the rewrite-retrieve loop (the ablation of GAR-meets-RAG §4), with RRR's
re-ranker settings (Table 4: window 10, step 5; passages cut to 300 words as RankGPT does).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..llm.client import LLM
from ..prompts import listwise_prompt
from ..records import CandidateList, Query, Trace
from ..stages import ListwiseReranker, Reader, Retriever
from ..stages.fusion import ScoreFusion
from ..stages.listwise import check_listwise_prompt
from ..stages.retrieve import SearchIndex
from .base import Method, RerankingSettings


@dataclass
class RankGPTSettings(RerankingSettings):
    window: int = 10
    step: int = 5
    max_passage_words: int = 300
    listwise_prompt: str = "rrr"  # or "rankgpt" (stages.listwise.LISTWISE_PROMPTS)

    def validate(self, method: str) -> None:
        super().validate(method)
        check_listwise_prompt(self.listwise_prompt)


class RankGPT(Method):
    name = "rankgpt"
    summary = "retrieve N, RankGPT listwise rerank with a sliding window (w, s), answer from the top k"
    stages = ("retrieve(N)", "listwise rerank (w, s)", "[fuse with first stage, α]", "keep top k", "generate")
    Settings = RankGPTSettings

    def __init__(self, index: SearchIndex, llm: LLM, settings: RankGPTSettings) -> None:
        super().__init__(settings)
        self.retriever = Retriever(index, n=settings.n)
        self.reranker = ListwiseReranker(llm, window=settings.window, step=settings.step,
                                         max_words=settings.max_passage_words, keep=None,
                                         template=listwise_prompt(check_listwise_prompt(settings.listwise_prompt)))
        self.fusion = ScoreFusion(settings.fusion_alpha, first_stage=self.retriever.name, reranker=self.reranker.name)
        self.reader = Reader(llm, max_tokens=settings.max_answer_tokens)

    def _run(self, query: Query, trace: Trace) -> tuple[str, CandidateList]:
        retrieved = self.retriever.run(query, trace)
        reranked = self.fusion.run(self.reranker.run(retrieved, trace), trace)
        top = reranked.truncated(self.settings.k)
        return self.reader.run(top, trace), top
