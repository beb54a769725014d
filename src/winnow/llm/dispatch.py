"""Sending many chat-completion requests to one or several OpenAI-compatible endpoints.

A stage hands over all its prompts at once. At most ``max_inflight`` requests are in flight at any
moment, and a new one starts the moment one finishes (no chunk waits for its slowest call), so a
server that batches many sequences (vLLM, TGI, llama.cpp with slots) stays full. Each request goes
to the endpoint with the fewest requests in flight (least-loaded dispatch). A request that meets a
passing failure (429, a 5xx, a timeout, a dropped connection, a 200 whose body cannot be read) is
retried with exponential backoff and full jitter, a bounded number of times; the retries are counted
so that usage shows them. A server that says when to come back (``Retry-After`` on a 429 or 503) is
waited for at least that long.

The endpoints are a health-checked pool. A retry goes to another endpoint when there is one (a
*failover*, counted in :meth:`Dispatcher.stats`). Each endpoint has a circuit breaker
(:class:`BreakerPolicy`): after a few failures in a row it is taken out of the pool for a cool-down,
then one request is let through as a probe (half-open); the probe's success puts it back, its failure
takes it out again. So a dead endpoint beside a healthy one costs a handful of requests, not half of
them. A 429 is back-pressure from a live server, not a failure: it is retried elsewhere but does not
open the breaker.

A straggler can be *hedged* (``hedge_seconds``, ``--hedge``): a call with no answer after that long
is sent again, to the least-loaded other endpoint when there is one, if a slot of ``max_inflight``
is free at that moment (a hedge never displaces a first attempt); the first answer wins and the
other request is cancelled. The copy is the same request, so a greedy call's answer is the same; a
hedge that loses is not held against its endpoint's breaker. :meth:`Dispatcher.stats` counts the
hedges sent and won. This is "The Tail at Scale"'s hedged request (Dean and Barroso, CACM 2013).

The requests go out from one asyncio event loop on a thread of the dispatcher's own, over one
aiohttp session per endpoint (kept-alive connections reused call after call), not from a thread per
request: on a 2-core machine a thread per call with httpx's sync client costs 1.2-2.4 ms of CPU a
call, httpx's async client about 3 ms, aiohttp about 0.2 ms (bench/bench_client.py). Callers stay
synchronous: :meth:`map` blocks its thread until its calls are done, calling ``on_done`` in that
thread as each finishes, so several callers (the requests of `winnow serve`) share the loop and the
bound on calls in flight.
"""

from __future__ import annotations

import asyncio
import functools
import json
import queue
import random
import ssl
import threading
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any, Callable, Sequence, TypeVar

import httpx

from ..errors import BackendError
from .http_json import UNREACHABLE_HINT, checked_json
from .response_checks import UnreadableAnswer

T = TypeVar("T")

#: What a caller asks for: the route under the endpoint's base URL and the JSON body.
Request = tuple[str, dict[str, Any]]
#: Turns an answer into the caller's result: (endpoint, parsed JSON, seconds, raw body) -> result.
Reader = Callable[["Endpoint", Any, float, str], T]

#: Statuses a busy or restarting server answers; anything else at 400 or above is the request's fault.
RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


#: The longest a ``Retry-After`` header is obeyed; a server asking for more is waited for this long.
MAX_RETRY_AFTER_SECONDS = 120.0


#: The per-attempt request timeout in seconds when none is given (a long generation on a busy server).
DEFAULT_TIMEOUT_SECONDS = 600.0
#: How long a stopped map waits for its cancelled calls to end (cancelling an aiohttp request is at once).
CANCEL_WAIT_SECONDS = 5.0


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


@dataclass(frozen=True)
class BreakerPolicy:
    """When an endpoint leaves the pool and when it is tried again: ``failures`` in a row open its
    breaker for ``cooldown_seconds``; then one probe request decides (half-open)."""

    failures: int = 3
    cooldown_seconds: float = 5.0


@functools.cache
def shared_tls_context() -> ssl.SSLContext:
    """The TLS context every endpoint's sync client verifies servers with: httpx's default (certifi's
    CA bundle, or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` when set), made once per process. httpx makes a
    new one for each client it is not given one, reading the whole CA bundle each time: about 50 ms
    of every endpoint's start on 2 cores, on the way to a run's first call (docs/benchmarks.md, "The
    start and the end of a command").
    ``winnow eval`` makes it before forking its client processes."""
    return httpx.create_ssl_context(verify=True, trust_env=True)


