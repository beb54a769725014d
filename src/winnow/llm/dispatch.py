"""Sending many chat-completion requests to one or several OpenAI-compatible endpoints.

A stage hands over all its prompts at once. At most ``max_inflight`` requests are in flight at any
moment, and a new one starts the moment one finishes (no chunk waits for its slowest call), so a
server that batches many sequences (vLLM, TGI, llama.cpp with slots) stays full. Each request goes
to the endpoint with the fewest requests in flight (least-loaded dispatch). A request that meets a
passing failure (429, a 5xx, a timeout, a dropped connection) is retried with exponential backoff
and full jitter, a bounded number of times; the retries are counted so that usage shows them. A
server that says when to come back (``Retry-After`` on a 429 or 503) is waited for at least that long.
"""

from __future__ import annotations

import functools
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any, Callable, Sequence, TypeVar

import httpx

from ..errors import BackendError
from .http_json import UNREACHABLE_HINT, checked_json

T = TypeVar("T")
J = TypeVar("J")

#: Statuses a busy or restarting server answers; anything else at 400 or above is the request's fault.
RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


#: The longest a ``Retry-After`` header is obeyed; a server asking for more is waited for this long.
MAX_RETRY_AFTER_SECONDS = 120.0


class TransientFailure(Exception):
    """A failure worth trying again: the server was busy, restarting or dropped the connection.
    ``retry_after`` is the wait in seconds the server asked for, if it said."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


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


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter (sleep a uniform time up to base·2^attempt, capped), the
    scheme that spreads many clients' retries apart instead of having them return together."""

    attempts: int = 5
    base_seconds: float = 0.5
    cap_seconds: float = 20.0

    def delay(self, attempt: int, rng: random.Random, retry_after: float | None = None) -> float:
        """The pause before the next attempt: jittered backoff, but never shorter than the server
        asked for (retrying earlier would only meet another 429)."""
        backoff = rng.uniform(0.0, min(self.cap_seconds, self.base_seconds * 2 ** attempt))
        return backoff if retry_after is None else max(backoff, retry_after)


class Endpoint:
    """One server address, its connection pool and the requests it has in flight."""

    def __init__(self, base_url: str, headers: dict[str, str], timeout: float, connections: int) -> None:
        self.base_url = base_url.rstrip("/")
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        self.client = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout, limits=limits)
        self.inflight = 0

    def post(self, path: str, body: dict[str, Any]) -> tuple[Any, str]:
        """(parsed answer, raw body); a passing failure is a :class:`TransientFailure`."""
        url = f"{self.base_url}{path}"
        try:
            response = self.client.post(url, json=body)
        except httpx.ConnectError as exc:  # nothing listens there: retrying will not help
            raise BackendError(f"cannot reach {url}: {exc}", UNREACHABLE_HINT) from exc
        except (httpx.TimeoutException, httpx.TransportError) as exc:  # reset, dropped mid-answer, slow
            raise TransientFailure(f"{url}: {type(exc).__name__}: {exc}") from exc
        if response.status_code in RETRY_STATUSES:
            raise TransientFailure(f"{url} answered {response.status_code}",
                                   retry_after_seconds(response.headers.get("retry-after")))
        return checked_json(response, url, self.base_url)


class Dispatcher:
    """Runs calls over endpoints with a bound on calls in flight, least-loaded, with retries."""

    def __init__(self, endpoints: Sequence[Endpoint], max_inflight: int, retry: RetryPolicy | None = None,
                 seed: int | None = None) -> None:
        if not endpoints:
            raise ValueError("a Dispatcher needs at least one endpoint")
        self.endpoints = list(endpoints)
        self.max_inflight = max(1, max_inflight)
        self.retry = retry or RetryPolicy()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    @property
    def inflight(self) -> int:
        """Requests on the wire right now, over all endpoints (for a progress bar)."""
        return sum(e.inflight for e in self.endpoints)

    def _acquire(self) -> Endpoint:
        with self._lock:
            endpoint = min(self.endpoints, key=lambda e: e.inflight)  # first of the least loaded
            endpoint.inflight += 1
            return endpoint

    def _release(self, endpoint: Endpoint) -> None:
        with self._lock:
            endpoint.inflight -= 1

    def call(self, send: Callable[[Endpoint], T]) -> tuple[T, int]:
        """``send``'s result on some endpoint, and how many retries it took."""
        for attempt in range(self.retry.attempts):
            endpoint = self._acquire()
            retry_after = None
            try:
                return send(endpoint), attempt
            except TransientFailure as exc:
                retry_after = exc.retry_after
                if attempt + 1 == self.retry.attempts:
                    raise BackendError(f"{exc}, still after {self.retry.attempts} attempts",
                                       "the server is overloaded or failing: lower --max-inflight or check "
                                       "its log") from exc
            finally:
                self._release(endpoint)
            with self._lock:
                pause = self.retry.delay(attempt, self._rng, retry_after)
            time.sleep(pause)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def map(self, jobs: Sequence[J], send: Callable[[Endpoint, J], T],
            on_done: Callable[[int], None] | None = None) -> list[tuple[T, int]]:
        """``send(endpoint, job)`` for every job, in order, with at most ``max_inflight`` at once;
        ``on_done(n)`` is called after each finished job with the number finished so far."""
        if len(jobs) <= 1 or self.max_inflight == 1:
            out: list[tuple[T, int]] = []
            for job in jobs:
                out.append(self.call(functools.partial(_send_one, send, job)))
                if on_done:
                    on_done(len(out))
            return out
        with self._lock:
            if self._pool is None:
                # The pool's workers are the in-flight slots: a worker that finishes takes the next job.
                self._pool = ThreadPoolExecutor(self.max_inflight, thread_name_prefix="winnow-llm")
        return pooled_map(self._pool, [functools.partial(self.call, functools.partial(_send_one, send, job))
                                       for job in jobs], on_done)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        for endpoint in self.endpoints:
            endpoint.client.close()


def pooled_map(pool: ThreadPoolExecutor, calls: Sequence[Callable[[], T]],
               on_done: Callable[[int], None] | None = None) -> list[T]:
    """Every call's result, in order, run on ``pool``'s workers: a worker that finishes takes the next
    call at once, so no call waits for a slower one started with it. ``on_done(n)`` is told after each
    finished call how many have finished; the first failure cancels the calls not yet started."""
    futures = {pool.submit(call): i for i, call in enumerate(calls)}
    results: list[Any] = [None] * len(calls)
    try:
        for done, future in enumerate(as_completed(futures), 1):
            results[futures[future]] = future.result()
            if on_done:
                on_done(done)
    except BaseException:
        for future in futures:
            future.cancel()
        raise
    return results


def _send_one(send: Callable[[Endpoint, J], T], job: J, endpoint: Endpoint) -> T:
    """``send`` with its job bound first, called with the endpoint the dispatcher chose."""
    return send(endpoint, job)
