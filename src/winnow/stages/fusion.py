"""Blending a reranker's score with the first-stage retrieval score (beyond the papers; off by default).

Small untuned models can rank worse than BM25 (RankRAG-prompt P(True) with Qwen2.5-Coder-0.5B lowered
gold Recall@1 on Wikipedia QA from 0.600 to 0.525); blending lets an imperfect judge help without
overruling a good retriever. Both scores are min-max normalised over the query's list, then

    fused = (1 - α) · reranker + α · first stage

α = 0 is the paper's method (the stage then does nothing and is not recorded); α = 1 is the
retriever's order.

Calibrated fusion (``weights`` = [w_llm, w_first, bias], the setting ``fusion_weights``) replaces the
hand-set α by a logistic model fitted on tuning questions (:mod:`winnow.evaluation.fusion_fit`):

    P(relevant) = σ(w_llm · reranker + w_first · first stage + bias)

with the reranker's score as it gives it (P("True") is already a probability) and the first
stage's min-max normalised over the question's list (BM25's scale differs from query to query).
Passages are ranked by that probability, which is also their recorded score.
"""

from __future__ import annotations

import math
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


def sigmoid(z: float) -> float:
    """1 / (1 + e^-z), without overflow for large |z|."""
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


def calibrated_features(reranker: Sequence[float], first_stage: Sequence[float]) -> list[tuple[float, float]]:
    """The calibrated model's inputs per passage: the reranker's score as given, the first stage's
    min-max normalised over the list (see the module docstring). Fitting and ranking share it."""
    return list(zip((float(r) for r in reranker), min_max(first_stage), strict=True))


def calibrated(reranker: Sequence[float], first_stage: Sequence[float], weights: Sequence[float]) -> list[float]:
    """P(relevant) = σ(w_llm · reranker + w_first · min-max(first stage) + bias) per passage."""
    w_llm, w_first, bias = weights
    return [sigmoid(w_llm * r + w_first * f + bias) for r, f in calibrated_features(reranker, first_stage)]


@dataclass
class ScoreFusion(ListStage):
    alpha: float
    first_stage: str
    reranker: str
    keep: int | None = None
    name: str = "fusion"
    weights: tuple[float, ...] = ()  # calibrated fusion [w_llm, w_first, bias]; () blends by alpha

    def __post_init__(self) -> None:
        if not 0.0 <= self.alpha <= 1.0:
            raise WinnowError(f"fusion_alpha must be between 0 and 1 (got {self.alpha})",
                              "0 reproduces the paper, 1 keeps the retriever's order")
        if self.weights and (len(self.weights) != 3 or self.alpha):
            raise WinnowError(f"fusion_weights must be 3 numbers [w_llm, w_first, bias] with fusion_alpha 0 "
                              f"(got {list(self.weights)}, alpha {self.alpha})")

    def run(self, batch: Sequence[QuestionState]) -> None:
        if self.alpha == 0.0 and not self.weights:
            for state in batch:
                state.candidates = state.ranked if self.keep is None else state.ranked.truncated(self.keep)
            return
        settings: dict[str, object] = {"alpha": self.alpha, "first_stage": self.first_stage, "reranker": self.reranker,
                                       "normalisation": "min-max per query", "keep": self.keep}
        if self.weights:
            settings = {"weights": list(self.weights), "model": "logistic: σ(w_llm·reranker + w_first·first + bias)",
                        "first_stage": self.first_stage, "reranker": self.reranker,
                        "normalisation": "first stage min-max per query", "keep": self.keep}
        with recording(batch, self.name, "score-fusion", settings) as traces:
            for state, stage in zip(batch, traces, strict=True):
                pairs = [(c.score_of(self.reranker), c.score_of(self.first_stage)) for c in state.ranked]
                both = [(r, f) for r, f in pairs if r is not None and f is not None]
                if len(both) < len(pairs):
                    raise WinnowError(f"score fusion needs both a {self.first_stage!r} and a {self.reranker!r} "
                                      "score on every candidate")
                rerank_scores, first_scores = [r for r, _ in both], [f for _, f in both]
                fused = (calibrated(rerank_scores, first_scores, self.weights) if self.weights
                         else fuse(rerank_scores, first_scores, self.alpha))
                state.candidates = state.ranked.ranked_by(self.name, fused, keep=self.keep)
                stage.output = state.ranked.to_dicts()
