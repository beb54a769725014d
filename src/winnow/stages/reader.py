"""The reader: answers each question from its final passages (RankRAG Appendix D.2 by default, in the
variant of the run's task and framing)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Sequence

from ..details import ReaderDetails
from ..llm.client import LLM
from ..prompts import PromptTemplate, prompt
from .contract import QuestionState, recording
from .fitting import fit_prompt
from .recipe import Composable

#: Where an answer in the plain framing ends: the next "User:" turn of the layout.
PLAIN_TURN_END = ("\nUser:",)


@dataclass
class Reader(Composable):
    llm: LLM
    max_tokens: int = 32  # "a short phrase" (D.2); at ~9 tokens/s on a 1.5B model every token counts
    template: PromptTemplate = field(default_factory=lambda: prompt("rankrag.rag"))
    framing: str = "chat"  # "plain": the paper's text as a raw completion (winnow.prompts.FRAMINGS)
    name: str = "generate"

    def run(self, batch: Sequence[QuestionState]) -> None:
        # A plain prompt has no end-of-turn token to stop at: the model's turn ends where it starts
        # the user's next one, as the layout it continues writes it.
        stop = PLAIN_TURN_END if self.framing == "plain" else ()
        settings = {"prompt": self.template.name, "framing": self.framing, "max_tokens": self.max_tokens,
                    "temperature": 0.0, **({"stop": list(stop)} if stop else {})}
        with recording(batch, self.name, "reader", settings) as traces:
            renders = [partial(self.template.render, s.query.text, history=s.query.history, framing=self.framing)
                       for s in batch]
            prompts = [render(fit_prompt(self.llm, render, s.ranked.passages, output_tokens=self.max_tokens,
                                         fitted=t.details.fitted)) for render, s, t in zip(renders, batch, traces,
                                                                                            strict=True)]
            generations = self.llm.generate(prompts, stage=traces, max_tokens=self.max_tokens, stop=stop)
            for state, stage, generation in zip(batch, traces, generations, strict=True):
                state.answer = generation
                details = stage.details_as(ReaderDetails)
                details.answer = generation.text
                details.finish_reason = generation.finish_reason
                details.cut_by_token_limit = generation.finish_reason == "length"
                if details.cut_by_token_limit:
                    details.warning = (f"the answer was cut at max_answer_tokens={self.max_tokens}: "
                                       "raise it for a complete answer")
                stage.output = state.ranked.to_dicts()
