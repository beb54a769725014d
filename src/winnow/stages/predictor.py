"""Agent-1 Predictor: MAIN-RAG (Chang et al., ACL 2025), "Definition of LLM Agents in MAIN-RAG".

For each retrieved document d_i the model answers the query from d_i alone, which turns the list
into (document, query, answer) triplets for Agent-2, the judge. The system instruction is Appendix
C's ("You are an accurate and reliable AI assistant …"), the same one Agent-3 answers with.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Sequence

from ..details import PredictorDetails
from ..llm.client import LLM
from ..prompts import PromptTemplate, prompt
from .contract import QuestionState, recording
from .fitting import fit_prompt
from .recipe import Composable

#: Agent-1's answers by passage id: the "answer" of each (document, query, answer) triplet.
DocumentAnswers = dict[str, str]


@dataclass
class PerDocumentPredictor(Composable):
    """Answers each question once per candidate, from that candidate's passage alone.

    The candidates pass on unchanged (same order, no new score: the predictor judges nothing);
    the answers go to each question's ``document_answers`` and the stage's details.
    """

    llm: LLM
    max_tokens: int = 32  # an answer, not an essay; each of the N documents pays this budget
    template: PromptTemplate = field(default_factory=lambda: prompt("mainrag.predictor"))
    name: str = "predict"

    def run(self, batch: Sequence[QuestionState]) -> None:
        settings = {"agent": "Agent-1 Predictor (MAIN-RAG)", "prompt": self.template.name,
                    "max_tokens": self.max_tokens, "temperature": 0.0}
        with recording(batch, self.name, "per-document-predictor", settings) as traces:
            for state in batch:
                ids = [p.id for p in state.ranked.passages]
                duplicated = sorted({i for i in ids if ids.count(i) > 1})
                if duplicated:
                    # Answers are keyed by passage id; two passages under one id would share one answer.
                    raise ValueError(f"passage ids must be unique in a candidate list; repeated: {duplicated}")
            owners = [(i, p) for i, s in enumerate(batch) for p in s.ranked.passages]
            prompts = [self.template.messages(batch[i].query.text, fit_prompt(
                self.llm, partial(self.template.messages, batch[i].query.text), [p],
                output_tokens=self.max_tokens, fitted=traces[i].details.fitted)) for i, p in owners]
            generations = self.llm.generate(prompts, stage=[traces[i] for i, _ in owners], max_tokens=self.max_tokens)
            for (i, passage), generation in zip(owners, generations, strict=True):
                batch[i].document_answers[passage.id] = generation.text
            for state, stage in zip(batch, traces, strict=True):
                details = stage.details_as(PredictorDetails)
                details.answers = {p.id: state.document_answers[p.id] for p in state.ranked.passages}
                stage.output = state.ranked.to_dicts()
