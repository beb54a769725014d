"""Continuous flow: questions stream through a method's stages, each on its own, while a server has room.

A batch run (:func:`~winnow.evaluation.runner.answer_batch` over many questions) makes every stage
wait for the batch's slowest call, and the batch's retrieval and writing use no LLM: at 64 slots and
200 ms a call that kept only 6.8-71.5% of a server's slots busy (docs/benchmarks.md, "Keeping a fast
server full"). Here each question is its own unit, asked by the one-question path on a bounded pool of
threads: its next stage starts the moment its own calls return, a new question is admitted the
moment one finishes, and every call still goes through the model's one dispatcher, which alone
bounds the calls on the wire (``--max-inflight``). So nothing waits for another question, the
records and traces are the one-question path's by construction, and retrieval, prompt building and
writing of some questions overlap the calls of the others.

How many questions are in progress: a question at its lightest stage has one call outstanding (every
method's reader; RankGPT's windows; vanilla has nothing else), and some are between calls at any
moment (retrieving, building prompts, being written), so more questions than the servers' capacity
keep their slots full whatever stage the questions are at; heavier stages (RankRAG's N calls) only
queue more calls in the dispatcher. Twice the capacity, not capacity plus a quarter, because of the
end of a run: once no question is left to admit, a method of sequential calls (RankGPT's four
windows) leaves slots idle while its last questions finish their chains, and the more questions are
in progress when that starts, the longer the slots stay full (RankGPT at 256 slots x 1 s: 80.4% of
the LLM span busy with a quarter, 91.0% with twice; docs/benchmarks.md, "Keeping a fast server full").
``--batch-size`` given by the user caps it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from ..pipeline import Pipeline

Item = TypeVar("Item")
Outcome = TypeVar("Outcome")

#: The most questions in progress however large the servers: each holds a thread and its passages.
MAX_QUESTIONS_IN_PROGRESS = 1024
#: Questions between calls (retrieving, building prompts, being written) per question on the wire.
HEADROOM = 1.0


def server_capacity(pipeline: Pipeline) -> int | None:
    """Calls the pipeline's model servers take at once (the sum of their ``--max-inflight`` over the
    distinct backends), or None when a model does not take concurrent callers (llama.cpp and
    transformers in process: their own batching is kept)."""
    backends = {id(llm.backend): llm.backend for llm in pipeline.llms}
    if not backends or not all(getattr(b, "concurrent_callers", False) for b in backends.values()):
        return None
    return sum(max(1, int(getattr(b, "max_inflight", 1))) for b in backends.values())


def questions_in_progress(capacity: int, batch_size: int | None = None) -> int:
    """Questions to keep in progress for servers taking ``capacity`` calls at once (see the module
    notes), at most ``batch_size`` when given."""
    derived = min(MAX_QUESTIONS_IN_PROGRESS, capacity + math.ceil(HEADROOM * capacity))
    return max(1, min(derived, batch_size) if batch_size else derived)


def flow(items: Iterable[Item], ask: Callable[[Item], list[Outcome]], *, workers: int,
         keep: Callable[[list[Outcome]], None]) -> None:
    """``ask(item)`` for every item on ``workers`` threads, at most ``workers`` in progress, admitted in
    order; ``keep`` gets, on this thread, the outcomes of the questions finished since its last call
    (so the run folder has one writer, and makes them durable together: one fsync for all of them,
    not one each). New questions are admitted before the finished ones are kept, so writing never
    leaves the servers short. An exception from ``ask`` or ``keep`` stops the flow: no question is
    admitted after it, and it is raised here (the other finished questions' outcomes kept first)."""
    pool = ThreadPoolExecutor(max(1, workers), thread_name_prefix="winnow-question")
    running: set[Future[list[Outcome]]] = set()
    queued = iter(items)

    def admit() -> None:
        for item in queued:
            running.add(pool.submit(ask, item))
            if len(running) >= workers:
                return

    try:
        admit()
        while running:
            finished, still = wait(running, return_when=FIRST_COMPLETED)
            running.intersection_update(still)
            failure = next((f.exception() for f in finished if f.exception() is not None), None)
            if failure is None:
                admit()
            outcomes = [outcome for f in finished if f.exception() is None for outcome in f.result()]
            if outcomes:
                keep(outcomes)
            if failure is not None:
                raise failure
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
