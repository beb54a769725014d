"""Auth, the Host check and every request limit of `winnow serve`, against a real server with tight limits.

The server runs with an API key (from WINNOW_API_KEY, as a deployment would set it), small
ceilings, so each limit can be hit with a small request, and two --allowed-host names. Every
refusal must be a 4xx JSON body ``{"error": {"type", "message", "field"}}`` naming the field at
fault. Most refusals happen before any model work; the queue-full test is the one that needs the
model busy.
"""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest
from service_server import build_small_index, queue_stats, running_server, wait_for

from winnow.service.hosts import HostPolicy

pytestmark = [pytest.mark.llm, pytest.mark.subprocess]  # `winnow serve` in a process of its own

KEY = "test-key-5f2c"
AUTH = {"Authorization": f"Bearer {KEY}"}
LIMITS = ["--max-question-chars", "100", "--max-documents", "4", "--max-document-chars", "200", "--max-n", "6",
          "--max-k", "3", "--max-body-bytes", "4000", "--max-pending", "1", "--timeout", "20",
          "--allowed-host", "API.Example.com", "--allowed-host", "*.example.org", "--read-timeout", "1"]
ROUTES = [("GET", "/v1/models"), ("GET", "/v1/methods"), ("GET", "/v1/search?q=rome"),
          ("GET", "/v1/traces/0123456789abcdef"), ("POST", "/v1/ask"), ("POST", "/v1/rerank"),
          ("POST", "/v2/rerank"), ("POST", "/rerank"),  # the vendor rerank shapes
          ("GET", "/openapi.json"), ("GET", "/docs"), ("GET", "/redoc")]  # the schema and its pages


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("service-limits")
    with running_server(build_small_index(folder), folder / "cache", *LIMITS, api_key=KEY) as base:
        yield base


@pytest.fixture(scope="module")
def client(server):
    """A client that sends the key."""
    with httpx.Client(base_url=server, headers=AUTH, timeout=60) as http:
        yield http


