"""RankGPT (Sun et al., 2023): retrieve N, rerank listwise with a sliding window, answer from the top k.

RRR's re-ranker h on the first retrieval alone, without the rewrite-retrieve loop. GAR-meets-RAG
measures RRR against RankGPT as a baseline whose numbers it quotes from Sun et al. (§4(B): "we quote
results from Thakur et al. (2021) and Sun et al. (2023) computed in identical setting"); the paper
runs no ablation of RRR without its loop (its nearest, Table 6's N_rw = 1, still filters by σ
before h). Winnow's RankGPT uses h's window and step by default (§4(D): "w = 10 and s = 5");
RankGPT's own released code reranks the top 100 with a window of 20 and a step of 10, which
``--profile paper`` sets. Passages are cut to 300 words, as RankGPT's code does. The re-ranker, its
non-paper fallbacks and the optional second pass over the top ``second_pass_depth`` (RankGPT's
two-step process as RRR §4(C) uses it) are :mod:`.final_rerank`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Mapping

from ..llm.client import LLM
from ..settings import RerankerPath, at_least, check_sliding_window
from ..stages import Reader, Recipe, Retriever, ScoreFusion
from ..stages.retrieve import SearchIndex
from .base import Method, RerankingSettings, adaptive_depth, guarded
from .final_rerank import (
    RERANK_ROLES,
    check_final_rerank,
    final_reranker,
    rerank_deviations,
    second_pass,
    second_pass_without_its_model,
)
from .reranking import TrainedRerankers


@dataclass
class RankGPTSettings(RerankingSettings):
    upper_bounds: ClassVar[dict[str, float]] = {"window": 100_000, "max_passage_words": 1_000_000}
    server_caps: ClassVar[dict[str, int]] = {"window": 100, "max_passage_words": 1000}
    contract_values: ClassVar[dict[str, Any]] = {"window": 3, "step": 2}  # two windows over N = 4
    window: int = 10
    step: int = 5
    max_passage_words: int = 300
    listwise_prompt: Literal["rrr", "rankgpt"] = "rrr"  # stages.listwise.LISTWISE_PROMPTS
    rerank: Literal["listwise", "pointwise", "graded", "cross-encoder", "monot5"] = "listwise"  # final_rerank
    rerank_model: RerankerPath = ""  # rerank=cross-encoder/monot5: a folder or hub id ("": the kind's default)
    second_pass_depth: int = 0  # re-rank the top d again on the rerank2 model (RRR §4(C): 30); 0 is off

    def check(self) -> None:
        super().check()
        check_window(self)
        check_final_rerank(self)
        self.require(not (self.second_pass_depth and self.fusing), "second_pass_depth",
                     "settings 'second_pass_depth' and 'fusion_alpha' (or 'fusion_weights') cannot be combined: the "
                     "blend would reorder the second pass's list by the first pass's scores", "set one of them to 0")

    def deviations(self) -> dict[str, str]:
        return {**super().deviations(), **rerank_deviations(self)}


def check_window(settings: Any) -> None:
    """A sliding window (RankGPT's and RRR's settings alike) needs 1 ≤ s ≤ w (:func:`check_sliding_window`),
    and passages cut to at least one word."""
    check_sliding_window(settings)
    at_least(settings, 1, "max_passage_words")


class RankGPT(Method):
    name = "rankgpt"
    summary = "retrieve N, RankGPT listwise rerank with a sliding window (w, s), answer from the top k"
    stages = ("retrieve(N)", "listwise rerank (w, s) [or a fallback]", "[second pass: top d on rerank2]",
              "[fuse with first stage, α]", "keep top k", "generate")
    Settings = RankGPTSettings
    roles = dict(RERANK_ROLES)

    def __init__(self, index: SearchIndex, llm: LLM, settings: RankGPTSettings,
                 agents: Mapping[str, LLM] | None = None, rerankers: TrainedRerankers | None = None) -> None:
        super().__init__(index, llm, settings, agents, rerankers)
        self.retriever = Retriever(index, n=settings.n)
        reranker = final_reranker(settings, self.llm_for("rerank"), rerankers=self.rerankers)
        assert reranker is not None  # RankGPT's rerank has no "none"
        self.reranker = reranker
        self.second_pass = second_pass(settings, self.llm_for("rerank2"))
        if notice := second_pass_without_its_model(settings, self.agents, llm):
            self.notice(notice)
        self.fusion = ScoreFusion(settings.fusion_alpha, first_stage=self.retriever.kind, reranker=reranker.name,
                                  weights=settings.fusion_weights)
        self.reader = Reader(llm, max_tokens=settings.max_answer_tokens)
        passes = Recipe.of(reranker, *([self.second_pass] if self.second_pass else []))
        self.stage_roles = {reranker.name: "rerank", **({self.second_pass.name: "rerank2"} if self.second_pass else {})}
        self.depth = adaptive_depth(settings, self.retriever, *passes, self.fusion)
        self.recipe = self.retriever >> guarded(settings, self.depth) % settings.k >> self.reader
