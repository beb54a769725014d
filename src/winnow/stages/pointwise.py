"""Pointwise LLM reranking by P("True"): RankRAG's context ranking (Yu et al., 2024, §4.3).

Each (question, passage) pair is put to the model with the context-ranking prompt (Appendix D.1);
the score is the probability of "True" as the next token, renormalised over {True, False}. Scoring
emits a single token, which is why reranking costs far less than generating (§5.5, Fig. 5).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..llm.client import LLM
from ..prompts import PromptTemplate, prompt
from ..records import CandidateList, Trace
from .base import stage_record

CHOICES = ("True", "False")


@dataclass
class PointwiseTrueReranker:
    llm: LLM
    keep: int | None = None  # top-k to keep after reranking; None keeps all
    template: PromptTemplate = field(default_factory=lambda: prompt("rankrag.context_ranking"))
    name: str = "rerank"

    def run(self, candidates: CandidateList, trace: Trace) -> CandidateList:
        settings = {"scorer": 'P("True") renormalised over True/False', "prompt": self.template.name,
                    "keep": self.keep}
        with stage_record(trace, self.name, "pointwise-true", settings, candidates) as stage:
            question = candidates.query.text
            prompts = [self.template.messages(question, [p]) for p in candidates.passages]
            scores = self.llm.choice_scores(prompts, CHOICES, stage=stage)
            p_true = [s.probability("True") for s in scores]
            reranked = candidates.ranked_by(self.name, p_true)
            if self.keep is not None and len(reranked) > self.keep:
                # The whole reranked order is kept in the trace: answer Recall@k after reranking
                # (Table 6) needs ranks beyond the k passed on.
                stage.details["ranked_ids"] = [p.id for p in reranked.passages]
                reranked = reranked.truncated(self.keep)
            missing = sorted({m for s in scores for m in s.missing})
            if missing:
                stage.details["choices_not_in_top_tokens"] = missing
            stage.output = reranked.to_dicts()
        return reranked
