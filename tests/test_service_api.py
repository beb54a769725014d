"""The HTTP API of `winnow serve`, against a real server on 127.0.0.1 with the real smollm2-135m.

One server (started once for the module: loading the model is the slow part) answers every test
here, in file order: later tests rely on what earlier ones cached, as a real client's repeats would.
It runs with --allow-any-host (the Host check itself is tested in test_service_limits.py), and
its stderr is kept: the last test reads it for tracebacks. Requests stay small (N=4, k=2, 8 answer
tokens) so the module runs in well under a minute.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import re
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from fast_model import suite_model
from service_server import build_small_index, queue_stats, running_server, wait_for
from small_corpus import PASSAGES

from winnow.methods import build_method
from winnow.service.engine import Plan
from winnow.service.limits import ApiError
from winnow.service.runner import _on_worker
from winnow.service.worker import LLMWorker

MODEL = suite_model()

pytestmark = [pytest.mark.llm, pytest.mark.subprocess]  # `winnow serve` in a process of its own

CORPUS = {p["id"]: p for p in PASSAGES}
TINY = {"max_answer_tokens": 8}  # short answers: the tests check plumbing, not prose
ASK = {"question": "What is the capital of France?", "n": 4, "k": 2, "options": TINY}
RERANK_DOCS = ["Rome is the capital city of Italy.",
               {"id": "fruit-1", "title": "Banana", "text": "A banana is an elongated, edible fruit."},
               "The Nile is a major river in northeastern Africa."]
RERANK = {"query": "What is the capital of Italy?", "documents": RERANK_DOCS, "return_documents": True,
          "model": "rerank-english-v3.0", "max_chunks_per_doc": 10}  # the last two: a hosted API's client


def text_of(doc: str | dict[str, Any]) -> str:
    return doc if isinstance(doc, str) else doc["text"]


@pytest.fixture(scope="module")
def server_log() -> list[str]:
    """The server's stderr, line by line, as it arrives."""
    return []


@pytest.fixture(scope="module")
def client(tmp_path_factory, server_log):
    folder = tmp_path_factory.mktemp("service-api")
    with running_server(build_small_index(folder), folder / "cache", "--allow-any-host", log=server_log) as base:
        with httpx.Client(base_url=base, timeout=120) as http:
            yield http


def new_lines(log: list[str], since: int, text: str) -> list[str]:
    return [line for line in log[since:] if text in line]


@pytest.fixture(scope="module")
def first_answer(client) -> dict[str, Any]:
    """ASK, computed by the model (the first request this server sees)."""
    response = client.post("/v1/ask", json=ASK)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture(scope="module")
def first_rerank(client) -> dict[str, Any]:
    response = client.post("/v1/rerank", json=RERANK)
    assert response.status_code == 200, response.text
    return response.json()


def scores_by_text(body: dict[str, Any], documents: list[Any]) -> dict[str, float]:
    return {text_of(documents[r["index"]]): r["relevance_score"] for r in body["results"]}


# ---- describing the service ---------------------------------------------------------------------

def test_health_models_methods_and_schema(client):
    health = client.get("/healthz").json()
    assert health["status"] == "ok" and health["model"] == MODEL and health["method"] == "rankrag"
    assert health["auth"] is False and health["call_cache"] is True
    models = client.get("/v1/models").json()
    assert models["object"] == "list"
    assert {m["id"]: m["role"] for m in models["data"]}[Path(MODEL).stem] == "default"
    assert "all-MiniLM-L6-v2" in [m["id"] for m in models["data"]]
    methods = client.get("/v1/methods").json()
    assert {"vanilla", "rankrag", "mainrag", "rrr", "rankgpt"} <= {m["name"] for m in methods["methods"]}
    assert [m["name"] for m in methods["rerank_methods"]] == ["pointwise", "graded", "listwise", "embedding",
                                                             "cross-encoder", "monot5"]
    assert methods["default"] == "rankrag" and methods["limits"]["max_n"] == 100
    schema = client.get("/openapi.json").json()
    assert {"/v1/ask", "/v1/rerank", "/v1/search", "/v1/traces/{trace_id}", "/v1/models", "/v1/methods",
            "/healthz"} <= set(schema["paths"])
    assert schema["components"]["schemas"]["AskRequest"]["required"] == ["question"]
    page = client.get("/")
    assert page.status_code == 200 and "Winnow inspector" in page.text
    assert "swagger-ui" in client.get("/docs").text and "redoc" in client.get("/redoc").text  # no key set: open


