"""Request and response bodies of the HTTP API (they make the OpenAPI schema at /openapi.json).

Requests are checked for types here and for limits in :mod:`winnow.service.limits`. ``/v1/ask``
refuses unknown fields (a misspelt option must not be silently ignored); ``/v1/rerank`` accepts
the extra fields hosted rerank APIs take (``model``, ``max_chunks_per_doc``, ...) so their clients
work unchanged, and lists the ones it ignored in ``meta.ignored_fields``. The vendor shapes
(Voyage's, TEI's) are in :mod:`winnow.service.rerank_vendors`.
"""

from __future__ import annotations

from typing import Annotated, Any, Optional, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr


def _integral(value: Any) -> Any:
    """10.0 as 10: JSON has one number type, and JSON Schema's "integer" admits 10.0. Anything
    else (10.5, "10", true) is left for the strict check to refuse."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


#: An integer field: strict (no strings, no booleans) but reading 10.0 as 10, as JSON Schema does.
JsonInt = Annotated[StrictInt, BeforeValidator(_integral)]


class TurnIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: StrictStr = Field(description="user or assistant.")
    text: StrictStr


class AskRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: StrictStr = Field(description="The question.")
    history: list[TurnIn] = Field(default_factory=list, description="The dialogue's earlier turns, oldest first, "
                                                                     "opening with the user and alternating; needs "
                                                                     "options.task = \"conversational\" (rankrag, "
                                                                     "vanilla).")
    method: Optional[StrictStr] = Field(None, description="vanilla, rankrag, mainrag, rrr or rankgpt "
                                                          "(default: the server's --method).")
    n: Optional[JsonInt] = Field(None, description="Passages to retrieve.")
    k: Optional[JsonInt] = Field(None, description="Passages to answer from (at most n).")
    options: dict[str, Any] = Field(default_factory=dict, description="Other method settings, e.g. "
                                                                       "{\"judge_n\": 0.5}; GET /v1/methods lists "
                                                                       "them.")
    profile: Optional[StrictStr] = Field(None, description="Start from a named preset of settings, e.g. \"paper\" "
                                                           "(the papers' values; GET /v1/methods lists the "
                                                           "profiles); n, k and options override it.")
    stream: StrictBool = Field(False, description="Answer as server-sent events: queued, started, progress "
                                                  "(stage, done, total), then result or error.")
    include_trace: StrictBool = Field(False, description="Include the full trace (also at GET /v1/traces/{id}).")
    timeout: Optional[Union[StrictInt, StrictFloat]] = Field(None, description="Seconds to wait for and use the "
                                                                               "model (at most the server's).")


class RerankDocumentObject(BaseModel):
    model_config = ConfigDict(extra="allow")

    text: StrictStr
    id: Optional[Union[StrictStr, StrictInt]] = None
    title: StrictStr = ""


class RerankRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    query: StrictStr
    documents: list[Union[StrictStr, RerankDocumentObject]] = Field(description="Texts, or {id, title, text}, in "
                                                                                "your first stage's order.")
    method: Optional[StrictStr] = Field(None, description="pointwise (RankRAG P(True), default), graded (RRR 1-5), "
                                                          "listwise (RankGPT), embedding (MiniLM cosine, no LLM), "
                                                          "cross-encoder or monot5 (the papers' trained baselines, "
                                                          "on the server's --rerank-model; no LLM).")
    top_n: Optional[JsonInt] = Field(None, description="Return only the best top_n.")
    top_k: Optional[JsonInt] = Field(None, description="Voyage's name for top_n: a body with top_k or "
                                                         "truncation is answered in Voyage's shape.")
    truncation: Optional[StrictBool] = Field(None, description="Voyage's; accepted (a document too long for the "
                                                               "model is always cut to fit, and the trace says "
                                                               "so). Picks Voyage's shape.")
    return_documents: StrictBool = Field(False, description="Include each document in its result.")
    model: Optional[StrictStr] = Field(None, description="Accepted for compatibility; the server's model is used.")
    options: dict[str, Any] = Field(default_factory=dict, description="listwise: window, step.")
    include_trace: StrictBool = False
    timeout: Optional[Union[StrictInt, StrictFloat]] = None


class ErrorDetail(BaseModel):
    type: str
    message: str
    field: Optional[str] = None


class ErrorResponse(BaseModel):
    error: ErrorDetail


class StageScoreOut(BaseModel):
    stage: str
    score: float
    rank: int


class PassageOut(BaseModel):
    id: str
    title: str
    text: str
    score: float
    rank: int
    scores: list[StageScoreOut] = Field(description="The score and rank every stage gave, first stage first.")
    note: Optional[str] = None


class AskResponse(BaseModel):
    trace_id: str
    question: str
    answer: str
    method: str
    settings: dict[str, Any]
    profile: Optional[str] = Field(None, description="The named preset the settings started from, if any.")
    passages: list[PassageOut]
    usage: dict[str, Any]
    served_from: str = Field(description="llm (the model ran), call-cache (every LLM call was cached) or "
                                         "answer-cache (the same request was answered before).")
    seconds: float
    queue_seconds: float
    trace: Optional[dict[str, Any]] = None


class RerankResult(BaseModel):
    index: int = Field(description="Position of the document in the request.")
    relevance_score: float = Field(description="pointwise: P(True); graded: (E[grade] - 1) / 4; listwise: "
                                               "1 - (rank - 1) / n; embedding: cosine similarity.")
    document: Optional[dict[str, Any]] = None


class RerankResponse(BaseModel):
    id: str
    trace_id: str
    model: str
    method: str
    results: list[RerankResult]
    usage: dict[str, Any]
    meta: dict[str, Any]
    served_from: str
    seconds: float


class SearchResponse(BaseModel):
    query: str
    retriever: str
    passages: list[PassageOut]
    seconds: float
