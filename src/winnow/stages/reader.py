"""The reader: answers the question from the final passages (RankRAG Appendix D.2 by default)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..llm.client import LLM
from ..prompts import PromptTemplate, prompt
from ..records import CandidateList, Trace
from .base import stage_record


@dataclass
class Reader:
    llm: LLM
    max_tokens: int = 32  # "a short phrase" (D.2); at ~9 tokens/s on a 1.5B model every token counts
    template: PromptTemplate = field(default_factory=lambda: prompt("rankrag.rag"))
    name: str = "generate"

    def run(self, candidates: CandidateList, trace: Trace) -> str:
        settings = {"prompt": self.template.name, "max_tokens": self.max_tokens, "temperature": 0.0}
        with stage_record(trace, self.name, "reader", settings, candidates) as stage:
            messages = self.template.messages(candidates.query.text, candidates.passages)
            [generation] = self.llm.generate([messages], stage=stage, max_tokens=self.max_tokens)
            stage.details["answer"] = generation.text
            stage.output = candidates.to_dicts()
        return generation.text
