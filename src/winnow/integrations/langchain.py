"""Winnow in LangChain: a document compressor per Winnow stage, and a whole method as a retriever.

:class:`WinnowCompressor` is a ``BaseDocumentCompressor``, so it goes where LangChain's rerankers go::

    from langchain_classic.retrievers import ContextualCompressionRetriever
    from winnow.integrations.langchain import WinnowCompressor

    compressor = WinnowCompressor(stage="judge_filter", llm=llm)   # or model=..., backend=..., base_url=...
    retriever = ContextualCompressionRetriever(base_compressor=compressor, base_retriever=your_retriever)
    docs = retriever.invoke("who painted the mona lisa")

One class with a ``stage=`` argument (:data:`winnow.integrations.core.STAGES`); ``top_n=`` keeps the
best n, as LangChain's rerankers do (``top_k=`` is the same). The documents it keeps come back best
first, copies with ``relevance_score`` (0-1, the key LangChain's rerankers use), ``winnow_score``,
``winnow_rank``, ``winnow_stage`` and ``winnow_stage_scores`` added to their metadata. The ones it
drops are not returned; after each call ``compressor.last_dropped`` holds them (with
``winnow_dropped``, the reason, in their metadata) and ``compressor.last_result`` the whole
:class:`~winnow.integrations.core.Winnowed` result with its trace. A compressor shared between
threads should pass ``on_result=`` instead, a function called with each call's result.

:class:`WinnowRetriever` runs a whole Winnow method (RankRAG, MAIN-RAG, RRR, …) over a Winnow index
and returns the passages the method kept, without generating its answer. It takes every run option
(``k=``, ``n=``, ``profile=``, ``model=``, …; ``invoke(query, k=3)`` too); a misspelt argument is
refused naming it. It passes langchain-tests' standard retriever tests (tests/test_langchain_standard.py).
Saved with ``dumpd``, it loads back with ``load(data, allowed_objects=[WinnowRetriever],
valid_namespaces=["winnow"])``: LangChain's ``load`` refuses a namespace other than its own unless
``valid_namespaces`` names it.

Both close what they loaded (models, an OpenAI-compatible backend's sessions) on ``close()`` or at the
end of a ``with`` block: ``with WinnowRetriever(index="wiki-index", model="...") as retriever: ...``.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..extras import import_extra
from .closing import Closing
from .core import STAGES, ArgumentError, MethodRunner, dropped_metadata, method_items, winnow_metadata

import_extra("langchain_core", "langchain", "winnow.integrations.langchain")

from langchain_core.callbacks import CallbackManagerForRetrieverRun, Callbacks  # noqa: E402
from langchain_core.documents import BaseDocumentCompressor, Document  # noqa: E402
from langchain_core.retrievers import BaseRetriever  # noqa: E402
from pydantic import ConfigDict, Field, PrivateAttr, model_validator  # noqa: E402

from ..records import Answer  # noqa: E402
from .stage_model import StageModel  # noqa: E402

#: Where LangChain's serialisation finds the classes: ``load(data, allowed_objects=[WinnowCompressor, ...])``.
NAMESPACE = ["winnow", "integrations", "langchain"]


class Saved:
    """LangChain serialisation (``dumpd``/``dumps``, then ``load``/``loads`` with the class in
    ``allowed_objects`` and ``valid_namespaces=["winnow"]``: LangChain loads only its own namespaces
    unless told another, so ``load(data, allowed_objects=[WinnowRetriever], valid_namespaces=["winnow"])``)
    of a Winnow retriever: its whole configuration, a model handed in as ``llm``
    written as its name, backend and base_url, never an API key. (A document compressor is a plain
    pydantic model in LangChain, its rerankers too: ``model_dump()`` is its configuration.)"""

    @classmethod
    def is_lc_serializable(cls) -> bool:
        return True

    @classmethod
    def get_lc_namespace(cls) -> list[str]:
        return list(NAMESPACE)

    def saved_arguments(self) -> dict[str, Any]:
        raise NotImplementedError

    def to_json(self) -> Any:
        return {"lc": 1, "type": "constructor", "id": [*NAMESPACE, type(self).__name__],
                "kwargs": self.saved_arguments()}


class WinnowCompressor(StageModel[Document], BaseDocumentCompressor):
    """A Winnow stage as a LangChain document compressor (see the module docstring); its options
    are :class:`~winnow.integrations.stage_model.StageModel`'s."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    def compress_documents(self, documents: Sequence[Document], query: str,
                           callbacks: Callbacks | None = None) -> Sequence[Document]:
        documents = _documents(documents)
        result = self._winnow(query, [d.page_content for d in documents], [d.id or "" for d in documents],
                              lambda result: [_copy(documents[d.index], dropped_metadata(d, self.stage))
                                              for d in result.dropped])
        return [_copy(documents[k.index], winnow_metadata(k, self.stage, "relevance_score")) for k in result.kept
                if k.index is not None]