class Endpoint:
    """One server address, its connection pool, the requests it has in flight and its breaker."""

    def __init__(self, base_url: str, headers: dict[str, str], timeout: float, connections: int) -> None:
        self.base_url = base_url.rstrip("/")
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        # The sync client asks the start-up questions (server_tokens); the calls go over the async one,
        # made on the dispatcher's loop when it first sends.
        self.client = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout, limits=limits,
                                   verify=shared_tls_context())
        self._headers = {**headers, "Content-Type": "application/json"}
        self._timeout = timeout
        self._connections = connections
        self.session: Any = None  # an aiohttp.ClientSession, made on the dispatcher's loop
        self.inflight = 0
        # The breaker (guarded by the dispatcher's lock): closed while open_until is 0.
        self.failures_in_a_row = 0
        self.open_until = 0.0
        self.probing = False
        self.requests = self.failures = self.times_opened = 0

    def admits(self, now: float) -> bool:
        """Whether a request may go here now: the breaker is closed, or its cool-down is over and no
        probe is out yet (half-open)."""
        return self.open_until == 0.0 or (now >= self.open_until and not self.probing)

    async def post(self, path: str, body: dict[str, Any]) -> tuple[Any, str]:
        """(parsed answer, raw body); a passing failure is a :class:`TransientFailure`. Runs on the
        dispatcher's loop; ``timeout`` bounds the whole attempt."""
        import aiohttp

        if self.session is None:
            self.session = aiohttp.ClientSession(
                headers=self._headers, timeout=aiohttp.ClientTimeout(total=self._timeout),
                connector=aiohttp.TCPConnector(limit=self._connections, limit_per_host=self._connections))
        url = f"{self.base_url}{path}"
        try:
            async with self.session.post(url, data=json.dumps(body).encode()) as response:
                answer = Received(response.status, await response.read(), response.headers.get("retry-after"))
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

    async def close_session(self) -> None:
        if self.session is not None:
            await self.session.close()
            self.session = None


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


