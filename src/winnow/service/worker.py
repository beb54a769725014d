"""The worker threads that own the LLM(s): requests queue for them and run as the models allow.

llama.cpp runs one sequence at a time in this process, so with an in-process model two requests
must never be inside it at once: one thread runs the jobs one at a time. A model server (the
``openai`` backend) takes many callers at once (its dispatcher bounds the calls in flight), and there
running one job at a time would let a single hung upstream call hold every later request in the
queue until each timed out (504) however fast the server answered them; so each admitted job gets a
thread of its own. Each job reports to its own progress hook (:meth:`LLM.reporting_to`, per thread).

Every job that needs the model is queued here; its slot (``max_pending`` counts queued and running
jobs) is freed when it finishes, fails, or is cancelled. A queued job that is cancelled leaves the
queue at once; a running one stops at its next LLM call: the progress hook, called between calls,
raises :class:`Cancelled`.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import Future
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ..llm.client import LLM

Listener = Callable[[dict[str, Any]], None]


class Cancelled(Exception):
    """The request was cancelled (client gone) or ran out of time."""


class QueueFull(Exception):
    """Every slot is taken."""


@dataclass(eq=False)
class Job:
    run: Callable[[Job], Any]
    listener: Listener | None = None
    future: Future[Any] = field(default_factory=Future)
    cancelled: threading.Event = field(default_factory=threading.Event)
    reason: str = ""
    submitted: float = field(default_factory=time.perf_counter)
    started: float | None = None

    def emit(self, event: dict[str, Any]) -> None:
        if self.listener is not None:
            try:
                self.listener(event)
            except Exception:  # a listener's failure (e.g. a closed stream) must not kill the job
                pass

    def progress(self, stage: str, done: int, total: int) -> None:
        """The LLM clients' progress hook while this job runs: report, and stop if cancelled."""
        if self.cancelled.is_set():
            raise Cancelled(self.reason or "cancelled")
        self.emit({"event": "progress", "stage": stage, "done": done, "total": total})

    @property
    def queue_seconds(self) -> float:
        return (self.started or time.perf_counter()) - self.submitted


class LLMWorker:
    """Runs submitted jobs on threads that alone call the given LLMs: one at a time for in-process
    models, up to ``max_pending`` at once when every model is a server that takes concurrent callers
    (or as many as ``concurrency`` says)."""

    def __init__(self, llms: Sequence[LLM], *, max_pending: int = 64, name: str = "winnow-llm",
                 concurrency: int | None = None) -> None:
        self.llms = list(llms)
        self.max_pending = max_pending
        if concurrency is None:
            concurrency = max_pending if self.llms and all(
                getattr(llm.backend, "concurrent_callers", False) for llm in self.llms) else 1
        self.concurrency = max(1, min(concurrency, max_pending))
        self._queue: deque[Job] = deque()
        self._running: list[Job] = []
        self._cond = threading.Condition()
        self._closing = False
        self.counts = {"completed": 0, "failed": 0, "cancelled": 0, "refused": 0}
        self._threads = [threading.Thread(target=self._loop, name=f"{name}-{i}", daemon=True)
                         for i in range(self.concurrency)]
        for thread in self._threads:
            thread.start()

    def submit(self, run: Callable[[Job], Any], listener: Listener | None = None) -> Job:
        """Queue ``run(job)``; raises :class:`QueueFull` when ``max_pending`` jobs are queued or running."""
        job = Job(run, listener)
        with self._cond:
            if self._closing:
                raise QueueFull("the server is shutting down")
            if self.pending >= self.max_pending:
                self.counts["refused"] += 1
                raise QueueFull(f"all {self.max_pending} slots are taken")
            self._queue.append(job)
            position = len(self._queue) + len(self._running)
            self._cond.notify()
        job.emit({"event": "queued", "position": position})
        return job

    def cancel(self, job: Job, reason: str = "cancelled") -> None:
        """Free the job's slot: at once if it is still queued, at its next LLM call if running."""
        with self._cond:
            job.reason = job.reason or reason
            job.cancelled.set()
            if job in self._queue:
                self._queue.remove(job)
                self.counts["cancelled"] += 1
                if not job.future.done():  # an asyncio wrapper may have cancelled it already
                    job.future.set_exception(Cancelled(job.reason))
                self._announce_positions()

    @property
    def pending(self) -> int:
        return len(self._queue) + len(self._running)

    def stats(self) -> dict[str, Any]:
        with self._cond:
            return {"pending": self.pending, "queued": len(self._queue), "running": len(self._running),
                    "concurrency": self.concurrency, "max_pending": self.max_pending, **self.counts}

    def _announce_positions(self) -> None:
        for position, waiting in enumerate(self._queue, start=1 + len(self._running)):
            waiting.emit({"event": "queued", "position": position})

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if self._closing and not self._queue:
                    return
                job = self._queue.popleft()
                if not job.future.set_running_or_notify_cancel():  # cancelled by its waiter meanwhile
                    self.counts["cancelled"] += 1
                    continue
                self._running.append(job)
                job.started = time.perf_counter()
                self._announce_positions()
            job.emit({"event": "started", "queue_seconds": round(job.queue_seconds, 3)})
            outcome = "completed"
            try:
                with ExitStack() as hooks:
                    for llm in self.llms:
                        hooks.enter_context(llm.reporting_to(job.progress))
                    if job.cancelled.is_set():
                        raise Cancelled(job.reason)
                    job.future.set_result(job.run(job))
            except Cancelled as exc:
                outcome = "cancelled"
                job.future.set_exception(exc)
            except BaseException as exc:  # handed to the waiting request, which turns it into a 5xx/4xx
                outcome = "failed"
                job.future.set_exception(exc)
            finally:
                with self._cond:
                    self._running.remove(job)
                    self.counts[outcome] += 1

    def close(self, timeout: float = 5.0) -> None:
        """Cancel queued jobs and stop after the running one."""
        with self._cond:
            self._closing = True
            for job in list(self._queue):
                job.cancelled.set()
                if not job.future.done():
                    job.future.set_exception(Cancelled("the server is shutting down"))
            self._queue.clear()
            for job in self._running:
                job.cancelled.set()
            self._cond.notify_all()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
