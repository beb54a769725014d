"""The routes of the HTTP API, as module-level routers over the app's :class:`~winnow.service.engine.Service`.

A route gets the service through the :data:`ServiceDep` dependency (``app.state.service``, set by
:func:`winnow.service.app.create_app`), checks what the request model cannot (:func:`check_unicode`,
the limits), turns the request into a plan (``service.plan_*``) and runs it (:func:`execute`).
Refusals are raised as :class:`~winnow.service.limits.ApiError`; the handlers of
:mod:`winnow.service.http_errors` give them the one error shape. Guards (Host, key, body size) run
before any route: :mod:`winnow.service.guards`.

``pages`` holds what is not the API (``/``, ``/healthz``, ``/readyz``, ``/metrics``); ``v1`` the API
under ``/v1``; ``vendors`` the other paths hosted rerank APIs' clients post to (their shapes:
:mod:`winnow.service.rerank_vendors`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from .engine import Service
from .http_errors import check_query_utf8
from .lifecycle import Lifecycle
from .limits import ApiError, check_unicode
from .rerank_vendors import (
    VOYAGE_FIELDS,
    CohereV2RerankRequest,
    TeiRerankRequest,
    TeiRerankResult,
    VoyageRerankResponse,
    tei_plan,
    voyage_plan,
)
from .runner import execute, open_record, stream
from .schemas import AskRequest, AskResponse, ErrorResponse, RerankRequest, RerankResponse, SearchResponse
from .traces import StoreUnavailable

STATIC = Path(__file__).parent / "static"
#: One server-sent event of a streamed /v1/ask: its name, and its data (a JSON object) as text.
SSE_EVENT: dict[str, Any] = {
    "type": "object", "required": ["event", "data"],
    "description": "With stream: true: accepted (trace_id), then queued, started and progress (stage, done, "
                   "total) as they happen, then result (the answer's JSON) or error (the error's JSON).",
    "properties": {"event": {"type": "string", "enum": ["accepted", "queued", "started", "progress", "result",
                                                        "error"]},
                   "data": {"type": "string", "description": "A JSON object."}}}
ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": ErrorResponse} for code in (400, 401, 413, 422, 503, 504)}


def get_service(request: Request) -> Service:
    """The service the app was made over, or 503 ``starting`` while `winnow serve` opens it."""
    lifecycle: Lifecycle = request.app.state.lifecycle
    return lifecycle.require_service()


ServiceDep = Annotated[Service, Depends(get_service)]

pages = APIRouter()


@pages.get("/", include_in_schema=False)
async def inspector() -> FileResponse:
    return FileResponse(STATIC / "index.html")


@pages.get("/healthz", tags=["service"], summary="Liveness: the process answers (status 'starting' while it "
                                                  "opens the index)")
async def healthz(request: Request) -> dict[str, Any]:
    lifecycle: Lifecycle = request.app.state.lifecycle
    if lifecycle.service is None:
        return {"status": lifecycle.phase, "auth": request.app.state.auth}
    return dict(lifecycle.service.health(), auth=request.app.state.auth)


@pages.get("/readyz", tags=["service"], responses={503: {"model": ErrorResponse}},
           summary="Readiness: 200 when this replica should get traffic; 503 naming why not (starting, draining, "
                   "index_changed, no_healthy_endpoint)")
async def readyz(request: Request) -> dict[str, Any]:
    lifecycle: Lifecycle = request.app.state.lifecycle
    ready, refusal = lifecycle.readiness()
    if not ready and refusal is not None:
        raise refusal
    return {"status": "ready"}


@pages.get("/metrics", tags=["service"], response_class=Response,
           responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                            "description": "Prometheus' text exposition format"}},
           summary="Prometheus metrics: requests and latency by route, LLM calls, tokens and cost by model "
                   "and role, cache hits, endpoint health, questions in flight")
async def metrics(request: Request) -> Response:
    body, content_type = request.app.state.metrics.exposition()
    return Response(body, media_type=content_type)


v1 = APIRouter(prefix="/v1", responses=ERRORS)


@v1.post("/ask", response_model=AskResponse, tags=["rag"],
         responses={200: {"content": {"text/event-stream": {"schema": SSE_EVENT}}}},
         summary="Answer a question: retrieve, rerank/filter, answer; with the passages' per-stage scores")
async def ask(body: AskRequest, request: Request, service: ServiceDep) -> Response:
    check_unicode(body)
    plan = service.plan_ask(body)
    if body.stream:
        return StreamingResponse(stream(service, plan), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    return JSONResponse(await execute(service, plan, open_record(service, plan),
                                      disconnected=request.is_disconnected))


@v1.post("/rerank", response_model=RerankResponse | VoyageRerankResponse, tags=["rag"],
         summary="Rerank documents for a query (the shape of Cohere v1, Jina, and Voyage's with top_k)")
async def rerank(body: RerankRequest, request: Request, service: ServiceDep) -> Response:
    """Winnow's own shape, which Cohere's v1 and Jina's clients read as theirs; a body with one of
    Voyage's fields (``top_k``, ``truncation``) is answered in Voyage's shape."""
    check_unicode(body)
    plan = voyage_plan(service, body) if body.model_fields_set & VOYAGE_FIELDS else service.plan_rerank(body)
    return JSONResponse(await execute(service, plan, open_record(service, plan),
                                      disconnected=request.is_disconnected))


@v1.get("/search", response_model=SearchResponse, tags=["rag"], summary="First-stage retrieval only")
async def search(request: Request, service: ServiceDep, q: str = Query(..., description="The query."),
                 k: Optional[int] = Query(None, description="How many passages (default 10, at most "
                                                            "the server's max N).")) -> Response:
    check_query_utf8(request.scope["query_string"])
    return JSONResponse(await run_in_threadpool(service.search, q, k))


@v1.get("/traces/{trace_id}", tags=["service"], responses={404: {"model": ErrorResponse,
                                                              "description": "No such trace, or too old"}},
        summary="A recent request: status, progress, and when done the full trace of every stage")
async def trace(trace_id: str, service: ServiceDep) -> Response:
    try:
        record = service.traces.get(trace_id)
    except StoreUnavailable as exc:
        raise ApiError(503, "store_unavailable", str(exc), headers={"Retry-After": "5"}) from exc
    if record is None:
        raise ApiError(404, "not_found", f"no trace {trace_id!r}: unknown, or older than the last "
                                         f"{service.traces.capacity} requests", "trace_id")
    return JSONResponse(dict(record))  # a shallow copy: the worker thread may update it meanwhile


@v1.get("/models", tags=["service"], summary="The loaded models")
async def models(service: ServiceDep) -> dict[str, Any]:
    return service.model_list()


@v1.get("/methods", tags=["service"], summary="Methods, their stages and defaults; rerank methods; limits")
async def methods(service: ServiceDep) -> dict[str, Any]:
    return service.method_list()


vendors = APIRouter(responses=ERRORS)


@vendors.post("/v2/rerank", response_model=RerankResponse, tags=["rerank APIs"],
              summary="Rerank in Cohere v2's shape (cohere.ClientV2(base_url=...).rerank)")
async def rerank_cohere_v2(body: CohereV2RerankRequest, request: Request, service: ServiceDep) -> Response:
    check_unicode(body)
    plan = service.plan_rerank(body)  # relevant_spans other than off was refused by the body's model
    return JSONResponse(await execute(service, plan, open_record(service, plan),
                                      disconnected=request.is_disconnected))


@vendors.post("/rerank", response_model=list[TeiRerankResult], tags=["rerank APIs"],
              summary="Rerank in Hugging Face Text Embeddings Inference's shape: [{index, score, text?}], best first")
async def rerank_tei(body: TeiRerankRequest, request: Request, service: ServiceDep) -> Response:
    check_unicode(body)
    plan = tei_plan(service, body)
    answer = await execute(service, plan, open_record(service, plan), disconnected=request.is_disconnected)
    return JSONResponse(answer["ranked"], headers={"X-Winnow-Trace-Id": answer["trace_id"]})
