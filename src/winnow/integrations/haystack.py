"""Winnow in Haystack: a ranker component per Winnow stage, and a whole method as a retriever component.

:class:`WinnowRanker` follows Haystack's ranker contract, ``run(query, documents, top_k) ->
{"documents": [...]}``, so it goes after any retriever in a pipeline::

    from haystack import Pipeline
    from winnow.integrations.haystack import WinnowRanker

    pipe = Pipeline()
    pipe.add_component("retriever", InMemoryBM25Retriever(document_store=store, top_k=20))
    pipe.add_component("ranker", WinnowRanker(stage="judge_filter", llm=llm))   # or model=, backend=, base_url=
    pipe.connect("retriever.documents", "ranker.documents")
    pipe.run({"retriever": {"query": q}, "ranker": {"query": q}})["ranker"]["documents"]

Kept documents come back best first, copies with ``Document.score`` set to the stage's 0-1
relevance and ``winnow_score``, ``winnow_relevance``, ``winnow_rank``, ``winnow_stage`` and
``winnow_stage_scores`` in ``meta``. The dropped ones leave by a second output, ``dropped``, with the
reason in ``meta["winnow_dropped"]``: connect it, or read it from the pipeline's result.

A model named by ``model=`` is loaded in ``warm_up()`` (which a pipeline calls before running),
one handed in as ``llm=`` is used as it is. :class:`WinnowRetriever` runs a whole Winnow method over
a Winnow index: ``run(query, top_k) -> {"documents": [...]}``, the passages the method kept; it
takes every run option (``k=``, ``profile=``, ``model=``, …) and refuses a misspelt one by name.

Both save and load with the pipeline (``Pipeline.dumps()``/``loads()``, Haystack's
``component_to_dict``/``component_from_dict``): ``to_dict`` holds every argument, a model handed in as
``llm=`` written as its model name, backend and base_url (never an API key: a reloaded
OpenAI-compatible model reads ``WINNOW_OPENAI_API_KEY``), an index as its folder. Nothing loads
until ``warm_up()`` or the first ``run``. Haystack loads classes only from modules its user trusts:
``Pipeline.loads(text, allowed_modules=["winnow.integrations.haystack"])``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..extras import import_extra
from ..records import Answer
from .closing import Closing
from .core import (
    STAGES,
    ArgumentError,
    MethodRunner,
    Winnowed,
    Winnower,
    check_top_k,
    dropped_metadata,
    method_items,
    winnow_metadata,
)

import_extra("haystack", "haystack", "winnow.integrations.haystack")

from haystack import Document, component, default_from_dict, default_to_dict  # noqa: E402


@component
class WinnowRanker(Closing):
    """A Winnow stage as a Haystack ranker (see the module docstring).

    ``stage``: pointwise, graded, listwise, embedding, cross-encoder, monot5 (rerankers; the last two load
    ``model`` as the reranker, no LLM) or judge_filter, graded_filter
    (filters); ``llm`` a :class:`winnow.llm.LLM` on any backend, or ``model`` loaded with ``backend``
    ("llama.cpp" or "openai" at ``base_url``); ``top_k`` keeps the best k (``run``'s own ``top_k``
    overrides it); ``judge_n``, ``tau``, ``window``, ``step`` and ``max_document_answer_tokens`` as in
    :class:`~winnow.integrations.core.Winnower`. Bad arguments raise ``ValueError`` naming them.
    """

    def __init__(self, stage: str = "pointwise", *, llm: Any = None, model: str | None = None,
                 backend: str = "llama.cpp", base_url: str | list[str] = "", api_key: str = "",
                 judge_llm: Any = None, judge_model: str | None = None, embedder: Any = None,
                 top_k: int | None = None, judge_n: float = 0.0, tau: float = 1.0, window: int = 10, step: int = 5,
                 max_document_answer_tokens: int = 32, cache: bool | str = True) -> None:
        self.stage = stage
        self.winnower = Winnower(stage, llm=llm, model=model, backend=backend, base_url=base_url, api_key=api_key,
                                 judge_llm=judge_llm, judge_model=judge_model, embedder=embedder, top_k=top_k,
                                 judge_n=judge_n, tau=tau, window=window, step=step,
                                 max_document_answer_tokens=max_document_answer_tokens, cache=cache, lazy=True)
        self.last_result: Winnowed | None = None

    def to_dict(self) -> dict[str, Any]:
        """Every argument (see the module docstring), for ``Pipeline.dumps()``."""
        return default_to_dict(self, **self.winnower.config())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WinnowRanker:
        """The ranker :meth:`to_dict` describes; nothing loads until ``warm_up()``."""
        return default_from_dict(cls, data)

    def warm_up(self) -> None:
        """Load the model (or embedder) this ranker was named, if it was not handed one."""
        self.winnower.load()

    @component.output_types(documents=list[Document], dropped=list[Document])
    def run(self, query: str, documents: list[Document], top_k: int | None = None) -> dict[str, list[Document]]:
        """Rank (or filter) ``documents`` for ``query``: ``documents`` the kept ones best first,
        ``dropped`` the others with the reason in ``meta["winnow_dropped"]``."""
        if not isinstance(documents, list):
            raise ArgumentError("documents", f"must be a list of Haystack Documents (got {type(documents).__name__})")
        for i, document in enumerate(documents):
            if not isinstance(document, Document):
                raise ArgumentError(f"documents[{i}]", f"must be a Haystack Document (got {type(document).__name__})")
            if document.content is None:
                raise ArgumentError(f"documents[{i}]", f"document {document.id!r} has no text content to rank")
        result = self.winnower.run(query, [d.content or "" for d in documents], ids=[d.id for d in documents],
                                   top_k=top_k)
        self.last_result = result
        kept = [dataclasses.replace(documents[k.index], score=k.relevance,
                                    meta={**documents[k.index].meta, **winnow_metadata(k, self.stage)})
                for k in result.kept if k.index is not None]
        dropped = [dataclasses.replace(documents[d.index], meta={**documents[d.index].meta,
                                                                  **dropped_metadata(d, self.stage)})
                   for d in result.dropped]
        return {"documents": kept, "dropped": dropped}

    def close(self) -> None:
        self.winnower.close()


@component
class WinnowRetriever(Closing):
    """A whole Winnow method over a Winnow index as a Haystack retriever component: ``run(query)``
    gives the passages the method keeps, best first, as Documents (score: 0-1 relevance; ``meta``:
    title, ``winnow_id`` and the ``winnow_*`` scores). Arguments as
    :class:`~winnow.integrations.core.MethodRunner`."""

    def __init__(self, method: str | None = None, **options: Any) -> None:
        self.runner = MethodRunner(method, source="WinnowRetriever", lazy=True, **options)
        self.last_answer: Answer | None = None

    def to_dict(self) -> dict[str, Any]:
        """The method, the index folder, the models by name and the settings, for ``Pipeline.dumps()``."""
        return default_to_dict(self, **self.runner.config())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WinnowRetriever:
        """The retriever :meth:`to_dict` describes; nothing opens until ``warm_up()``."""
        return default_from_dict(cls, data)

    def warm_up(self) -> None:
        """Open the index and load the models (a pipeline calls this before running)."""
        self.runner.open()

    @component.output_types(documents=list[Document])
    def run(self, query: str, top_k: int | None = None) -> dict[str, list[Document]]:
        """The passages the method keeps for ``query``; ``top_k`` is the method's ``k`` for this query."""
        settings = {"k": check_top_k(top_k)} if top_k is not None else {}
        answer = self.last_answer = self.runner.select(query, settings)
        return {"documents": [Document(id=item.id, content=item.text, score=item.relevance,
                                       meta={**item.metadata, "title": item.title, "winnow_id": item.id,
                                             **winnow_metadata(item, self.runner.name)})
                              for item in method_items(answer)]}

    def close(self) -> None:
        self.runner.close()


__all__ = ["STAGES", "WinnowRanker", "WinnowRetriever"]