# ---- ask, search, traces ------------------------------------------------------------------------

def test_ask_takes_a_profile_that_its_own_fields_override(client):
    """``"profile": "paper"`` starts from the paper's settings (vanilla: k = 5, RankRAG §1, §5.1);
    the request's own fields override it; an unknown profile is a 422 naming the field and the list."""
    body = {"question": "Where is the Nile?", "method": "vanilla", "options": {"max_answer_tokens": 4}}
    answered = client.post("/v1/ask", json={**body, "profile": "paper"})
    assert answered.status_code == 200, answered.text
    assert answered.json()["profile"] == "paper" and answered.json()["settings"]["k"] == 5
    assert answered.json()["settings"]["max_answer_tokens"] == 4  # the request's option, not the profile's 32
    refused = client.post("/v1/ask", json={**body, "profile": "papers"})
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "profile"
    assert "paper-70b" in refused.json()["error"]["message"]
    methods = client.get("/v1/methods").json()
    assert "paper" in methods["profiles"]
    assert {m["name"]: m["profiles"]["paper"] for m in methods["methods"]}["rrr"]["n"] == 100


def test_ask_answers_with_ranked_passages_and_per_stage_scores(client, first_answer):
    body = first_answer
    assert body["question"] == ASK["question"] and body["method"] == "rankrag"
    assert (body["settings"]["n"], body["settings"]["k"], body["settings"]["max_answer_tokens"]) == (4, 2, 8)
    assert isinstance(body["answer"], str) and body["answer"].strip()
    assert body["served_from"] == "llm" and re.fullmatch(r"[0-9a-f]{16}", body["trace_id"])
    assert "trace" not in body  # only when asked for
    passages = body["passages"]
    assert [p["rank"] for p in passages] == [1, 2]
    assert [p["score"] for p in passages] == sorted((p["score"] for p in passages), reverse=True)
    first_stage = {p["id"]: rank for rank, p in enumerate(client.get(
        "/v1/search", params={"q": ASK["question"], "k": 4}).json()["passages"], start=1)}
    for p in passages:
        assert p["text"] == CORPUS[p["id"]]["text"] and p["title"] == CORPUS[p["id"]]["title"]
        assert [s["stage"] for s in p["scores"]] == ["bm25", "rerank"]
        bm25, rerank = p["scores"]
        assert bm25["rank"] == first_stage[p["id"]]  # the first stage's own rank, kept per passage
        assert rerank["rank"] == p["rank"] and rerank["score"] == p["score"]
        assert 0.0 <= rerank["score"] <= 1.0  # P("True")
    assert body["usage"]["calls"] == 4 + 1  # one P("True") per retrieved passage, one answer
    assert body["usage"]["cache_hits"] == 0 and body["usage"]["prompt_tokens"] > 0


def test_the_trace_of_an_ask_has_every_stage(client, first_answer):
    record = client.get(f"/v1/traces/{first_answer['trace_id']}").json()
    assert record["status"] == "done" and record["kind"] == "ask"
    assert record["request"]["question"] == ASK["question"]
    assert record["request"]["settings"]["n"] == 4
    result = record["result"]
    assert result["answer"] == first_answer["answer"]
    stages = {s["name"]: s for s in result["trace"]["stages"]}
    assert list(stages) == ["retrieve", "rerank", "generate"]
    assert (len(stages["retrieve"]["output"]), len(stages["rerank"]["input"]), len(stages["rerank"]["output"])) == (4, 4, 2)
    assert len(stages["rerank"]["llm_calls"]) == 4 and len(stages["generate"]["llm_calls"]) == 1
    assert stages["generate"]["details"]["answer"] == first_answer["answer"]
    assert {p["id"] for p in first_answer["passages"]} <= set(result["trace"]["documents"])


def test_n_and_k_in_options_are_honoured(client):
    """options.n and options.k reach the method as top-level n and k do: 3 retrieved, 1 read; the
    same values given both ways are the same request."""
    body = {"question": "What is the capital of France?", "options": {"n": 3, "k": 1, **TINY}, "include_trace": True}
    got = client.post("/v1/ask", json=body).json()
    assert (got["settings"]["n"], got["settings"]["k"], got["settings"]["max_answer_tokens"]) == (3, 1, 8)
    stages = {s["name"]: s for s in got["trace"]["stages"]}
    assert len(stages["retrieve"]["output"]) == 3 and len(stages["rerank"]["input"]) == 3
    assert len(stages["rerank"]["output"]) == 1 and len(got["passages"]) == 1
    assert [call["completion_tokens"] <= 8 for call in stages["generate"]["llm_calls"]] == [True]
    same = client.post("/v1/ask", json=dict(body, n=3, k=1)).json()
    assert same["served_from"] == "answer-cache" and same["settings"] == got["settings"]


