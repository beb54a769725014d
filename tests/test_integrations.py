"""winnow.integrations: Winnow's stages and methods inside real LangChain, LlamaIndex and Haystack pipelines.

Every pipeline here is the framework's own (ContextualCompressionRetriever, RetrieverQueryEngine,
haystack.Pipeline with InMemoryBM25Retriever) over the small corpus, reranked by the real
SmolLM2-135M; the scores are checked against winnow.rerank and MAIN-RAG's own stages on the same
input. One call cache is shared by the module, so a list scored twice (by an adapter, then by
winnow.rerank to compare) costs the model once.
"""

from __future__ import annotations

import importlib
import statistics
import sys

import pytest
from pydantic import ValidationError
from small_corpus import PASSAGES

from winnow.extras import MissingExtra
from winnow.integrations.core import Winnower
from winnow.llm import LLM, CallCache
from winnow.methods.mainrag import judge_filter_stages
from winnow.records import Passage, Query
from winnow.rerank import as_candidates, relevance_score, rerank
from winnow.stages import QuestionState, run_stages

pytestmark = pytest.mark.llm

QUERY = "what is the capital of france"
BY_ID = {p["id"]: p for p in PASSAGES}


@pytest.fixture(scope="module")
def shared_llm(llama_backend, tmp_path_factory):
    """The real model behind one call cache for the whole module."""
    return LLM(llama_backend, CallCache(tmp_path_factory.mktemp("integrations") / "calls.sqlite"))


# --- LangChain -------------------------------------------------------------------------------------

def test_langchain_compression_retriever_reranks_as_winnow_does(index, shared_llm):
    from langchain_classic.retrievers import ContextualCompressionRetriever
    from langchain_core.documents import Document

    from winnow.integrations.langchain import WinnowCompressor, WinnowRetriever

    base = WinnowRetriever(method="vanilla", index=index, llm=shared_llm, settings={"k": 4})
    compressor = WinnowCompressor(stage="pointwise", llm=shared_llm, top_k=2)
    retriever = ContextualCompressionRetriever(base_compressor=compressor, base_retriever=base)
    docs = retriever.invoke(QUERY)

    # The base retriever is Winnow's BM25 index as a LangChain retriever (vanilla: retrieval alone, no answer).
    retrieved = [c.passage for c in index.search(QUERY, k=4)]
    assert base.last_answer is not None and base.last_answer.text == ""
    expected = rerank(QUERY, [Passage(str(i), p.text) for i, p in enumerate(retrieved)], "pointwise",
                      llm=shared_llm).ranked
    assert [d.id for d in docs] == [retrieved[int(c.passage.id)].id for c in expected.candidates[:2]]
    for rank, (doc, candidate) in enumerate(zip(docs, expected, strict=False), start=1):
        assert isinstance(doc, Document)
        assert doc.metadata["winnow_score"] == candidate.score
        assert doc.metadata["relevance_score"] == relevance_score("pointwise", candidate.score, rank, 4)
        assert doc.metadata["winnow_rank"] == rank
        assert doc.metadata["winnow_stage_scores"] == {"rerank": candidate.score}
        assert doc.metadata["winnow_stage"] == "pointwise"
        assert doc.metadata["title"] == BY_ID[doc.id]["title"]  # the base retriever's metadata is kept
    # The two cut by top_k are not returned, and are reported with the reason.
    dropped = compressor.last_dropped
    assert sorted(d.id for d in dropped) == sorted(set(p.id for p in retrieved) - {d.id for d in docs})
    assert all("top_k=2" in d.metadata["winnow_dropped"] for d in dropped)
    assert compressor.last_result is not None and len(compressor.last_result.kept) == 2
    # top_n, the name LangChain's rerankers use, keeps the best n (the same calls: the cache answers).
    first = WinnowCompressor(stage="pointwise", llm=shared_llm, top_n=1).compress_documents(base.invoke(QUERY), QUERY)
    assert [d.id for d in first] == [docs[0].id]


