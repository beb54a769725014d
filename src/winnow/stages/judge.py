"""Agent-2 Judge: MAIN-RAG (Chang et al., ACL 2025), "Definition of LLM Agents in MAIN-RAG".

Each (document, question, answer) triplet from Agent-1 is put to the judge with Appendix C's
"noisy document evaluator" instruction, which asks for "Yes" (the document helps and the answer
follows from it) or "No" (a noisy document). The judgment is made sortable by its next-token
log-probabilities (the paper's Figure 3, "quantification of document relevant score"):

    s_i = log P("Yes") - log P("No")

the log of the odds of "Yes" over "No", one forward pass and no generated text per document. The
documents are ranked by s_i, best first: the paper's ordered list D^rank_q, which the adaptive
judge bar then cuts (:mod:`winnow.stages.adaptive_bar`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..llm.base import ChoiceScores
from ..llm.client import LLM
from ..prompts import JudgePromptTemplate, judge_prompt
from ..records import CandidateList, Trace
from .base import stage_record
from .predictor import DocumentAnswers

CHOICES = ("Yes", "No")


def judge_score(scores: ChoiceScores) -> float:
    """s = log P("Yes") - log P("No") from next-token scores over {Yes, No}.

    :meth:`LLM.choice_scores` renormalises the two log-probabilities over {Yes, No}, i.e. subtracts
    the same log Z from both; the difference is unchanged, so this is exactly the paper's score
    on the model's raw next-token distribution. Spellings of a choice ("Yes", " yes", …) are
    summed into it first (:func:`winnow.llm.choices.scores_over_choices`). A choice missing from
    the top tokens was given the lowest log-probability seen, an upper bound on its true value, so
    the score is then a bound (a lower one when "No" is missing, an upper one when "Yes" is).
    """
    return scores.logprobs["Yes"] - scores.logprobs["No"]


@dataclass
class NoisyDocumentJudge:
    """Scores every candidate by the judge's log-odds of "Yes" and ranks by it, highest first."""

    llm: LLM
    template: JudgePromptTemplate = field(default_factory=lambda: judge_prompt("mainrag.judge"))
    name: str = "judge"

    def run(self, candidates: CandidateList, answers: DocumentAnswers, trace: Trace) -> CandidateList:
        """``answers`` are Agent-1's, by passage id (:class:`~winnow.stages.predictor.PerDocumentPredictor`)."""
        settings = {"agent": "Agent-2 Judge (MAIN-RAG)", "prompt": self.template.name,
                    "scorer": 'log P("Yes") - log P("No") of the next token'}
        with stage_record(trace, self.name, "noisy-document-judge", settings, candidates) as stage:
            unanswered = [p.id for p in candidates.passages if p.id not in answers]
            if unanswered:
                raise ValueError(f"no Agent-1 answer for passage(s) {unanswered}; run PerDocumentPredictor "
                                 "on the same list before the judge")
            question = candidates.query.text
            prompts = [self.template.messages(question, p, answers[p.id]) for p in candidates.passages]
            choice_scores = self.llm.choice_scores(prompts, CHOICES, stage=stage)
            scores = [judge_score(s) for s in choice_scores]
            ranked = candidates.ranked_by(self.name, scores)
            stage.details["scores"] = {p.id: s for p, s in zip(candidates.passages, scores)}
            missing: dict[str, Any] = {p.id: list(s.missing) for p, s in zip(candidates.passages, choice_scores)
                                       if s.missing}
            if missing:
                stage.details["choices_not_in_top_tokens"] = missing
            stage.output = ranked.to_dicts()
        return ranked
