"""The OpenAPI schema of `winnow serve` against its behaviour, checked by schemathesis.

The real FastAPI app (create_app over a real Service and Pipeline) answers in-process through its
ASGI interface; its LLM is an OpenAI-compatible server on 127.0.0.1 (tests/fault_server.py, healthy,
answers in microseconds), so every route runs for real without loading a model. schemathesis
generates requests from /openapi.json, valid and invalid, a bounded number per operation, and
checks that no answer is a 500, that every status and body is one the schema documents, and that
requests the schema calls invalid are refused.
"""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
schemathesis = pytest.importorskip("schemathesis")

from fault_server import FaultServer  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from schemathesis import GenerationMode  # noqa: E402

from winnow.pipeline import Pipeline, RunSpec  # noqa: E402
from winnow.service import Service  # noqa: E402
from winnow.service.app import create_app  # noqa: E402
from winnow.service.limits import Limits  # noqa: E402

#: Small limits keep each request quick (a rerank of at most 8 short documents), and show that the
#: schema states this server's limits, not the defaults.
LIMITS = Limits(max_documents=8, max_document_chars=400, max_question_chars=200)
MAX_EXAMPLES = 20  # per operation, valid and invalid together: the file in about ten seconds


@pytest.fixture(scope="module")
def api(index):
    server = FaultServer()
    pipeline = Pipeline(RunSpec(method="vanilla", model="m", backend="openai", base_url=server.url,
                                settings={"k": 2, "n": 4}), index.path, cache=False)
    service = Service(pipeline, cache=False, limits=LIMITS)
    try:
        yield create_app(service)
    finally:
        service.close()
        pipeline.close()
        server.stop()


@pytest.fixture(scope="module")
def api_schema(api):
    return schemathesis.openapi.from_asgi("/openapi.json", api)


def expressible(case):
    """A schema-valid request with the parts taken out whose rules JSON Schema cannot state, so a
    refusal of what is left is a real mismatch: ``options`` (each method's own settings; GET
    /v1/methods lists them), ``history`` (a dialogue alternating from the user, for the
    conversational task only), ``timeout`` (any deadline is valid, and one of a nanosecond is a
    documented 504), k above N (k is chosen among the N retrieved: brought down to N), and the
    trained rerankers (cross-encoder, monot5): this server has no model for them and cannot fetch
    one offline, a documented 503 ``model_unavailable`` (tests/test_cross_encoder.py serves one),
    the counts a method does not read (no-retrieval's N and k, mainrag-unfiltered's k: refused with
    the reason, a documented 422), and a one-row profile (``rankgpt-quoted``) with a method it does
    not name: given its method."""
    from winnow.methods import METHODS
    from winnow.methods.profiles import PROFILES

    if isinstance(case.body, dict):
        profile = PROFILES.get(case.body.get("profile")) if isinstance(case.body.get("profile"), str) else None
        if profile is not None and not profile.applies_to(str(case.body.get("method", "vanilla"))):
            case.body["method"] = next(iter(profile.settings))
        if case.body.get("method") in ("cross-encoder", "monot5"):
            case.body.pop("method")
        for part in ("options", "history", "timeout"):
            case.body.pop(part, None)
        n, k = case.body.get("n"), case.body.get("k")
        if n is None and isinstance(k, (int, float)) and not isinstance(k, bool) and float(k).is_integer():
            case.body["n"] = n = int(k)  # a k above the method's default N is refused: N given, as large
        if isinstance(n, int) and not isinstance(n, bool) and (case.body.get("k") is None or case.body["k"] > n):
            case.body["k"] = min(n, LIMITS.max_k)
        chosen = METHODS.get(str(case.body.get("method")))
        for count in getattr(chosen, "unused_settings", ()):  # last: the line above may give k
            case.body.pop(count, None)
    return case


def test_the_api_does_what_its_schema_says(api_schema):
    """Every operation: valid requests are answered (2xx, or a documented refusal such as 404 for
    an unknown trace), invalid ones refused with a 4xx, never a 5xx, and every answer's status,
    content type and body are the ones the schema documents."""
    operations = [result.ok() for result in api_schema.get_all_operations()]
    # healthz, readyz, metrics, ask, rerank, search, traces, models, methods, v2/rerank, /rerank
    assert len(operations) == 11
    for operation in operations:
        valid = operation.as_strategy(GenerationMode.POSITIVE).map(expressible)
        invalid = operation.as_strategy(GenerationMode.NEGATIVE)

        @given(case=valid | invalid)
        @settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        def check(case):
            case.call_and_validate()

        check()


def test_the_schema_states_the_checks_the_issue_named(api):
    """Empty questions are refused, and said to be; an unknown trace's 404 is documented."""
    schema = api.openapi()
    question = schema["components"]["schemas"]["AskRequest"]["properties"]["question"]
    assert question["minLength"] == 1 and question["maxLength"] == LIMITS.max_question_chars == 200
    assert "404" in schema["paths"]["/v1/traces/{trace_id}"]["get"]["responses"]
    k = next(m for m in schema["components"]["schemas"]["AskRequest"]["properties"]["k"]["anyOf"]
             if m["type"] == "integer")
    assert (k["minimum"], k["maximum"]) == (1, LIMITS.max_k)
    documents = schema["components"]["schemas"]["RerankRequest"]["properties"]["documents"]
    assert (documents["minItems"], documents["maxItems"]) == (1, 8)


def test_a_reranker_model_the_server_cannot_load_is_a_documented_503(api, monkeypatch):
    """No --rerank-model and the default not cached (offline): 503 model_unavailable, as documented."""
    from fastapi.testclient import TestClient

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    response = TestClient(api).post("/v1/rerank", json={"query": "q", "documents": ["a", "b"], "method": "monot5"})
    assert response.status_code == 503, response.text
    assert response.json()["error"]["type"] == "model_unavailable"
    assert "monot5" in response.json()["error"]["message"]
    assert "503" in api.openapi()["paths"]["/v1/rerank"]["post"]["responses"]


def test_the_schema_lists_the_keys_options_may_hold_and_an_unlisted_one_is_refused(api):
    """Every method's settings (less the paths a request may not set) are the keys an ask's
    ``options`` may hold; a key outside the list is a 422 naming it, as the schema says."""
    from fastapi.testclient import TestClient

    from winnow.methods import METHODS, method_class

    schema = api.openapi()["components"]["schemas"]
    listed = set(schema["AskRequest"]["properties"]["options"]["propertyNames"]["enum"])
    for method in METHODS:
        settings = method_class(method).Settings
        assert set(settings.field_types()) - set(settings.path_settings()) <= listed, method
        assert not set(settings.path_settings()) & listed, method
    assert schema["RerankRequest"]["properties"]["options"]["propertyNames"]["enum"] == ["injection_guard", "step",
                                                                                        "window"]
    with TestClient(api) as client:
        refused = client.post("/v1/ask", json={"question": "Rome?", "options": {"windoww": 5}})
    assert refused.status_code == 422 and "options.windoww" in refused.text
