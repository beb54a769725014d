"""The LLM call cache in Redis, shared by every `winnow serve` replica (``--store redis://…``).

The same entries as the SQLite cache (:mod:`.cache`): keyed by :func:`.cache.call_key`, each holding
its kind, the answer as JSON, when it was written and the BLAKE2b checksum of key, kind and answer
(:func:`.cache.entry_checksum`), as one Redis hash (``winnow:call:<key>``). An entry that fails its
checksum (damaged, edited, moved under another key) or has none is deleted and refused, never served:
the caller asks the model again and counts it (``cache_rejected``), as with the SQLite cache. So a
question asked on one replica costs its calls once, whichever replica asks it next (RRR App. B's call
database, shared).

The store bounds itself: run Redis with ``maxmemory`` and ``maxmemory-policy allkeys-lru``
(docs/deployment.md); Winnow does not evict. A store that fails a call (down, too slow: more than
:data:`winnow.shared_store.TIMEOUT_SECONDS`) costs a miss, not the request: the failure is counted
(:meth:`RedisCallCache.errors`, ``winnow_store_errors_total`` in /metrics) and logged, the first time
and every hundredth.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from ..extras import import_extra
from ..shared_store import PREFIX, open_redis, shown
from .cache import CORRUPT, UNVERIFIED, CacheDamaged, entry_checksum

log = logging.getLogger("winnow.service")


class StoreFailures:
    """Counts a shared store's failed calls and logs them, the first and every hundredth."""

    def __init__(self, where: str, what: str) -> None:
        self.where, self.what = where, what
        self._count = 0
        self._lock = threading.Lock()

    def failed(self, exc: BaseException) -> None:
        with self._lock:
            self._count += 1
            count = self._count
        if count == 1 or count % 100 == 0:
            log.warning("the store %s failed %s (%d failures so far): %s", self.where, self.what, count, exc)

    def count(self) -> int:
        with self._lock:
            return self._count


class RedisCallCache:
    """:class:`winnow.llm.cache.CallStore` over a Redis server; thread-safe (redis-py's connection pool)."""

    def __init__(self, url: str, *, client: Any = None, failures: StoreFailures | None = None) -> None:
        redis = import_extra("redis", "redis", "a call cache in Redis")
        self.url = url
        self._client = client if client is not None else open_redis(url)
        self._failures_of: tuple[type[BaseException], ...] = (redis.RedisError, OSError)
        self.failures = failures or StoreFailures(shown(url), "a cache call (served as a miss)")
        #: A Redis store is never "damaged" as a file is: a failed call is a miss, counted.
        self.damaged: CacheDamaged | None = None

    @property
    def where(self) -> str:
        return shown(self.url)

    @staticmethod
    def key(key: str) -> str:
        return f"{PREFIX}call:{key}"

    def lookup(self, key: str) -> tuple[dict[str, Any] | None, str]:
        """As :meth:`winnow.llm.cache.CallCache.lookup`: a refused entry is deleted, never served."""
        try:
            kind, answer, checksum = self._client.hmget(self.key(key), ["kind", "response", "checksum"])
        except self._failures_of as exc:
            self.failures.failed(exc)
            return None, ""
        if answer is None:
            return None, ""
        kind_text = kind.decode("utf-8", errors="replace") if kind is not None else ""
        why = (UNVERIFIED if checksum is None
               else "" if checksum.decode("ascii", errors="replace") == entry_checksum(key, kind_text, answer)
               else CORRUPT)
        if why:
            self._forget(key)
            return None, why
        return json.loads(answer), ""

    def _forget(self, key: str) -> None:
        try:
            self._client.delete(self.key(key))
        except self._failures_of as exc:
            self.failures.failed(exc)

    def put(self, key: str, kind: str, response: dict[str, Any]) -> None:
        text = json.dumps(response, ensure_ascii=False).encode("utf-8")
        entry = {"kind": kind, "response": text, "checksum": entry_checksum(key, kind, text), "created": time.time()}
        try:
            self._client.hset(self.key(key), mapping=entry)
        except self._failures_of as exc:
            self.failures.failed(exc)

    def errors(self) -> int:
        """Calls to the store that failed since it was opened (each served as a miss or not stored)."""
        return self.failures.count()

    def reopen(self) -> RedisCallCache:
        """The same store over the same connection pool (thread-safe), its failures counted with these."""
        return RedisCallCache(self.url, client=self._client, failures=self.failures)

    def close(self) -> None:
        pass  # the pool is shared with the cache-only twin; its sockets close with the process
