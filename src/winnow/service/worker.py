"""One worker thread that owns the LLM(s): requests queue for it and run one at a time.

llama.cpp runs one sequence at a time in this process and an LLM client has a single progress
hook, so two requests must never be inside the model at once. Every job that needs the model is
queued here; its slot (``max_pending`` counts queued and running jobs) is freed when it finishes,
fails, or is cancelled. A queued job that is cancelled leaves the queue at once; a running one
stops at its next LLM call: the progress hook, called between calls, raises :class:`Cancelled`.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import Future
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
    """Runs submitted jobs one at a time on a thread that alone calls the given LLMs."""

    def __init__(self, llms: Sequence[LLM], *, max_pending: int = 64, name: str = "winnow-llm") -> None:
        self.llms = list(llms)
        self.max_pending = max_pending
        self._queue: deque[Job] = deque()
        self._running: Job | None = None
        self._cond = threading.Condition()
        self._closing = False
        self.counts = {"completed": 0, "failed": 0, "cancelled": 0, "refused": 0}
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

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
            position = len(self._queue) + (self._running is not None)
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
        return len(self._queue) + (self._running is not None)

    def stats(self) -> dict[str, Any]:
        with self._cond:
            return {"pending": self.pending, "queued": len(self._queue), "running": self._running is not None,
                    "max_pending": self.max_pending, **self.counts}

    def _announce_positions(self) -> None:
        for position, waiting in enumerate(self._queue, start=1 + (self._running is not None)):
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
                self._running = job
                job.started = time.perf_counter()
                self._announce_positions()
            job.emit({"event": "started", "queue_seconds": round(job.queue_seconds, 3)})
            for llm in self.llms:
                llm.progress = job.progress
            outcome = "completed"
            try:
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
                for llm in self.llms:
                    llm.progress = None
                with self._cond:
                    self._running = None
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
            if self._running is not None:
                self._running.cancelled.set()
            self._cond.notify_all()
        self._thread.join(timeout)
