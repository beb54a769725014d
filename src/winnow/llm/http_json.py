"""One JSON request to a model server, with the failures a user can act on as BackendErrors."""

from __future__ import annotations

import sys
from typing import Any, Protocol

from ..errors import BackendError
from .response_checks import preview, read_json

UNREACHABLE_HINT = "is the server running, and is --base-url right (it usually ends in /v1)?"


class RequestTimedOut(BackendError):
    """A request that got no answer in time: a busy server may answer the next one."""


class HttpAnswer(Protocol):
    """What :func:`checked_json` reads of an answer: an ``httpx.Response``, or an endpoint's
    :class:`~winnow.llm.endpoint.Received`."""

    @property
    def status_code(self) -> int: ...

    @property
    def text(self) -> str: ...

    def json(self) -> Any: ...


class HttpClient(Protocol):
    """What sends a start-up question: an endpoint (:class:`~winnow.llm.endpoint.Endpoint`, over its
    one session), or an ``httpx.Client`` (the in-process llama.cpp server's loopback routes)."""

    def request(self, method: str, url: str, *, json: Any = None) -> HttpAnswer: ...


def send(client: HttpClient, method: str, url: str, body: Any = None) -> HttpAnswer:
    """The response to one request; a connection failure is a BackendError naming the address, a
    timeout a :class:`RequestTimedOut`."""
    try:
        return client.request(method, url, json=body)
    except Exception as exc:
        # httpx's failures are read only where httpx is loaded (a client of it made them): a run over
        # endpoints alone (aiohttp, whose failures the endpoint turns into BackendErrors) never
        # imports it, 0.1-0.3 s before its first call.
        httpx = sys.modules.get("httpx")
        if httpx is not None and isinstance(exc, httpx.TimeoutException):
            raise RequestTimedOut(f"{url}: no answer in time ({exc})") from exc
        if httpx is not None and isinstance(exc, httpx.TransportError):
            raise BackendError(f"cannot reach {url}: {exc}", UNREACHABLE_HINT) from exc
        raise


def post_json(client: HttpClient, url: str, body: Any, source: str) -> tuple[Any, str]:
    """(parsed answer, raw body) of a POST that must succeed."""
    return checked_json(send(client, "POST", url, body), url, source)


def checked_json(response: HttpAnswer, url: str, source: str) -> tuple[Any, str]:
    """(parsed answer, raw body) of a response that must be a success."""
    if response.status_code in (401, 403):
        raise BackendError(f"{source} refused the request ({response.status_code})",
                           "set the key with --api-key or WINNOW_OPENAI_API_KEY")
    if response.status_code >= 400:
        raise BackendError(f"{url} answered {response.status_code}: {preview(response.text, 500)}")
    return read_json(response, source), response.text