def test_langchain_bad_arguments_name_the_argument(index, shared_llm):
    from langchain_core.documents import Document

    from winnow.integrations.langchain import WinnowCompressor, WinnowRetriever

    with pytest.raises(ValidationError, match="stage.*unknown Winnow stage 'bogus'"):
        WinnowCompressor(stage="bogus", llm=shared_llm)
    with pytest.raises(ValidationError, match="top_k"):
        WinnowCompressor(stage="pointwise", llm=shared_llm, top_k=0)
    with pytest.raises(ValidationError, match="llm: must be a winnow LLM"):
        WinnowCompressor(stage="pointwise", llm="smollm2")
    with pytest.raises(ValidationError, match="backend: unknown backend 'vllm'"):
        WinnowCompressor(stage="pointwise", model="smollm2-135m", backend="vllm")
    with pytest.raises(ValidationError, match="method: unknown method 'rankrag2'"):  # the one resolver's words
        WinnowRetriever(method="rankrag2", index=index, llm=shared_llm)
    with pytest.raises(ValidationError, match=r"settings\['k'\].*at least 1"):
        WinnowRetriever(method="rankrag", index=index, llm=shared_llm, settings={"k": 0})
    compressor = WinnowCompressor(stage="pointwise", llm=shared_llm)
    with pytest.raises(ValueError, match="query: the query is empty"):
        compressor.compress_documents([Document(page_content="Paris")], "  ")
    with pytest.raises(ValueError, match=r"documents\[1\]: must be a LangChain Document"):
        compressor.compress_documents([Document(page_content="Paris"), "Berlin"], QUERY)  # type: ignore[list-item]


def test_a_missing_framework_names_its_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "haystack", None)  # what an environment without haystack-ai imports
    monkeypatch.delitem(sys.modules, "winnow.integrations.haystack", raising=False)
    with pytest.raises(MissingExtra, match=r"needs the 'haystack' extra: pip install 'winnow-rag\[haystack\]'") as error:
        importlib.import_module("winnow.integrations.haystack")
    assert error.value.extra == "haystack"


# --- LlamaIndex ------------------------------------------------------------------------------------

def test_llamaindex_query_engine_with_the_postprocessor(index, shared_llm):
    from llama_index.core.instrumentation import get_dispatcher
    from llama_index.core.instrumentation.event_handlers import BaseEventHandler
    from llama_index.core.llms import MockLLM
    from llama_index.core.query_engine import RetrieverQueryEngine
    from llama_index.core.response_synthesizers.no_text import NoText

    from winnow.integrations.llamaindex import WinnowPostprocessor, WinnowRetriever

    retriever = WinnowRetriever("vanilla", index=index, llm=shared_llm, settings={"k": 4})
    postprocessor = WinnowPostprocessor(stage="graded", llm=shared_llm, top_k=3)
    # MockLLM is never called: NoText synthesises nothing (it is handed one because its factory would
    # otherwise resolve the default, OpenAI); the retrieval and the reranking are real.
    engine = RetrieverQueryEngine(retriever, response_synthesizer=NoText(llm=MockLLM()),
                                  node_postprocessors=[postprocessor])

    class Recorder(BaseEventHandler):
        events: list = []

        def handle(self, event, **kwargs) -> None:
            if "ReRank" in event.class_name():
                self.events.append(event)

    recorder = Recorder()
    get_dispatcher().add_event_handler(recorder)
    try:
        nodes = engine.query(QUERY).source_nodes
    finally:
        get_dispatcher().event_handlers.remove(recorder)
    # The instrumentation events LlamaIndex's own rerankers send, around the reranking.
    start, end = recorder.events
    assert start.class_name() == "ReRankStartEvent" and start.top_n == 3 and len(start.nodes) == 4
    assert "graded" in start.model_name and end.class_name() == "ReRankEndEvent" and end.nodes == nodes

    retrieved = [c.passage for c in index.search(QUERY, k=4)]
    expected = rerank(QUERY, [Passage(str(i), p.text) for i, p in enumerate(retrieved)], "graded",
                      llm=shared_llm).ranked
    assert [n.node.node_id for n in nodes] == [retrieved[int(c.passage.id)].id for c in expected.candidates[:3]]
    for rank, (node, candidate) in enumerate(zip(nodes, expected, strict=False), start=1):
        assert node.score == relevance_score("graded", candidate.score, rank, 4) == (candidate.score - 1) / 4
        assert node.node.metadata["winnow_score"] == candidate.score
        assert node.node.metadata["winnow_rank"] == rank
        # Winnow's keys stay out of what an LLM would be shown.
        assert "winnow_score" not in node.node.get_content(metadata_mode="llm")
    assert [n.node.metadata["winnow_dropped"] for n in postprocessor.last_dropped] == ["ranked 4 of 4 kept; top_k=3"]