def refused(response: httpx.Response, status: int, field: str | None) -> dict:
    """Check a JSON refusal and return its error."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert set(error) == {"type", "message", "field"} and error["message"]
    assert error["field"] == field, error
    return error


# ---- auth ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("method,path", ROUTES)
@pytest.mark.parametrize("authorization", [None, "Bearer wrong-key", f"Basic {KEY}", f"Bearer {KEY}x", "Bearer"])
def test_every_api_route_and_the_docs_need_the_key(server, method, path, authorization):
    headers = {"Authorization": authorization} if authorization else {}
    response = httpx.request(method, server + path, headers=headers, json={"question": "x"})
    error = refused(response, 401, "Authorization")
    assert error["type"] == "unauthorized" and "Authorization: Bearer" in error["message"]
    assert response.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize("method,path", [r for r in ROUTES if r[0] == "GET"])
def test_the_key_opens_every_route(client, method, path):
    response = client.request(method, path)
    assert response.status_code == (404 if "traces" in path else 200), response.text  # 404: past the guard


def test_the_key_opens_the_schema_and_its_pages(client):
    """The same rule as the API: with the key, the schema (every route, the vendor shapes too) and
    the pages that render it (Swagger UI, ReDoc) pointing at it."""
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/v1/ask", "/v1/rerank", "/v2/rerank", "/rerank"} <= set(paths)
    assert "swagger-ui" in client.get("/docs").text and "/openapi.json" in client.get("/docs").text
    assert "redoc" in client.get("/redoc").text


def test_health_and_inspector_need_no_key(server):
    health = httpx.get(f"{server}/healthz").json()
    assert health["status"] == "ok" and health["auth"] is True
    assert "Winnow inspector" in httpx.get(f"{server}/").text
    assert httpx.get(f"{server}/static/app.js").status_code == 200


# ---- the Host header (DNS rebinding) -------------------------------------------------------------

def port_of(server: str) -> int:
    return httpx.URL(server).port


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "[::1]:{port}", "LocalHost.", "10.1.2.3:80",
                                  "api.example.com:443", "docs.example.org"])
def test_loopback_names_addresses_and_allowed_hosts_are_answered(server, host):
    headers = {"Host": host.format(port=port_of(server))}
    assert httpx.get(f"{server}/healthz", headers=headers).json()["status"] == "ok"
    assert httpx.get(f"{server}/v1/models", headers=dict(headers, **AUTH)).status_code == 200


@pytest.mark.parametrize("host", ["evil.example:{port}", "evil.example", "example.org", "api.example.com.evil.example",
                                  "localhost.evil.example:{port}", ""])
@pytest.mark.parametrize("path", ["/healthz", "/", "/openapi.json", "/docs", "/v1/models", "/v1/ask", "/rerank"])
def test_other_host_names_are_refused_on_every_route(server, host, path):
    """A DNS-rebinding page sends its own name: refused before the key, the body or the route."""
    host = host.format(port=port_of(server))
    response = httpx.request("POST" if path in ("/v1/ask", "/rerank") else "GET", server + path,
                             headers=dict(AUTH, Host=host), json={"question": "x"})
    error = refused(response, 400, "Host")
    assert error["type"] == "invalid_host" and repr(host) in error["message"]
    assert "--allowed-host" in error["message"] and "--allow-any-host" in error["message"]


def test_a_request_without_a_host_header_is_answered(server):
    """HTTP/1.0 tools may send no Host; a browser always does, so there is nothing to check."""
    with socket.create_connection(("127.0.0.1", port_of(server))) as raw:
        raw.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
        reply = b"".join(iter(lambda: raw.recv(65536), b""))
    assert reply.startswith(b"HTTP/1.1 200") and b'"status":"ok"' in reply


def test_the_names_each_bind_address_answers_to():
    """Listening on every interface adds the machine's name; a name given to --host is its own."""
    name = socket.gethostname().lower()
    assert HostPolicy.for_bind("0.0.0.0").allows(f"{name}:8080") and HostPolicy.for_bind("::").allows(name)
    assert HostPolicy.for_bind("127.0.0.1").allows(f"{name}:8080") == (name == "localhost")
    assert HostPolicy.for_bind("gpu-box.lan").allows("GPU-box.lan:8080")
    assert not HostPolicy.for_bind("gpu-box.lan").allows("other-box.lan:8080")
    assert HostPolicy.for_bind("127.0.0.1", any_host=True).allows("evil.example")


def test_the_key_is_checked_before_the_body_is_read(server):
    response = httpx.post(f"{server}/v1/ask", content=b"{not json", headers={"Content-Type": "application/json"})
    refused(response, 401, "Authorization")


def test_the_limits_are_published(client):
    limits = client.get("/v1/methods").json()["limits"]
    assert (limits["max_question_chars"], limits["max_documents"], limits["max_n"], limits["max_k"]) == (100, 4, 6, 3)
    assert limits["max_pending"] == 1 and limits["timeout"] == 20


def test_defaults_above_the_ceilings_are_lowered_to_them(client):
    """The methods' default N=20 and k=5 (and search's k=10) exceed --max-n 6 and --max-k 3: a
    request that leaves them out gets the ceilings, and is refused only for what it asked."""
    methods = client.get("/v1/methods").json()
    from winnow.methods import METHODS

    for method in methods["methods"]:  # MAIN-RAG's k is a cap on its survivors, off (None) by default
        unread = set(getattr(METHODS[method["name"]], "unused_settings", ()))  # no-retrieval's n and k
        if "n" not in unread:
            assert method["defaults"]["n"] == 6, method
        if "k" not in unread:
            assert method["defaults"]["k"] == (None if method["name"] == "mainrag" else 3), method
    assert len(client.get("/v1/search", params={"q": "capital painted fruit planet river"}).json()["passages"]) == 6
    # Over the question limit, not "n: got 20": the only thing wrong is what the client sent.
    refused(client.post("/v1/ask", json={"question": "q" * 101}), 422, "question")
    refused(client.post("/v1/ask", json={"question": "x", "n": 2, "method": "magic"}), 422, "method")  # k: 2


