"""The layers every request passes before a route sees it, outermost first, one job each.

1. :class:`HostCheck`: the ``Host`` header is one the server answers to (400 ``invalid_host``;
   the DNS-rebinding defence of :mod:`winnow.service.hosts`), on every path.
2. :class:`BearerAuth`: with an API key, ``Authorization: Bearer <key>`` (401), on every path
   but the open ones (:data:`OPEN_PATHS`): the API, its vendor-shaped rerank routes, and the
   schema and its documentation pages (``/openapi.json``, ``/docs``, ``/redoc``) alike. It runs
   before the body is read, so a malformed body without the key is still a 401.
3. :class:`BodyLimit`: the body is at most ``max_body_bytes`` (413), counted as it is read (a
   chunked body declares no length) and then replayed to the route; each part of it must arrive
   within ``read_timeout`` seconds (408, :mod:`winnow.service.slow_clients`).
4. :class:`FormAsJson`: a body labelled as a form is read as JSON (``curl -d '{...}'`` labels it so).

Each is a plain ASGI middleware: ``app.add_middleware`` wraps them in reverse order of the list
(the last added runs first), which :func:`install_guards` does.
"""

from __future__ import annotations

import hmac
from typing import Any, Awaitable, Callable, MutableMapping

from starlette.applications import Starlette
from starlette.responses import JSONResponse

from .hosts import HostPolicy
from .slow_clients import DEFAULT_READ_TIMEOUT, BodyTooSlow, receive_within

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Paths anyone who can reach the port may read, key or not: liveness and readiness (an orchestrator's
#: probes carry no key), and the inspector's page and files (the inspector's own requests go to the API
#: and carry the key). /metrics needs the key: a scraper sends it (Prometheus' `authorization`).
OPEN_PATHS = frozenset({"/", "/healthz", "/readyz", "/favicon.ico"})
OPEN_PREFIXES = ("/static/",)


def error_response(status: int, kind: str, message: str, field: str | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    """The one error shape of the API: ``{"error": {"type", "message", "field"}}``."""
    return JSONResponse({"error": {"type": kind, "message": message, "field": field}}, status, headers=headers)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key.lower() == name:
            return str(value.decode("latin-1"))
    return None


def is_open(path: str) -> bool:
    """Whether ``path`` is served without the API key (everything else needs it: a new route is
    guarded unless it is added here on purpose)."""
    return path in OPEN_PATHS or path.startswith(OPEN_PREFIXES)


class HostCheck:
    """400 ``invalid_host`` for a ``Host`` header the policy refuses, before anything else."""

    def __init__(self, app: ASGIApp, *, hosts: HostPolicy | None) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.hosts is not None:
            host = _header(scope, b"host")
            if not self.hosts.allows(host):
                assert host is not None  # a request without one is always allowed
                return await error_response(400, "invalid_host", self.hosts.refusal(host), "Host")(scope, receive, send)
        await self.app(scope, receive, send)


class BearerAuth:
    """401 without ``Authorization: Bearer <key>`` on every guarded path; does nothing without a key."""

    def __init__(self, app: ASGIApp, *, api_key: str) -> None:
        self.app = app
        self.api_key = api_key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] == "http" and self.api_key and not is_open(scope["path"])
                and not self.authorised(_header(scope, b"authorization") or "")):
            response = error_response(401, "unauthorized",
                                      "missing or wrong API key: send 'Authorization: Bearer <key>'",
                                      "Authorization", {"WWW-Authenticate": "Bearer"})
            return await response(scope, receive, send)
        await self.app(scope, receive, send)

    def authorised(self, header: str) -> bool:
        scheme, _, token = header.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), self.api_key)


class BodyLimit:
    """413 for a body over ``max_body_bytes``: by its declared length at once, else counted while
    reading it whole; the body read is then replayed to the app."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int, read_timeout: float = DEFAULT_READ_TIMEOUT) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.read_timeout = read_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = _header(scope, b"content-length") or ""
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            return await self.too_large(scope, receive, send)
        if scope["method"] not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        chunks, size, more = [], 0, True
        while more:
            try:
                message = await receive_within(receive, self.read_timeout)
            except BodyTooSlow as slow:
                response = error_response(408, "request_timeout", f"{slow}: send the whole body at once", "body")
                response.headers["Connection"] = "close"
                return await response(scope, receive, send)
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return await self.too_large(scope, receive, send)
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # later calls wait for the disconnect, as Starlette expects

        await self.app(scope, replay, send)

    async def too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = error_response(413, "too_large", f"the request body is over {self.max_body_bytes:,} bytes", "body")
        await response(scope, receive, send)


class FormAsJson:
    """A POST/PUT/PATCH body labelled as a form (or not labelled) is relabelled JSON: the API
    takes only JSON, and `curl -d '{...}'` sends it labelled as a form."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in ("POST", "PUT", "PATCH"):
            label = _header(scope, b"content-type") or "application/x-www-form-urlencoded"
            if label.startswith("application/x-www-form-urlencoded"):
                scope = dict(scope, headers=[(k, v) for k, v in scope["headers"] if k.lower() != b"content-type"]
                             + [(b"content-type", b"application/json")])
        await self.app(scope, receive, send)


def install_guards(app: Starlette, *, api_key: str, max_body_bytes: int, hosts: HostPolicy | None,
                   read_timeout: float = DEFAULT_READ_TIMEOUT) -> None:
    """Wrap ``app`` in the four layers, Host outermost (Starlette runs the last added first)."""
    app.add_middleware(FormAsJson)
    app.add_middleware(BodyLimit, max_body_bytes=max_body_bytes, read_timeout=read_timeout)
    app.add_middleware(BearerAuth, api_key=api_key)
    app.add_middleware(HostCheck, hosts=hosts)
