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
from functools import partial
from typing import Sequence

from ..details import JudgeDetails
from ..llm.base import ChoiceScores
from ..llm.client import LLM
from ..prompts import JudgePromptTemplate, judge_prompt
from .contract import ListStage, QuestionState, recording
from .fitting import fit_one_passage

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
class NoisyDocumentJudge(ListStage):
    """Scores every candidate by the judge's log-odds of "Yes" and ranks by it, highest first.

    Each triplet's answer is Agent-1's, from the question's ``document_answers``
    (:class:`~winnow.stages.predictor.PerDocumentPredictor` must run first).
    """

    llm: LLM
    template: JudgePromptTemplate = field(default_factory=lambda: judge_prompt("mainrag.judge"))
    name: str = "judge"

    def run(self, batch: Sequence[QuestionState]) -> None:
        settings = {"agent": "Agent-2 Judge (MAIN-RAG)", "prompt": self.template.name,
                    "scorer": 'log P("Yes") - log P("No") of the next token'}
        with recording(batch, self.name, "noisy-document-judge", settings) as traces:
            for state in batch:
                unanswered = [p.id for p in state.ranked.passages if p.id not in state.document_answers]
                if unanswered:
                    raise ValueError(f"no Agent-1 answer for passage(s) {unanswered}; run PerDocumentPredictor "
                                     "on the same list before the judge")
            owners = [(i, p) for i, s in enumerate(batch) for p in s.ranked.passages]
            prompts = []
            for i, p in owners:
                question, answer = batch[i].query.text, batch[i].document_answers[p.id]
                fitted = fit_one_passage(self.llm, partial(self.template.messages, question, answer=answer), p,
                                         output_tokens=1, fitted=traces[i].details.fitted)
                prompts.append(self.template.messages(question, fitted, answer))
            choice_scores = self.llm.choice_scores(prompts, CHOICES, stage=[traces[i] for i, _ in owners])
            start = 0
            for state, stage in zip(batch, traces, strict=True):
                passages = state.ranked.passages
                mine = choice_scores[start:start + len(passages)]
                start += len(passages)
                scores = [judge_score(s) for s in mine]
                details = stage.details_as(JudgeDetails)
                details.scores = {p.id: s for p, s in zip(passages, scores, strict=True)}
                details.choices_not_in_top_tokens = {p.id: list(s.missing) for p, s in zip(passages, mine, strict=True)
                                                     if s.missing}
                state.candidates = state.ranked.ranked_by(self.name, scores)
                stage.output = state.ranked.to_dicts()
