"""The HTTP API and the web inspector: ``create_app(service, api_key=...)`` returns a FastAPI app.

Routes: ``POST /v1/ask``, ``POST /v1/rerank`` (the request and response shape of hosted rerank
APIs), ``GET /v1/search``, ``GET /v1/traces/{id}``, ``GET /v1/models``, ``GET /v1/methods``,
``GET /healthz``, the inspector at ``/`` and the schema at ``/openapi.json``. With an API key, every
``/v1`` route needs ``Authorization: Bearer <key>``; the others never do. Every route checks the
``Host`` header (:mod:`winnow.service.hosts`). Every error is JSON
``{"error": {"type", "message", "field"}}`` with a 4xx status when the request is at fault.
"""

from __future__ import annotations

import hmac
from pathlib import Path
from typing import Any, Optional
from urllib.parse import parse_qsl

from ..extras import require

require("serve", "winnow.service (the HTTP API)")

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from .engine import Service
from .hosts import HostPolicy
from .limits import ApiError, check_unicode, invalid
from .runner import ClientGone, execute, open_record, stream
from .schemas import AskRequest, AskResponse, ErrorResponse, RerankRequest, RerankResponse, SearchResponse

STATIC = Path(__file__).parent / "static"
ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": ErrorResponse} for code in (400, 401, 413, 422, 503, 504)}


def _error(status: int, kind: str, message: str, field: str | None = None,
           headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"type": kind, "message": message, "field": field}}, status, headers=headers)