# ---- malformed and oversized bodies -------------------------------------------------------------

@pytest.mark.parametrize("body", [b"{\"question\": ", b"{'question': 'single quotes'}", b"question=what",
                                  b"{\"question\": \"x\",}", b"{\"question\": \"caf\xe9\"}",
                                  b"{\"question\": \"\xe2\x82\"}", b"[" * 1900 + b"]" * 1900],
                         ids=["cut", "quotes", "form", "comma", "latin-1", "cut-utf-8", "deep"])
def test_malformed_json_is_a_400(client, body):
    """Not JSON, not UTF-8 (a Latin-1 byte; a character cut short), or nested deeper than JSON can
    be read (1,900 levels; 100,000 in test_service_api): a 400 naming the body, never a 500."""
    error = refused(client.post("/v1/ask", content=body, headers={"Content-Type": "application/json"}), 400, "body")
    assert error["type"] == "malformed_json"
    if b"\xe9" in body:
        assert "not valid UTF-8: byte 0xe9 at position 17" in error["message"]
    if body.startswith(b"[["):
        assert "too deeply" in error["message"]


def test_nesting_json_can_read_is_refused_by_the_field_check(client):
    """500 levels parse; the request is then refused for what the field holds, quoted briefly."""
    body = b"{\"question\": \"x\", \"options\": {\"n\": " + b"[" * 500 + b"]" * 500 + b"}}"
    error = refused(client.post("/v1/ask", content=body, headers={"Content-Type": "application/json"}),
                    422, "options.n")
    assert "must be an integer" in error["message"] and len(error["message"]) < 100


# A JSON escape of half a surrogate pair decodes to a str that is not Unicode text: refused by
# field, whether sent as the escape or as its (invalid) UTF-8 bytes, which Python's json reads the same.
SURROGATES = [
    ("/v1/ask", b'{"question": "Where is \\ud800 Rome?"}', "question"),
    ("/v1/ask", b'{"question": "Where is \xed\xa0\x80 Rome?"}', "question"),
    ("/v1/ask", b'{"question": "x", "options": {"judge_n": "\\udfff"}}', "options.judge_n"),
    ("/v1/ask", b'{"question": "x", "options": {"\\ud800": 1}}', "options"),
    ("/v1/rerank", b'{"query": "\\udc00", "documents": ["a"]}', "query"),
    ("/v1/rerank", b'{"query": "q", "documents": ["a", "b\\ud800"]}', "documents[1]"),
    ("/v1/rerank", b'{"query": "q", "documents": [{"text": "\\ud800\\ud800"}]}', "documents[0].text"),
    ("/v1/rerank", b'{"query": "q", "documents": [{"text": "a", "title": "\\ud83d"}]}', "documents[0].title"),
    ("/v1/rerank", b'{"query": "q", "documents": [{"text": "a", "id": "\\ud83d"}]}', "documents[0].id"),
]


@pytest.mark.parametrize("path,body,field", SURROGATES, ids=[f"{f}-{i}" for i, (_, _, f) in enumerate(SURROGATES)])
def test_lone_surrogates_are_refused_naming_the_field(client, path, body, field):
    error = refused(client.post(path, content=body, headers={"Content-Type": "application/json"}), 422, field)
    assert error["type"] == "invalid_request" and "lone surrogate" in error["message"]


def test_a_lone_surrogate_in_an_extra_field_name_is_refused(client):
    """/v1/rerank takes unknown fields (hosted APIs' extras); pydantic refuses such a name itself."""
    body = b'{"query": "q", "documents": ["a"], "\\ud800extra": 1}'
    error = refused(client.post("/v1/rerank", content=body, headers={"Content-Type": "application/json"}), 422, "body")
    assert "unicode string" in error["message"]


