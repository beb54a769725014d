"""A persistent cache of LLM calls in SQLite, shared safely between processes.

Keyed by the backend's identity (kind, model, checksum), the request kind, the exact messages and
the decoding parameters; at temperature 0 the answer is a pure function of that key. RRR (App. B)
reports that such a call database cut its relevance calls per query from about 500 to about 300.
WAL journaling lets several processes read while one writes; a busy timeout makes writers wait
instead of failing.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable

from ..errors import WinnowError

SCHEMA = """
CREATE TABLE IF NOT EXISTS llm_calls (
    key TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    response TEXT NOT NULL,
    created REAL NOT NULL
)
"""


BUSY_SECONDS = 30.0


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


class CallCache:
    """Get and put JSON answers by key. One connection per instance, guarded by a lock."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=BUSY_SECONDS, check_same_thread=False,
                                       isolation_level=None)
            set_up = ("PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL", SCHEMA)
            for statement in set_up:
                retry_while_locked(partial(self._db.execute, statement))
        except sqlite3.DatabaseError as exc:
            raise WinnowError(f"cannot open the LLM call cache {self.path}: {exc}",
                              "delete the file to start a fresh cache, or pass --no-cache") from exc
        self._lock = threading.Lock()

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute("SELECT response FROM llm_calls WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def put(self, key: str, kind: str, response: dict[str, Any]) -> None:
        text = json.dumps(response, ensure_ascii=False)
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO llm_calls (key, kind, response, created) VALUES (?, ?, ?, ?)",
                             (key, kind, text, time.time()))

    def __len__(self) -> int:
        with self._lock:
            count: int = self._db.execute("SELECT COUNT(*) FROM llm_calls").fetchone()[0]
            return count

    def close(self) -> None:
        with self._lock:
            self._db.close()