class Guard:
    """ASGI middleware: the ``Host`` header on every route (400 when not one the server answers
    to), then for ``/v1`` the bearer key (checked before the body is even read, so a malformed
    body without a key is still a 401) and the body size limit (413)."""

    def __init__(self, app: Any, *, api_key: str, max_body_bytes: int, hosts: HostPolicy | None) -> None:
        self.app = app
        self.api_key = api_key.encode()
        self.max_body_bytes = max_body_bytes
        self.hosts = hosts

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if self.hosts is not None and not self.hosts.allows(headers.get("host")):
            response = _error(400, "invalid_host", self.hosts.refusal(headers["host"]), "Host")
            return await response(scope, receive, send)
        if not scope["path"].startswith("/v1"):
            return await self.app(scope, receive, send)
        if self.api_key and not self._authorised(headers.get("authorization", "")):
            response = _error(401, "unauthorized", "missing or wrong API key: send 'Authorization: Bearer <key>'",
                              "Authorization", {"WWW-Authenticate": "Bearer"})
            return await response(scope, receive, send)
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            return await self._too_large(scope, receive, send)
        if scope["method"] in ("POST", "PUT", "PATCH"):
            if headers.get("content-type", "application/x-www-form-urlencoded").startswith(
                    "application/x-www-form-urlencoded"):
                # `curl -d '{...}'` labels JSON as a form; the API only takes JSON, so read it as such.
                scope = dict(scope, headers=[(k, v) for k, v in scope["headers"] if k.lower() != b"content-type"]
                             + [(b"content-type", b"application/json")])
            # Read the body here (counting) and replay it: a chunked body has no length to check.
            chunks, size, more = [], 0, True
            while more:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > self.max_body_bytes:
                    return await self._too_large(scope, receive, send)
                chunks.append(chunk)
                more = message.get("more_body", False)
            body = b"".join(chunks)
            replayed = False

            async def replay() -> dict[str, Any]:
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()  # later calls wait for the disconnect, as Starlette expects

            return await self.app(scope, replay, send)
        return await self.app(scope, receive, send)

    def _authorised(self, header: str) -> bool:
        scheme, _, token = header.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), self.api_key)

    async def _too_large(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        response = _error(413, "too_large", f"the request body is over {self.max_body_bytes:,} bytes", "body")
        await response(scope, receive, send)


def _field(loc: tuple[Any, ...]) -> str:
    """A pydantic location as a field path: ("body", "documents", 3, "text") -> documents[3].text."""
    path = ""
    for part in loc[1:] if loc and loc[0] in ("body", "query", "path") else loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part in ("str", "RerankDocumentObject", "int", "float") or "[" in str(part):
            continue  # the union member pydantic tried, not a field
        else:
            path += f".{part}" if path else str(part)
    return path or "body"


def _unreadable_body(cause: BaseException | None) -> str:
    """Why a body that is not a JSON decode error could not be read (the cause FastAPI wraps in a
    bare 400 "There was an error parsing the body")."""
    if isinstance(cause, UnicodeDecodeError):
        return (f"the body is not valid UTF-8: byte 0x{cause.object[cause.start]:02x} at position {cause.start:,} "
                f"({cause.reason}); send JSON text encoded as UTF-8")
    if isinstance(cause, RecursionError):
        return "the body nests arrays or objects too deeply to read (about 1,000 levels at most); flatten it"
    return f"the body could not be read as JSON: {type(cause).__name__}: {cause}"


def _check_query_utf8(query_string: bytes) -> None:
    """Refuse a query parameter that is not UTF-8 once percent-decoded (Starlette would quietly
    turn the bad bytes into U+FFFD and search for that)."""
    for name, value in parse_qsl(query_string.decode("latin-1"), keep_blank_values=True, encoding="latin-1"):
        try:
            value.encode("latin-1").decode("utf-8")
        except UnicodeDecodeError as exc:
            raise invalid(name, f"{name} is not valid UTF-8 once percent-decoded (byte 0x{exc.object[exc.start]:02x} "
                                f"at position {exc.start}); percent-encode the UTF-8 bytes of the text") from exc


def create_app(service: Service, *, api_key: str = "", hosts: HostPolicy | None = None) -> FastAPI:
    """The app over ``service``. ``hosts`` says which ``Host`` headers to answer (`winnow serve`
    passes one for its bound address); None answers any."""
    from ..version import __version__

    app = FastAPI(title="Winnow", version=__version__, docs_url=None, redoc_url=None,
                  description="LLM-in-the-loop retrieval-augmented generation: ask, rerank, search, and "
                              "the trace of every decision. Errors are JSON {error: {type, message, field}}.")
    app.state.service = service
    app.add_middleware(Guard, api_key=api_key, max_body_bytes=service.limits.max_body_bytes, hosts=hosts)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(exc.body(), exc.status, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        broken = next((e for e in errors if e.get("type") == "json_invalid"), None)
        if broken is not None:
            return _error(400, "malformed_json", f"the body is not valid JSON: {broken.get('ctx', {}).get('error', '')}"
                                                 f" at character {broken['loc'][-1]}", "body")
        first = max(errors, key=lambda e: len(e.get("loc", ())))  # the deepest: in a union, the member meant
        field = _field(tuple(first.get("loc", ())))
        message = f"{field}: {first.get('msg', 'invalid')}"
        if len(errors) > 1:
            message += f" (and {len(errors) - 1} more problem(s))"
        return _error(422, "invalid_request", message, field)

    @app.exception_handler(ClientGone)
    async def client_gone(request: Request, exc: ClientGone) -> Response:
        return Response(status_code=499)  # nginx's "client closed request": nobody is there to receive it

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400 and exc.__cause__ is not None:  # the body is not UTF-8, or nests too deeply
            return _error(400, "malformed_json", _unreadable_body(exc.__cause__), "body")
        kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return _error(exc.status_code, kind, str(exc.detail), headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        return _error(500, "internal_error", f"{type(exc).__name__}: {exc}")

    @app.get("/", include_in_schema=False)
    async def inspector() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/healthz", tags=["service"])
    async def healthz() -> dict[str, Any]:
        return dict(service.health(), auth=bool(api_key))

    v1 = APIRouter(prefix="/v1", responses=ERRORS)

    @v1.post("/ask", response_model=AskResponse, tags=["rag"],
             summary="Answer a question: retrieve, rerank/filter, answer; with the passages' per-stage scores")
    async def ask(body: AskRequest, request: Request) -> Any:
        check_unicode(body)
        plan = service.plan_ask(body)
        if body.stream:
            return StreamingResponse(stream(service, plan), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        return JSONResponse(await execute(service, plan, open_record(service, plan),
                                          disconnected=request.is_disconnected))

    @v1.post("/rerank", response_model=RerankResponse, tags=["rag"],
             summary="Rerank documents for a query (the shape of hosted rerank APIs)")
    async def rerank(body: RerankRequest, request: Request) -> Any:
        check_unicode(body)
        plan = service.plan_rerank(body)
        return JSONResponse(await execute(service, plan, open_record(service, plan),
                                          disconnected=request.is_disconnected))

    @v1.get("/search", response_model=SearchResponse, tags=["rag"], summary="First-stage retrieval only")
    async def search(request: Request, q: str = Query(..., description="The query."),
                     k: Optional[int] = Query(None, description="How many passages (default 10, at most "
                                                                "the server's max N).")) -> Any:
        _check_query_utf8(request.scope["query_string"])
        return JSONResponse(await run_in_threadpool(service.search, q, k))

    @v1.get("/traces/{trace_id}", tags=["service"],
            summary="A recent request: status, progress, and when done the full trace of every stage")
    async def trace(trace_id: str) -> Any:
        record = service.traces.get(trace_id)
        if record is None:
            raise ApiError(404, "not_found", f"no trace {trace_id!r}: unknown, or older than the last "
                                             f"{service.traces.capacity} requests", "trace_id")
        return JSONResponse(dict(record))  # a shallow copy: the worker thread may update it meanwhile

    @v1.get("/models", tags=["service"], summary="The loaded models")
    async def models() -> dict[str, Any]:
        return service.model_list()

    @v1.get("/methods", tags=["service"], summary="Methods, their stages and defaults; rerank methods; limits")
    async def methods() -> dict[str, Any]:
        return service.method_list()

    app.include_router(v1)
    return app
