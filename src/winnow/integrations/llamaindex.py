"""Winnow in LlamaIndex: a node postprocessor per Winnow stage, a whole method as a retriever or query engine.

:class:`WinnowPostprocessor` is a ``BaseNodePostprocessor``, so it goes in ``node_postprocessors``::

    from llama_index.core.query_engine import RetrieverQueryEngine
    from winnow.integrations.llamaindex import WinnowPostprocessor

    rerank = WinnowPostprocessor(stage="pointwise", llm=llm, top_k=5)   # or model=..., backend=..., base_url=...
    engine = RetrieverQueryEngine.from_args(your_retriever, node_postprocessors=[rerank], llm=your_llm)

Like LlamaIndex's own rerankers it takes ``top_n=`` (``top_k=`` is the same), emits the
instrumentation events ``ReRankStartEvent`` and ``ReRankEndEvent`` around each call, and
``to_dict()``/``from_dict()`` give back the same postprocessor (a model handed in as ``llm`` is saved
as its name, backend and base_url; never an API key). Kept nodes come back best first with
``NodeWithScore.score`` set to the stage's 0-1 relevance and
``winnow_score``, ``winnow_relevance``, ``winnow_rank``, ``winnow_stage`` and ``winnow_stage_scores``
in a copy of the node's metadata (kept out of what the LLM and the embedder read). Dropped nodes
are not returned; ``last_dropped`` holds them after each call (the reason in ``winnow_dropped``),
``last_result`` the whole result, and ``on_result=`` is called with each call's result.

:class:`WinnowRetriever` returns the passages a whole Winnow method keeps for a query (no answer
generated); :class:`WinnowQueryEngine` returns the method's answer with those passages as sources.
"""

from __future__ import annotations

import asyncio
from typing import Any, Mapping

from ..extras import import_extra
from .core import STAGES, ArgumentError, Kept, MethodRunner, dropped_metadata, method_items, winnow_metadata

import_extra("llama_index.core", "llamaindex", "winnow.integrations.llamaindex")

from llama_index.core.base.base_query_engine import BaseQueryEngine  # noqa: E402
from llama_index.core.base.base_retriever import BaseRetriever  # noqa: E402
from llama_index.core.base.response.schema import Response  # noqa: E402
from llama_index.core.callbacks import CallbackManager  # noqa: E402
from llama_index.core.instrumentation.events.rerank import ReRankEndEvent, ReRankStartEvent  # noqa: E402
from llama_index.core.postprocessor.types import BaseNodePostprocessor  # noqa: E402
from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore, QueryBundle, TextNode  # noqa: E402

# The package that defines LlamaIndex's dispatcher (llama-index-core requires it, and re-exports
# get_dispatcher from llama_index.core.instrumentation without declaring it exported).
from llama_index_instrumentation import get_dispatcher  # noqa: E402

from ..records import Answer  # noqa: E402
from .closing import Closing  # noqa: E402
from .stage_model import StageModel  # noqa: E402

dispatcher = get_dispatcher(__name__)


class WinnowPostprocessor(StageModel[NodeWithScore], BaseNodePostprocessor):
    """A Winnow stage as a LlamaIndex node postprocessor (see the module docstring); its options are
    :class:`~winnow.integrations.stage_model.StageModel`'s."""

    @classmethod
    def class_name(cls) -> str:
        return "WinnowPostprocessor"

    def _postprocess_nodes(self, nodes: list[NodeWithScore],
                           query_bundle: QueryBundle | None = None) -> list[NodeWithScore]:
        if query_bundle is None:
            raise ArgumentError("query_bundle", "Winnow ranks nodes for a query; none was given",
                                "pass query_str= or query_bundle= to postprocess_nodes")
        for i, item in enumerate(nodes):
            if not isinstance(item, NodeWithScore):
                raise ArgumentError(f"nodes[{i}]", f"must be a NodeWithScore (got {type(item).__name__})")
        # The events LlamaIndex's own rerankers send, so its instrumentation sees Winnow's as one of them.
        dispatcher.event(ReRankStartEvent(query=query_bundle, nodes=nodes, top_n=self.keep or len(nodes),
                                          model_name=f"winnow {self.stage} ({self.model or 'default model'})"))
        texts = [n.node.get_content(metadata_mode=MetadataMode.NONE) for n in nodes]
        result = self._winnow(query_bundle.query_str, texts, [n.node.node_id for n in nodes],
                              lambda result: [NodeWithScore(node=_with_metadata(nodes[d.index].node,
                                                                                dropped_metadata(d, self.stage)),
                                                            score=nodes[d.index].score) for d in result.dropped])
        kept = [NodeWithScore(node=_with_metadata(nodes[k.index].node, winnow_metadata(k, self.stage)),
                              score=k.relevance) for k in result.kept if k.index is not None]
        dispatcher.event(ReRankEndEvent(nodes=kept))
        return kept


