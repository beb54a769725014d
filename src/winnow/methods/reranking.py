"""The one reranker chooser: a reranking stage by name, for the rerank use case and for every method.

``winnow rerank``, ``/v1/rerank`` and the adapters (:mod:`winnow.rerank`) and the methods' final
re-rankers (:mod:`.final_rerank`: RRR's and RankGPT's h, their fallbacks and second pass) all build
their reranker here, so a name means the same stage everywhere:

- ``pointwise``: RankRAG's P("True") per passage (§4.3, App. D.1);
- ``graded``: RRR's relevance grade 1-5, expected over the next-token probabilities (App. A.2);
- ``listwise``: RankGPT's sliding-window permutation (Sun et al., 2023; RRR §3.2 Stage 3's h);
- ``embedding``: all-MiniLM-L6-v2 cosine, no LLM;
- ``cross-encoder`` and ``monot5``: the trained rerankers the papers compare with (RankRAG Table 6;
  RRR Tables 1-3; :mod:`winnow.models.rerankers`), no LLM.

A trained reranker's model is, first, the one a setting names (``rerank_model``, ``--model``); then
the one the method was *given* (:data:`TrainedRerankers`: ``winnow serve --rerank-model
cross-encoder=DIR`` gives its models to every method a request builds, ``build_method(...,
rerankers=...)`` in Python); else the kind's default checkpoint. A method that reranks through
:meth:`Method.reranker <winnow.methods.base.Method.reranker>` (or :func:`choose_reranker` with its
``rerankers``) is reached by the server's models with nothing else to wire.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Union

from ..errors import WinnowError
from ..llm.client import LLM
from ..prompts import listwise_prompt as listwise_template
from ..stages import (
    CrossEncoderReranker,
    EmbeddingReranker,
    GradedRelevanceReranker,
    ListStage,
    ListwiseReranker,
    PointwiseTrueReranker,
)
from ..stages.listwise import check_listwise_prompt

if TYPE_CHECKING:
    from ..index.embedder import Embedder
    from ..models.rerankers import PairScorer

#: Every reranker by name, and what it is.
RERANKERS = {
    "pointwise": "RankRAG P(\"True\") per document (one forward pass each)",
    "graded": "RRR relevance grade 1-5, expected over the next-token probabilities",
    "listwise": "RankGPT sliding-window permutation (window, step)",
    "embedding": "all-MiniLM-L6-v2 cosine; no LLM",
    "cross-encoder": "a trained cross-encoder's relevance logit (MS MARCO MiniLM, BGE-reranker); no LLM",
    "monot5": 'monoT5\'s P("true") (Nogueira et al., 2020); no LLM',
}

#: The rerankers that run a trained reranker model (no LLM): a folder or hub id each.
TRAINED_RERANKERS = ("cross-encoder", "monot5")

#: Trained rerankers handed to a method: kind -> a model folder or hub id ("" for the default), or
#: a model already loaded (:func:`winnow.models.rerankers.load_pair_scorer`).
TrainedRerankers = Mapping[str, Union[str, "PairScorer"]]


def check_trained_rerankers(given: TrainedRerankers | None) -> dict[str, str | PairScorer]:
    """``given`` as a dict, a kind that is not a trained reranker refused by name."""
    chosen = dict(given or {})
    unknown = sorted(set(chosen) - set(TRAINED_RERANKERS))
    if unknown:
        raise WinnowError(f"trained reranker(s) {unknown} are not a kind of trained reranker",
                          f"give models for: {', '.join(TRAINED_RERANKERS)}")
    return chosen


def trained_scorer(kind: str, model: str = "", rerankers: TrainedRerankers | None = None) -> PairScorer:
    """The ``kind`` model: ``model`` if named, else the one in ``rerankers``, else the kind's default;
    loaded once per process."""
    from ..models.rerankers import load_pair_scorer

    given = (rerankers or {}).get(kind, "")
    if model or isinstance(given, str):
        return load_pair_scorer(kind, model or str(given))
    return given


def choose_reranker(choice: str, *, llm: LLM | None = None, embedder: Embedder | None = None,
                    keep: int | None = None, window: int = 10, step: int = 5, max_words: int = 300,
                    listwise_prompt: str = "rrr", model: str = "", rerankers: TrainedRerankers | None = None,
                    name: str | None = None, memo: bool = True) -> ListStage:
    """The stage ``choice`` names (:data:`RERANKERS`), keeping the top ``keep`` (None: all).

    ``window``, ``step``, ``max_words`` and ``listwise_prompt`` are the listwise re-ranker's;
    ``model`` and ``rerankers`` choose a trained reranker's model (see the module notes); ``name``
    replaces the stage's own (a second pass); ``memo`` lets a graded re-ranker take grades already
    given to the same question (RRR's σ, same model).
    """
    named: dict[str, Any] = {"name": name} if name else {}
    if choice in TRAINED_RERANKERS:
        return CrossEncoderReranker(trained_scorer(choice, model, rerankers), keep=keep, **named)
    if choice == "embedding":
        if embedder is None:
            raise WinnowError("the embedding reranker needs an embedder", "winnow.index.load_embedder()")
        return EmbeddingReranker(embedder, keep=keep, **named)
    if choice not in RERANKERS:
        raise WinnowError(f"unknown reranker {choice!r}", f"choose one of: {', '.join(RERANKERS)}")
    if llm is None:
        raise WinnowError(f"the {choice} reranker needs an LLM", "winnow.load_llm(model, backend=...)")
    if choice == "pointwise":
        return PointwiseTrueReranker(llm, keep=keep, **named)
    if choice == "graded":
        return GradedRelevanceReranker(llm, keep=keep, memo=memo, **named)
    return ListwiseReranker(llm, window=window, step=step, max_words=max_words, keep=keep,
                            template=listwise_template(check_listwise_prompt(listwise_prompt)), **named)
