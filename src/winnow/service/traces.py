"""The recent requests' trace records (``GET /v1/traces/{id}``, the web inspector): in memory, or shared.

A record (status, progress, the request and, when done, the full payload) is written when the request
is accepted and again at each change (:mod:`.runner`). :class:`LocalTraces` keeps the last
``capacity`` in this process (the default: one `winnow serve`); :class:`RedisTraces` keeps them in the
store every replica reaches (``--store redis://…``, :mod:`winnow.shared_store`), so a trace id a
replica handed out opens on any other: the inspector works behind a load balancer.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from ..errors import WinnowError
from ..extras import import_extra
from ..llm.redis_cache import StoreFailures
from ..shared_store import PREFIX, open_redis, shown
from .store import LRU

#: A record in the store outlives its place among the last ``capacity`` by at most this (seconds): a
#: record updated after it was trimmed (a long request) is not kept for ever.
TRACE_TTL_SECONDS = 7 * 24 * 3600


class StoreUnavailable(WinnowError):
    """The shared store did not answer a read: the request gets a 503, not a 404."""


class TraceStore(Protocol):
    """Trace records by id, the last ``capacity`` of them."""

    capacity: int

    def get(self, trace_id: str) -> dict[str, Any] | None: ...

    def put(self, trace_id: str, record: dict[str, Any]) -> None: ...

    def __len__(self) -> int: ...


class LocalTraces(LRU[str, dict[str, Any]]):
    """The last ``capacity`` records in this process's memory. A record is stored as the object the
    runner updates, so ``put`` again only marks it recent."""


class RedisTraces:
    """The last ``capacity`` records in Redis: each a JSON string (``winnow:trace:<id>``), their ids in a
    sorted set by creation time (``winnow:traces``) trimmed to ``capacity`` after each new one."""

    INDEX = f"{PREFIX}traces"

    def __init__(self, url: str, capacity: int, *, client: Any = None) -> None:
        redis = import_extra("redis", "redis", "traces in Redis")
        self.url = url
        self.capacity = max(1, capacity)
        self._client = client if client is not None else open_redis(url)
        self._failures_of: tuple[type[BaseException], ...] = (redis.RedisError, OSError)
        self.failures = StoreFailures(shown(url), "a trace write")

    @staticmethod
    def key(trace_id: str) -> str:
        return f"{PREFIX}trace:{trace_id}"

    def get(self, trace_id: str) -> dict[str, Any] | None:
        try:
            text = self._client.get(self.key(trace_id))
        except self._failures_of as exc:
            self.failures.failed(exc)
            raise StoreUnavailable(f"the store {shown(self.url)} did not answer: {exc}",
                                   "retry shortly; see the store's health") from exc
        return None if text is None else dict(json.loads(text))

    def put(self, trace_id: str, record: dict[str, Any]) -> None:
        """Write ``record`` (a copy of it as it is now: the worker thread may change it meanwhile)."""
        text = json.dumps(dict(record), ensure_ascii=False, default=str)
        try:
            pipe = self._client.pipeline(transaction=False)
            pipe.set(self.key(trace_id), text, ex=TRACE_TTL_SECONDS)
            pipe.zadd(self.INDEX, {trace_id: float(record.get("created", 0.0))}, nx=True)
            pipe.zcard(self.INDEX)
            size = pipe.execute()[-1]
            if size > self.capacity:
                oldest = self._client.zpopmin(self.INDEX, size - self.capacity)
                if oldest:
                    self._client.delete(*[self.key(old.decode() if isinstance(old, bytes) else str(old))
                                          for old, _ in oldest])
        except self._failures_of as exc:
            self.failures.failed(exc)

    def __len__(self) -> int:
        try:
            return int(self._client.zcard(self.INDEX))
        except self._failures_of as exc:
            self.failures.failed(exc)
            return 0

    def errors(self) -> int:
        return self.failures.count()


def open_traces(store: str, capacity: int) -> TraceStore:
    """The trace store of ``--store`` (a URL), or this process's memory when none is given."""
    return RedisTraces(store, capacity) if store else LocalTraces(capacity)
