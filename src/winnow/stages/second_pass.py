"""A second re-ranking pass over the head of a list: RankGPT's two-step process as RRR runs it.

RRR §4(C): "The re-ranker h follows the two-step process described in the RankGPT paper (Sun et
al., 2023): first, re-rank N documents in S (after Step 15 of Algorithm 1) using GPT-3.5-Turbo;
then, further re-rank the top 30 documents using GPT-4." App. B counts the calls of that second
step as ((30 - w) // s) + 1 windows.

:class:`HeadReranker` runs any list stage (the second model's re-ranker) on the top ``depth``
candidates the first pass left, and keeps the rest below them in the first pass's order. Those
keep the first pass's score (the second model never saw them) and a note saying so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..records import Candidate, CandidateList
from .contract import ListStage, QuestionState, Stage
from .recipe import label


@dataclass
class HeadReranker(ListStage):
    """Re-rank the top ``depth`` candidates of each list with ``inner``; the tail follows unchanged.

    The trace holds ``inner``'s stage record, with ``depth`` and the count of candidates below it
    added to its settings and the whole list (head re-ranked, tail as it was) as its output, so the
    stage's row in reports is the final order. A list no longer than ``depth`` is re-ranked whole.
    """

    inner: Stage
    depth: int
    name: str = ""  # the inner stage's

    def __post_init__(self) -> None:
        self.name = self.inner.name

    def label(self) -> str:
        return f"HeadReranker({label(self.inner)}, depth={self.depth})"

    def run(self, batch: Sequence[QuestionState]) -> None:
        tails: list[list[Candidate]] = []
        for state in batch:
            tails.append(state.ranked.candidates[self.depth:])
            state.candidates = state.ranked.truncated(self.depth)
        recorded = [len(state.trace.stages) for state in batch]
        self.inner.run(batch)
        note = f"below the second pass's depth {self.depth}: in the first pass's order"
        for state, tail, before in zip(batch, tails, recorded, strict=True):
            below = [Candidate(c.passage, list(c.scores), note) for c in tail]
            state.candidates = CandidateList(state.query, [*state.ranked.candidates, *below])
            if len(state.trace.stages) > before:  # the inner stage recorded this question
                stage = state.trace.stages[before]
                stage.settings.update(depth=self.depth, below_depth=len(tail))
                stage.output = state.ranked.to_dicts()
