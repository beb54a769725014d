"""The OpenAPI schema at /openapi.json, stating what the server checks, with this server's limits.

pydantic's schema gives the types; the service checks more (:mod:`winnow.service.limits`): texts
must hold a visible character and fit a length, N, k and top_n lie in ranges set by `winnow serve`'s
flags, methods and profiles are names from a list. Those checks stay where they are (their
messages name the field and the limit); this module writes them into the schema too, so a client
generated from it, or a fuzzer such as schemathesis (tests/test_service_schema.py), knows what the
server will refuse. The keys ``options`` may hold are listed (``propertyNames``: the settings of any
method, less those a request may not set); which of them the chosen method takes, and constraints
JSON Schema cannot state (k at most N, a dialogue's alternation) are left to the descriptions and
GET /v1/methods.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..text import visible_character_pattern
from .limits import Limits


def _text(limit: int) -> dict[str, Any]:
    return {"minLength": 1, "maxLength": limit, "pattern": visible_character_pattern()}


def _between(low: int, high: int) -> dict[str, Any]:
    return {"minimum": low, "maximum": high}


def _constrain(schema: dict[str, Any], component: str, field: str, extra: dict[str, Any]) -> None:
    """Add ``extra`` to a property of a component; to its non-null member when it is Optional."""
    properties = schema.get("components", {}).get("schemas", {}).get(component, {}).get("properties", {})
    if field not in properties:
        return
    target = properties[field]
    for member in target.get("anyOf") or [target]:  # each non-null member of an Optional or a Union
        if member.get("type") != "null":
            member.update(extra)


#: The request bodies in Winnow's own rerank shape: /v1/rerank's, and /v2/rerank's (the same, with Cohere
#: v2's ``relevant_spans`` stated).
RERANK_BODIES = ("RerankRequest", "CohereV2RerankRequest")


def describe_limits(schema: dict[str, Any], limits: Limits, *, methods: list[str], rerank_methods: list[str],
                    profiles: list[str], ask_options: Sequence[str] = (), rerank_options: Sequence[str] = ()
                    ) -> dict[str, Any]:
    """``schema`` (FastAPI's) with the server's checks written in; changed in place and returned.
    ``ask_options`` and ``rerank_options``: the keys the two requests' ``options`` may hold."""
    question = _text(limits.max_question_chars)
    document = _text(limits.max_document_chars)
    timeout = {"exclusiveMinimum": 0, "maximum": limits.timeout}
    for component, field, extra in (
            ("AskRequest", "question", question),
            ("AskRequest", "n", _between(1, limits.max_n)),
            ("AskRequest", "k", _between(1, limits.max_k)),
            ("AskRequest", "method", {"enum": methods}),
            ("AskRequest", "profile", {"enum": profiles}),
            ("AskRequest", "timeout", timeout),
            ("AskRequest", "history", {"maxItems": limits.max_history_turns}),
            ("TurnIn", "text", question),
            ("TurnIn", "role", {"enum": ["user", "assistant"]}),
            *((body, field, extra) for body in RERANK_BODIES for field, extra in (
                ("query", question),
                ("documents", {"minItems": 1, "maxItems": limits.max_documents}),
                ("method", {"enum": rerank_methods}),
                ("top_n", _between(1, limits.max_documents)),
                ("top_k", _between(1, limits.max_documents)),
                ("timeout", timeout),
                ("options", {"propertyNames": {"enum": sorted(rerank_options)}}))),
            ("RerankDocumentObject", "text", document),
            ("TeiRerankRequest", "query", question),
            ("TeiRerankRequest", "texts", {"minItems": 1, "maxItems": limits.max_documents}),
            ("TeiRerankRequest", "method", {"enum": rerank_methods}),
            ("AskRequest", "options", {"propertyNames": {"enum": sorted(ask_options)}})):
        _constrain(schema, component, field, extra)
    # Voyage's top_k and Cohere's top_n name the same thing: a body may give one of them.
    for body in RERANK_BODIES:
        rerank = schema.get("components", {}).get("schemas", {}).get(body)
        if rerank is not None:
            rerank["not"] = {"required": ["top_n", "top_k"],
                             "properties": {"top_n": {"type": "integer"}, "top_k": {"type": "integer"}}}
    # Plain-string documents: the same checks as a document object's text.
    for component, field in (*((body, "documents") for body in RERANK_BODIES), ("TeiRerankRequest", "texts")):
        items = schema.get("components", {}).get("schemas", {}).get(component, {}).get("properties", {}) \
            .get(field, {}).get("items", {})
        for member in items.get("anyOf", [items]):
            if member.get("type") == "string":
                member.update(document)
    search = schema.get("paths", {}).get("/v1/search", {}).get("get", {})
    for parameter in search.get("parameters", []):
        if parameter.get("name") == "q":
            parameter["schema"].update(question)
        elif parameter.get("name") == "k":
            target = parameter["schema"]
            target = next((m for m in target.get("anyOf", []) if m.get("type") == "integer"), target)
            target.update(_between(1, limits.max_n))
    return schema
