"""MAIN-RAG (Chang et al., ACL 2025): training-free multi-agent filtering of retrieved documents.

    D_q = top-N documents from the retriever                        (paper: Contriever, N = 20)
    Agent-1 Predictor:  a_i = answer(q | d_i) for every d_i          one generation per document
    Agent-2 Judge:      s_i = log P("Yes") - log P("No")             one next-token read per triplet
                        on the triplet (d_i, q, a_i)
    Adaptive judge bar: τ_q = mean(s) - n · std(s)                   n = 0 by default
    D_filtered = {d_i : s_i ≥ τ_q}, in descending s_i
    Agent-3 Final-Predictor: answer(q | D_filtered)                  Agent-1's instruction

Agents and instructions are in "Definition of LLM Agents in MAIN-RAG" and Appendix C, the bar in
"Adaptive Judge Bar". The three agents may be one model or different ones (``judge_llm``,
``final_llm``); Agent-1 always uses ``llm``.

MAIN-RAG has no top-k: the final predictor reads every document that clears the bar. Winnow's
``k`` (None by default, the paper's behaviour) caps the survivors at the k best by judge score, for
a caller that asks for at most k passages (a retriever's ``k``, ``winnow ask --k``); set, it is
marked as a deviation from the paper (:meth:`MainRAGSettings.deviations`).

The paper's ablations are settings: ``judge_n`` (n in {-0.5, 0, 0.5, 1}, the ablation table of n
and document ordering), ``order`` of the survivors (``descending``, the paper's; ``ascending``,
MAIN-RAG-asc; ``random`` with ``order_seed``, the MAIN-RAG-Random variant) and ``variant = "naive"``,
the paper's "Naïve Multi-Agent RAG", which "replaces Agent-2's role with a simple natural language
judgment of Yes or No" (:mod:`winnow.stages.yes_no`): a document is kept when the judge's "Yes"
beats its "No", with no adaptive bar, in retrieval order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Mapping

from ..llm.client import LLM
from ..prompts import judge_prompt, prompt
from ..settings import at_least
from ..stages import (
    AdaptiveJudgeBar,
    NoisyDocumentJudge,
    PerDocumentPredictor,
    Reader,
    Retriever,
    YesNoJudgment,
)
from ..stages.retrieve import SearchIndex
from .base import AdaptiveDepthSettings, Method, adaptive_depth, guarded, refuse_no_passages
from .reranking import TrainedRerankers


def judge_filter_stages(llm: LLM, judge_llm: LLM | None = None, *, judge_n: float = 0.0,
                        max_document_answer_tokens: int = 32, order: str = "descending",
                        order_seed: int = 0, keep: int | None = None, judge_sentence: str = "added",
                        ) -> tuple[PerDocumentPredictor, NoisyDocumentJudge, AdaptiveJudgeBar]:
    """MAIN-RAG's filter between retrieval and the final predictor: Agent-1 answers from each document
    alone, Agent-2 judges each (document, query, answer) triplet by s = log P("Yes") - log P("No"),
    and the adaptive judge bar keeps s ≥ τ = mean(s) - n·std(s), in ``order`` (descending s: "Adaptive Judge
    Bar"), at most ``keep`` of them (Winnow's cap; None: all, the paper's). ``judge_sentence`` is
    :attr:`MainRAGSettings.judge_sentence`. The method runs these three; :mod:`winnow.integrations`
    runs them alone over a caller's list."""
    predictor = PerDocumentPredictor(llm, max_tokens=max_document_answer_tokens)
    judge = NoisyDocumentJudge(judge_llm or llm, template=judge_prompt(JUDGE_TEMPLATES[judge_sentence]))
    return predictor, judge, AdaptiveJudgeBar(n=judge_n, scored_by=judge.name, order=order, order_seed=order_seed,
                                              keep=keep)


#: The judge's user turn by ``judge_sentence``: with Winnow's added request ('Are both conditions
#: reached? Answer "Yes" or "No" first.'), or ending at the LLM Answer as nothing in Appendix C adds.
JUDGE_TEMPLATES = {"added": "mainrag.judge", "none": "mainrag.judge_without_request"}


@dataclass
class MainRAGSettings(AdaptiveDepthSettings):
    """``n`` documents are retrieved (paper: 20); ``k`` caps the survivors (Winnow's; None, the
    default, keeps every survivor as the paper does).

    ``judge_n`` is the bar's n in τ = mean − n·std (named apart from ``n``, the documents
    retrieved; the paper tries n in {-0.5, 0, 0.5, 1}, 0 its default); ``max_document_answer_tokens``
    bounds each Agent-1 answer and ``max_answer_tokens`` the final one. ``order`` is the order the
    survivors reach Agent-3 in (``order_seed`` seeds ``random``); ``variant = "naive"`` is the
    paper's naïve multi-agent RAG (Yes/No judgment, no bar, retrieval order). ``judge_sentence``
    is whether the judge's user turn ends with Winnow's request 'Are both conditions reached? Answer
    "Yes" or "No" first.' (``added``, the default: a small model then puts its verdict in the first
    token, where the score is read) or ends at the LLM Answer (``none``, ``--profile paper``: the
    paper prints no user turn and Appendix C's instruction asks for no such thing).
    """

    upper_bounds: ClassVar[dict[str, float]] = {"max_document_answer_tokens": 1_048_576}
    server_caps: ClassVar[dict[str, int]] = {"max_document_answer_tokens": 512}
    contract_values: ClassVar[dict[str, Any]] = {"n": 3}  # Agent-1 and Agent-2 each call once per document
    judge_n: float = 0.0
    max_document_answer_tokens: int = 32
    order: Literal["descending", "ascending", "random"] = "descending"
    order_seed: int = 0
    variant: Literal["mainrag", "naive"] = "mainrag"
    judge_sentence: Literal["added", "none"] = "added"
    k: int | None = None  # type: ignore[assignment]  # no cap by default: the paper keeps every survivor

    def check(self) -> None:
        # Not MethodSettings.check: k is optional here (a cap on the survivors, not the reader's top k).
        at_least(self, 1, "n", "max_answer_tokens", "max_document_answer_tokens")
        if self.k is not None:
            refuse_no_passages(self)
            at_least(self, 1, "k")
            self.require(self.k <= self.n, "k", f"setting 'k' ({self.k}) cannot exceed setting 'n' ({self.n}): "
                                                "the survivors k caps are among the N retrieved")
            self.require(self.variant == "mainrag", "k", "setting 'k' caps the adaptive bar's survivors by judge "
                         "score; the naive variant has no bar", "leave k out with variant=naive")
        self.require(self.order == "random" or self.order_seed == 0, "order_seed",
                     f"setting 'order_seed' ({self.order_seed}) only applies with order = 'random' "
                     f"(order is {self.order!r})", "set order=random, or leave order_seed out")
        if self.variant == "naive":
            # The naïve variant has no bar and no scores to order by: these would be silently ignored.
            self.require(self.judge_n == 0.0, "judge_n", "setting 'judge_n' is the adaptive bar's n; the naive "
                         "variant has no bar", "leave judge_n out with variant=naive")
            self.require(self.order == "descending", "order", "setting 'order' orders the survivors by judge "
                         "score; the naive variant keeps them in retrieval order", "leave order out with variant=naive")

    def deviations(self) -> dict[str, str]:
        if self.k is None:
            return super().deviations()
        return {**super().deviations(), "k": "Winnow's cap on the survivors: MAIN-RAG answers from every document "
                                             "that clears the adaptive judge bar"}


class MainRAG(Method):
    name = "mainrag"
    summary = ("retrieve N, answer from each document alone (Agent-1), judge each triplet by "
               'log P("Yes") - log P("No") (Agent-2), keep s ≥ mean - n·std in descending order, '
               "answer from all survivors (Agent-3)")
    stages = ("retrieve(N)", "predict per document (Agent-1)", "judge Yes/No log-odds (Agent-2)",
              "adaptive judge bar τ = mean − n·std, in `order` (naive: keep the Yes)",
              "final predict from survivors (Agent-3)")
    Settings = MainRAGSettings
    roles = {"judge": "Agent-2, the judge", "final": "Agent-3, the final predictor"}

    def __init__(self, index: SearchIndex, llm: LLM, settings: MainRAGSettings,
                 agents: Mapping[str, LLM] | None = None, rerankers: TrainedRerankers | None = None) -> None:
        super().__init__(index, llm, settings, agents, rerankers)
        self.retriever = Retriever(index, n=settings.n)
        self.predictor, self.judge, bar = judge_filter_stages(
            llm, self.llm_for("judge"), judge_n=settings.judge_n,
            max_document_answer_tokens=settings.max_document_answer_tokens, order=settings.order,
            order_seed=settings.order_seed, keep=settings.k, judge_sentence=settings.judge_sentence)
        self.bar: AdaptiveJudgeBar | YesNoJudgment = bar
        if settings.variant == "naive":
            self.bar = YesNoJudgment(scored_by=self.judge.name, retrieved_by=self.retriever.kind)
        self.final_predictor = Reader(self.llm_for("final"), max_tokens=settings.max_answer_tokens,
                                      template=prompt("mainrag.final_predictor"), name="final_predict")
        self.depth = adaptive_depth(settings, self.retriever, self.predictor, self.judge, self.bar)
        self.recipe = self.retriever >> guarded(settings, self.depth) >> self.final_predictor
        self.stage_roles = {self.judge.name: "judge", self.final_predictor.name: "final"}
