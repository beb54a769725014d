"""Winnow inside other RAG frameworks, one import each.

* :mod:`winnow.integrations.langchain` — ``WinnowCompressor`` (a document compressor for
  ``ContextualCompressionRetriever``) and ``WinnowRetriever`` (a whole method as a retriever);
* :mod:`winnow.integrations.llamaindex` — ``WinnowPostprocessor`` (a node postprocessor),
  ``WinnowRetriever`` and ``WinnowQueryEngine``;
* :mod:`winnow.integrations.haystack` — ``WinnowRanker`` (a ranker component) and ``WinnowRetriever``.

Each needs its framework (the ``langchain``, ``llamaindex`` or ``haystack`` extra; importing one
without it says which to install). They share :mod:`winnow.integrations.core`: the stages they run
(:data:`~winnow.integrations.core.STAGES`), argument checks and the kept/dropped result.
"""

from .core import STAGES, ArgumentError, Dropped, Kept, MethodRunner, Winnowed, Winnower

__all__ = ["STAGES", "ArgumentError", "Dropped", "Kept", "MethodRunner", "Winnowed", "Winnower"]