class Dispatcher:
    """Runs calls over endpoints with a bound on calls in flight, least-loaded, with retries that
    fail over to another endpoint and a circuit breaker per endpoint (see the module notes)."""

    def __init__(self, endpoints: Sequence[Endpoint], max_inflight: int, retry: RetryPolicy | None = None,
                 seed: int | None = None, breaker: BreakerPolicy | None = None,
                 hedge_seconds: float | None = None) -> None:
        if not endpoints:
            raise ValueError("a Dispatcher needs at least one endpoint")
        if hedge_seconds is not None and not hedge_seconds > 0:
            raise BackendError(f"--hedge must be above 0 seconds (got {hedge_seconds})")
        self.hedge_seconds = hedge_seconds
        self.endpoints = list(endpoints)
        self.max_inflight = max(1, max_inflight)
        self.retry = retry or RetryPolicy()
        self.breaker = breaker or BreakerPolicy()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._slots: asyncio.Semaphore | None = None  # max_inflight, made on the loop
        self.calls = self.retries = self.failovers = 0
        self.hedges = self.hedges_won = 0  # copies of stragglers sent, and those that answered first

    @property
    def inflight(self) -> int:
        """Requests on the wire right now, over all endpoints (for a progress bar)."""
        return sum(e.inflight for e in self.endpoints)

    def stats(self) -> dict[str, Any]:
        """Calls made, attempts retried, retries sent to another endpoint than the one that failed,
        and per endpoint its requests, failures and how often its breaker opened."""
        with self._lock:
            return {"calls": self.calls, "retries": self.retries, "failovers": self.failovers,
                    "hedges": self.hedges, "hedges_won": self.hedges_won,
                    "endpoints": {e.base_url: {"requests": e.requests, "failures": e.failures,
                                               "breaker_opened": e.times_opened, "open": e.open_until > 0}
                                  for e in self.endpoints}}

    def _acquire(self, avoid: Endpoint | None = None) -> Endpoint:
        """The least-loaded endpoint the breakers admit, other than ``avoid`` when another is
        admitted; with every breaker open, the one that reopens first (a call never waits for a pool
        that has nobody in it: the retry's own bound ends a pool that stays dead)."""
        with self._lock:
            now = time.monotonic()
            admitted = [e for e in self.endpoints if e.admits(now)]
            choices = [e for e in admitted if e is not avoid] or admitted
            if choices:
                endpoint = min(choices, key=lambda e: e.inflight)  # first of the least loaded
            else:
                endpoint = min(self.endpoints, key=lambda e: e.open_until)
            if endpoint.open_until:
                endpoint.probing = True  # the half-open probe: the others wait for its outcome
            endpoint.inflight += 1
            endpoint.requests += 1
            return endpoint

    def _release(self, endpoint: Endpoint, failure: BaseException | None, *, settled: bool = True) -> None:
        """Give back ``endpoint``'s request, and let its outcome (``failure``, None for an answer) move
        the breaker unless ``settled`` is False (a cancelled hedge race says nothing of the endpoint)."""
        with self._lock:
            endpoint.inflight -= 1
            endpoint.probing = False
        if settled:
            self._judge(endpoint, failure)

    def _judge(self, endpoint: Endpoint, failure: BaseException | None) -> None:
        """One request's outcome on ``endpoint``'s breaker: an answer (or a refusal of the request
        itself, a 4xx) closes it; failures in a row open it."""
        if not isinstance(failure, (TransientFailure, UnreadableAnswer)):
            failure = None
        with self._lock:
            if failure is None:
                endpoint.failures_in_a_row, endpoint.open_until = 0, 0.0
                return
            if isinstance(failure, TransientFailure) and failure.busy:
                return  # a 429: the server is alive, only full
            endpoint.failures += 1
            endpoint.failures_in_a_row += 1
            if endpoint.open_until or endpoint.failures_in_a_row >= self.breaker.failures:
                endpoint.times_opened += endpoint.open_until == 0.0
                endpoint.open_until = time.monotonic() + self.breaker.cooldown_seconds

    async def _call(self, request: Request, read: Reader[T]) -> tuple[T, int]:
        """``read`` of the answer to ``request`` from some endpoint, and how many retries it took.
        A call holds one of the ``max_inflight`` slots while on the wire, not while it waits to retry."""
        assert self._slots is not None
        path, body = request
        with self._lock:
            self.calls += 1
        failed_at: Endpoint | None = None
        for attempt in range(self.retry.attempts):
            async with self._slots:
                endpoint = self._acquire(avoid=failed_at)
                if failed_at is not None:
                    with self._lock:
                        self.retries += 1
                        self.failovers += endpoint is not failed_at
                failure: TransientFailure | UnreadableAnswer | None = None
                settled = True
                try:
                    started = time.perf_counter()
                    if self.hedge_seconds is None:
                        response, raw = await endpoint.post(path, body)
                        answered_by = endpoint
                    else:
                        response, raw, answered_by, settled = await self._hedged(endpoint, path, body)
                    return read(answered_by, response, time.perf_counter() - started, raw), attempt
                except (TransientFailure, UnreadableAnswer) as exc:
                    failure = exc
                    if isinstance(exc, TransientFailure) and exc.unreachable and len(self.endpoints) == 1:
                        raise BackendError(str(exc), exc.hint) from exc  # one address, nothing there: say so now
                    if attempt + 1 == self.retry.attempts:
                        if isinstance(exc, UnreadableAnswer):
                            raise
                        raise BackendError(f"{exc}, still after {self.retry.attempts} attempts",
                                           exc.hint or "the server is overloaded or failing: lower --max-inflight "
                                                       "or check its log") from exc
                finally:
                    self._release(endpoint, failure, settled=settled)
            failed_at = endpoint
            retry_after = failure.retry_after if isinstance(failure, TransientFailure) else None
            with self._lock:
                # Another endpoint can take the retry at once; backoff is for waiting on the same one.
                now = time.monotonic()
                elsewhere = any(e is not endpoint and e.admits(now) for e in self.endpoints)
                pause = 0.0 if elsewhere else self.retry.delay(attempt, self._rng, retry_after)
            await asyncio.sleep(pause)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _hedged(self, endpoint: Endpoint, path: str, body: dict[str, Any]) -> tuple[Any, str, Endpoint, bool]:
        """``endpoint.post`` of the request, hedged: with no answer after ``hedge_seconds``, once a
        slot is free, the same request goes to another endpoint (the least loaded; this one when it is alone)
        and the first answer wins. Returns (answer, raw body, the endpoint that answered, whether
        ``endpoint``'s own request is the one that answered: only then is its outcome the caller's
        to judge; a failure of it was judged here, and a cancelled one says nothing). When every
        copy fails, the first request's failure is raised, as without hedging."""
        assert self._slots is not None and self.hedge_seconds is not None
        first: asyncio.Future[tuple[Any, str]] = asyncio.ensure_future(endpoint.post(path, body))
        await asyncio.wait({first}, timeout=self.hedge_seconds)
        # A straggler waits for a spare slot (looked for a few times a hedge delay): a hedge never
        # takes one that a first attempt is waiting for.
        look = min(0.25, max(0.01, self.hedge_seconds / 4))
        while not first.done() and self._slots.locked():
            await asyncio.wait({first}, timeout=look)
        if first.done():
            response, raw = await first
            return response, raw, endpoint, True
        async with self._slots:
            other = self._acquire(avoid=endpoint)
            with self._lock:
                self.hedges += 1
            second: asyncio.Future[tuple[Any, str]] = asyncio.ensure_future(other.post(path, body))
            owners = {first: endpoint, second: other}
            racing = set(owners)
            failures: dict[Endpoint, BaseException] = {}
            winner: asyncio.Future[tuple[Any, str]] | None = None
            try:
                while racing and winner is None:
                    done, racing = await asyncio.wait(racing, return_when=asyncio.FIRST_COMPLETED)
                    for task in done:
                        if (error := task.exception()) is None:
                            winner = winner or task
                        else:
                            failures[owners[task]] = error
            finally:
                for task in racing:
                    task.cancel()
                await asyncio.gather(*racing, return_exceptions=True)
                self._release(other, failures.get(other), settled=second not in racing)
            if winner is None:
                raise failures[endpoint]
            if winner is second:
                with self._lock:
                    self.hedges_won += 1
            if endpoint in failures:  # the first request failed before the copy answered: that counts
                self._judge(endpoint, failures[endpoint])
            response, raw = winner.result()
            return response, raw, owners[winner], first is winner

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._loop_thread = threading.Thread(target=self._loop.run_forever, name="winnow-llm-io",
                                                     daemon=True)
                self._loop_thread.start()
            return self._loop

    def map(self, requests: Sequence[Request], read: Reader[T],
            on_done: Callable[[int], None] | None = None) -> list[tuple[T, int]]:
        """``read`` of the answer to every request, in order, with at most ``max_inflight`` on the wire
        at once (over every caller); ``on_done(n)`` is called in this thread after each finished
        request with the number finished so far. The first failure cancels the requests still
        running; so does an exception ``on_done`` raises (a cancelled `winnow serve` request)."""
        if not requests:
            return []
        loop = self._running_loop()
        results: list[Any] = [None] * len(requests)
        finished: queue.SimpleQueue[int] = queue.SimpleQueue()
        END = -1

        async def one(i: int, request: Request) -> None:
            results[i] = await self._call(request, read)
            finished.put(i)

        async def run_all() -> None:
            if self._slots is None:
                self._slots = asyncio.Semaphore(self.max_inflight)
            try:
                async with asyncio.TaskGroup() as group:
                    for i, request in enumerate(requests):
                        group.create_task(one(i, request))
            except BaseExceptionGroup as failures:
                first = failures.exceptions[0]  # the first failure, as a caller expects it, its cause kept
                raise first from first.__cause__
            finally:
                finished.put(END)

        future = asyncio.run_coroutine_threadsafe(run_all(), loop)
        done = 0
        try:
            while finished.get() != END:
                done += 1
                if on_done:
                    on_done(done)
        except BaseException:
            future.cancel()
            # Wait (briefly) for the calls on the wire to be cancelled, so whoever stops here (Ctrl-C:
            # "waiting for N calls in flight") leaves no request running behind it.
            deadline = time.monotonic() + CANCEL_WAIT_SECONDS
            try:
                while finished.get(timeout=max(0.0, deadline - time.monotonic())) != END:
                    pass
            except queue.Empty:
                pass
            raise
        future.result()
        return results

    def close(self) -> None:
        loop, thread = self._loop, self._loop_thread
        if loop is not None and thread is not None:
            async def close_clients() -> None:
                # Cancel the calls still running first: callers on other threads (questions in flow
                # when Ctrl-C stopped the run) then get CancelledError, not a wait on a stopped loop.
                current = asyncio.current_task()
                running = [task for task in asyncio.all_tasks() if task is not current]
                for task in running:
                    task.cancel()
                await asyncio.gather(*running, return_exceptions=True)
                for endpoint in self.endpoints:
                    await endpoint.close_session()

            try:
                asyncio.run_coroutine_threadsafe(close_clients(), loop).result(timeout=10)
            finally:
                loop.call_soon_threadsafe(loop.stop)
                thread.join(timeout=10)
                loop.close()
                self._loop = self._loop_thread = None
        for endpoint in self.endpoints:
            endpoint.client.close()
