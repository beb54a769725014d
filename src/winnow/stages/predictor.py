"""Agent-1 Predictor: MAIN-RAG (Chang et al., ACL 2025), "Definition of LLM Agents in MAIN-RAG".

For each retrieved document d_i the model answers the query from d_i alone, which turns the list
into (document, query, answer) triplets for Agent-2, the judge. The system instruction is Appendix
C's ("You are an accurate and reliable AI assistant …"), the same one Agent-3 answers with.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..llm.client import LLM
from ..prompts import PromptTemplate, prompt
from ..records import CandidateList, Trace
from .base import stage_record

#: Agent-1's answers by passage id: the "answer" of each (document, query, answer) triplet.
DocumentAnswers = dict[str, str]


@dataclass
class PerDocumentPredictor:
    """Answers the question once per candidate, from that candidate's passage alone.

    ``run`` returns the candidates unchanged (same order, no new score: the predictor judges
    nothing) together with the answers by passage id; the answers are also in the stage's
    ``details["answers"]``.
    """

    llm: LLM
    max_tokens: int = 32  # an answer, not an essay; each of the N documents pays this budget
    template: PromptTemplate = field(default_factory=lambda: prompt("mainrag.predictor"))
    name: str = "predict"

    def run(self, candidates: CandidateList, trace: Trace) -> tuple[CandidateList, DocumentAnswers]:
        settings = {"agent": "Agent-1 Predictor (MAIN-RAG)", "prompt": self.template.name,
                    "max_tokens": self.max_tokens, "temperature": 0.0}
        with stage_record(trace, self.name, "per-document-predictor", settings, candidates) as stage:
            ids = [p.id for p in candidates.passages]
            duplicated = sorted({i for i in ids if ids.count(i) > 1})
            if duplicated:
                # Answers are keyed by passage id; two passages under one id would share one answer.
                raise ValueError(f"passage ids must be unique in a candidate list; repeated: {duplicated}")
            question = candidates.query.text
            prompts = [self.template.messages(question, [p]) for p in candidates.passages]
            generations = self.llm.generate(prompts, stage=stage, max_tokens=self.max_tokens)
            answers = {pid: generation.text for pid, generation in zip(ids, generations)}
            stage.details["answers"] = dict(answers)
            stage.output = candidates.to_dicts()
        return candidates, answers
