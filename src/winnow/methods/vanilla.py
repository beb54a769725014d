"""Plain RAG, the baseline every paper measures against: retrieve top-k, read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Mapping

from ..llm.client import LLM
from ..prompts import FRAMINGS, TASK_VARIANTS, task_prompt
from ..settings import at_least
from ..stages import Reader, Retriever
from ..stages.retrieve import SearchIndex
from .base import Method, MethodSettings, refuse_no_passages
from .reranking import TrainedRerankers


@dataclass
class VanillaSettings(MethodSettings):
    """``k`` passages are retrieved and read; ``n`` is not used. The reader's prompt is RankRAG's
    D.2, so every framing and task variant is available."""

    framings: ClassVar[tuple[str, ...]] = FRAMINGS
    tasks: ClassVar[tuple[str, ...]] = tuple(TASK_VARIANTS)

    def check(self) -> None:
        refuse_no_passages(self)
        at_least(self, 1, "n", "k", "max_answer_tokens")


class VanillaRAG(Method):
    name = "vanilla"
    summary = "retrieve the top k passages and answer from them with the RankRAG RAG prompt (D.2)"
    stages = ("retrieve(k)", "generate")
    Settings = VanillaSettings
    unused_settings = ("n",)

    def __init__(self, index: SearchIndex, llm: LLM, settings: MethodSettings,
                 agents: Mapping[str, LLM] | None = None, rerankers: TrainedRerankers | None = None) -> None:
        super().__init__(index, llm, settings, agents, rerankers)
        self.retriever = Retriever(index, n=settings.k)
        self.reader = Reader(llm, max_tokens=settings.max_answer_tokens,
                             template=task_prompt("rankrag.rag", settings.task), framing=settings.framing)
        self.recipe = self.retriever >> self.reader
