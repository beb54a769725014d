"""Ending the ``winnow`` process without the interpreter's teardown.

When a command has finished, everything it writes is already on disk: run files, caches and
indexes are written to a temporary file and renamed (:mod:`winnow.atomic`), and SQLite commits
before it returns. What the interpreter still does at exit is tear down every module and free
every object one by one; after a vanilla ``winnow eval`` of 1,000 questions that took 0.3 s on 2
cores (docs/benchmarks.md, "The start and the end of a command"), time in which the user, or the
next job of a benchmark, waits for nothing. So the command ends the way the
interpreter would, up to that point, and then leaves: non-daemon threads are joined, every
``atexit`` handler runs (the standard library's, and a coverage or logging handler a user added),
the standard streams are flushed, and the process exits with the command's status.

Only for the command line's own process (:func:`winnow.cli.main`): code that calls Winnow in a
process of its own is never ended behind its back.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn


def end_process(code: int) -> NoReturn:
    """Finish what the interpreter's exit would run for Python code, then exit with ``code``."""
    # The interpreter's own order: wait for non-daemon threads (and run what modules such as
    # concurrent.futures registered with threading to stop their workers), then the atexit handlers.
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (``winnow ... | head``) or a closed stream
            pass
    os._exit(code)