def test_a_pair_of_surrogates_is_one_character_and_accepted(client):
    """The escape of U+1F600 as a pair is valid: the request passes the text checks and is
    refused by the next one (the unknown method) instead."""
    body = b'{"query": "\\ud83d\\ude00", "documents": [{"text": "\\ud83d\\ude00", "title": "t"}], "method": "magic"}'
    refused(client.post("/v1/rerank", content=body, headers={"Content-Type": "application/json"}), 422, "method")


@pytest.mark.parametrize("query,field", [("q=%FF", "q"), ("q=%ED%A0%80", "q"), ("k=2&q=rome%C3%28", "q")])
def test_search_text_that_is_not_utf8_is_refused(client, query, field):
    """Starlette would search for U+FFFD in place of the bad bytes; the request is refused instead."""
    assert "not valid UTF-8" in refused(client.get(f"/v1/search?{query}"), 422, field)["message"]


def test_a_form_labelled_body_is_read_as_json(client):
    """`curl -d '{...}'` sends JSON labelled as a form; the limit check below proves it was parsed."""
    response = client.post("/v1/ask", content=json.dumps({"question": "x", "n": 7}),
                           headers={"Content-Type": "application/x-www-form-urlencoded"})
    refused(response, 422, "n")


def test_a_body_over_the_limit_is_a_413_declared_or_chunked(client):
    big = json.dumps({"query": "q", "documents": ["word " * 30] * 30}).encode()
    assert len(big) > 4000
    refused(client.post("/v1/rerank", content=big, headers={"Content-Type": "application/json"}), 413, "body")

    def chunks():  # no Content-Length: the server must count as it reads
        for start in range(0, len(big), 1000):
            yield big[start:start + 1000]

    response = client.post("/v1/rerank", content=chunks(), headers={"Content-Type": "application/json"})
    assert "content-length" not in response.request.headers
    refused(response, 413, "body")
    tei = json.dumps({"query": "q", "texts": ["word " * 30] * 30}).encode()
    refused(client.post("/rerank", content=tei, headers={"Content-Type": "application/json"}), 413, "body")


# ---- field limits -------------------------------------------------------------------------------

ASK_REFUSALS = [
    ({"question": "q" * 101}, "question"),
    ({"question": "   "}, "question"),
    ({}, "question"),
    ({"question": 42}, "question"),
    ({"question": "x", "n": 7}, "n"),
    ({"question": "x", "n": 0}, "n"),
    ({"question": "x", "profile": ""}, "profile"),  # the schema lists the profiles: "" is none of them
    ({"question": "x", "profile": "papers"}, "profile"),
    ({"question": "x", "n": "5"}, "n"),
    ({"question": "x", "n": 6, "k": 4}, "k"),
    ({"question": "x", "n": 2, "k": 3}, "k"),  # k above n
    ({"question": "x", "k": 0}, "k"),
    ({"question": "x", "method": "magic"}, "method"),
    ({"question": "x", "options": {"max_answer_tokens": 513}}, "options.max_answer_tokens"),
    ({"question": "x", "options": {"max_answer_tokens": "8"}}, "options.max_answer_tokens"),
    ({"question": "x", "options": {"temperature": 1}}, "options.temperature"),
    ({"question": "x", "options": {"n": "abc"}}, "options.n"),
    ({"question": "x", "options": {"n": 7}}, "options.n"),
    ({"question": "x", "options": {"k": 4}}, "options.k"),
    ({"question": "x", "n": 2, "options": {"k": 3}}, "options.k"),  # k above n, k in options
    ({"question": "x", "method": "rankgpt", "options": {"window": "x"}}, "options.window"),
    ({"question": "x", "method": "rankgpt", "options": {"window": 2.5}}, "options.window"),
    ({"question": "x", "method": "rankrag", "options": {"fusion_alpha": "high"}}, "options.fusion_alpha"),
    ({"question": "x", "method": "mainrag", "options": {"judge_n": True}}, "options.judge_n"),
    ({"question": "x", "method": "rankrag", "options": {"fusion_alpha": 2}}, "options.fusion_alpha"),
    ({"question": "x", "method": "rankgpt", "options": {"listwise_prompt": "bogus"}}, "options.listwise_prompt"),
    ({"question": "x", "options": {"max_answer_tokens": 0}}, "options.max_answer_tokens"),
    ({"question": "x", "timeout": 21}, "timeout"),
    ({"question": "x", "timeout": 0}, "timeout"),
    ({"question": "x", "stream": "yes"}, "stream"),
    ({"question": "x", "qestion": "typo"}, "qestion"),
]