def test_llamaindex_graded_filter_drops_with_the_reason(shared_llm):
    from llama_index.core.schema import NodeWithScore, TextNode

    from winnow.integrations.llamaindex import WinnowPostprocessor

    nodes = [NodeWithScore(node=TextNode(id_=p["id"], text=p["text"]), score=1.0) for p in PASSAGES[:3]]
    every_grade_passes = WinnowPostprocessor(stage="graded_filter", llm=shared_llm, tau=0)
    assert len(every_grade_passes.postprocess_nodes(nodes, query_str=QUERY)) == 3
    assert every_grade_passes.last_dropped == []
    none_passes = WinnowPostprocessor(stage="graded_filter", llm=shared_llm, tau=5)  # σ ≤ 5 is never above 5
    assert none_passes.postprocess_nodes(nodes, query_str=QUERY) == []
    reasons = [n.node.metadata["winnow_dropped"] for n in none_passes.last_dropped]
    assert len(reasons) == 3 and all("not above τ=5" in r and r.startswith("grade ") for r in reasons)
    assert [n.node.node_id for n in none_passes.last_dropped] == [p["id"] for p in PASSAGES[:3]]
    with pytest.raises(ValueError, match="query_bundle"):
        none_passes.postprocess_nodes(nodes)


def test_llamaindex_query_engine_runs_a_whole_method(index, shared_llm):
    from winnow.integrations.llamaindex import WinnowQueryEngine

    engine = WinnowQueryEngine("rankrag", index=index, llm=shared_llm,
                               settings={"n": 3, "k": 2, "max_answer_tokens": 8})
    response = engine.query(QUERY)
    answer = engine.last_answer
    assert answer is not None and response.response == answer.text
    assert [n.node.node_id for n in response.source_nodes] == [p.id for p in answer.passages.passages]
    assert len(response.source_nodes) == 2
    assert [n.score for n in response.source_nodes] == [c.score_of("rerank") for c in answer.passages]
    assert response.metadata["winnow_usage"]["calls"] + response.metadata["winnow_usage"]["cache_hits"] == 4


# --- Haystack --------------------------------------------------------------------------------------

def haystack_store():
    from haystack import Document
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    store = InMemoryDocumentStore()
    store.write_documents([Document(id=p["id"], content=p["text"], meta={"title": p["title"]}) for p in PASSAGES])
    return store


def test_haystack_pipeline_with_the_judge_filter(shared_llm):
    from haystack import Pipeline
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever

    from winnow.integrations.haystack import WinnowRanker

    pipe = Pipeline()
    pipe.add_component("retriever", InMemoryBM25Retriever(document_store=haystack_store(), top_k=3))
    pipe.add_component("ranker", WinnowRanker(stage="judge_filter", llm=shared_llm, max_document_answer_tokens=6))
    pipe.connect("retriever.documents", "ranker.documents")
    result = pipe.run({"retriever": {"query": QUERY}, "ranker": {"query": QUERY}},
                      include_outputs_from={"retriever"})
    retrieved, kept, dropped = (result["retriever"]["documents"], result["ranker"]["documents"],
                                result["ranker"]["dropped"])
    assert sorted(d.id for d in kept + dropped) == sorted(d.id for d in retrieved)

    # The same list through MAIN-RAG's own stages: Agent-1, the judge and the adaptive bar.
    state = QuestionState(Query(QUERY), candidates=as_candidates(QUERY, [Passage(str(i), d.content)
                                                                         for i, d in enumerate(retrieved)]))
    run_stages(judge_filter_stages(shared_llm, max_document_answer_tokens=6), [state])
    assert [d.id for d in kept] == [retrieved[int(c.passage.id)].id for c in state.ranked]
    assert [d.meta["winnow_score"] for d in kept] == [c.score_of("judge") for c in state.ranked]
    scores = [d.meta["winnow_score"] for d in kept + dropped]
    tau = statistics.mean(scores)  # judge_n = 0: τ is the mean judge score
    assert all(s >= tau for s in scores[:len(kept)]) and all(s < tau for s in scores[len(kept):])
    for d in kept:
        assert 0 < d.score < 1 and d.meta["title"] == BY_ID[d.id]["title"]
        assert set(d.meta["winnow_stage_scores"]) == {"judge"}
    for d in dropped:
        assert d.meta["winnow_dropped"].startswith(f"judge score {d.meta['winnow_score']:.3g} below the adaptive "
                                                   f"bar τ={tau:.3g}")


