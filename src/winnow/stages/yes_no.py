"""The naïve Yes/No judgment: MAIN-RAG's baseline "Naïve Multi-Agent RAG" (Chang et al., ACL 2025).

The paper's experiments compare MAIN-RAG with two variants of itself; the first, "Naïve
Multi-Agent RAG", "replaces Agent-2's role with a simple natural language judgment of Yes or No":
the judge's answer keeps or drops each document, with no score to sort by and no adaptive bar.

Here the judgment is read from the same judge call MAIN-RAG makes (Appendix C's instruction, the
(document, question, answer) triplet, next-token scores over {Yes, No}): the judge says "Yes" when
P("Yes") > P("No"), i.e. when s = log P("Yes") − log P("No") > 0 — the choice greedy decoding
restricted to the two words would make. So the naïve variant costs exactly MAIN-RAG's calls, and a
run of each on the same questions shares them through the call cache. The survivors keep the
retriever's order (a Yes/No judgment ranks nothing). When the judge says "No" to every document
the final predictor answers from none, as a filter that keeps nothing would; the details say so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..details import YesNoDetails
from ..records import Candidate, CandidateList
from .contract import ListStage, QuestionState, recording


def says_yes(score: float) -> bool:
    """The judge's Yes/No decision from its log-odds s: "Yes" when P("Yes") > P("No"), a tie is "No"."""
    return score > 0.0


@dataclass
class YesNoJudgment(ListStage):
    """Keep the candidates the judge said "Yes" to, in the retriever's order (``retrieved_by``'s ranks).

    Reads each candidate's ``scored_by`` score, the judge's s = log P("Yes") − log P("No").
    """

    scored_by: str = "judge"
    retrieved_by: str = "bm25"
    name: str = "yes_no"

    def run(self, batch: Sequence[QuestionState]) -> None:
        settings = {"scored_by": self.scored_by, "order": "retrieval",
                    "rule": 'keep a document when the judge says "Yes": P("Yes") > P("No") (naïve multi-agent RAG)'}
        with recording(batch, self.name, "yes-no-judgment", settings) as traces:
            for state, stage in zip(batch, traces, strict=True):
                state.candidates = self._judge(state.ranked, stage.details_as(YesNoDetails))
                stage.output = state.ranked.to_dicts()

    def _judge(self, candidates: CandidateList, details: YesNoDetails) -> CandidateList:
        in_retrieval_order = sorted(candidates, key=self._retrieval_rank)
        kept: list[Candidate] = []
        for candidate in in_retrieval_order:
            score = candidate.score_of(self.scored_by)
            if score is None:
                raise ValueError(f"candidate {candidate.passage.id!r} has no score from stage {self.scored_by!r}; "
                                 "run NoisyDocumentJudge on the list before the Yes/No judgment")
            decision = "Yes" if says_yes(score) else "No"
            details.decisions[candidate.passage.id] = decision
            verdict = "kept" if decision == "Yes" else "dropped"
            note = f"{verdict} by {self.name}: the judge said {decision} (s = {score:.4g})"
            noted = Candidate(candidate.passage, list(candidate.scores), note)
            if decision == "Yes":
                kept.append(noted)
            else:
                details.dropped.append({k: v for k, v in noted.to_dict().items() if k != "text"})
        details.kept = len(kept)
        if candidates.candidates and not kept:
            details.warning = 'the judge said "No" to every document: the final predictor answers without documents'
        return CandidateList(candidates.query, kept)

    def _retrieval_rank(self, candidate: Candidate) -> int:
        rank = candidate.rank_of(self.retrieved_by)
        if rank is None:
            raise ValueError(f"candidate {candidate.passage.id!r} has no rank from stage {self.retrieved_by!r}")
        return rank
