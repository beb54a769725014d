"""What a ``winnow`` command does before its body runs, kept short: the cyclic garbage collector paused.

A command's start is imports (typer and the pydantic it coerces options with, numpy, the methods,
aiohttp): hundreds of thousands of new objects and not one of them garbage, yet each 700 allocations
start a young collection and the oldest generations are walked again and again. ``winnow eval``
reached its first LLM call 0.07 s sooner with the collector paused until the command's body
(median of 6 against a 200 ms load-test server, docs/benchmarks.md). The objects made meanwhile are
then frozen (moved where no collection looks: they live as long as the process) and collection
resumes, so a long command (``winnow serve``, a long ``eval``) collects as usual and its full
collections no longer walk the imported modules.

Only :func:`winnow.cli.main` pauses it, for its own process: code that imports Winnow, and the tests'
in-process command runner, never run without the collector.
"""

from __future__ import annotations

import gc

_paused = False


def pause_collection() -> None:
    """Stop the collector until :func:`resume_collection` (the command line's start)."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume_collection() -> None:
    """Freeze what the start made and collect again, if :func:`pause_collection` stopped it; else nothing."""
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()