def test_listwise_options_are_honoured(client):
    """RankGPT's window and step from options: 3 passages in windows of 2, one apart, back to front."""
    body = {"question": "What is the capital of Italy?", "method": "rankgpt", "include_trace": True,
            "options": {"n": 3, "k": 1, "window": 2, "step": 1, **TINY}}
    got = client.post("/v1/ask", json=body).json()
    stages = {s["name"]: s for s in got["trace"]["stages"]}
    windows = stages["listwise"]["details"]["windows"]
    assert [(w["start"], w["end"]) for w in windows] == [(1, 3), (0, 2)]
    assert len(stages["listwise"]["llm_calls"]) == 2 and len(got["passages"]) == 1


@pytest.mark.parametrize("route", ["/v1/ask", "/v1/rerank"])
@pytest.mark.parametrize("where", ["top", "inside"])
def test_json_nested_100000_deep_is_malformed_json(client, route, where):
    nested = b"[" * 100_000 + b"]" * 100_000
    body = nested if where == "top" else b'{"question": "x", "query": "x", "options": {"n": ' + nested + b"}}"
    response = client.post(route, content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["type"], error["field"]) == ("malformed_json", "body") and "too deeply" in error["message"]


def test_an_unknown_trace_is_a_json_404(client):
    response = client.get("/v1/traces/0123456789abcdef")
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "not_found" and response.json()["error"]["field"] == "trace_id"


def test_a_repeated_ask_is_served_from_the_answer_cache(client, first_answer):
    before = queue_stats(client)["completed"]
    again = client.post("/v1/ask", json=dict(ASK, include_trace=True)).json()
    assert again["served_from"] == "answer-cache"
    assert again["original_trace_id"] == first_answer["trace_id"] != again["trace_id"]
    assert again["answer"] == first_answer["answer"] and again["passages"] == first_answer["passages"]
    assert [s["name"] for s in again["trace"]["stages"]] == ["retrieve", "rerank", "generate"]
    assert queue_stats(client)["completed"] == before  # the model did not run


def test_search_is_bm25_over_the_index(client):
    body = client.get("/v1/search", params={"q": "capital of Italy", "k": 3}).json()
    assert body["query"] == "capital of Italy" and body["retriever"] == "bm25"
    assert [p["rank"] for p in body["passages"]] == [1, 2, 3]
    assert body["passages"][0]["id"] == "rome"
    assert [p["score"] for p in body["passages"]] == sorted((p["score"] for p in body["passages"]), reverse=True)


