"""A persistent cache of LLM calls in SQLite, shared safely between processes.

Keyed by the backend's identity (kind, model, checksum), the request kind, the exact messages and
the decoding parameters; at temperature 0 the answer is a pure function of that key. RRR (App. B)
reports that such a call database cut its relevance calls per query from about 500 to about 300.
WAL journaling lets several processes read while one writes; a busy timeout makes writers wait
instead of failing.

The cache is bounded: when the live pages of the database pass its size limit
(``WINNOW_LLM_CACHE_MAX_SIZE``, default 1 GB; :data:`DEFAULT_MAX_BYTES`) the oldest entries are
deleted until it is back under 90% of it, and the deletions are counted in the database itself
(``winnow cache info`` shows them). Freed pages are reused by later writes, so the file stops
growing at about the limit; ``winnow cache clear`` and ``prune`` also give the space back (VACUUM).

Every entry carries a checksum of its key, kind and stored answer (:func:`entry_checksum`, BLAKE2b).
An entry whose answer no longer matches it (a flipped bit on disk, a hand edit, a row moved under
another key) is never served: :meth:`CallCache.lookup` deletes it and says why, the caller asks the
model again, and the run's usage counts it (``cache_rejected``). A file written before checksums
were kept gets the column on opening; its old entries have none, so they cannot be told from damaged
ones: they are treated as unverified, asked again once and stored with a checksum (not migrated by
hashing what is there, which would bless whatever the file holds now).

A database damaged below its first page (SQLite's "database disk image is malformed") is a
:class:`CacheDamaged`, one line that names the file and says how to recover (``winnow cache clear``).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, Callable, Protocol

from ..errors import WinnowError

SCHEMA = """
CREATE TABLE IF NOT EXISTS llm_calls (
    key TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    response TEXT NOT NULL,
    created REAL NOT NULL,
    checksum TEXT
);
CREATE INDEX IF NOT EXISTS llm_calls_created ON llm_calls (created);
CREATE TABLE IF NOT EXISTS cache_meta (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
)
"""

#: The size limit when neither the caller nor ``WINNOW_LLM_CACHE_MAX_SIZE`` gives one.
DEFAULT_MAX_BYTES = 1_000_000_000
MAX_SIZE_ENV = "WINNOW_LLM_CACHE_MAX_SIZE"
#: Eviction brings the cache down to this share of its limit, so it does not run on every write.
EVICT_TO = 0.9

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
          "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_size(text: str, *, what: str = "the size") -> int:
    """``"500MB"``, ``"1.5 GB"``, ``"2GiB"`` or a plain byte count, as bytes; anything else is one clear error."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise WinnowError(f"{what} {text!r} is not a size", "write bytes or a size with a unit, e.g. 500MB, 1GB, 2GiB")
    return int(float(match.group(1)) * _UNITS[unit])


def human_size(size: int) -> str:
    """Bytes in the largest decimal unit that keeps a number at least 1 (``"1.2 GB"``, ``"340 kB"``)."""
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


def default_max_bytes() -> int:
    """``WINNOW_LLM_CACHE_MAX_SIZE`` when set, else :data:`DEFAULT_MAX_BYTES`."""
    given = os.environ.get(MAX_SIZE_ENV, "").strip()
    return parse_size(given, what=MAX_SIZE_ENV) if given else DEFAULT_MAX_BYTES


BUSY_SECONDS = 30.0

#: Why :meth:`CallCache.lookup` refused an entry: its answer fails its checksum, or it has none.
CORRUPT = "corrupt"
UNVERIFIED = "unverified"

#: How to recover from a damaged cache, for its errors and notes.
RECOVER_HINT = "run `winnow cache clear` (with --path for another file) to start a fresh one, or pass --no-cache"


class CacheDamaged(WinnowError):
    """The cache's database cannot be read where a query went: SQLite reports it malformed."""


