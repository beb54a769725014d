"""The adaptive judge bar: MAIN-RAG (Chang et al., ACL 2025), "Adaptive Judge Bar".

The judge's scores of one query's documents set their own threshold:

    τ_q = mean(s) - n · std(s)

and the documents with s_i ≥ τ_q are kept, in descending order of s_i. The paper compares the
orders in its ablation table of n and document ordering (MAIN-RAG-decs against MAIN-RAG-asc) and
in the MAIN-RAG-Random variant, where "the orders of remaining documents are randomized";
descending is best, and ``order`` reaches the other two (:func:`order_survivors`).

With n = 0 (the paper's default) about half the documents survive whatever the scale of the
scores; n > 0 relaxes the bar, n < 0 tightens it (the ablation tries n in {-0.5, 0, 0.5, 1}).
n is MAIN-RAG's only hyper-parameter.

std is the population standard deviation (divide by the number of documents, not by one less):
the N scores are the whole set being cut, not a sample from a larger one, and it stays defined
for a single document (std 0, so τ is that document's score and it is kept).
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from ..details import FilterDetails
from ..records import Candidate, CandidateList, Query, Trace
from .contract import ListStage, QuestionState, recording

#: The survivors' orders of MAIN-RAG's ablation; descending is the paper's default and best.
ORDERS = ("descending", "ascending", "random")


def adaptive_judge_bar(scores: Sequence[float], n: float = 0.0) -> float:
    """τ = mean(scores) - n · pstdev(scores).

    ``statistics.mean`` and ``pstdev`` compute exactly before rounding once, so equal scores give
    τ equal to that score (a naive float sum could land a hair above it and drop every document).
    """
    if not scores:
        raise ValueError("the adaptive judge bar needs at least one score")
    if not math.isfinite(n):
        raise ValueError(f"n must be a finite number, got {n!r}")
    bad = [s for s in scores if not math.isfinite(s)]
    if bad:
        raise ValueError(f"judge scores must be finite numbers, got {bad}")
    values = [float(s) for s in scores]
    mean = statistics.mean(values)
    if n == 0.0:
        return mean
    return mean - n * statistics.pstdev(values, mu=mean)


def order_survivors(kept: list[Candidate], scores: list[float], order: str, *, seed: int = 0,
                    query: Query | None = None) -> list[Candidate]:
    """The survivors ``kept`` (with their judge ``scores``, best first) in the ``order`` asked for.

    ``descending`` keeps them best first, ``ascending`` worst first (equal scores stay in the order
    they came in, either way), ``random`` shuffles them with a generator seeded by ``seed`` and the
    question's text, so a question's order does not depend on the batch it ran in or on the others.
    """
    if order == "descending":
        return list(kept)
    if order == "ascending":
        by_score = sorted(range(len(kept)), key=lambda i: scores[i])
        return [kept[i] for i in by_score]
    if order == "random":
        shuffled = list(kept)
        random.Random(f"{seed}\0{query.text if query else ''}").shuffle(shuffled)
        return shuffled
    raise ValueError(f"order must be one of {', '.join(ORDERS)} (got {order!r})")


@dataclass
class AdaptiveJudgeBar(ListStage):
    """Keep the candidates whose ``scored_by`` score reaches τ = mean − n·std, in ``order``.

    Scores are read from each candidate's ``scored_by`` stage score (the judge's s_i). Every
    candidate gets a note saying why it was kept or dropped, with its score and τ; dropped ones are
    listed in the stage's details. With n < 0, τ can exceed every score (e.g. nine equal scores
    and one far below); then the best-scored candidate alone is kept, so the final predictor still
    has a document, and the details' ``fallback`` says so. An empty list passes through (τ None).
    ``order`` is ``descending`` (the paper's), ``ascending`` or ``random`` (seeded by ``order_seed``);
    the details' ``order`` names the one used. ``keep`` (Winnow's, not the paper's: None by default)
    caps the survivors at the ``keep`` best-scored, before they are put in ``order``; those it cuts
    are dropped with that reason.
    """

    n: float = 0.0
    scored_by: str = "judge"
    name: str = "adaptive_bar"
    order: str = "descending"
    order_seed: int = 0
    keep: int | None = None

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise ValueError(f"order must be one of {', '.join(ORDERS)} (got {self.order!r})")

    @property
    def order_used(self) -> str:
        """The order as traces name it: "descending", "ascending" or "random (seed 3)"."""
        return f"random (seed {self.order_seed})" if self.order == "random" else self.order

    def run(self, batch: Sequence[QuestionState]) -> None:
        settings = {"n": self.n, "std": "population", "scored_by": self.scored_by, "order": self.order_used,
                    "rule": f"keep s ≥ τ = mean(s) − n·std(s), {self.order_used} s (MAIN-RAG adaptive judge bar)"}
        if self.keep is not None:
            settings["keep"] = self.keep  # Winnow's cap on the survivors, not the paper's
        with recording(batch, self.name, "adaptive-judge-bar", settings) as traces:
            for state, stage in zip(batch, traces, strict=True):
                state.candidates = self._cut(state.ranked, stage.details_as(FilterDetails))
                stage.output = state.ranked.to_dicts()

    def _cut(self, candidates: CandidateList, details: FilterDetails) -> CandidateList:
        scores = [_score(c, self.scored_by) for c in candidates]
        # Stable: equal scores keep the order they came in (the judge's, then the retriever's).
        order = sorted(range(len(scores)), key=lambda i: -scores[i])
        kept: list[Candidate] = []
        dropped: list[Candidate] = []
        if scores:
            tau = details.tau = adaptive_judge_bar(scores, self.n)
            details.mean, details.std = statistics.mean(scores), statistics.pstdev(scores)
            for i in order:
                candidate, s = candidates.candidates[i], scores[i]
                if s >= tau:
                    kept.append(_noted(candidate, f"kept by {self.name}: s = {s:.4g} ≥ τ = {tau:.4g}"))
                else:
                    dropped.append(_noted(candidate, f"dropped by {self.name}: s = {s:.4g} < τ = {tau:.4g}"))
            if not kept:
                best, s = dropped.pop(0), scores[order[0]]
                details.fallback = (f"every score fell below τ = {tau:.4g} (n = {self.n:g}); kept the best-scored "
                                    f"candidate {best.passage.id!r} (s = {s:.4g}) so the answer has a document")
                kept.append(_noted(best, f"kept by {self.name} as a fallback: s = {s:.4g} < τ = {tau:.4g}, "
                                         "but it is the best-scored document"))
        if self.keep is not None and len(kept) > self.keep:  # best first here: the cap keeps the best-scored
            dropped += [_noted(c, f"dropped by {self.name}: cleared τ, but k = {self.keep} caps the survivors "
                                  f"(ranked {rank} by judge score)")
                        for rank, c in enumerate(kept[self.keep:], start=self.keep + 1)]
            kept = kept[:self.keep]
        details.kept = len(kept)
        details.dropped = [{k: v for k, v in c.to_dict().items() if k != "text"} for c in dropped]
        details.order = self.order_used
        kept = order_survivors(kept, [_score(c, self.scored_by) for c in kept], self.order, seed=self.order_seed,
                               query=candidates.query)
        return CandidateList(candidates.query, kept)


def adaptive_bar_filter(candidates: CandidateList, trace: Trace | None = None, *, n: float = 0.0,
                        scored_by: str = "judge", name: str = "adaptive_bar", order: str = "descending",
                        order_seed: int = 0) -> CandidateList:
    """:class:`AdaptiveJudgeBar` over one list (see there)."""
    return AdaptiveJudgeBar(n=n, scored_by=scored_by, name=name, order=order, order_seed=order_seed).rank(
        candidates, trace)


def _noted(candidate: Candidate, note: str) -> Candidate:
    return Candidate(candidate.passage, list(candidate.scores), note)


def _score(candidate: Candidate, scored_by: str) -> float:
    score = candidate.score_of(scored_by)
    if score is None:
        raise ValueError(f"candidate {candidate.passage.id!r} has no score from stage {scored_by!r}; "
                         "run NoisyDocumentJudge on the list before the adaptive judge bar")
    return score