@pytest.mark.parametrize("body,field", ASK_REFUSALS, ids=[f for _, f in ASK_REFUSALS])
def test_ask_refusals_name_the_field(client, body, field):
    error = refused(client.post("/v1/ask", json=body), 422, field)
    assert error["type"] == "invalid_request" and field.split(".")[-1] in error["message"]


@pytest.mark.parametrize("name", ["n", "k"])
@pytest.mark.parametrize("top,option", [(2, 3), (3, 2), (2, "2"), (1, True), (2, [2])])
def test_a_setting_given_top_level_and_in_options_must_agree(client, name, top, option):
    """`n` and `options.n` (or k) that differ are refused naming both: neither silently wins."""
    error = refused(client.post("/v1/ask", json={"question": "x", name: top, "options": {name: option}}), 422, name)
    assert f"{name} is {top}" in error["message"] and f"options.{name} is {option!r}" in error["message"]


def test_the_same_setting_twice_with_one_value_is_accepted(client):
    """Accepted (2.0 is the integer 2, as settings read it): the request passes the settings check
    and is refused by the next one."""
    body = {"question": "x", "n": 2, "k": 1, "options": {"n": 2.0, "k": 1}, "timeout": 21}
    refused(client.post("/v1/ask", json=body), 422, "timeout")


@pytest.mark.parametrize("body,field", [(b'{"question": "x", "method": "mainrag", "options": {"judge_n": NaN}}',
                                         "options.judge_n"),
                                        (b'{"question": "x", "timeout": Infinity}', "timeout")])
def test_non_finite_numbers_are_refused_naming_the_field(client, body, field):
    """Python's JSON reader takes NaN and Infinity; a setting holding one is refused, not run."""
    refused(client.post("/v1/ask", content=body, headers={"Content-Type": "application/json"}), 422, field)


def test_limits_are_inclusive(client):
    """A question of exactly the limit, N and k at their ceilings, pass their own checks: the
    request is refused by the next check (the unknown method) instead."""
    body = {"question": "q" * 100, "n": 6, "k": 3, "timeout": 20, "method": "magic"}
    refused(client.post("/v1/ask", json=body), 422, "method")
    documents = ["d" * 200] * 4
    refused(client.post("/v1/rerank", json={"query": "q" * 100, "documents": documents, "method": "magic"}),
            422, "method")


RERANK_REFUSALS = [
    ({"query": "q", "documents": ["a"] * 5}, "documents"),
    ({"query": "q", "documents": []}, "documents"),
    ({"query": "q" * 101, "documents": ["a"]}, "query"),
    ({"query": "q", "documents": ["a", "b" * 201]}, "documents[1]"),
    ({"query": "q", "documents": [{"id": "x", "text": "b" * 201}]}, "documents[0].text"),
    ({"query": "q", "documents": ["a", ""]}, "documents[1]"),
    ({"query": "q", "documents": ["a", 5]}, "documents[1]"),
    ({"query": "q", "documents": [{"id": "x"}]}, "documents[0].text"),
    ({"query": "q", "documents": "a single string"}, "documents"),
    ({"documents": ["a"]}, "query"),
    ({"query": "q", "documents": ["a"], "top_n": 0}, "top_n"),
    ({"query": "q", "documents": ["a"], "top_n": 5}, "top_n"),
    ({"query": "q", "documents": ["a"], "method": "bogus"}, "method"),
    ({"query": "q", "documents": ["a"], "options": {"window": 3}}, "options.window"),
    ({"query": "q", "documents": ["a"], "method": "listwise", "options": {"window": 1}}, "options.window"),
    ({"query": "q", "documents": ["a"], "method": "listwise", "options": {"window": 4, "step": 5}}, "options.step"),
    ({"query": "q", "documents": ["a"], "timeout": 25}, "timeout"),
]


