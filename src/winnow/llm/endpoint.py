"""One model server address: its one HTTP stack (an aiohttp session), its load and its breaker.

Every request to an endpoint goes over one ``aiohttp.ClientSession``, made on the dispatcher's event
loop when first needed, with kept-alive connections reused call after call: the calls of a run
(:meth:`Endpoint.post`, awaited on that loop) and the questions asked at start-up and while prompts are
fitted (``/tokenize``, ``/props``, the model list: :meth:`Endpoint.request`, which a caller's thread
blocks on while the loop sends it). One stack means one connection pool, one TLS context and one set
of headers and timeouts per server, and one thing to close.

A passing failure of a call (429, a 5xx a busy or restarting server answers, a timeout, a dropped
connection) is a :class:`TransientFailure` for the dispatcher to retry; a start-up question's failure
is a :class:`~winnow.errors.BackendError` (:class:`~winnow.llm.http_json.RequestTimedOut` for a
timeout), which :mod:`.server_tokens` reads as it reads httpx's.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

from ..errors import BackendError
from .breaker import Breaker, BreakerPolicy
from .http_json import UNREACHABLE_HINT, RequestTimedOut, checked_json

#: Statuses a busy or restarting server answers; anything else at 400 or above is the request's fault.
RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})

#: The longest a ``Retry-After`` header is obeyed; a server asking for more is waited for this long.
MAX_RETRY_AFTER_SECONDS = 120.0


class TransientFailure(Exception):
    """A failure worth trying again: the server was busy, restarting or dropped the connection.
    ``retry_after`` is the wait in seconds the server asked for, if it said; ``busy`` marks a 429
    (a live server pushing back, which does not count against its breaker); ``unreachable`` a
    refused connection (nothing listens there)."""

    def __init__(self, message: str, retry_after: float | None = None, *, busy: bool = False,
                 unreachable: bool = False, hint: str = "") -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.busy = busy
        self.unreachable = unreachable
        self.hint = hint


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """The wait a ``Retry-After`` header asks for (RFC 9110 §10.2.3: seconds or an HTTP date), capped
    at :data:`MAX_RETRY_AFTER_SECONDS`; None when absent or unreadable (then backoff alone decides)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        seconds = float(value)
    else:
        try:
            moment = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if moment.tzinfo is None:
            return None
        seconds = moment.timestamp() - (time.time() if now is None else now)
    return min(MAX_RETRY_AFTER_SECONDS, max(0.0, seconds))


def shared_tls_context() -> None:
    """Make the TLS context every endpoint's session verifies servers with, once per process: aiohttp's
    verified default (Python's default CA store, or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` when set), which
    aiohttp makes when it is imported and every session shares. Reading a CA bundle costs 50-250 ms on 2
    cores, on the way to a run's first call (docs/benchmarks.md, "The load-test server's own CPU, the
    endpoints' TLS context, and where the slots are still lost"); with one HTTP stack it is read once,
    not once for httpx and again for aiohttp. ``winnow eval`` calls this before starting its client
    processes."""
    import aiohttp  # noqa: F401  (its import makes the context)


@dataclass(frozen=True)
class Received:
    """An HTTP answer as :func:`~winnow.llm.http_json.checked_json` reads it (the shape of an
    ``httpx.Response`` it uses: ``status_code``, ``text``, ``json()``)."""

    status_code: int
    body: bytes
    retry_after: str | None = None

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.body)  # bytes: not UTF-8 is a ValueError, as httpx's is


class Endpoint:
    """One server address, its session, the requests it has in flight and its breaker."""

    def __init__(self, base_url: str, headers: dict[str, str], timeout: float, connections: int) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = {**headers, "Content-Type": "application/json"}
        self._timeout = timeout
        self._connections = connections
        self._session: Any = None  # an aiohttp.ClientSession, made on the loop when first needed
        self._loop_of: Callable[[], asyncio.AbstractEventLoop] | None = None
        self.breaker = Breaker(BreakerPolicy())  # the dispatcher's policy once attached
        self.inflight = 0
        self.requests = 0

    def attach(self, loop_of: Callable[[], asyncio.AbstractEventLoop], breaker: BreakerPolicy) -> None:
        """Join a dispatcher: its loop (started by ``loop_of`` when first needed) runs this endpoint's
        requests, and its breaker policy is this endpoint's."""
        self._loop_of = loop_of
        self.breaker = Breaker(breaker)

    def _open_session(self) -> Any:
        import aiohttp

        if self._session is None:
            # Room for the calls (the dispatcher's slots bound them to ``connections``) and as many
            # start-up and /tokenize questions beside them, so fitting a prompt never waits for a call
            # to end to get a connection (as when each had a pool of its own).
            limit = 2 * self._connections
            self._session = aiohttp.ClientSession(
                headers=self._headers, timeout=aiohttp.ClientTimeout(total=self._timeout),
                connector=aiohttp.TCPConnector(limit=limit, limit_per_host=limit))
        return self._session

    async def _exchange(self, method: str, url: str, body: Any) -> Received:
        """One request and its whole answer; aiohttp's own errors pass through to the caller."""
        data = None if body is None else json.dumps(body).encode()
        async with self._open_session().request(method, url, data=data) as response:
            return Received(response.status, await response.read(), response.headers.get("retry-after"))

    async def post(self, path: str, body: dict[str, Any]) -> tuple[Any, str]:
        """(parsed answer, raw body) of a call; a passing failure is a :class:`TransientFailure`. Runs on
        the dispatcher's loop; ``timeout`` bounds the whole attempt."""
        import aiohttp

        url = f"{self.base_url}{path}"
        try:
            answer = await self._exchange("POST", url, body)
        except aiohttp.ClientConnectorError as exc:  # nothing listens there: worth another endpoint, not this one
            raise TransientFailure(f"cannot reach {url}: {exc}", unreachable=True, hint=UNREACHABLE_HINT) from exc
        except asyncio.TimeoutError as exc:
            raise TransientFailure(f"{url}: no answer within {self._timeout:g} s (timed out)") from exc
        except aiohttp.ClientError as exc:  # reset, dropped mid-answer
            raise TransientFailure(f"{url}: {type(exc).__name__}: {exc}") from exc
        if answer.status_code in RETRY_STATUSES:
            raise TransientFailure(f"{url} answered {answer.status_code}", retry_after_seconds(answer.retry_after),
                                   busy=answer.status_code == 429)
        return checked_json(answer, url, self.base_url)

    async def _asked(self, method: str, url: str, body: Any) -> Received:
        import aiohttp

        try:
            return await self._exchange(method, url, body)
        except asyncio.TimeoutError as exc:
            raise RequestTimedOut(f"{url}: no answer within {self._timeout:g} s (timed out)") from exc
        except aiohttp.ClientError as exc:
            raise BackendError(f"cannot reach {url}: {exc}", UNREACHABLE_HINT) from exc

    def request(self, method: str, url: str, *, json: Any = None) -> Received:
        """The answer to one request (a start-up question: any status), sent over this endpoint's
        session from the caller's thread, which waits. A connection failure is a BackendError naming
        the address, a timeout a :class:`~winnow.llm.http_json.RequestTimedOut`."""
        if self._loop_of is None:
            raise RuntimeError("an Endpoint sends nothing before a Dispatcher has it")
        loop = self._loop_of()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:  # a blocking wait on the loop's own thread would never end
            raise RuntimeError("Endpoint.request called on the dispatcher's own loop; await the request there")
        return asyncio.run_coroutine_threadsafe(self._asked(method, url, json), loop).result()

    async def close_session(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