def test_haystack_ranker_over_an_openai_compatible_server(llama_backend, shared_llm):
    from haystack import Document

    from winnow.integrations.haystack import WinnowRanker

    ranker = WinnowRanker(stage="pointwise", model="smollm2", backend="openai",
                          base_url=llama_backend.http_address + "/v1")
    ranker.warm_up()
    # Passages whose P("True") lie apart: the server's prompt cache may move a score in the fourth decimal.
    documents = [Document(id=BY_ID[i]["id"], content=BY_ID[i]["text"]) for i in ("jupiter", "nile", "rome")]
    out = ranker.run(query=QUERY, documents=documents, top_k=2)
    expected = rerank(QUERY, [Passage(str(i), d.content) for i, d in enumerate(documents)], "pointwise",
                      llm=shared_llm).ranked
    assert [d.id for d in out["documents"]] == [documents[int(c.passage.id)].id for c in expected.candidates[:2]]
    assert [d.score for d in out["documents"]] == pytest.approx([c.score for c in expected.candidates[:2]], abs=2e-3)
    assert [d.id for d in out["dropped"]] == [documents[int(expected.candidates[2].passage.id)].id]
    ranker.close()
    # Haystack's own OpenAI chat model on the same server is taken as the same model (the same calls:
    # the call cache answers them), and saved as that model by name.
    from haystack.components.generators.chat import OpenAIChatGenerator
    from haystack.utils import Secret

    generator = OpenAIChatGenerator(model="smollm2", api_base_url=llama_backend.http_address + "/v1",
                                    api_key=Secret.from_token("unused"))
    adopted = WinnowRanker(stage="pointwise", llm=generator)
    again = adopted.run(query=QUERY, documents=documents, top_k=2)
    assert [d.id for d in again["documents"]] == [d.id for d in out["documents"]]
    assert [d.score for d in again["documents"]] == [d.score for d in out["documents"]]
    assert adopted.to_dict()["init_parameters"]["model"] == "smollm2"
    adopted.close()


def test_haystack_retriever_runs_a_method_without_its_answer(index, shared_llm):
    from winnow.integrations.haystack import WinnowRetriever

    retriever = WinnowRetriever("vanilla", index=index, llm=shared_llm, settings={"k": 3})
    documents = retriever.run(query=QUERY)["documents"]
    assert [d.id for d in documents] == [p.id for p in index.search(QUERY, k=3).passages]
    assert [d.meta["winnow_rank"] for d in documents] == [1, 2, 3]
    assert retriever.last_answer is not None and retriever.last_answer.text == ""
    assert retriever.last_answer.usage.calls == 0  # retrieval alone: the reader was not run
    assert len(retriever.run(query=QUERY, top_k=2)["documents"]) == 2  # Haystack's top_k: the method's k
    with pytest.raises(ValueError, match="query: the query is empty"):
        retriever.run(query="\u200b")


def test_haystack_bad_arguments_raise_value_errors(shared_llm):
    from haystack import Document

    from winnow.integrations.haystack import WinnowRanker

    with pytest.raises(ValueError, match="stage: unknown Winnow stage 'rerank'"):
        WinnowRanker(stage="rerank", llm=shared_llm)
    with pytest.raises(ValueError, match="base_url: the openai backend needs"):
        WinnowRanker(stage="pointwise", model="smollm2", backend="openai")
    with pytest.raises(ValueError, match="window: setting 'window' must be at least 2"):
        WinnowRanker(stage="listwise", llm=shared_llm, window=1)
    ranker = WinnowRanker(stage="pointwise", llm=shared_llm)
    with pytest.raises(ValueError, match="top_k: must be at least 1"):
        ranker.run(query=QUERY, documents=[Document(content="Paris")], top_k=0)
    with pytest.raises(ValueError, match="query: must be a string"):
        ranker.run(query=None, documents=[Document(content="Paris")])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"documents\[0\]: .* has no text content"):
        ranker.run(query=QUERY, documents=[Document()])
    assert ranker.run(query=QUERY, documents=[]) == {"documents": [], "dropped": []}


# --- the core, framework-free ----------------------------------------------------------------------

def test_winnower_reports_every_input_once(shared_llm):
    texts = [p["text"] for p in PASSAGES[:4]]
    result = Winnower("listwise", llm=shared_llm, window=4, step=2, top_k=3).run(QUERY, texts,
                                                                                ids=[p["id"] for p in PASSAGES[:4]])
    assert sorted([k.index for k in result.kept] + [d.index for d in result.dropped]) == [0, 1, 2, 3]
    assert [k.rank for k in result.kept] == [1, 2, 3]
    assert [k.relevance for k in result.kept] == [1.0, 0.75, 0.5]  # RankGPT's order as 1 - (rank - 1) / n
    with pytest.raises(ValueError, match=r"ids: has 2 entries for 4 documents"):
        Winnower("listwise", llm=shared_llm).run(QUERY, texts, ids=["a", "b"])
    with pytest.raises(ValueError, match="documents: must be a list of strings"):
        Winnower("listwise", llm=shared_llm).run(QUERY, "Paris is in France")