@pytest.mark.parametrize("body,field", RERANK_REFUSALS, ids=[f for _, f in RERANK_REFUSALS])
def test_rerank_refusals_name_the_field(client, body, field):
    assert refused(client.post("/v1/rerank", json=body), 422, field)["type"] == "invalid_request"


VENDOR_REFUSALS = [  # each names the vendor's own field, not the Winnow field it becomes
    ("/v1/rerank", {"query": "q", "documents": ["a"], "top_k": 0}, "top_k"),
    ("/v1/rerank", {"query": "q", "documents": ["a"], "top_k": 5}, "top_k"),  # over --max-documents 4
    ("/v1/rerank", {"query": "q", "documents": ["a"], "top_k": "1"}, "top_k"),
    ("/v1/rerank", {"query": "q", "documents": ["a"], "top_k": 1, "top_n": 1}, "top_k"),
    ("/v1/rerank", {"query": "q", "documents": ["a"], "truncation": "yes"}, "truncation"),
    ("/v1/rerank", {"query": "q", "documents": ["a"] * 5, "truncation": True}, "documents"),
    ("/v2/rerank", {"model": "m", "query": "q", "documents": ["a"], "relevant_spans": {"mode": "enabled"}},
     "relevant_spans.mode"),
    # issue 40 item 12: what spans Winnow cannot give is refused whatever field asks for them
    ("/v2/rerank", {"model": "m", "query": "q", "documents": ["a"], "relevant_spans": {"enabled": True}},
     "relevant_spans.enabled"),
    ("/v2/rerank", {"model": "m", "query": "q", "documents": ["a"], "relevant_spans": True}, "relevant_spans"),
    ("/v2/rerank", {"model": "m", "query": "q", "documents": ["a", ""]}, "documents[1]"),
    ("/rerank", {"query": "q", "texts": ["a", "b" * 201]}, "texts[1]"),
    ("/rerank", {"query": "q", "texts": ["a"] * 5}, "texts"),
    ("/rerank", {"query": "q", "texts": []}, "texts"),
    ("/rerank", {"query": "q", "texts": "a"}, "texts"),
    ("/rerank", {"query": "q", "texts": ["a"], "raw_score": True}, "raw_score"),  # TEI's is raw_scores
    ("/rerank", {"query": "q", "texts": ["a"], "method": "bogus"}, "method"),
    ("/rerank", {"query": "q", "texts": ["a"], "truncation_direction": "Up"}, "truncation_direction"),
    ("/rerank", {"texts": ["a"]}, "query"),
]


@pytest.mark.parametrize("path,body,field", VENDOR_REFUSALS, ids=[f"{p}-{f}" for p, _, f in VENDOR_REFUSALS])
def test_vendor_rerank_refusals_name_the_vendors_field(client, path, body, field):
    error = refused(client.post(path, json=body), 422, field)
    assert error["type"] == "invalid_request" and field.split("[")[0].split(".")[0] in error["message"]


@pytest.mark.parametrize("params,field", [({"q": "rome", "k": 7}, "k"), ({"q": "rome", "k": 0}, "k"),
                                          ({"q": "q" * 101}, "q"), ({"q": " "}, "q"), ({}, "q"),
                                          ({"q": "rome", "k": "many"}, "k")])
def test_search_refusals_name_the_field(client, params, field):
    refused(client.get("/v1/search", params=params), 422, field)


def test_unknown_routes_and_methods_are_json(client):
    assert refused(client.get("/v1/nothing-here"), 404, None)["type"] == "not_found"
    assert refused(client.delete("/v1/ask"), 405, None)["type"] == "method_not_allowed"


