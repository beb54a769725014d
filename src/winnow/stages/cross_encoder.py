"""Reranking by a trained reranker: a cross-encoder or monoT5, the baselines the papers compare with.

RankRAG Table 6 reranks the retriever's top 100 with rankers fine-tuned on MS MARCO (RankBERT,
monoT5) and BGE-Reranker-v2-m3, and reports Recall@5/10/20 of the reranked list against its own
P("True") ranking (§5.5, "RankRAG is Data-efficient"). RRR Tables 1-3 list monoT5 (220M and 3B)
and monoBERT beside RankGPT and RRR on BEIR and TREC-DL20. Each passage is scored once, with the
query, by the model of :mod:`winnow.models.rerankers` (no LLM, no call cache): a cross-encoder's
relevance logit, or monoT5's P("true"). The passage is given as its title, a space and its text
(the text alone when it has no title), as BEIR's rerankers read its corpora.

The stage record keeps every passage's score by id (``details.scores``: those passed on and those
a ``keep`` cut away) and, when ``keep`` cut the list, the whole order (``details.ranked_ids``), so
the inspector and Recall@k after reranking see the passages beyond the cut.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from ..details import CrossEncoderDetails
from ..records import Passage
from .contract import ListStage, QuestionState, recording

if TYPE_CHECKING:
    from ..models.rerankers import PairScorer


def pair_text(passage: Passage) -> str:
    """The passage as the reranker reads it: "title text", or the text alone."""
    return f"{passage.title} {passage.text}" if passage.title else passage.text


@dataclass
class CrossEncoderReranker(ListStage):
    """Rerank each list by ``scorer`` (a cross-encoder or monoT5); keep the top ``keep`` (None: all)."""

    scorer: PairScorer
    keep: int | None = None
    name: str = ""  # the scorer's kind unless given

    def __post_init__(self) -> None:
        self.name = self.name or self.scorer.kind

    def run(self, batch: Sequence[QuestionState]) -> None:
        settings = {"scorer": self.scorer.description, "model": self.scorer.name,
                    "max_length": self.scorer.max_length, "keep": self.keep}
        with recording(batch, self.name, self.scorer.kind, settings) as traces:
            for state, stage in zip(batch, traces, strict=True):
                passages = state.ranked.passages
                scored = self.scorer.score(state.query.text, [pair_text(p) for p in passages])
                details = stage.details_as(CrossEncoderDetails)
                details.model = self.scorer.name
                details.scores = {p.id: round(s, 6) for p, s in zip(passages, scored.scores, strict=True)}
                details.truncated = scored.truncated
                reranked = state.ranked.ranked_by(self.name, scored.scores)
                if self.keep is not None and len(reranked) > self.keep:
                    details.ranked_ids = [p.id for p in reranked.passages]
                    reranked = reranked.truncated(self.keep)
                state.candidates = reranked
                stage.output = reranked.to_dicts()