def test_ask_streams_queue_and_progress_events_then_the_result(client):
    events = []
    question = "Which river is in Africa?"
    with client.stream("POST", "/v1/ask", json={"question": question, "method": "vanilla", "k": 1,
                                               "options": TINY, "stream": True}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        for block in response.read().decode().split("\n\n"):
            if block.strip():
                name, data = (line.split(": ", 1)[1] for line in block.splitlines())
                events.append((name, json.loads(data)))
    names = [name for name, _ in events]
    assert names[0] == "accepted" and names[-1] == "result"
    assert {"queued", "started", "progress"} <= set(names)
    assert any(data.get("stage") == "generate" for name, data in events if name == "progress")
    result = events[-1][1]
    assert result["trace_id"] == events[0][1]["trace_id"] and result["question"] == question
    assert [p["id"] for p in result["passages"]] == ["nile"] and result["served_from"] == "llm"


# ---- rerank -------------------------------------------------------------------------------------

def test_rerank_has_the_shape_of_hosted_rerank_apis(first_rerank):
    body = first_rerank
    results = body["results"]
    assert sorted(r["index"] for r in results) == [0, 1, 2]  # every document once
    scores = [r["relevance_score"] for r in results]
    assert scores == sorted(scores, reverse=True) and all(0.0 <= s <= 1.0 for s in scores)
    for r in results:
        assert r["document"]["text"] == text_of(RERANK_DOCS[r["index"]])
    fruit = next(r["document"] for r in results if r["index"] == 1)
    assert fruit["id"] == "fruit-1" and fruit["title"] == "Banana"
    assert body["method"] == "pointwise" and body["model"] == MODEL
    assert body["id"] == body["trace_id"] and body["served_from"] == "llm"
    assert body["usage"]["calls"] == 3
    assert body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"]
    assert body["meta"]["documents"] == 3 and body["meta"]["ignored_fields"] == ["max_chunks_per_doc"]
    assert "rerank-english-v3.0" in body["meta"]["notes"][0]


def test_rerank_top_n_and_reordered_documents_reuse_the_scores(client, first_rerank):
    top = client.post("/v1/rerank", json=dict(RERANK, top_n=1)).json()
    assert top["served_from"] == "answer-cache"
    assert top["results"] == first_rerank["results"][:1]
    reordered = list(reversed(RERANK_DOCS))
    again = client.post("/v1/rerank", json=dict(RERANK, documents=reordered)).json()
    assert again["served_from"] == "call-cache"  # a new request, but every P("True") was computed before
    assert scores_by_text(again, reordered) == scores_by_text(first_rerank, RERANK_DOCS)
    assert [r["document"]["text"] for r in again["results"]] == [r["document"]["text"] for r in first_rerank["results"]]


def test_rerank_by_embedding_needs_no_llm(client):
    body = client.post("/v1/rerank", json={"query": "capital of Italy", "documents": RERANK_DOCS,
                                           "method": "embedding"}).json()
    assert body["served_from"] == "computed" and body["model"] == "all-MiniLM-L6-v2"
    assert body["results"][0]["index"] == 0  # MiniLM does know which sentence is about Italy
    assert body["usage"]["calls"] == 0


def test_rerank_by_graded_relevance(client):
    body = client.post("/v1/rerank", json={"query": "largest planet", "method": "graded",
                                           "documents": ["Jupiter is the largest planet.", "Bananas are yellow."]}).json()
    assert sorted(r["index"] for r in body["results"]) == [0, 1] and body["usage"]["calls"] == 2
    scores = [r["relevance_score"] for r in body["results"]]
    assert scores == sorted(scores, reverse=True) and all(0.0 <= s <= 1.0 for s in scores)  # (E[grade] - 1) / 4


# ---- the rerank APIs clients already speak: each vendor's own client, pointed at this server -----

TEXTS = [text_of(doc) for doc in RERANK_DOCS]
VENDOR_QUERY = "Which city is the capital of Italy?"


@pytest.fixture(scope="module")
def winnow_scores(client) -> dict[int, float]:
    """Winnow's own /v1/rerank of TEXTS: every vendor shape below must give the same scores."""
    response = client.post("/v1/rerank", json={"query": VENDOR_QUERY, "documents": TEXTS})
    assert response.status_code == 200, response.text
    return {r["index"]: r["relevance_score"] for r in response.json()["results"]}


def best_first(scores: dict[int, float]) -> list[int]:
    return sorted(scores, key=lambda i: -scores[i])


def test_cohere_v1_client(client, winnow_scores):
    cohere = pytest.importorskip("cohere")
    co = cohere.Client(api_key="any", base_url=str(client.base_url))
    got = co.rerank(model="rerank-english-v3.0", query=VENDOR_QUERY, documents=TEXTS, top_n=2,
                    return_documents=True, max_chunks_per_doc=10)
    assert [r.index for r in got.results] == best_first(winnow_scores)[:2]
    assert all(r.relevance_score == winnow_scores[r.index] and r.document.text == TEXTS[r.index] for r in got.results)


def test_cohere_v2_client(client, winnow_scores):
    """cohere.ClientV2 posts to /v2/rerank (it got a 404 before the route existed)."""
    cohere = pytest.importorskip("cohere")
    co = cohere.ClientV2(api_key="any", base_url=str(client.base_url))
    got = co.rerank(model="rerank-v3.5", query=VENDOR_QUERY, documents=TEXTS, top_n=1, max_tokens_per_doc=512)
    assert [(r.index, r.relevance_score) for r in got.results] == [(best_first(winnow_scores)[0],
                                                                   max(winnow_scores.values()))]
    assert got.meta.ignored_fields == ["max_tokens_per_doc"]  # said, not silently dropped


def test_voyage_client(client, winnow_scores):
    """voyageai posts Voyage's shape to {base}/rerank with top_k and truncation, and reads `data`
    (a KeyError before): top_k=1 returns one result, not every document."""
    voyageai = pytest.importorskip("voyageai")
    vo = voyageai.Client(api_key="any", base_url=f"{client.base_url}/v1", max_retries=0)
    got = vo.rerank(VENDOR_QUERY, TEXTS, model="rerank-2", top_k=1)
    [best] = got.results
    assert (best.index, best.relevance_score, best.document) == (best_first(winnow_scores)[0],
                                                                 max(winnow_scores.values()), TEXTS[best.index])
    assert got.total_tokens > 0
    every = vo.rerank(VENDOR_QUERY, TEXTS, model="rerank-2")
    assert [r.index for r in every.results] == best_first(winnow_scores)


def test_voyage_shape_with_return_documents(client, winnow_scores):
    """Voyage's REST shape itself (return_documents is in its API, not in the Python client)."""
    body = client.post("/v1/rerank", json={"query": VENDOR_QUERY, "documents": TEXTS, "model": "rerank-2",
                                           "top_k": 2, "return_documents": True}).json()
    assert body["object"] == "list" and "results" not in body
    assert [(d["index"], d["document"]) for d in body["data"]] == [(i, TEXTS[i]) for i in best_first(winnow_scores)[:2]]
    assert body["usage"]["total_tokens"] >= 0 and body["served_from"] in ("answer-cache", "call-cache")


def test_jina_client(client, winnow_scores):
    """LlamaIndex's Jina reranker posts Jina's shape to {base}/rerank: Winnow's own /v1/rerank."""
    pytest.importorskip("llama_index.postprocessor.jinaai_rerank")
    from llama_index.core.schema import NodeWithScore, TextNode
    from llama_index.postprocessor.jinaai_rerank import JinaRerank

    nodes = [NodeWithScore(node=TextNode(text=text, id_=str(i)), score=0.0) for i, text in enumerate(TEXTS)]
    ranked = JinaRerank(base_url=f"{client.base_url}/v1", api_key="any", top_n=2).postprocess_nodes(
        nodes, query_str=VENDOR_QUERY)
    best_two = best_first(winnow_scores)[:2]
    assert [(int(n.node.id_), n.score) for n in ranked] == [(i, winnow_scores[i]) for i in best_two]


def test_tei_client(client, winnow_scores):
    """LlamaIndex's Text Embeddings Inference reranker posts {query, texts} to {base}/rerank."""
    pytest.importorskip("llama_index.postprocessor.tei_rerank")
    from llama_index.core.schema import NodeWithScore, TextNode
    from llama_index.postprocessor.tei_rerank import TextEmbeddingInference

    nodes = [NodeWithScore(node=TextNode(text=text, id_=str(i)), score=0.0) for i, text in enumerate(TEXTS)]
    ranked = TextEmbeddingInference(base_url=str(client.base_url), top_n=2).postprocess_nodes(
        nodes, query_str=VENDOR_QUERY)
    best_two = best_first(winnow_scores)[:2]
    assert [(int(n.node.id_), n.score) for n in ranked] == [(i, winnow_scores[i]) for i in best_two]


def test_tei_shape_with_raw_scores_and_text(client, winnow_scores):
    """TEI's own fields: raw_scores gives the method's score (graded: E[grade] in 1..5, not the
    relevance in [0, 1]); return_text adds the text; the trace id travels in a header."""
    body = {"query": VENDOR_QUERY, "texts": TEXTS, "return_text": True, "truncate": True,
            "truncation_direction": "Right"}
    plain = client.post("/rerank", json=body)
    assert plain.status_code == 200, plain.text
    assert [(r["index"], r["score"], r["text"]) for r in plain.json()] == [
        (i, winnow_scores[i], TEXTS[i]) for i in best_first(winnow_scores)]
    trace = client.get(f"/v1/traces/{plain.headers['x-winnow-trace-id']}").json()
    assert trace["kind"] == "rerank" and trace["request"]["query"] == VENDOR_QUERY
    graded = client.post("/rerank", json={"query": "largest planet", "method": "graded", "raw_scores": True,
                                          "texts": ["Jupiter is the largest planet.", "Bananas are yellow."]})
    relevance = client.post("/rerank", json={"query": "largest planet", "method": "graded",
                                             "texts": ["Jupiter is the largest planet.", "Bananas are yellow."]})
    for raw, scaled in zip(graded.json(), relevance.json(), strict=True):
        assert raw["index"] == scaled["index"] and 1.0 <= raw["score"] <= 5.0
        assert scaled["score"] == pytest.approx((raw["score"] - 1) / 4)


# ---- concurrency, the worker queue, timeouts and cancellation -----------------------------------

def test_concurrent_requests_each_get_their_own_answer(client, index):
    questions = ["Who painted the Mona Lisa?", "What is the largest planet?", "What is the capital of Germany?",
                 "What fruit is elongated and edible?"]
    asks = [{"question": q, "n": 2, "k": 1, "options": TINY} for q in questions]
    reranks = [{"query": f"query number {i} about {topic}", "return_documents": True,
                "documents": [{"id": f"r{i}-d{j}", "text": f"{topic} note {j} of request {i}."} for j in range(2)]}
               for i, topic in enumerate(["rivers", "planets", "paintings"])]
    with ThreadPoolExecutor(len(asks) + len(reranks)) as pool:
        ask_futures = [pool.submit(client.post, "/v1/ask", json=body) for body in asks]
        rerank_futures = [pool.submit(client.post, "/v1/rerank", json=body) for body in reranks]
        answers = [f.result() for f in ask_futures]
        reranked = [f.result() for f in rerank_futures]
    assert all(r.status_code == 200 for r in answers + reranked), [r.text for r in answers + reranked]
    for body, response in zip(asks, answers):
        got = response.json()
        own = {p.id for p in index.search(body["question"], k=2).passages}  # its own first stage
        assert got["question"] == body["question"] and got["passages"][0]["id"] in own
        assert got["usage"]["calls"] == len(own) + 1  # a P("True") per retrieved passage, then the answer
        assert client.get(f"/v1/traces/{got['trace_id']}").json()["request"]["question"] == body["question"]
    for body, response in zip(reranks, reranked):
        got = response.json()
        assert sorted(r["document"]["id"] for r in got["results"]) == [d["id"] for d in body["documents"]]
        assert client.get(f"/v1/traces/{got['trace_id']}").json()["request"]["query"] == body["query"]
    waited = [r.json()["queue_seconds"] for r in answers + reranked]
    assert max(waited) > 0.1  # they really queued for the one model


def test_cached_requests_skip_the_queue_and_a_closed_stream_frees_its_slot(client, first_answer, first_rerank,
                                                                            server_log):
    long_ask = {"question": "Who painted the Mona Lisa, and when?", "method": "mainrag", "n": 8, "stream": True,
                "options": {"max_document_answer_tokens": 48, "max_answer_tokens": 48}}
    before, since = queue_stats(client), len(server_log)
    with httpx.Client(base_url=str(client.base_url), timeout=60) as streamer:
        with streamer.stream("POST", "/v1/ask", json=long_ask) as stream:
            lines = stream.iter_lines()
            trace_id = json.loads(next(line for line in lines if line.startswith("data:"))[5:])["trace_id"]
            next(line for line in lines if line == "event: started")  # the model is now busy with it
            started = time.perf_counter()
            again = client.post("/v1/ask", json=ASK).json()
            rotated = RERANK_DOCS[1:] + RERANK_DOCS[:1]
            reranked = client.post("/v1/rerank", json=dict(RERANK, documents=rotated)).json()
            waited = time.perf_counter() - started
            assert again["served_from"] == "answer-cache" and again["answer"] == first_answer["answer"]
            assert reranked["served_from"] == "call-cache"
            assert scores_by_text(reranked, rotated) == scores_by_text(first_rerank, RERANK_DOCS)
            stats = queue_stats(client)
            assert stats["running"] and stats["pending"] == 1, "the long request ended too soon for this test"
            assert waited < 5, waited
            # An uncached request waits in the queue behind it and times out there.
            timed_out = client.post("/v1/ask", json={"question": "Where is Berlin?", "k": 1, "method": "vanilla",
                                                     "options": TINY, "timeout": 0.5})
            assert timed_out.status_code == 504, timed_out.text
            assert timed_out.json()["error"]["type"] == "timeout" and timed_out.json()["error"]["field"] == "timeout"
            stats = queue_stats(client)
            assert stats["pending"] == 1 and stats["cancelled"] == before["cancelled"] + 1  # left the queue at once
        # Closing the stream is the client going away: the running request is cancelled.
    freed = wait_for(lambda: (s := queue_stats(client))["pending"] == 0 and s, timeout=30, what="the slot to free")
    assert freed["cancelled"] == before["cancelled"] + 2 and freed["completed"] == before["completed"]
    assert client.get(f"/v1/traces/{trace_id}").json()["status"] == "cancelled"
    # Each cancellation is one line in the server's log: the 504 in the queue, the closed stream.
    [timed_out_line] = wait_for(lambda: new_lines(server_log, since, "timed out"), what="the timeout's log line")
    assert "no answer within 0.5 s" in timed_out_line
    [gone] = wait_for(lambda: new_lines(server_log, since, "the client disconnected"), what="the cancellation's line")
    assert f"ask {trace_id} cancelled" in gone
    after = client.post("/v1/ask", json={"question": "Where is Berlin?", "k": 1, "method": "vanilla", "options": TINY})
    assert after.status_code == 200 and after.json()["served_from"] == "llm"


def test_a_timed_out_running_request_is_cancelled_and_the_next_succeeds(client, server_log):
    before, since = queue_stats(client), len(server_log)
    slow = {"question": "Which city is the capital of Italy?", "n": 8, "k": 2, "options": TINY}
    started = time.perf_counter()
    response = client.post("/v1/ask", json=dict(slow, timeout=0.5))
    assert response.status_code == 504 and time.perf_counter() - started < 5
    assert response.json()["error"]["type"] == "timeout" and response.json()["error"]["field"] == "timeout"
    # The job stops at its next LLM call, long before its 8 + 1 calls would be done.
    freed = wait_for(lambda: (s := queue_stats(client))["pending"] == 0 and s, timeout=30, what="the slot to free")
    assert freed["cancelled"] == before["cancelled"] + 1 and freed["completed"] == before["completed"]
    assert len(wait_for(lambda: new_lines(server_log, since, "timed out"), what="the log line")) == 1
    after = client.post("/v1/ask", json={"question": "Which city is the capital of Italy?", "n": 2, "k": 1,
                                         "options": TINY})
    assert after.status_code == 200 and after.json()["passages"][0]["id"] in CORPUS


def test_a_client_that_disconnects_is_one_log_line(client, server_log):
    """A plain (not streamed) request whose client closes the connection mid-run is cancelled at
    the model's next call and logged as one line, with no ASGI traceback."""
    before, since = queue_stats(client), len(server_log)
    body = json.dumps({"question": "Who painted the Mona Lisa, and in which city is it kept?", "method": "mainrag",
                       "n": 8, "options": {"max_document_answer_tokens": 48, "max_answer_tokens": 48}}).encode()
    url = client.base_url
    with socket.create_connection((url.host, url.port)) as raw:
        raw.sendall(b"POST /v1/ask HTTP/1.1\r\nHost: %b\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%b" % (url.netloc, len(body), body))
        wait_for(lambda: queue_stats(client)["running"], what="the request to reach the model")
    freed = wait_for(lambda: (s := queue_stats(client))["pending"] == 0 and s, timeout=30, what="the slot to free")
    assert freed["cancelled"] == before["cancelled"] + 1 and freed["completed"] == before["completed"]
    [line] = wait_for(lambda: new_lines(server_log, since, "the client disconnected"), what="the log line")
    trace_id = re.search(r"ask ([0-9a-f]{16}) cancelled after [0-9.]+ s", line).group(1)
    assert client.get(f"/v1/traces/{trace_id}").json()["status"] == "cancelled"


def test_an_abandoned_job_leaves_no_exception_unread(llm, index, caplog):
    """The Cancelled a job ends with after its request timed out must not be copied into an asyncio
    future nobody reads: asyncio logs those ("Future exception was never retrieved") when the
    future is garbage-collected. In the server that happens only if its collector runs (the last
    test reads its log); here the collector runs on purpose, in this process, with a real worker,
    model and method. The service is a namespace: only its worker is used."""
    worker = LLMWorker([llm])
    method = build_method("rankrag", index=index, llm=llm, n=8, k=1, max_answer_tokens=8)
    plan = Plan(kind="ask", key=None, needs_llm=True, request={}, timeout=0.05,
                compute=lambda models: method.ask("Which city is the capital of Italy?").to_dict())

    statuses = []

    async def time_out_then_let_the_job_end() -> None:
        try:
            await _on_worker(SimpleNamespace(worker=worker, models=None), plan, lambda event: None, None)
        except ApiError as refusal:  # not kept: its traceback would keep the future alive past gc.collect()
            statuses.append(refusal.status)
        while worker.stats()["pending"]:  # the job stops at its next LLM call
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.05)  # its outcome's callbacks reach the loop

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        try:
            asyncio.run(time_out_then_let_the_job_end())
        finally:
            worker.close()  # its thread holds the last job until the next one: ended, it lets go
        gc.collect()
    assert statuses == [504] and worker.counts["cancelled"] == 1 and worker.counts["completed"] == 0
    assert not [record.getMessage() for record in caplog.records if "never retrieved" in record.getMessage()]


