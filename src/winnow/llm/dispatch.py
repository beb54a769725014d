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
(:mod:`.breaker`): after a few failures in a row it is taken out of the pool for a cool-down, then
one request is let through as a probe. A 429 is back-pressure from a live server, not a failure: it
is retried elsewhere but does not open the breaker.

A straggler can be *hedged* (``hedge_seconds``, ``--hedge``, :mod:`.hedging`): sent again to another
endpoint when a slot is free, the first answer winning. :meth:`Dispatcher.stats` counts the hedges
sent and won.

The layers of one call, inside out: the *attempt* (:meth:`Dispatcher._attempt`: one request to one
endpoint, its answer read); hedging, a wrapper around the attempt; retries and failover around that
(:meth:`Dispatcher._call`), each try holding a slot of ``max_inflight`` while on the wire.

The requests go out from one asyncio event loop on a thread of the dispatcher's own, over one
aiohttp session per endpoint (:mod:`.endpoint`: kept-alive connections reused call after call, for
the calls and for the start-up questions alike), not from a thread per
request: on a 2-core machine a thread per call with httpx's sync client costs 1.2-2.4 ms of CPU a
call, httpx's async client about 3 ms, aiohttp about 0.2 ms (bench/bench_client.py). Callers stay
synchronous: :meth:`map` blocks its thread until its calls are done, calling ``on_done`` in that
thread as each finishes, so several callers (the requests of `winnow serve`) share the loop and the
bound on calls in flight.
"""

from __future__ import annotations

import asyncio
import queue
import random
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Sequence, TypeVar

from ..errors import BackendError
from .breaker import BreakerPolicy
from .endpoint import (
    MAX_RETRY_AFTER_SECONDS,
    RETRY_STATUSES,
    Endpoint,
    Received,
    TransientFailure,
    retry_after_seconds,
    shared_tls_context,
)
from .hedging import hedged
from .response_checks import UnreadableAnswer

# The endpoint's and the breaker's names are read from here too, as before they had modules of their own.
__all__ = ["BreakerPolicy", "CANCEL_WAIT_SECONDS", "DEFAULT_TIMEOUT_SECONDS", "MAX_RETRY_AFTER_SECONDS",
           "RETRY_STATUSES", "Dispatcher", "Endpoint", "Reader", "Received", "Request", "RetryPolicy",
           "TransientFailure", "retry_after_seconds", "shared_tls_context"]

T = TypeVar("T")

#: What a caller asks for: the route under the endpoint's base URL and the JSON body.
Request = tuple[str, dict[str, Any]]
#: Turns an answer into the caller's result: (endpoint, parsed JSON, seconds, raw body) -> result.
Reader = Callable[[Endpoint, Any, float, str], T]

#: The per-attempt request timeout in seconds when none is given (a long generation on a busy server).
DEFAULT_TIMEOUT_SECONDS = 600.0
#: How long a stopped map waits for its cancelled calls to end (cancelling an aiohttp request is at once).
CANCEL_WAIT_SECONDS = 5.0

#: The failures a call is tried again for: passing ones, and a 200 whose body cannot be read.
RETRIED = (TransientFailure, UnreadableAnswer)


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


class IoThread:
    """The event loop the calls go out from, on a thread of its own, started when first needed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def running(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=self._loop.run_forever, name="winnow-llm-io", daemon=True)
                self._thread.start()
            return self._loop

    def stop(self, endpoints: Sequence[Endpoint]) -> None:
        """Cancel what runs on the loop, close the endpoints' sessions there, then stop the loop."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return

        async def close_sessions() -> None:
            # Cancel the calls still running first: callers on other threads (questions in flow
            # when Ctrl-C stopped the run) then get CancelledError, not a wait on a stopped loop.
            current = asyncio.current_task()
            running = [task for task in asyncio.all_tasks() if task is not current]
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
            for endpoint in endpoints:
                await endpoint.close_session()

        if threading.current_thread() is thread:  # collected on the loop's own thread: it cannot wait here
            closing = loop.create_task(close_sessions())
            closing.add_done_callback(lambda _: loop.stop())
            return
        try:
            asyncio.run_coroutine_threadsafe(close_sessions(), loop).result(timeout=10)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)
            loop.close()


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
        # aiohttp and its TLS context made now, as the run starts, not by the I/O thread at the first
        # call, where the import (0.3 s idle, 1.0-1.4 s with question threads holding the GIL) held
        # back every call of the first wave (docs/benchmarks.md, "The start and the end of a command").
        shared_tls_context()
        self._io = IoThread()
        for endpoint in self.endpoints:
            endpoint.attach(self._io.running, self.breaker)
        # The sessions are closed however the dispatcher ends: close(), collected, or the interpreter's
        # exit (weakref.finalize runs at exit too); the finalizer holds the endpoints, not the dispatcher.
        weakref.finalize(self, self._io.stop, self.endpoints)
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
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
                    "endpoints": {e.base_url: {"requests": e.requests, "failures": e.breaker.failures,
                                               "breaker_opened": e.breaker.times_opened, "open": e.breaker.is_open}
                                  for e in self.endpoints}}

    def health(self) -> dict[str, dict[str, Any]]:
        """Per endpoint now: its breaker's state (:meth:`Breaker.state`), whether it admits a request
        (``healthy``: `winnow serve`'s /readyz and /metrics) and its requests in flight."""
        with self._lock:
            now = time.monotonic()
            return {e.base_url: {"state": e.breaker.state(now), "healthy": e.breaker.admits(now),
                                 "inflight": e.inflight} for e in self.endpoints}

    # --- the pool: least-loaded choice among the endpoints the breakers admit -------------------

    def acquire(self, avoid: Endpoint | None = None) -> Endpoint:
        """The least-loaded endpoint the breakers admit, other than ``avoid`` when another is
        admitted; with every breaker open, the one that reopens first (a call never waits for a pool
        that has nobody in it: the retry's own bound ends a pool that stays dead)."""
        with self._lock:
            now = time.monotonic()
            admitted = [e for e in self.endpoints if e.breaker.admits(now)]
            choices = [e for e in admitted if e is not avoid] or admitted
            if choices:
                endpoint = min(choices, key=lambda e: e.inflight)  # first of the least loaded
            else:
                endpoint = min(self.endpoints, key=lambda e: e.breaker.open_until)
            endpoint.breaker.sent()
            endpoint.inflight += 1
            endpoint.requests += 1
            return endpoint

    def release(self, endpoint: Endpoint, failure: BaseException | None, *, settled: bool = True) -> None:
        """Give back ``endpoint``'s request, and let its outcome (``failure``, None for an answer) move
        the breaker unless ``settled`` is False (a cancelled hedge race says nothing of the endpoint)."""
        with self._lock:
            endpoint.inflight -= 1
            endpoint.breaker.returned()
        if settled:
            self.judge(endpoint, failure)

    def judge(self, endpoint: Endpoint, failure: BaseException | None) -> None:
        """One request's outcome on ``endpoint``'s breaker: an answer (or a refusal of the request
        itself, a 4xx) closes it; passing failures in a row open it; a 429 leaves it as it is."""
        with self._lock:
            if not isinstance(failure, RETRIED):
                endpoint.breaker.answered()
            elif not (isinstance(failure, TransientFailure) and failure.busy):
                endpoint.breaker.failed(time.monotonic())

    def hedge_sent(self) -> None:
        with self._lock:
            self.hedges += 1

    def hedge_won(self) -> None:
        with self._lock:
            self.hedges_won += 1

    # --- one call: the attempt, hedged, retried -----------------------------------------------

    @staticmethod
    async def _attempt(endpoint: Endpoint, request: Request, read: Reader[T], started: float) -> T:
        """One attempt of a call: ``request`` to ``endpoint``, and ``read`` of its answer (a body that
        cannot be read is this attempt's failure); ``started`` is when the call's first try began."""
        path, body = request
        response, raw = await endpoint.post(path, body)
        return read(endpoint, response, time.perf_counter() - started, raw)

    async def _try(self, endpoint: Endpoint, request: Request, read: Reader[T]) -> tuple[T, bool]:
        """One try of a call on ``endpoint``, hedged when ``hedge_seconds`` is set: (the result,
        whether ``endpoint``'s own outcome is still to be judged; see :func:`~.hedging.hedged`)."""
        started = time.perf_counter()
        if self.hedge_seconds is None:
            return await self._attempt(endpoint, request, read, started), True
        assert self._slots is not None
        return await hedged(lambda on: self._attempt(on, request, read, started), endpoint, self.hedge_seconds,
                            self._slots, self)

    def _gave_up(self, failure: TransientFailure | UnreadableAnswer, attempt: int) -> BaseException | None:
        """The error that ends the call after ``failure`` on try ``attempt`` (0-based), or None to retry."""
        if isinstance(failure, TransientFailure) and failure.unreachable and len(self.endpoints) == 1:
            return BackendError(str(failure), failure.hint)  # one address, nothing there: say so now
        if attempt + 1 < self.retry.attempts:
            return None
        if isinstance(failure, UnreadableAnswer):
            return failure
        return BackendError(f"{failure}, still after {self.retry.attempts} attempts",
                            failure.hint or "the server is overloaded or failing: lower --max-inflight "
                                            "or check its log")

    def _pause(self, failed: Endpoint, failure: TransientFailure | UnreadableAnswer, attempt: int) -> float:
        """The wait before the next try: none when another endpoint can take it at once; else backoff,
        at least as long as the server asked (``Retry-After``)."""
        retry_after = failure.retry_after if isinstance(failure, TransientFailure) else None
        with self._lock:
            now = time.monotonic()
            if any(e is not failed and e.breaker.admits(now) for e in self.endpoints):
                return 0.0
            return self.retry.delay(attempt, self._rng, retry_after)

    async def _call(self, request: Request, read: Reader[T]) -> tuple[T, int]:
        """``read`` of the answer to ``request`` from some endpoint, and how many retries it took.
        A call holds one of the ``max_inflight`` slots while on the wire, not while it waits to retry."""
        assert self._slots is not None
        with self._lock:
            self.calls += 1
        failed_at: Endpoint | None = None
        for attempt in range(self.retry.attempts):
            async with self._slots:
                endpoint = self.acquire(avoid=failed_at)
                if failed_at is not None:
                    with self._lock:
                        self.retries += 1
                        self.failovers += endpoint is not failed_at
                failure: TransientFailure | UnreadableAnswer | None = None
                settled = True
                try:
                    result, settled = await self._try(endpoint, request, read)
                    return result, attempt
                except RETRIED as exc:
                    failure = exc
                    if (error := self._gave_up(exc, attempt)) is not None:
                        if error is exc:
                            raise
                        raise error from exc
                finally:
                    self.release(endpoint, failure, settled=settled)
            assert failure is not None  # the try returned or raised otherwise
            failed_at = endpoint
            await asyncio.sleep(self._pause(endpoint, failure, attempt))
        raise AssertionError("unreachable: the last attempt returns or raises")

    def map(self, requests: Sequence[Request], read: Reader[T],
            on_done: Callable[[int], None] | None = None) -> list[tuple[T, int]]:
        """``read`` of the answer to every request, in order, with at most ``max_inflight`` on the wire
        at once (over every caller); ``on_done(n)`` is called in this thread after each finished
        request with the number finished so far. The first failure cancels the requests still
        running; so does an exception ``on_done`` raises (a cancelled `winnow serve` request)."""
        if not requests:
            return []
        loop = self._io.running()
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
        """Cancel the calls still running, close every endpoint's session and stop the loop. Also done
        when the dispatcher is collected or the interpreter exits (no "Unclosed client session")."""
        self._io.stop(self.endpoints)
        self._slots = None  # bound to the loop just stopped; a later call makes one on the next
