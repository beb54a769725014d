"""LangChain's own standard retriever tests (the `langchain-tests` package) against WinnowRetriever.

The standard tests run the vanilla method (retrieval alone: the contract, not the model, is what they
test) over the real BM25 index of tests/small_corpus.py, ``k`` given through the constructor (``k=3``)
and per call (``invoke(q, k=1)``). One more test runs RankRAG (two P("True") calls of the real
SmolLM2-135M) for the relevance LangChain's rerankers store. The standard tests run MAIN-RAG too,
whose ``k`` is Winnow's cap on the survivors of its adaptive judge bar (n = 3 keeps all four of N = 4,
so the cap alone decides how many come back).
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_tests.integration_tests import RetrieversIntegrationTests

from winnow.integrations.langchain import WinnowRetriever
from winnow.llm import LLM, CallCache

# The async standard tests run on anyio's pytest plugin (its default backend, asyncio).
pytestmark = [pytest.mark.llm, pytest.mark.anyio]


@pytest.fixture(scope="module")
def cached_llm(llama_backend, tmp_path_factory):
    return LLM(llama_backend, CallCache(tmp_path_factory.mktemp("langchain-standard") / "calls.sqlite"))


class TestWinnowRetrieverStandard(RetrieversIntegrationTests):
    @pytest.fixture(autouse=True)
    def _parts(self, index, cached_llm) -> None:
        self._index, self._llm = index, cached_llm

    @property
    def retriever_constructor(self) -> type[WinnowRetriever]:
        return WinnowRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"method": "vanilla", "index": self._index, "llm": self._llm, "k": 4}

    @property
    def retriever_query_example(self) -> str:
        return "what is the capital of france"


class TestWinnowMainRAGRetrieverStandard(TestWinnowRetrieverStandard):
    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"method": "mainrag", "index": self._index, "llm": self._llm, "n": 4, "k": 4,
                "settings": {"judge_n": 3.0, "max_document_answer_tokens": 8}}


def test_the_retriever_stores_langchains_relevance_score(index, cached_llm):
    docs = WinnowRetriever(method="rankrag", index=index, llm=cached_llm, n=2, k=2).invoke("capital of france")
    assert len(docs) == 2
    assert all(0 <= d.metadata["relevance_score"] <= 1 for d in docs)
    assert docs[0].metadata["relevance_score"] >= docs[1].metadata["relevance_score"]
    assert "winnow_relevance" not in docs[0].metadata  # one name for one value: LangChain's
