"""RankRAG inference (Yu et al., NeurIPS 2024, §4.3): retrieve → rerank by P("True") → generate.

One LLM scores each of the top-N retrieved passages with the context-ranking prompt (Appendix D.1),
the k most relevant are kept, and the same LLM answers from them with the RAG prompt (D.2). The
paper retrieves N=100 for its 8B model; on a CPU the default is N=20.

Appendix D prints both prompts for each task type of §5.1: "NQ/TriviaQA/HotpotQA/PopQA", "FEVER"
(a claim to verify) and "Doc2dial, Inscit, TopiocQA" (a question with its dialogue's earlier
turns); the ``task`` setting picks the variant. The ``framing`` setting sends them as chat turns
(the model's template) or as the printed "System: … User: … Assistant:" text, a raw completion.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal, Mapping

from ..llm.client import LLM
from ..prompts import FRAMINGS, TASK_VARIANTS, task_prompt
from ..stages import PointwiseTrueReranker, Reader, Retriever, ScoreFusion
from ..stages.retrieve import SearchIndex
from .base import Method, RerankingSettings, adaptive_depth, guarded
from .reranking import TrainedRerankers


@dataclass
class RankRAGSettings(RerankingSettings):
    """RankRAG's prompts are Appendix D's, printed for three task types and as plain text, so every
    framing and task variant is available (see :class:`~winnow.methods.base.MethodSettings`).
    ``score`` is how P("True") is read."""

    framings: ClassVar[tuple[str, ...]] = FRAMINGS
    tasks: ClassVar[tuple[str, ...]] = tuple(TASK_VARIANTS)
    #: P("True") renormalised over {True, False} (the default), or ``raw``, as generated: §4.3 scores
    #: by "the probability of generating the answer as True", and ``--profile paper`` sets ``raw``.
    score: Literal["renormalised", "raw"] = "renormalised"


class RankRAG(Method):
    name = "rankrag"
    summary = 'retrieve N, rerank by the LLM\'s P("True") (D.1), answer from the top k (D.2)'
    stages = ("retrieve(N)", "rerank: pointwise P(True)", "[fuse with first stage, α]", "keep top k", "generate")
    Settings = RankRAGSettings

    def __init__(self, index: SearchIndex, llm: LLM, settings: RankRAGSettings,
                 agents: Mapping[str, LLM] | None = None, rerankers: TrainedRerankers | None = None) -> None:
        super().__init__(index, llm, settings, agents, rerankers)
        self.retriever = Retriever(index, n=settings.n)
        # With fusion every passage must keep its P(True) until the blend decides which k survive; with
        # demotion until the guard has moved the flagged ones down.
        whole = settings.fusing or settings.injection_guard == "demote"
        self.reranker = PointwiseTrueReranker(llm, keep=None if whole else settings.k,
                                              template=task_prompt("rankrag.context_ranking", settings.task),
                                              framing=settings.framing, score=settings.score)
        # The blend keeps its whole order (the trace and `winnow eval` show it); the reader takes the top k.
        self.fusion = ScoreFusion(settings.fusion_alpha, first_stage=self.retriever.kind, reranker=self.reranker.name,
                                  weights=settings.fusion_weights)
        self.reader = Reader(llm, max_tokens=settings.max_answer_tokens,
                             template=task_prompt("rankrag.rag", settings.task), framing=settings.framing)
        self.depth = adaptive_depth(settings, self.retriever, self.reranker, self.fusion)
        self.recipe = self.retriever >> guarded(settings, self.depth) % settings.k >> self.reader
