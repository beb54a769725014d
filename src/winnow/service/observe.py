"""The outermost ASGI layer of `winnow serve`: every request counted and timed, and logged as JSON.

It wraps the guards (:mod:`.guards`), so a request they refuse (400, 401, 413) is counted too. A
request is labelled by its route's template (``/v1/traces/{trace_id}``; ``/static`` for the files
of the inspector; ``unmatched`` for a path no route has), found by matching the app's routes as the
router does, never by the raw path, so a scanner's random paths add no series.

With ``--log-json`` each request is one JSON line on stderr (logger ``winnow.access``) with the time,
method, path (without the query string: a question in ``/v1/search?q=`` is the user's text, not a
log's), route, status, seconds, bytes sent, client address and, for ask and rerank, the trace id the
answer carries (set by :func:`winnow.service.runner.open_record` through :data:`REQUEST_NOTES`).
"""

from __future__ import annotations

import json
import logging
import time
from contextvars import ContextVar
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Awaitable, Callable, MutableMapping

if TYPE_CHECKING:
    from starlette.routing import BaseRoute

    from .metrics import ServiceMetrics

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

access_log = logging.getLogger("winnow.access")
#: What a route learns about its request for the access log (the trace id); a fresh dict per request.
REQUEST_NOTES: ContextVar[dict[str, Any] | None] = ContextVar("winnow_request_notes", default=None)


def note_request(**notes: Any) -> None:
    """Add to the access log line of the request being answered (nothing outside a request)."""
    current = REQUEST_NOTES.get()
    if current is not None:
        current.update(notes)


def route_template(routes: list[BaseRoute], scope: Scope) -> str:
    """The path template of the route that answers ``scope`` (or would, for another method), else ``unmatched``."""
    from starlette.routing import Match

    partial = ""
    for route in routes:
        path = str(getattr(route, "path", ""))
        if not path:
            continue  # a wrapper of an included router: its routes are listed themselves
        match, _ = route.matches(scope)
        if match == Match.FULL:
            return path
        if match == Match.PARTIAL and not partial:
            partial = path
    return partial or "unmatched"


class Observe:
    """Counts and times every HTTP request into ``metrics``; with ``log_json``, one JSON log line each."""

    def __init__(self, app: ASGIApp, *, metrics: ServiceMetrics, routes: Callable[[], list[BaseRoute]],
                 log_json: bool = False) -> None:
        self.app = app
        self.metrics = metrics
        self.routes = routes
        self.log_json = log_json

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        sent = {"status": 500, "bytes": 0}  # 500 unless a response starts: an exception escaped every handler
        notes: dict[str, Any] = {}
        token = REQUEST_NOTES.set(notes)

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                sent["status"] = int(message["status"])
            elif message["type"] == "http.response.body":
                sent["bytes"] += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            REQUEST_NOTES.reset(token)
            seconds = time.perf_counter() - started
            route = route_template(self.routes(), scope)
            self.metrics.request_done(route, scope["method"], sent["status"], seconds)
            if self.log_json:
                self._log(scope, route, sent, seconds, notes)

    @staticmethod
    def _log(scope: Scope, route: str, sent: dict[str, int], seconds: float, notes: dict[str, Any]) -> None:
        client = scope.get("client")
        line = {"time": datetime.now(timezone.utc).isoformat(timespec="milliseconds"), "method": scope["method"],
                "path": scope["path"], "route": route, "status": sent["status"], "seconds": round(seconds, 4),
                "bytes": sent["bytes"], "client": client[0] if client else None, **notes}
        access_log.info(json.dumps(line, ensure_ascii=False))


class JsonLogFormatter(logging.Formatter):
    """A log record as one JSON object: the access log's lines as they are, the service's notes as
    ``{"time", "level", "logger", "message"}``."""

    def format(self, record: logging.LogRecord) -> str:
        if record.name == access_log.name:
            return record.getMessage()
        when = datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds")
        return json.dumps({"time": when, "level": record.levelname.lower(), "logger": record.name,
                           "message": record.getMessage()}, ensure_ascii=False)
