"""Hedged requests: a straggler sent again, the first answer winning ("The Tail at Scale", Dean and
Barroso, CACM 2013, the hedged request).

:func:`hedged` wraps one attempt of a call (:mod:`.dispatch`'s attempt coroutine: send, then read the
answer) on one endpoint. With no answer after ``delay`` seconds, and once a slot of the dispatcher's bound
on calls in flight is free (a hedge never takes a slot a first attempt is waiting for), the same attempt
goes to the least-loaded other endpoint (this one when it is alone); the first answer wins and the other
request is cancelled. The copy is the same request, so a greedy call's answer is the same. A copy that
loses says nothing of its endpoint: its breaker is not moved by a cancelled request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from .endpoint import Endpoint

T = TypeVar("T")

#: How often a straggler looks for a spare slot, at most (a quarter of the hedge delay, within these).
LOOK_SECONDS = (0.01, 0.25)


class HedgePool(Protocol):
    """What a hedge needs of the dispatcher: another endpoint, given back with its outcome, and the counts."""

    def acquire(self, avoid: Endpoint | None = None) -> Endpoint: ...

    def release(self, endpoint: Endpoint, failure: BaseException | None, *, settled: bool = True) -> None: ...

    def judge(self, endpoint: Endpoint, failure: BaseException | None) -> None: ...

    def hedge_sent(self) -> None: ...

    def hedge_won(self) -> None: ...


async def hedged(attempt: Callable[[Endpoint], Awaitable[T]], endpoint: Endpoint, delay: float,
                 slots: asyncio.Semaphore, pool: HedgePool) -> tuple[T, bool]:
    """``attempt(endpoint)``, hedged. Returns (its result, whether ``endpoint``'s own request is the one
    that answered: only then is its outcome the caller's to judge; a failure of it was judged here, and a
    cancelled one says nothing). When every copy fails, the first request's failure is raised, as
    without hedging; the caller judges it."""
    first: asyncio.Future[T] = asyncio.ensure_future(attempt(endpoint))
    await asyncio.wait({first}, timeout=delay)
    look = min(LOOK_SECONDS[1], max(LOOK_SECONDS[0], delay / 4))
    while not first.done() and slots.locked():
        await asyncio.wait({first}, timeout=look)
    if first.done():
        return await first, True
    async with slots:
        other = pool.acquire(avoid=endpoint)
        pool.hedge_sent()
        second: asyncio.Future[T] = asyncio.ensure_future(attempt(other))
        racing = {first, second}
        failures: dict[asyncio.Future[T], BaseException] = {}
        winner: asyncio.Future[T] | None = None
        try:
            while racing and winner is None:
                done, racing = await asyncio.wait(racing, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    if (error := task.exception()) is None:
                        winner = winner or task
                    else:
                        failures[task] = error
        finally:
            for task in racing:
                task.cancel()
            await asyncio.gather(*racing, return_exceptions=True)
            pool.release(other, failures.get(second), settled=second not in racing)
        if winner is None:
            raise failures[first]
        if winner is second:
            pool.hedge_won()
        if first in failures:  # the first request failed before the copy answered: that counts
            pool.judge(endpoint, failures[first])
        return winner.result(), winner is first
