"""The final re-ranker h of RRR and RankGPT: listwise as the papers have it, a fallback, a second pass.

Both papers re-rank listwise with a sliding window (RRR §3.2 Stage 3: "the LLM-based re-ranker model
h, which we implement using the technique of Sun et al. (2023)"; prompt in App. A.3). The setting
``rerank`` chooses h:

- ``listwise`` (default): the papers' re-ranker.
- ``pointwise`` / ``graded``: NOT the papers'. Small local models answer the listwise prompt with the
  identity order or the format's example ("[1] >> [2]"), so the listwise pass changes nothing (the
  trace's ``windows_unchanged`` counts it). These score one passage per call instead, which such
  models do better: P("True") with RankRAG's context-ranking prompt (App. D.1), or the expected
  grade 1..5 with RRR's relevance prompt (App. A.2). Run labels and reports mark them as deviations.
- ``cross-encoder`` / ``monot5``: NOT the papers' h but the trained rerankers they compare with
  (RankRAG Table 6: monoT5, BGE-Reranker-v2-m3, RankBERT over the top 100; RRR Tables 1-3: monoT5
  220M and 3B, monoBERT): the model of ``rerank_model`` (a folder or hub id; "" loads the one the
  method was given, as ``winnow serve --rerank-model`` gives its own, else
  cross-encoder/ms-marco-MiniLM-L-6-v2 or castorini/monot5-base-msmarco) scores each passage, no
  LLM (:mod:`winnow.stages.cross_encoder`). RankGPT with one of these is the "retrieve, rerank with
  a trained reranker, answer from the top k" baseline pipeline.
- ``none`` (RRR only): no final re-ranker, S as ordered by σ — the ablation of RRR §5.3 (i),
  Table 7 ("Is the final re-ranker h necessary? Can we instead only rely on the relevance scores
  obtained using σ to re-rank S?").

``second_pass_depth`` adds RRR §4(C)'s second step: "first, re-rank N documents in S … using
GPT-3.5-Turbo; then, further re-rank the top 30 documents using GPT-4". The second pass is the same
kind of re-ranker on the agent role ``rerank2``'s model (the method's model unless given), over the
top ``second_pass_depth`` (30 in the paper; 0, off, by default).
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol

from ..llm.client import LLM
from ..settings import at_least
from ..stages import HeadReranker, ListStage
from .reranking import TRAINED_RERANKERS, TrainedRerankers, choose_reranker

#: The re-rankers that are no paper's h, and why they are offered.
FALLBACK_RERANKERS = {
    "pointwise": "RankRAG's P(\"True\") per passage instead of the paper's listwise re-ranker (a fallback for "
                 "small models that cannot follow the listwise format)",
    "graded": "RRR's relevance grade 1-5 per passage instead of the paper's listwise re-ranker (a fallback for "
              "small models that cannot follow the listwise format)",
    "cross-encoder": "a trained cross-encoder (rerank_model) instead of the paper's LLM re-ranker: the baseline of "
                     "RankRAG Table 6 (BGE-Reranker-v2-m3) and RRR Table 3 (monoBERT)",
    "monot5": "monoT5 (rerank_model) instead of the paper's LLM re-ranker: the baseline of RankRAG Table 6 and "
              "RRR Tables 1-3",
}

#: The roles the final re-ranker brings to a method: role -> what it does.
RERANK_ROLES = {"rerank": "the final re-ranker h (first pass)",
                "rerank2": "the second pass's re-ranker over the top second_pass_depth (RRR §4(C): GPT-4)"}


class FinalRerankSettings(Protocol):
    """The settings of a method with a final re-ranker (RRRSettings, RankGPTSettings)."""

    @property
    def rerank(self) -> str: ...
    @property
    def window(self) -> int: ...
    @property
    def step(self) -> int: ...
    @property
    def max_passage_words(self) -> int: ...
    @property
    def listwise_prompt(self) -> str: ...
    @property
    def second_pass_depth(self) -> int: ...
    @property
    def rerank_model(self) -> str: ...


def check_final_rerank(settings: Any) -> None:
    """``second_pass_depth`` is 0 (off) or at least 2 (one passage has no order), and needs a re-ranker."""
    at_least(settings, 0, "second_pass_depth")
    settings.require(settings.second_pass_depth != 1, "second_pass_depth",
                     "setting 'second_pass_depth' must be 0 (no second pass) or at least 2: one passage has no order")
    settings.require(not (settings.second_pass_depth and settings.rerank == "none"), "second_pass_depth",
                     "setting 'second_pass_depth' needs a final re-ranker, but 'rerank' is 'none'",
                     "set rerank=listwise (the paper) or second_pass_depth=0")
    settings.require(not (settings.second_pass_depth and settings.rerank in TRAINED_RERANKERS), "second_pass_depth",
                     f"setting 'second_pass_depth' re-ranks the head again with an LLM (the rerank2 role), but "
                     f"'rerank' is {settings.rerank!r}, a trained reranker with no LLM",
                     "set second_pass_depth=0, or rerank=listwise (the paper)")
    settings.require(not (settings.rerank_model and settings.rerank not in TRAINED_RERANKERS), "rerank_model",
                     f"setting 'rerank_model' names the model of rerank=cross-encoder or monot5, but 'rerank' is "
                     f"{settings.rerank!r}", "set rerank=cross-encoder or rerank=monot5, or leave rerank_model out")


def rerank_deviations(settings: FinalRerankSettings) -> dict[str, str]:
    """``{"rerank": why}`` when the final re-ranker is a fallback the papers do not use."""
    return {"rerank": FALLBACK_RERANKERS[settings.rerank]} if settings.rerank in FALLBACK_RERANKERS else {}


def final_reranker(settings: FinalRerankSettings, llm: LLM, *, name: str | None = None,
                   reuse_grades: bool = False, rerankers: TrainedRerankers | None = None) -> ListStage | None:
    """The stage ``settings.rerank`` names, on ``llm`` (the one chooser,
    :func:`~.reranking.choose_reranker`); None for ``none``. ``reuse_grades`` lets a graded
    re-ranker take grades the relevance model already gave (same model, same query); ``rerankers``
    are the trained models the method was given (a ``rerank_model`` setting wins over them)."""
    if settings.rerank == "none":
        return None
    return choose_reranker(settings.rerank, llm=llm, window=settings.window, step=settings.step,
                           max_words=settings.max_passage_words, listwise_prompt=settings.listwise_prompt,
                           model=settings.rerank_model, rerankers=rerankers, name=name, memo=reuse_grades)


def second_pass_without_its_model(settings: FinalRerankSettings, agents: Mapping[str, LLM], llm: LLM) -> str:
    """The notice for a second pass with no ``rerank2`` model ("" when there is one, or no second
    pass): §4(C) re-ranks the top 30 again with GPT-4 after GPT-3.5-Turbo, while without the role the
    second pass runs on the method's own model and only repeats a re-ranking of the same kind."""
    if not settings.second_pass_depth or "rerank2" in agents:
        return ""
    return (f"second_pass_depth={settings.second_pass_depth} (set by the paper profile, or given) re-ranks the "
            f"top {settings.second_pass_depth} again on the method's own model {llm.model_name}, as no rerank2 "
            "model was given; the paper's second pass is a stronger model (GPT-4 after GPT-3.5-Turbo): give one "
            "with --agent rerank2=MODEL, or set second_pass_depth=0")


def second_pass(settings: FinalRerankSettings, llm: LLM) -> HeadReranker | None:
    """The second pass over the top ``second_pass_depth`` on ``llm`` (the ``rerank2`` role), or None."""
    depth = settings.second_pass_depth
    inner = final_reranker(settings, llm, name="second_pass") if depth else None
    return HeadReranker(inner, depth) if inner is not None else None