class WinnowRetriever(Saved, Closing, BaseRetriever):
    """A whole Winnow method over a Winnow index as a LangChain retriever.

    ``method`` is a Winnow method name (``winnow methods``); ``index`` an index folder or an opened
    index, or ``pipeline`` a :class:`winnow.pipeline.Pipeline`; ``llm`` or ``model``/``backend``/
    ``base_url`` its model; ``settings`` the method's settings ({"n": 20, "k": 5, ...}). Every other
    keyword is a run option (:class:`~winnow.run_spec.RunOptions`: ``k``, ``n``, ``profile``,
    ``retriever``, ``context_size``, …), checked by :class:`~winnow.integrations.core.MethodRunner`,
    which refuses a typo naming it. Each query returns the passages the method kept, best first,
    with ``winnow_*`` metadata and ``relevance_score``; ``invoke(query, k=3)`` (or any other method
    setting) overrides the settings for that query. ``last_answer`` is the method's full record.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="allow")

    method: str | None = None  # None: a config file's, or rankrag (resolved with the other run options)
    index: Any = Field(default=None, exclude=True)
    pipeline: Any = Field(default=None, exclude=True)
    llm: Any = Field(default=None, exclude=True)
    api_key: str = Field(default="", exclude=True, repr=False)
    agents: dict[str, Any] | None = Field(default=None, exclude=True)
    settings: dict[str, Any] = Field(default_factory=dict)
    lazy: bool = False  # open the index and load the models at the first query, not here

    _runner: MethodRunner = PrivateAttr()
    _last: Answer | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _open(self) -> WinnowRetriever:
        options = dict(self.model_extra or {})
        if self.api_key:
            options["api_key"] = self.api_key
        self._runner = MethodRunner(self.method, index=self.index, pipeline=self.pipeline, llm=self.llm,
                                    agents=self.agents, settings=self.settings, source=type(self).__name__,
                                    lazy=self.lazy, **options)
        return self

    def saved_arguments(self) -> dict[str, Any]:
        """The method, the index folder, the models by name and the settings (:meth:`MethodRunner.config`)."""
        return {**self._runner.config(), "lazy": self.lazy}

    @property
    def last_answer(self) -> Answer | None:
        return self._last

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun,
                                **settings: Any) -> list[Document]:
        answer = self._runner.select(query, settings)
        self._last = answer
        return [Document(page_content=item.text, id=item.id,
                         metadata={**item.metadata, "title": item.title, "winnow_id": item.id,
                                   **winnow_metadata(item, self._runner.name, "relevance_score")})
                for item in method_items(answer)]

    def close(self) -> None:
        self._runner.close()


def _documents(documents: object) -> list[Document]:
    if isinstance(documents, (str, bytes)) or not isinstance(documents, Sequence):
        raise ArgumentError("documents", f"must be a list of LangChain Documents (got {type(documents).__name__})")
    for i, document in enumerate(documents):
        if not isinstance(document, Document):
            raise ArgumentError(f"documents[{i}]", f"must be a LangChain Document (got {type(document).__name__})")
    return list(documents)


def _copy(document: Document, extra: dict[str, Any]) -> Document:
    return Document(page_content=document.page_content, metadata={**document.metadata, **extra}, id=document.id)


__all__ = ["STAGES", "WinnowCompressor", "WinnowRetriever"]
