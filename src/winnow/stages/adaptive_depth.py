"""Adaptive depth: per question, skip or shorten the LLM stage when the first stage is already sure
(beyond the papers; off by default).

Every reranking method spends the same LLM calls on every question: RankRAG one P("True") per
passage of the top N (§4.3), MAIN-RAG an Agent-1 answer and an Agent-2 judgment per document, RRR
σ per document of every round, RankGPT its windows. Yet a first stage is often right on its own: BM25
put an answer-bearing passage first for 80 % of the wiki-vital QA questions (docs/results.md).
Query performance prediction reads how sure a retriever is from its own scores alone, with no
relevance judgments: a list whose top score stands clear of the rest is more often right (Zhou &
Croft, SIGIR 2007, "weighted information gain"; Shtok et al., TOIS 2012, "normalized query
commitment", the spread of the top scores). Meng et al. ("Ranked List Truncation for Large
Language Model-based Re-Ranking", SIGIR 2024) cut an LLM reranker's depth per query for the same
trade of calls against quality.

The rule here is the top score's share of the list's scores, the predictor that did best on the
wiki-vital QA dev questions (181, BM25 top 10, none of them test questions) at telling whether
BM25's top passage holds a gold answer: ROC AUC 0.79, against 0.70 for the top-2 gap over the top
score, 0.68 for the top score's z-score (NQC-like) and 0.64 for the top-2 gap over the list's
range (docs/results.md, "Adaptive depth"). It needs no corpus statistics; scaled so that an even
list is 0 and a list whose whole mass is on its top is 1:

    share  = s_1 / (s_1 + … + s_N)
    margin = (share - 1/N) / (1 - 1/N)          (N the list's length; 0 for equal scores, 1 for N = 1)

Scores below 0 (a dense inner product) are first shifted so the lowest is 0, which the record's
``rule`` says. The margin depends on N (an even list of 10 has share 0.1, of 20 share 0.05), so a
threshold is chosen for the N it runs with. A question whose margin is at least the threshold (the
setting ``adaptive_depth``, in (0, 1]; 0 is off, the papers' methods) is *sure*: the LLM stages
see only its top ``adaptive_depth_keep`` candidates (0 skips them, and the first stage's order is
kept). The candidates they did not see follow the ones they passed on, in the first stage's order,
each with a note saying so, so a reader that takes k still gets k. A question that is not sure goes
through the LLM stages whole, as the paper has it.

:class:`AdaptiveDepth` wraps the LLM stages it governs (a reranker and its fusion, MAIN-RAG's
predictor, judge and bar), records its decision per question (:class:`~winnow.details.AdaptiveDepthDetails`)
and hands the stages only the questions that still have candidates for them, so a skipped question
makes no prompt at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from ..details import AdaptiveDepthDetails
from ..records import Candidate, CandidateList
from .contract import QuestionState, Stage, recording, run_stages
from .recipe import Composable, label

RULE = "top score's share above an even split: (s1 / sum(s) - 1/N) / (1 - 1/N)"
SHIFTED = " (scores shifted so the lowest is 0: some were negative)"


def first_stage_margin(scores: Sequence[float]) -> float:
    """The top score's share of the list, scaled to [0, 1] (see the module docstring); 0 for a list
    of equal scores, which says nothing, or of none, and 1 for a list of one (nothing to reorder)."""
    if len(scores) < 2:
        return float(len(scores))
    low = min(scores)
    shifted = [s - low for s in scores] if low < 0 else list(scores)
    total, top, even = sum(shifted), max(shifted), 1 / len(shifted)
    if total <= 0 or top * len(shifted) == total:
        return 0.0
    return max(0.0, (top / total - even) / (1 - even))


@dataclass
class AdaptiveDepth(Composable):
    """Run ``stages`` over each question's top candidates: all of them, or only the top ``keep`` when
    the first stage's margin is at least ``threshold`` (``keep = 0``: the stages are skipped).

    ``first_stage`` names the score read (the retriever's kind: ``bm25``, ``dense``, …). With
    ``threshold = 0`` the stages run as if it were not there and nothing is recorded.
    """

    threshold: float
    keep: int
    first_stage: str
    stages: Sequence[Stage] = field(default_factory=tuple)
    name: str = "adaptive_depth"

    @property
    def on(self) -> bool:
        return self.threshold > 0

    @property
    def steps(self) -> tuple[Stage, ...]:
        """The LLM stages it runs (what :func:`winnow.testing.leaves` walks)."""
        return tuple(self.stages)

    def label(self) -> str:
        """Off, the stages as they run (the paper's recipe prints as it always did); on, the rule too."""
        inner = " >> ".join(label(stage) for stage in self.stages)
        if not self.on:
            return inner or "AdaptiveDepth(off)"
        return (f"AdaptiveDepth(threshold={self.threshold!r}, keep={self.keep!r}, first_stage={self.first_stage!r})"
                + (f"[{inner}]" if inner else ""))

    def run(self, batch: Sequence[QuestionState]) -> None:
        if not self.on:
            run_stages(self.stages, batch)
            return
        depths = self.decide(batch)
        self.run_within(batch, [len(s.ranked) if d is None else d for s, d in zip(batch, depths, strict=True)],
                        self.stages)

    def decide(self, batch: Sequence[QuestionState]) -> list[int | None]:
        """Record the decision for every question of ``batch``; returns how many candidates of each
        the LLM stages will see, None for a question whose first stage is not sure (all of them)."""
        settings = {"rule": RULE, "threshold": self.threshold, "keep": self.keep, "first_stage": self.first_stage}
        depths: list[int | None] = []
        with recording(batch, self.name, "adaptive-depth", settings) as traces:
            for state, stage in zip(batch, traces, strict=True):
                scores = [c.score_of(self.first_stage) for c in state.ranked]
                known = [s for s in scores if s is not None]
                details = stage.details_as(AdaptiveDepthDetails)
                details.rule = RULE + (SHIFTED if any(s < 0 for s in known) else "")
                details.threshold = self.threshold
                if len(known) < len(scores):
                    # No first-stage score to read (a list handed in from elsewhere): never guess sure.
                    details.warning = f"{len(scores) - len(known)} candidate(s) have no {self.first_stage!r} score"
                details.margin = round(first_stage_margin(known), 6) if len(known) == len(scores) else None
                details.sure = details.margin is not None and details.margin >= self.threshold
                depth = min(self.keep, len(state.ranked)) if details.sure else len(state.ranked)
                details.depth = depth
                details.set_aside = len(state.ranked) - depth
                details.skipped = details.sure and depth == 0
                depths.append(depth if details.sure else None)
                stage.output = state.ranked.to_dicts()
        return depths

    def run_within(self, batch: Sequence[QuestionState], depths: Sequence[int], stages: Sequence[Stage]) -> None:
        """Run ``stages`` over each question's top ``depths[i]`` candidates (questions with none left
        out) and put the rest back below what they passed on, in the first stage's order."""
        tails: list[list[Candidate]] = []
        for state, depth in zip(batch, depths, strict=True):
            note = f"set aside by adaptive depth: the first stage was sure, the LLM stage saw its top {depth}"
            tails.append([Candidate(c.passage, list(c.scores), note) for c in state.ranked.candidates[depth:]])
            state.candidates = state.ranked.truncated(depth)
        seen = [state for state, depth in zip(batch, depths, strict=True) if depth > 0]
        if seen:
            run_stages(stages, seen)
        for state, tail in zip(batch, tails, strict=True):
            if tail:
                state.candidates = CandidateList(state.query, [*state.ranked.candidates, *tail])
