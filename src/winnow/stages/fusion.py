"""Blending a reranker's score with the first-stage retrieval score (beyond the papers; off by default).

Small untuned models can rank worse than BM25 (RankRAG-prompt P(True) with Qwen2.5-Coder-0.5B lowered
gold Recall@1 on Wikipedia QA from 0.600 to 0.525); blending lets an imperfect judge help without
overruling a good retriever. Both scores are min-max normalised over the query's list, then

    fused = (1 - α) · reranker + α · first stage

α = 0 is the paper's method (the stage then does nothing and is not recorded); α = 1 is the
retriever's order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..errors import WinnowError
from .contract import ListStage, QuestionState, recording


def min_max(values: Sequence[float]) -> list[float]:
    """Scale to [0, 1]; a list whose values are all equal carries no order and maps to zeros."""
    low, high = min(values, default=0.0), max(values, default=0.0)
    if high == low:
        return [0.0 for _ in values]
    return [(v - low) / (high - low) for v in values]


def fuse(reranker: Sequence[float], first_stage: Sequence[float], alpha: float) -> list[float]:
    return [(1 - alpha) * r + alpha * f for r, f in zip(min_max(reranker), min_max(first_stage), strict=True)]


@dataclass
class ScoreFusion(ListStage):
    alpha: float
    first_stage: str
    reranker: str
    keep: int | None = None
    name: str = "fusion"

    def __post_init__(self) -> None:
        if not 0.0 <= self.alpha <= 1.0:
            raise WinnowError(f"fusion_alpha must be between 0 and 1 (got {self.alpha})",
                              "0 reproduces the paper, 1 keeps the retriever's order")

    def run(self, batch: Sequence[QuestionState]) -> None:
        if self.alpha == 0.0:
            for state in batch:
                state.candidates = state.ranked if self.keep is None else state.ranked.truncated(self.keep)
            return
        settings = {"alpha": self.alpha, "first_stage": self.first_stage, "reranker": self.reranker,
                    "normalisation": "min-max per query", "keep": self.keep}
        with recording(batch, self.name, "score-fusion", settings) as traces:
            for state, stage in zip(batch, traces, strict=True):
                pairs = [(c.score_of(self.reranker), c.score_of(self.first_stage)) for c in state.ranked]
                both = [(r, f) for r, f in pairs if r is not None and f is not None]
                if len(both) < len(pairs):
                    raise WinnowError(f"score fusion needs both a {self.first_stage!r} and a {self.reranker!r} "
                                      "score on every candidate")
                fused = fuse([r for r, _ in both], [f for _, f in both], self.alpha)
                state.candidates = state.ranked.ranked_by(self.name, fused, keep=self.keep)
                stage.output = state.ranked.to_dicts()
