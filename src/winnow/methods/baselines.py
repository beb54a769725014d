"""The two baselines the papers' tables set beside their methods, which retrieve or filter nothing.

* ``no-retrieval``: the model answers from no passages at all, the rows "without RAG" of RankRAG's
  Tables 2-3 (Llama3-Instruct, ChatQA without retrieval) and MAIN-RAG's "Baselines without
  retrieval" (Table 1). By default it is RankRAG's D.2 prompt with no "Passage" blocks (every
  framing and task variant, as ``vanilla`` has them); ``prompt = "mainrag"`` sends MAIN-RAG's
  Agent-3 instruction with the question alone instead.
* ``mainrag-unfiltered``: MAIN-RAG's "Baselines with retrieval, training-free" (Table 1): the
  N retrieved documents (paper: 20) all handed to Agent-3's prompt, in retrieval order, with no
  Agent-1, no judge and no bar, so the gain of MAIN-RAG's filtering is measured on its own prompt.

Neither has a ``k``: ``no-retrieval`` reads no passage and ``mainrag-unfiltered`` reads all N.
The setting is refused when given, with the reason, rather than accepted and ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Mapping

from ..llm.client import LLM
from ..prompts import FRAMINGS, TASK_VARIANTS, prompt, task_prompt
from ..settings import at_least
from ..stages import Reader, Retriever
from ..stages.recipe import Recipe
from ..stages.retrieve import SearchIndex
from .base import Method, MethodSettings
from .reranking import TrainedRerankers


@dataclass
class NoRetrievalSettings(MethodSettings):
    """No passage is retrieved or read: ``n`` and ``k`` are 0 and refused otherwise. ``prompt`` is
    whose instruction the question is asked with: RankRAG's D.2 (``rankrag``, every framing and task)
    or MAIN-RAG's Agent-3 (``mainrag``, chat turns, open-domain QA)."""

    framings: ClassVar[tuple[str, ...]] = FRAMINGS
    tasks: ClassVar[tuple[str, ...]] = tuple(TASK_VARIANTS)
    contract_values: ClassVar[dict[str, Any]] = {"n": 0, "k": 0}
    n: int = 0
    k: int = 0
    prompt: Literal["rankrag", "mainrag"] = "rankrag"

    def check(self) -> None:
        for setting in ("n", "k"):
            value = getattr(self, setting)
            self.require(value == 0, setting,
                         f"setting {setting!r} ({value}) has no meaning for method no-retrieval: it answers "
                         "from no passages", "leave it out, or choose a method that retrieves: vanilla reads k")
        at_least(self, 1, "max_answer_tokens")
        self.require(self.prompt == "rankrag" or (self.framing, self.task) == ("chat", "qa"), "prompt",
                     f"prompt 'mainrag' is MAIN-RAG's Agent-3 instruction, chat turns for open-domain QA "
                     f"(framing is {self.framing!r}, task {self.task!r})",
                     "use prompt=rankrag for the plain framing and the fever/conversational tasks")


class NoRetrieval(Method):
    name = "no-retrieval"
    summary = "answer from no passages (the papers' baselines without retrieval), with RankRAG's D.2 prompt"
    stages = ("generate",)
    Settings = NoRetrievalSettings
    unused_settings = ("n", "k")

    def __init__(self, index: SearchIndex, llm: LLM, settings: NoRetrievalSettings,
                 agents: Mapping[str, LLM] | None = None, rerankers: TrainedRerankers | None = None) -> None:
        super().__init__(index, llm, settings, agents, rerankers)
        template = task_prompt("rankrag.rag", settings.task) if settings.prompt == "rankrag" \
            else prompt("mainrag.final_predictor")
        self.reader = Reader(llm, max_tokens=settings.max_answer_tokens, template=template, framing=settings.framing)
        self.recipe = Recipe.of(self.reader)


@dataclass
class UnfilteredSettings(MethodSettings):
    """``n`` documents are retrieved (paper: 20) and all of them read; there is no ``k`` to set."""

    contract_values: ClassVar[dict[str, Any]] = {"n": 3, "k": None}
    k: int | None = None  # type: ignore[assignment]  # every retrieved document is read

    def check(self) -> None:
        at_least(self, 1, "n", "max_answer_tokens")
        self.require(self.k is None, "k", f"setting 'k' ({self.k}) has no meaning for method mainrag-unfiltered: "
                                          "it answers from all n retrieved documents", "set n instead")


class MainRAGUnfiltered(Method):
    name = "mainrag-unfiltered"
    summary = ("retrieve N and answer from all of them with MAIN-RAG's Agent-3 prompt: MAIN-RAG without its "
               "filter (the paper's training-free baselines with retrieval)")
    stages = ("retrieve(N)", "final predict from all N (Agent-3's prompt)")
    Settings = UnfilteredSettings
    unused_settings = ("k",)

    def __init__(self, index: SearchIndex, llm: LLM, settings: UnfilteredSettings,
                 agents: Mapping[str, LLM] | None = None, rerankers: TrainedRerankers | None = None) -> None:
        super().__init__(index, llm, settings, agents, rerankers)
        self.retriever = Retriever(index, n=settings.n)
        self.final_predictor = Reader(llm, max_tokens=settings.max_answer_tokens,
                                      template=prompt("mainrag.final_predictor"), name="final_predict")
        self.recipe = self.retriever >> self.final_predictor