def is_damage(exc: sqlite3.DatabaseError) -> bool:
    """Whether SQLite's error says the file is damaged (SQLITE_CORRUPT*, SQLITE_NOTADB), not busy or full."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    return name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or "malformed" in str(exc)


def entry_checksum(key: str, kind: str, answer: bytes) -> str:
    """BLAKE2b-128 of an entry's key, kind and stored answer (each length-prefixed, so no two entries
    share the bytes hashed), as hex."""
    digest = hashlib.blake2b(digest_size=16)
    for part in (key.encode("utf-8"), kind.encode("utf-8"), answer):
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)
    return digest.hexdigest()


def retry_while_locked(action: Callable[[], Any], *, seconds: float = BUSY_SECONDS) -> Any:
    """Run ``action``, retrying while another process holds the database lock.

    SQLite's busy timeout does not cover every case: switching a new file to WAL needs an exclusive
    lock and fails at once with "database is locked" when a second process is opening the same file
    (seen in CI with two processes sharing a fresh cache). So the set-up retries with a short backoff.
    """
    deadline = time.monotonic() + seconds
    pause = 0.01
    while True:
        try:
            return action()
        except sqlite3.OperationalError as exc:
            held = "locked" in str(exc) or "busy" in str(exc)
            if not held or time.monotonic() > deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 0.5)


def call_key(identity: dict[str, Any], kind: str, messages: Any, params: dict[str, Any]) -> str:
    """A stable hash of everything that determines a call's answer."""
    payload = json.dumps({"identity": identity, "kind": kind, "messages": messages, "params": params},
                         sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


#: Fields a cached answer must hold, by call kind, with the types each must have.
_CACHED_FIELDS: dict[str, dict[str, type | tuple[type, ...]]] = {
    "generate": {"text": str, "prompt_tokens": int, "completion_tokens": int, "seconds": (int, float)},
    "choices": {"logprobs": dict, "prompt_tokens": int, "seconds": (int, float), "missing": list},
}


def cached_answer_is_usable(kind: str, answer: Any) -> bool:
    """Whether a cached answer passes today's checks: its fields are there with their types and a
    choice call's log-probabilities are finite numbers at most 0 (older versions could store NaN)."""
    fields = _CACHED_FIELDS.get(kind)
    if fields is None or not isinstance(answer, dict):
        return False
    if any(not isinstance(answer.get(name), kinds) for name, kinds in fields.items()):
        return False
    if kind == "choices":
        return all(isinstance(v, (int, float)) and math.isfinite(v) and v <= 0 for v in answer["logprobs"].values())
    return True


class CallStore(Protocol):
    """What the LLM client needs of a call cache: the SQLite file here (:class:`CallCache`, the default)
    or a store shared by replicas (:class:`winnow.llm.redis_cache.RedisCallCache`). Both keep each
    entry's checksum (:func:`entry_checksum`) and refuse one that fails it."""

    #: Set once the store is found damaged: the client then goes on without it, saying so once.
    damaged: CacheDamaged | None

    @property
    def where(self) -> str:
        """The file or store, for messages (never a password)."""

    def lookup(self, key: str) -> tuple[dict[str, Any] | None, str]:
        """(answer, ""), (None, "") for none, or (None, CORRUPT/UNVERIFIED) for an entry refused and deleted."""

    def put(self, key: str, kind: str, response: dict[str, Any]) -> None: ...

    def reopen(self) -> CallStore:
        """Another connection to the same cache (the service's cache-only twins use their own)."""

    def close(self) -> None: ...


class CallCache:
    """Get and put JSON answers by key, each with its checksum, within ``max_bytes`` (default:
    :func:`default_max_bytes`). One connection per instance, guarded by a lock."""

    def __init__(self, path: str | Path, *, max_bytes: int | None = None) -> None:
        self.path = Path(path)
        self.max_bytes = default_max_bytes() if max_bytes is None else max_bytes
        if self.max_bytes <= 0:
            raise WinnowError(f"the LLM call cache's size limit must be positive, not {self.max_bytes} bytes",
                              f"set {MAX_SIZE_ENV} to a size such as 500MB, or pass --no-cache")
        #: Set once a query met damage: the LLM client then goes on without the cache, saying so once.
        self.damaged: CacheDamaged | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=BUSY_SECONDS, check_same_thread=False,
                                       isolation_level=None)
            set_up = ("PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL", *SCHEMA.split(";"))
            for statement in set_up:
                retry_while_locked(partial(self._db.execute, statement))
            self._add_checksums()
        except sqlite3.DatabaseError as exc:
            raise WinnowError(f"cannot open the LLM call cache {self.path}: {exc}", RECOVER_HINT) from exc
        self._lock = threading.Lock()

    @property
    def where(self) -> str:
        return str(self.path)

    def reopen(self) -> CallCache:
        return CallCache(self.path, max_bytes=self.max_bytes)

    def _add_checksums(self) -> None:
        """Give a file written before checksums its column (its old entries stay unverified: see the module)."""
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(llm_calls)")}
        if "checksum" in columns:
            return
        try:
            retry_while_locked(partial(self._db.execute, "ALTER TABLE llm_calls ADD COLUMN checksum TEXT"))
        except sqlite3.OperationalError as exc:
            if "duplicate column" not in str(exc):  # another process added it first
                raise

    @contextmanager
    def _guarded(self) -> Iterator[None]:
        """Holds the lock; a damaged database is a :class:`CacheDamaged` naming the file and the way out."""
        with self._lock:
            try:
                yield
            except sqlite3.DatabaseError as exc:
                if not is_damage(exc):
                    raise
                self.damaged = CacheDamaged(f"the LLM call cache {self.path} is damaged ({exc})", RECOVER_HINT)
                raise self.damaged from exc

    def lookup(self, key: str) -> tuple[dict[str, Any] | None, str]:
        """(the answer stored under ``key``, "") when there is one and it matches its checksum; (None, "")
        when there is none; (None, :data:`CORRUPT` or :data:`UNVERIFIED`) for an entry refused, which
        is deleted so that it is never served."""
        with self._guarded():
            # As bytes: a damaged answer may not even be UTF-8, and it must be refused, not a crash.
            row = self._db.execute("SELECT CAST(response AS BLOB), checksum, kind FROM llm_calls WHERE key = ?",
                                   (key,)).fetchone()
            if row is None:
                return None, ""
            answer, checksum, kind = row
            why = UNVERIFIED if checksum is None else "" if checksum == entry_checksum(key, kind, answer) else CORRUPT
            if why:
                self._db.execute("DELETE FROM llm_calls WHERE key = ?", (key,))
                return None, why
        return json.loads(answer), ""

    def get(self, key: str) -> dict[str, Any] | None:
        """The answer stored under ``key``, if there is one that matches its checksum (see :meth:`lookup`)."""
        return self.lookup(key)[0]

    def put(self, key: str, kind: str, response: dict[str, Any]) -> None:
        text = json.dumps(response, ensure_ascii=False)
        checksum = entry_checksum(key, kind, text.encode("utf-8"))
        with self._guarded():
            self._db.execute("INSERT OR REPLACE INTO llm_calls (key, kind, response, created, checksum) "
                             "VALUES (?, ?, ?, ?, ?)", (key, kind, text, time.time(), checksum))
            self._evict_over(self.max_bytes)  # three pragmas (~µs): every write, so the limit holds exactly

    def size_bytes(self) -> int:
        """The bytes the live pages hold (free pages excluded: later writes reuse them)."""
        with self._guarded():
            return self._live_bytes()

    def _live_bytes(self) -> int:
        def pragma(name: str) -> int:
            return int(self._db.execute(f"PRAGMA {name}").fetchone()[0])

        return (pragma("page_count") - pragma("freelist_count")) * pragma("page_size")

    def _evict_over(self, limit: int) -> int:
        """Delete the oldest entries while the live pages pass ``limit`` (down to :data:`EVICT_TO` of
        it), counting them in ``cache_meta``. Holds ``self._lock``. Returns how many went."""
        removed, live = 0, self._live_bytes()
        while live > limit:
            count = self._db.execute("SELECT COUNT(*) FROM llm_calls").fetchone()[0]
            if count == 0:
                break  # only the schema is left: the limit is below an empty database
            # An estimate from the mean entry size; the loop takes more if it fell short.
            excess = live - int(limit * EVICT_TO)
            batch = max(1, min(count, math.ceil(excess / max(1, live // count))))
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute("DELETE FROM llm_calls WHERE key IN "
                                 "(SELECT key FROM llm_calls ORDER BY created LIMIT ?)", (batch,))
                self._db.execute("INSERT INTO cache_meta (name, value) VALUES ('evicted', ?) ON CONFLICT(name) "
                                 "DO UPDATE SET value = value + excluded.value", (batch,))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            removed += batch
            live, before = self._live_bytes(), live
            if live >= before:
                break  # the deletions freed no whole page: stop rather than empty the cache chasing one
        return removed

    def evicted(self) -> int:
        """How many entries the size limit has removed from this database, ever."""
        with self._guarded():
            row = self._db.execute("SELECT value FROM cache_meta WHERE name = 'evicted'").fetchone()
        return int(row[0]) if row else 0

    def prune(self, max_bytes: int) -> tuple[int, int]:
        """Evict the oldest entries until the cache holds at most ``max_bytes``, then give the freed
        space back to the file system. Returns (entries removed, bytes the file shrank by)."""
        before = self.file_bytes()
        with self._guarded():
            removed = self._evict_over(max_bytes)
            retry_while_locked(partial(self._db.execute, "VACUUM"))
        return removed, max(0, before - self.file_bytes())

    def clear(self) -> tuple[int, int]:
        """Delete every entry and give the space back. Returns (entries removed, bytes freed)."""
        before = self.file_bytes()
        with self._guarded():
            removed = self._db.execute("DELETE FROM llm_calls").rowcount
            retry_while_locked(partial(self._db.execute, "VACUUM"))
        return int(removed), max(0, before - self.file_bytes())

    def file_bytes(self) -> int:
        """The database's size on disk, its write-ahead log included."""
        with self._guarded():
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return sum(p.stat().st_size for p in (self.path, self.path.with_name(self.path.name + "-wal")) if p.exists())

    def oldest_and_newest(self) -> tuple[float, float] | None:
        """When the oldest and the newest entries were written (Unix times), or None when empty."""
        with self._guarded():
            row = self._db.execute("SELECT MIN(created), MAX(created) FROM llm_calls").fetchone()
        return None if row[0] is None else (float(row[0]), float(row[1]))

    def __len__(self) -> int:
        with self._guarded():
            count: int = self._db.execute("SELECT COUNT(*) FROM llm_calls").fetchone()[0]
            return count

    def close(self) -> None:
        with self._lock:
            self._db.close()
