"""Pointwise LLM reranking by P("True"): RankRAG's context ranking (Yu et al., 2024, §4.3).

Each (question, passage) pair is put to the model with the context-ranking prompt (Appendix D.1);
the score is the probability of "True" as the next token, renormalised over {True, False} by
default; ``score="raw"`` takes it as generated, which is what §4.3 says ("the probability of
generating the answer as True"; the two order passages alike unless the model puts much of its mass
on other tokens). The
prompt is the variant of the run's task (a claim for FEVER, the dialogue's earlier turns for
conversational QA) in the run's framing (chat turns, or the appendix's plain text). Scoring
emits a single token, which is why reranking costs far less than generating (§5.5, Fig. 5). Over a
batch, every (question, passage) pair of every question goes to the model in one request.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial
from typing import Literal, Sequence

from ..details import RankingDetails
from ..llm.base import ChoiceScores
from ..llm.choices import normalise_token
from ..llm.client import LLM
from ..prompts import PromptTemplate, prompt
from .contract import ListStage, QuestionState, recording
from .fitting import fit_prompt

CHOICES = ("True", "False")


def true_score(scores: ChoiceScores, score: str = "renormalised") -> float:
    """P("True") renormalised over {True, False} (Winnow's default), or as the model gave it
    (``raw``, §4.3's "the probability of generating the answer as True"). A cache entry older than
    the raw log-probabilities gives the raw value from its top tokens (the same sum over spellings)."""
    if score == "renormalised":
        return scores.probability("True")
    if scores.raw_logprobs:
        return math.exp(scores.raw_logprobs["True"])
    return sum(math.exp(lp) for token, lp in scores.raw_top.items() if normalise_token(token) == "true")


@dataclass
class PointwiseTrueReranker(ListStage):
    llm: LLM
    keep: int | None = None  # top-k to keep after reranking; None keeps all
    template: PromptTemplate = field(default_factory=lambda: prompt("rankrag.context_ranking"))
    framing: str = "chat"  # "plain": the paper's text as a raw completion (winnow.prompts.FRAMINGS)
    name: str = "rerank"
    score: Literal["renormalised", "raw"] = "renormalised"

    def run(self, batch: Sequence[QuestionState]) -> None:
        scorer = 'P("True") renormalised over True/False' if self.score == "renormalised" else 'P("True") as generated'
        settings = {"scorer": scorer, "prompt": self.template.name,
                    "framing": self.framing, "keep": self.keep}
        with recording(batch, self.name, "pointwise-true", settings) as traces:
            owners = [(i, p) for i, s in enumerate(batch) for p in s.ranked.passages]
            renders = [partial(self.template.render, s.query.text, history=s.query.history, framing=self.framing)
                       for s in batch]
            prompts = [renders[i](fit_prompt(self.llm, renders[i], [p], output_tokens=1,
                                             fitted=traces[i].details.fitted)) for i, p in owners]
            scores = self.llm.choice_scores(prompts, CHOICES, stage=[traces[i] for i, _ in owners])
            start = 0
            for state, stage in zip(batch, traces, strict=True):
                mine = scores[start:start + len(state.ranked)]
                start += len(state.ranked)
                details = stage.details_as(RankingDetails)
                reranked = state.ranked.ranked_by(self.name, [true_score(s, self.score) for s in mine])
                if self.keep is not None and len(reranked) > self.keep:
                    # The whole order stays in the trace: answer Recall@k after reranking (Table 6)
                    # needs ranks beyond the k passed on.
                    details.ranked_ids = [p.id for p in reranked.passages]
                    details.scores = {c.passage.id: c.score for c in reranked}
                    reranked = reranked.truncated(self.keep)
                details.choices_not_in_top_tokens = sorted({m for s in mine for m in s.missing})
                state.candidates = reranked
                stage.output = reranked.to_dicts()
