"""Query rewriting with retrieval feedback: RRR's rewriter g (Arora et al., 2023, §3.2, App. A.1).

The prompt carries the original query (TOPIC) and, for each query tried so far, its top N_aug
results by retriever score (Algorithm 1 lines 11-12; §5.3 (iii): retriever-ranked feedback is what
the paper's experiments use). The answer is asked for as ``<<Rewrite>>…<</Rewrite>>``; the turn is
started with the opening tag and generation stops at the closing one, so the text generated is the
rewrite itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

from ..details import RewriteDetails
from ..llm.base import Messages
from ..llm.client import LLM
from ..llm.continuation import continuation_support
from ..prompts import RewritePromptTemplate, rewrite_prompt
from ..records import Passage, StageTrace
from .contract import QuestionState, recording
from .fitting import fit_prompt
from .recipe import Composable

_TAGGED = re.compile(r"<<\s*rewrite\s*>>(.*?)(?:<<\s*/\s*rewrite\s*>>|$)", re.IGNORECASE | re.DOTALL)
_ANY_TAG = re.compile(r"<<\s*/?\s*rewrite\s*>>", re.IGNORECASE)


def parse_rewrite(text: str) -> str:
    """The rewrite in a model's answer, or "" when there is none.

    With the answer started by "<<Rewrite>>" the text is the rewrite up to the closing tag; a
    model that repeats the opening tag, or answers without tags, is read sensibly: the tagged part
    if any, else the first non-empty line, without quotes and a "Rewrite:" label.
    """
    match = _TAGGED.search(text)
    candidate = _ANY_TAG.sub(" ", match.group(1) if match else text)
    for line in candidate.splitlines():
        line = re.sub(r"^\s*(?:rewrite|query)\s*(?:#\d+)?\s*:\s*", "", line, flags=re.IGNORECASE)
        line = line.strip().strip("\"'“”‘’`").strip()
        if line:
            return " ".join(line.split())
    return ""


@dataclass
class QueryRewriter(Composable):
    """RRR's g: for each question still in the loop, the next query q_{t+1} = g(q_t; π_t).

    Each question's ``feedback`` (π_t: the queries tried and their top documents) must hold the
    current round's entry. The rewrite becomes the question's ``search_text``; a question whose
    rewrite came back empty is marked ``done`` (the loop cannot go on for it).
    """

    llm: LLM
    max_tokens: int = 20  # RRR Table 4: "token limit 20"; a search query, not an essay
    max_words: int | None = 100  # feedback documents cut to this many words (RRR: feedback_words); None: whole
    template: RewritePromptTemplate = field(default_factory=lambda: rewrite_prompt("rrr.rewrite"))
    feedback_docs: int = 3
    feedback: str = "retriever"  # how the caller chose the feedback documents, for the record
    name: str = "rewrite"

    def run(self, batch: Sequence[QuestionState]) -> None:
        settings = lambda s: {"round": s.round, "feedback_docs": self.feedback_docs,  # noqa: E731
                              "feedback": self.feedback}
        with recording(batch, self.name, "rewriter", settings, with_input=False) as traces:
            # A server that does not continue a started turn gets A.1 without "<<Rewrite>>" started
            # (llm/continuation.py); parse_rewrite reads the tagged answer it then writes in full.
            found = continuation_support(self.llm, traces[0]) if batch else None
            prefill = found is None or found.continues
            for stage in traces:
                stage.details_as(RewriteDetails).continuation = found.how if found else ""
            prompts = [self._prompt(state, stage, prefill=prefill) for state, stage in zip(batch, traces, strict=True)]
            generations = self.llm.generate(prompts, stage=traces, max_tokens=self.max_tokens,
                                            stop=["<</Rewrite>>"])
            for state, stage, generation in zip(batch, traces, generations, strict=True):
                text = parse_rewrite(generation.text)
                stage.details_as(RewriteDetails).rewrites.append({"answer": generation.text, "rewrite": text})
                if text:
                    state.search_text = text
                else:
                    state.done = True

    def _prompt(self, state: QuestionState, stage: StageTrace, *, prefill: bool = True) -> Messages:
        """A.1 with every round's feedback documents, cut together to fit the rewriter's context."""
        shapes = [(query, len(documents)) for query, documents in state.feedback]

        def render(passages: Sequence[Passage]) -> Messages:
            history, start = [], 0
            for query, count in shapes:
                history.append((query, passages[start:start + count]))
                start += count
            return self.template.messages(state.query.text, history, max_words=self.max_words, prefill=prefill)

        documents = [d for _, docs in state.feedback for d in docs]
        return render(fit_prompt(self.llm, render, documents, output_tokens=self.max_tokens,
                                 fitted=stage.details.fitted))
