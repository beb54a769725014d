"""The rerank use case: a query and passages in the caller's order in, the same passages reranked out.

Winnow as a reranker inside someone else's pipeline: ``winnow rerank`` (a JSONL file), ``POST
/v1/rerank`` (a hosted-rerank-API body) and the Python API all come here, so the methods, their
defaults and the shape of the result are defined once. Besides the three LLM rerankers and the
embedding baseline, ``cross-encoder`` and ``monot5`` run the trained rerankers the papers compare
against (RankRAG Table 6; RRR Tables 1-3; :mod:`winnow.models.rerankers`), on the model named by
``model`` (a folder or hub id; the kind's default when empty).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal, Sequence

from .errors import WinnowError
from .methods.reranking import RERANKERS, TRAINED_RERANKERS, choose_reranker
from .records import Candidate, CandidateList, Passage, Query, StageScore, Trace
from .settings import ModelPath, Settings, at_least, check_sliding_window
from .stages.contract import QuestionState, run_stages
from .stages.injection import GuardMode, InjectionGuard

if TYPE_CHECKING:
    from .index.embedder import Embedder
    from .llm.client import LLM
    from .stages.contract import ListStage

#: Every rerank method and what it is: the methods floor's one chooser's names (:mod:`winnow.methods.reranking`).
RERANK_METHODS = RERANKERS

#: The methods that run a trained reranker model rather than an LLM or the embedder.
MODEL_RERANK_METHODS = TRAINED_RERANKERS

RerankMethod = Literal["pointwise", "graded", "listwise", "embedding", "cross-encoder", "monot5"]


@dataclass
class RerankSettings(Settings):
    """A reranker's settings, as ``winnow rerank``, ``/v1/rerank``, the MCP rerank tool and the
    integrations give them: the ``method``, how many to ``keep`` (None: all), the listwise
    sliding window (RankGPT's w and s; RRR §4(D): w = 10, s = 5), the ``model`` of the
    ``cross-encoder`` and ``monot5`` methods (a folder or hub id; "" for the kind's default), and the
    ``injection_guard`` every method's settings have (:mod:`winnow.stages.injection`: ``flag`` by
    default, which records passages that read like instructions and changes nothing)."""

    owner: ClassVar[str] = "rerank"
    upper_bounds: ClassVar[dict[str, float]] = {"window": 100_000}
    server_caps: ClassVar[dict[str, int]] = {"window": 100}
    method: RerankMethod = "pointwise"
    keep: int | None = None
    window: int = 10
    step: int = 5
    model: ModelPath = ""
    injection_guard: GuardMode = "flag"

    def check(self) -> None:
        if self.keep is not None:
            at_least(self, 1, "keep")
        check_sliding_window(self, smallest_window=2)  # a window of one passage cannot reorder anything


def check_rerank_method(method: str) -> str:
    if method not in RERANK_METHODS:
        raise WinnowError(f"unknown rerank method {method!r}", f"choose one of: {', '.join(RERANK_METHODS)}")
    return method


def reranker(settings: RerankSettings, *, llm: LLM | None = None, embedder: Embedder | None = None) -> ListStage:
    """The stage that reranks by ``settings.method``: an LLM for the three LLM methods, an embedder for
    ``embedding``, the model ``settings.model`` for ``cross-encoder`` and ``monot5`` (the methods
    floor's one chooser, :func:`~winnow.methods.reranking.choose_reranker`)."""
    return choose_reranker(settings.method, llm=llm, embedder=embedder, keep=settings.keep, window=settings.window,
                           step=settings.step, model=settings.model)


def as_candidates(query: str, passages: Sequence[Passage]) -> CandidateList:
    """The caller's order as the first stage ("input": score n for the first passage down to 1)."""
    count = len(passages)
    return CandidateList(Query(query), [Candidate(p, [StageScore("input", float(count - i), i + 1)])
                                        for i, p in enumerate(passages)])


@dataclass
class Reranked:
    """The reranked passages, best first, and the trace of the stage that ranked them."""

    ranked: CandidateList
    trace: Trace


def rerank(query: str, passages: Sequence[Passage], method: str | RerankSettings = "pointwise", *,
           llm: LLM | None = None, embedder: Embedder | None = None, keep: int | None = None, window: int = 10,
           step: int = 5, model: str = "", injection_guard: str = "flag") -> Reranked:
    """Rerank ``passages`` for ``query`` with ``method`` (see :data:`RERANK_METHODS`): a method's name
    with ``keep``/``window``/``step``/``model``/``injection_guard``, or checked :class:`RerankSettings`."""
    if isinstance(method, str):
        check_rerank_method(method)
        method = RerankSettings.from_values({"method": method, "keep": keep, "window": window, "step": step,
                                             "model": model, "injection_guard": injection_guard})
    stage = reranker(method, llm=llm, embedder=embedder)
    trace = Trace()
    started = time.perf_counter()
    state = QuestionState(Query(query), trace, as_candidates(query, passages))
    run_stages([InjectionGuard(method.injection_guard, (stage,))], [state])
    trace.seconds = time.perf_counter() - started
    return Reranked(state.ranked, trace)


def relevance_score(method: str, score: float, rank: int, count: int) -> float:
    """The stage's score on a 0-1 scale where the method has one (hosted rerank APIs' convention)."""
    if method == "graded":
        return (score - 1.0) / 4.0
    if method == "listwise":
        return 1.0 - (rank - 1) / count
    if method in MODEL_RERANK_METHODS:
        from .models.rerankers import relevance_of

        return relevance_of(method, score)
    return score