DIALOGUE = [{"role": "user", "text": "who painted the mona lisa"}, {"role": "assistant", "text": "Leonardo da Vinci"}]
TALK = {"question": "when was it painted", "method": "vanilla", "k": 1, "history": DIALOGUE, "include_trace": True,
        "options": {"task": "conversational", "framing": "plain", "max_answer_tokens": 2}}


def test_a_dialogue_history_reaches_the_prompt(client):
    """RankRAG Appendix D.2, Doc2dial/Inscit/TopiOCQA: the earlier turns, then the latest question."""
    response = client.post("/v1/ask", json=TALK)
    assert response.status_code == 200, response.text
    [generate] = [stage for stage in response.json()["trace"]["stages"] if stage["name"] == "generate"]
    [call] = generate["llm_calls"]
    assert call["messages"][0]["role"] == "plain"
    assert call["messages"][0]["content"].endswith(
        "\n\nUser: who painted the mona lisa\n\nAssistant: Leonardo da Vinci\n\nUser: when was it painted\n\nAssistant:")
    # The same question without its history is another request, not the cached answer of this one.
    alone = client.post("/v1/ask", json={**TALK, "history": []})
    assert alone.status_code == 200 and alone.json()["served_from"] != "answer-cache"


@pytest.mark.parametrize("change, field", [
    ({"options": {"max_answer_tokens": 2}}, "history"),  # the qa task has no place for it
    ({"history": [DIALOGUE[0], {"role": "assistant", "text": "\u200b"}]}, "history[1].text"),
    ({"history": [DIALOGUE[1], DIALOGUE[0]]}, "history"),  # a dialogue opens with the user
    ({"history": [{"role": "user", "text": "hi", "when": 3}]}, "history[0].when"),
])
def test_a_bad_history_is_refused_naming_the_field(client, change, field):
    response = client.post("/v1/ask", json={**TALK, **change})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == field


