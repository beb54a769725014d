"""Blocks a stop signal must not cut in half.

A command's stop handler (:func:`winnow.commands.common.stop_on_signal`) raises in the main
thread at whatever line it is running. Most of that time is spent waiting for LLM calls, where
raising at once is what a user wants. But a write to a database is a sequence of Python-level
steps (check out a connection, execute, commit, check it back in); raised between two of them,
the connection can be left holding SQLite's write lock, and the write the command makes on its
way out (``winnow tune`` records the session's time) then waits for a lock nobody releases, and
fails. Inside :func:`uninterruptible` the handler keeps the stop and this block raises it when
it ends, a few milliseconds later.

Only the main thread is ever interrupted by a signal handler, so only its blocks count.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

_depth = 0  # uninterruptible blocks the main thread is in
_pending: BaseException | None = None  # the stop asked for inside them


@contextmanager
def uninterruptible() -> Iterator[None]:
    """Run the block whole; a stop asked for meanwhile is raised when it ends."""
    global _depth, _pending
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0 and _pending is not None:
            stop, _pending = _pending, None
            raise stop


def defer(stop: BaseException) -> bool:
    """Called by a signal handler: inside an uninterruptible block keep ``stop`` for its end and
    return True; otherwise return False (the handler raises it now)."""
    global _pending
    if _depth == 0:
        return False
    _pending = _pending or stop
    return True