# ---- the queue ------------------------------------------------------------------------------------

BUSY_QUESTIONS = ["Describe every city, river and country in these documents, one by one, in detail.",
                  "Tell the whole history of each place named in these documents, in detail.",
                  "Write a long essay comparing every place these documents mention."]


def test_a_full_queue_is_a_503_and_other_routes_still_answer(client):
    """With --max-pending 1, a second model request while one runs is refused at once.

    A tiny model on a fast machine can finish the busy request before the second one arrives, so
    the scenario is tried with fresh questions (no cache can answer them) until the queue is caught
    full; a queue that never refuses fails the test.
    """
    caught_full = False
    for attempt, busy_question in enumerate(BUSY_QUESTIONS):
        wait_for(lambda: queue_stats(client)["pending"] == 0, timeout=30, what="a free slot")
        busy = {"question": busy_question, "n": 6, "k": 3, "stream": True, "options": {"max_answer_tokens": 256}}
        waiting = {"question": f"Where is the Nile? ({attempt})", "method": "vanilla", "k": 1,
                   "options": {"max_answer_tokens": 8}}
        with httpx.Client(base_url=str(client.base_url), headers=AUTH, timeout=60) as streamer:
            with streamer.stream("POST", "/v1/ask", json=busy) as stream:
                next(line for line in stream.iter_lines() if line == "event: started")
                response = client.post("/v1/ask", json=waiting)
                if response.status_code == 200 and response.json()["served_from"] == "llm":
                    continue  # the busy request had already finished: try a longer race again
                caught_full = True
                assert refused(response, 503, None)["type"] == "busy"
                assert response.headers["retry-after"] == "5"
                assert client.get("/v1/search", params={"q": "Nile", "k": 1}).json()["passages"][0]["id"] == "nile"
                assert queue_stats(client)["refused"] >= 1
        break
    assert caught_full, f"no request was refused in {len(BUSY_QUESTIONS)} tries with --max-pending 1"
    wait_for(lambda: queue_stats(client)["pending"] == 0, timeout=30, what="the closed stream's slot")
    response = client.post("/v1/ask", json=waiting)
    assert response.status_code == 200 and response.json()["passages"][0]["id"] == "nile"


def test_a_question_of_only_zero_width_characters_is_refused_naming_the_field(client):
    """The same text check as the command line: nothing visible is nothing to ask."""
    error = refused(client.post("/v1/ask", json={"question": "\u200b\u200c\u2060 "}), 422, "question")
    assert "empty once zero-width" in error["message"]


# ---- half-sent requests -------------------------------------------------------------------------

def _talk(server: str, data: bytes, wait: float = 5.0) -> tuple[bytes, float]:
    """Send ``data`` over a raw connection and read until the server closes it: what it sent back
    and the seconds that took (``wait`` + 5 at most)."""
    host, port = server.removeprefix("http://").rsplit(":", 1)
    started = time.monotonic()
    with socket.create_connection((host, int(port))) as connection:
        connection.settimeout(wait + 5)
        connection.sendall(data)
        received = b""
        while chunk := connection.recv(4096):
            received += chunk
    return received, time.monotonic() - started


@pytest.mark.parametrize("sent", [b"", b"POST /v1/ask HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty"])
def test_a_client_that_does_not_finish_its_headers_is_disconnected_after_the_read_timeout(server, sent):
    received, seconds = _talk(server, sent)
    assert received == b"" and 0.9 <= seconds < 4  # --read-timeout 1


def test_a_body_that_stops_half_way_is_a_408_after_the_read_timeout(server):
    body = json.dumps({"question": "What is the capital of France?"}).encode()
    head = (f"POST /v1/ask HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    received, seconds = _talk(server, head + body[:10])
    assert received.startswith(b"HTTP/1.1 408") and b'"request_timeout"' in received, received[:300]
    assert 0.9 <= seconds < 4