def test_any_host_is_answered_with_allow_any_host(client):
    assert client.get("/healthz", headers={"Host": "winnow.internal.example:443"}).json()["status"] == "ok"


def test_the_server_log_has_no_tracebacks(client, server_log):
    """Last: every cancellation, timeout and refusal above was logged as at most one line."""
    client.get("/healthz")
    log = "".join(server_log)
    for sign in ("Traceback", "Exception in ASGI application", "never retrieved", "ERROR"):
        assert sign not in log, log


@pytest.fixture(scope="module")
def small_context_client(tmp_path_factory):
    """A server whose model holds 256 tokens of context (llama.cpp's least), so that a document too long
    for it costs seconds of prefill rather than the half-minute of one too long for the default 4,096."""
    folder = tmp_path_factory.mktemp("service-small-context")
    with running_server(build_small_index(folder), folder / "cache", "--context-size", "256") as base:
        with httpx.Client(base_url=base, timeout=120) as http:
            yield http


def test_rerank_fits_a_document_longer_than_the_model_context(small_context_client):
    """A 5,000-character document (about 1,250 SmolLM2 tokens; the context is 256) used to be a
    502 from the model; its text is now cut to fit, and the trace says what was cut."""
    long = ("Rome is the capital city of Italy and of the Lazio region. " * 90)[:5_000]
    response = small_context_client.post("/v1/rerank", json={
        "query": "What is the capital of Italy?", "method": "pointwise",
        "documents": [long, "A banana is an elongated, edible fruit."], "include_trace": True})
    assert response.status_code == 200, response.text
    body = response.json()
    assert sorted(r["index"] for r in body["results"]) == [0, 1]
    [stage] = body["trace"]["stages"]
    [cut] = stage["details"]["fitted"]
    assert cut["passage_id"] == "0" and cut["chars_before"] == 5_000 > cut["chars_after"]
    assert cut["context_size"] == 256
    assert all(call["prompt_tokens"] <= cut["context_size"] for call in stage["llm_calls"])
