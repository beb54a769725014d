"""A store shared by many `winnow serve` replicas (``--store redis://…``): its URL checked and opened.

Two replicas behind a load balancer each kept their own call cache and trace store on local disk, so
a question paid its LLM calls once per replica and a trace written by one was a 404 on the other.
With ``--store``, the LLM call cache (:mod:`winnow.llm.redis_cache`) and the recent traces
(:mod:`winnow.service.traces`) live in one Redis server that every replica reaches, and a replica
keeps no state of its own but its answer cache in memory. The local SQLite cache and the in-memory
traces stay the default (one process needs no server).

Redis was chosen over PostgreSQL for this: both are values by key with an expiry or a bound, which
Redis does in one round trip per call with its own memory bound (``maxmemory`` with
``allkeys-lru``), and Debian packages it (``apt-get install redis-server``); docs/deployment.md says
how to run it.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .errors import WinnowError
from .extras import import_extra

#: The schemes redis-py opens: TCP, TLS and a Unix socket.
SCHEMES = ("redis", "rediss", "unix")
#: Every key Winnow writes starts with this, so a Redis server can be shared with other programs.
PREFIX = "winnow:"
#: Seconds a call or an answer to the store may take before it counts as failed (served as a miss).
TIMEOUT_SECONDS = 2.0


def is_store_url(text: str) -> bool:
    """Whether ``text`` names a shared store (``redis://``, ``rediss://``, ``unix://``) rather than a file."""
    return urlsplit(text).scheme in SCHEMES


def shown(url: str) -> str:
    """``url`` without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def open_redis(url: str, *, option: str = "--store") -> Any:
    """A redis-py client for ``url``, checked with a PING; one clear line when the URL is not one or
    nothing answers there. redis-py's client is thread-safe (a connection pool)."""
    if not is_store_url(url):
        raise WinnowError(f"{option} {shown(url)!r} is not a store URL",
                          "give redis://HOST:PORT/DB, rediss://… (TLS) or unix:///path/to/redis.sock")
    redis = import_extra("redis", "redis", f"{option} (a shared Redis store)")
    try:
        client = redis.Redis.from_url(url, socket_timeout=TIMEOUT_SECONDS, socket_connect_timeout=TIMEOUT_SECONDS,
                                      health_check_interval=30)
        client.ping()
    except ValueError as exc:
        raise WinnowError(f"{option} {shown(url)!r} is not a store URL: {exc}",
                          "give redis://HOST:PORT/DB, rediss://… (TLS) or unix:///path/to/redis.sock") from exc
    except redis.RedisError as exc:
        raise WinnowError(f"cannot reach the store {shown(url)} ({option}): {exc}",
                          "start Redis there (docs/deployment.md), or fix the URL") from exc
    return client