class WinnowRetriever(Closing, BaseRetriever):
    """A whole Winnow method over a Winnow index as a LlamaIndex retriever: the passages the method
    keeps for a query, best first, as scored text nodes (see :class:`~winnow.integrations.core.MethodRunner`
    for the arguments)."""

    def __init__(self, method: str | None = None, *, callback_manager: CallbackManager | None = None,
                 **options: Any) -> None:
        self._runner = MethodRunner(method, source="WinnowRetriever", **options)
        self.last_answer: Answer | None = None
        super().__init__(callback_manager=callback_manager)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        self.last_answer = self._runner.select(query_bundle.query_str)
        return _nodes(self.last_answer, self._runner.name)

    def close(self) -> None:
        self._runner.close()


class WinnowQueryEngine(Closing, BaseQueryEngine):
    """A whole Winnow method as a LlamaIndex query engine: the method's answer, with the passages it
    answered from as ``source_nodes`` and its usage in the response's metadata."""

    def __init__(self, method: str | None = None, *, callback_manager: CallbackManager | None = None,
                 **options: Any) -> None:
        self._runner = MethodRunner(method, source="WinnowQueryEngine", **options)
        self.last_answer: Answer | None = None
        super().__init__(callback_manager=callback_manager)

    def _get_prompt_modules(self) -> Mapping[str, Any]:  # type: ignore[override]
        return {}

    def _query(self, query_bundle: QueryBundle) -> Response:
        answer = self.last_answer = self._runner.ask(query_bundle.query_str)
        return Response(response=answer.text, source_nodes=_nodes(answer, self._runner.name),
                        metadata={"winnow_method": answer.method, "winnow_usage": answer.usage.to_dict(),
                                  "winnow_cut_by_token_limit": answer.cut_by_token_limit})

    async def _aquery(self, query_bundle: QueryBundle) -> Response:
        return await asyncio.to_thread(self._query, query_bundle)

    def close(self) -> None:
        self._runner.close()


def _nodes(answer: Answer, method: str) -> list[NodeWithScore]:
    return [NodeWithScore(node=_method_node(item, method), score=item.relevance) for item in method_items(answer)]


def _method_node(item: Kept, method: str) -> TextNode:
    node = TextNode(id_=item.id, text=item.text, metadata={**item.metadata, "title": item.title})
    return _with_metadata(node, winnow_metadata(item, method))  # type: ignore[return-value]


def _with_metadata(node: BaseNode, extra: dict[str, Any]) -> BaseNode:
    """A copy of ``node`` with ``extra`` in its metadata, hidden from the LLM and the embedder (a score
    in the prompt would change the answer, in the embedding the vector)."""
    copy = node.model_copy(deep=True)
    copy.metadata = {**copy.metadata, **extra}
    for excluded in (copy.excluded_llm_metadata_keys, copy.excluded_embed_metadata_keys):
        excluded.extend(key for key in extra if key not in excluded)
    return copy


__all__ = ["STAGES", "WinnowPostprocessor", "WinnowQueryEngine", "WinnowRetriever"]
