"""RankGPT (Sun et al., 2023): retrieve N, rerank listwise with a sliding window, answer from the top k.

GAR-meets-RAG measures RRR against RankGPT as a baseline whose numbers it quotes from Sun et al.
(§4(B): "we quote results from Thakur et al. (2021) and Sun et al. (2023) computed in identical
setting"); the paper runs no ablation of RRR without its loop (its nearest, Table 6's N_rw = 1,
still filters by σ before h). Winnow's RankGPT uses the same listwise stage as RRR's re-ranker h,
with h's window and step by default (§4(D): "w = 10 and s = 5"); RankGPT's own released code
reranks the top 100 with a window of 20 and a step of 10, which ``--profile paper`` sets. Passages
are cut to 300 words, as RankGPT's code does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping

from ..llm.client import LLM
from ..prompts import listwise_prompt
from ..settings import at_least
from ..stages import KeepTop, ListwiseReranker, Reader, Retriever, ScoreFusion
from ..stages.listwise import check_listwise_prompt
from ..stages.retrieve import SearchIndex
from .base import Method, RerankingSettings


@dataclass
class RankGPTSettings(RerankingSettings):
    window: int = 10
    step: int = 5
    max_passage_words: int = 300
    listwise_prompt: Literal["rrr", "rankgpt"] = "rrr"  # stages.listwise.LISTWISE_PROMPTS

    def check(self) -> None:
        super().check()
        check_window(self)


def check_window(settings: Any) -> None:
    """A sliding window (RankGPT's and RRR's settings alike) needs 1 ≤ s ≤ w: a larger step would
    skip passages."""
    at_least(settings, 1, "window", "step", "max_passage_words")
    settings.require(settings.step <= settings.window, "step",
                     f"setting 'step' ({settings.step}) cannot exceed setting 'window' ({settings.window}): "
                     "passages between windows would never be ranked")


class RankGPT(Method):
    name = "rankgpt"
    summary = "retrieve N, RankGPT listwise rerank with a sliding window (w, s), answer from the top k"
    stages = ("retrieve(N)", "listwise rerank (w, s)", "[fuse with first stage, α]", "keep top k", "generate")
    Settings = RankGPTSettings

    def __init__(self, index: SearchIndex, llm: LLM, settings: RankGPTSettings,
                 agents: Mapping[str, LLM] | None = None) -> None:
        super().__init__(index, llm, settings, agents)
        self.retriever = Retriever(index, n=settings.n)
        self.reranker = ListwiseReranker(llm, window=settings.window, step=settings.step,
                                         max_words=settings.max_passage_words, keep=None,
                                         template=listwise_prompt(check_listwise_prompt(settings.listwise_prompt)))
        self.fusion = ScoreFusion(settings.fusion_alpha, first_stage=self.retriever.kind, reranker=self.reranker.name)
        self.reader = Reader(llm, max_tokens=settings.max_answer_tokens)
        self.recipe = [self.retriever, self.reranker, self.fusion, KeepTop(settings.k), self.reader]
