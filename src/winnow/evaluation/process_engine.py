"""``winnow eval --processes N``: a server's questions shared out over client processes on this machine.

One Python process drives a fast server only as fast as one core turns answers into prompts and
records, and its question threads share one GIL: against 64 slots at 200 ms a call (320 calls/s)
RankGPT's windows kept 62% of the slots busy, vanilla's single call per question 44%
(docs/benchmarks.md, "The client's CPU per question, cut"). Here the run's driver (the ``winnow
eval`` process) keeps what makes a run safe to stop, as with ``--engine ray``: the run folder, its
lock, the ids already answered, and the only writer. Each client process opens the index and the
models from the run's spec, takes questions from one shared queue as its flow (:mod:`.flow`) has
room, and sends each finished question's outcome back; the servers' ``--max-inflight`` is split
between the processes, so together they never put more calls on the wire than it says.

Why this cannot lose or repeat a question: only the driver writes, and it skips an id the folder
already holds (:meth:`~winnow.evaluation.runner.EvalRun.keep`). A client process that dies (killed,
out of memory) loses only the questions it held: they are recorded in ``errors.jsonl`` and the
run ends incomplete (a non-zero exit), and the same command asks just those again.

On Linux the processes are forked while the driver has no thread but its main one (it has not
started its progress bar yet): they start with the driver's modules imported, about 0.9 s sooner a
process on 2 cores than a fresh interpreter. Anywhere else, or with a thread running, they are
spawned (a forked child would inherit a running thread's locks held). A client process whose
driver is gone (killed with SIGKILL) stops within a second rather than wait on a queue nobody fills.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import multiprocessing
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..cores import available_cores
from ..errors import WinnowError
from .answering import (
    answered_batch,
    asking_note,
    dispatch_stats,
    llm_meter,
    merged_dispatch_stats,
    model_identities,
    token_counting,
)
from .flow import flow, questions_in_progress, server_capacity
from .schema import QuestionRecord

if TYPE_CHECKING:
    from ..datasets.qa import QAItem
    from ..run_spec import RunSpec
    from .runner import EvalRun

#: Server slots one client process keeps full by default: one process sustains RankRAG, MAIN-RAG and
#: RRR at 64 slots x 200 ms, but not RankGPT or vanilla (docs/benchmarks.md).
SLOTS_PER_PROCESS = 32
#: Fewest pending questions per process worth starting one for (each opens the index and models).
QUESTIONS_PER_PROCESS = 64
#: Seconds between checks that the client processes are alive while none has anything to say.
POLL_SECONDS = 0.5
#: The collector's thresholds in a client process (Python's default: 700, 10, 10): a young collection
#: every 10,000 allocations net of deallocations, not every 700.
YOUNG_COLLECTION_THRESHOLDS = (10_000, 10, 10)
#: Seconds between a client process's reports of its calls in flight and tokens (the driver's progress bar).
METER_SECONDS = 0.1




def default_processes(spec: RunSpec, pending: int) -> int:
    """Client processes when ``--processes`` is not given: one per :data:`SLOTS_PER_PROCESS` of the
    servers' ``--max-inflight`` (64 by default), at most one per core and per
    :data:`QUESTIONS_PER_PROCESS` pending questions; 1 for a model in this process."""
    if spec.backend != "openai":
        return 1
    from ..llm.openai_http import MAX_INFLIGHT

    slots = spec.max_inflight or MAX_INFLIGHT
    return max(1, min(available_cores(), math.ceil(slots / SLOTS_PER_PROCESS), pending // QUESTIONS_PER_PROCESS))


def check_processes(processes: int, spec: RunSpec) -> None:
    """Refuse ``--processes`` that cannot be honoured, before anything loads."""
    if processes < 1:
        raise WinnowError(f"--processes must be at least 1 (got {processes})")
    if processes > 1 and spec.backend != "openai":
        raise WinnowError(f"--processes {processes} needs --backend openai: a {spec.backend} model runs inside "
                          "the process, and each process would load its own copy",
                          "leave --processes out (llama.cpp: --slots decodes several sequences at once)")
    from ..llm.openai_http import MAX_INFLIGHT

    slots = spec.max_inflight or MAX_INFLIGHT
    if processes > slots:
        raise WinnowError(f"--processes {processes} is more than --max-inflight {slots}"
                          f"{'' if spec.max_inflight else ' (its default)'}: each process needs at least one of the "
                          "servers' slots", f"give at most --processes {slots}, or a larger --max-inflight")


def start_method() -> str:
    """``fork`` on Linux while this process runs no thread but its main one, else ``spawn``."""
    return "fork" if sys.platform == "linux" and threading.active_count() == 1 else "spawn"


def preload_client_modules() -> None:
    """Import here, once, what every forked client process needs and would otherwise import on its
    own: the pipeline (index and methods), the HTTP clients and the TLS context their endpoints
    share. aiohttp alone took 0.34 s to import on 2 cores, on the I/O thread at each process's first
    call, so no call left any process until it was done (docs/benchmarks.md, "The start and the end
    of a command")."""
    import aiohttp  # noqa: F401

    from .. import pipeline  # noqa: F401
    from ..llm.dispatch import shared_tls_context

    shared_tls_context()  # each endpoint's client would otherwise read the CA bundle again in each process


def inflight_shares(total: int, processes: int) -> list[int]:
    """``total`` calls in flight split over ``processes`` as evenly as whole numbers allow."""
    return [total // processes + (number < total % processes) for number in range(processes)]


def client_process(spec: RunSpec, index_dir: str, api_key: str, cache: bool, number: int, cap: int | None,
                   questions: Any, outbox: Any, meters: Any) -> None:
    """One client process: open the run's pipeline, then flow the questions of the shared queue
    until it says ``None``, at most ``cap`` in progress when given (``--batch-size`` split over the
    processes); every message to the driver is ``(kind, number, payload)``, and its calls in flight
    and tokens so far are kept in ``meters[2 * number:2 * number + 2]``."""
    from ..pipeline import Pipeline

    # Stopping is the driver's: Ctrl-C reaches the whole process group, and the driver ends the
    # processes (SIGTERM, which ends a client at once, whatever handler a fork copied from the driver).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    threading.Thread(target=_stop_when_orphaned, args=(os.getppid(),), daemon=True).start()
    try:
        pipeline = Pipeline(spec, index_dir, api_key=api_key, cache=cache)
    except WinnowError as exc:
        outbox.put(("error", number, str(exc)))
        return
    # The index and models live as long as the process: out of the collector's full passes, which
    # otherwise walk them again and again while the questions' objects come and go.
    gc.freeze()
    # The questions in progress (twice the process's slots, each holding its passages and traces)
    # outlive hundreds of young collections; every one of them walks the survivors again with the
    # GIL held, and the I/O thread waits. Fewer, larger young collections: RankGPT at 64 slots x
    # 200 ms kept 95.0% of the slots busy over its calls instead of 92.9% (median of 6 each,
    # docs/benchmarks.md, "The start and the end of a command").
    gc.set_threshold(*YOUNG_COLLECTION_THRESHOLDS)
    threading.Thread(target=_report_meter, args=(pipeline, meters, number), daemon=True).start()
    with pipeline:
        if number:  # the first process says once for all that tokens are estimated, if they are
            for llm in pipeline.llms:
                llm.estimate_announced = True
        try:
            outbox.put(("ready", number, {
                "models": model_identities(pipeline),
                "token_counting": token_counting(pipeline)}))
            capacity = server_capacity(pipeline) or 1
            flow(iter(questions.get, None), lambda item: answered_batch(pipeline, spec, [item]),
                 workers=questions_in_progress(capacity, cap),
                 keep=lambda outcomes: outbox.put(("outcomes", number, outcomes)))
        except Exception as exc:  # what would have stopped the single-process engine: the driver raises it
            outbox.put(("error", number, f"{type(exc).__name__}: {exc}" if not isinstance(exc, WinnowError)
                        else str(exc)))
            return
        outbox.put(("done", number, {
            "stale_cache_entries": sum(llm.stale_cache_entries for llm in pipeline.llms),
            "dispatch": dispatch_stats(pipeline.llms)}))


def _report_meter(pipeline: Any, meters: Any, number: int) -> None:
    """Keep this process's (calls in flight, tokens so far) where the driver reads them."""
    while True:
        meters[2 * number], meters[2 * number + 1] = llm_meter(pipeline.llms)
        time.sleep(METER_SECONDS)


def _stop_when_orphaned(driver: int) -> None:
    """End this client process once its driver is gone (it is then re-parented)."""
    while os.getppid() == driver:
        time.sleep(1)
    os._exit(1)


class ProcessEngine:
    """The driver's side: start the client processes, give out the questions, keep what comes back
    (an :class:`~winnow.evaluation.engines.Engine`)."""

    def __init__(self, run: EvalRun, processes: int, *, batch_size: int | None = None) -> None:
        check_processes(processes, run.spec)
        self.run = run
        self.count = processes
        self.batch_size = batch_size
        self.context: Any = None  # chosen at launch(), when the threads running are known
        self.questions: Any = None
        self.outbox: Any = None
        self.meters: Any = None  # (calls in flight, tokens) per process, written by the processes
        self.processes: list[Any] = []
        self.stats: list[dict[str, Any]] = []
        self.opened: dict[int, dict[str, Any]] = {}  # process number -> its models and token counting, once ready

    def describe(self) -> str:
        return asking_note(self.run.spec, self.batch_size) + f", shared by {self.count} client processes (--processes)"

    def start(self, waiting: Callable[[str], AbstractContextManager[object]]) -> str:
        """Start the client processes (before ``waiting`` starts a status line's thread: on Linux they
        are then forked) and wait for the first to open the run."""
        self.launch()
        with waiting(f"starting {self.count} client processes"):
            self.wait_until_ready()
        return ""

    def launch(self) -> None:
        """Start the client processes (each then opens the index and models). Called before any
        thread of this process starts (a progress bar's), so that on Linux they can be forked."""
        from ..llm.openai_http import MAX_INFLIGHT

        method = start_method()
        if method == "fork":
            preload_client_modules()
            # Python's recipe for fork: what the driver holds now is frozen, so the children's
            # collections neither walk it nor touch its pages (shared copy-on-write).
            gc.freeze()
        self.context = multiprocessing.get_context(method)
        self.questions, self.outbox = self.context.Queue(), self.context.Queue()
        self.meters = self.context.Array("q", 2 * self.count, lock=False)
        spec, index_dir = self.run.spec, str(Path(self.run.index_dir).resolve())
        shares = inflight_shares(spec.max_inflight or MAX_INFLIGHT, self.count)
        cap = math.ceil(self.batch_size / self.count) if self.batch_size else None
        for number, share in enumerate(shares):
            own = dataclasses.replace(spec, max_inflight=share)
            process = self.context.Process(target=client_process, name=f"winnow-client-{number}", daemon=True,
                                           args=(own, index_dir, self.run.api_key, self.run.cache, number, cap,
                                                 self.questions, self.outbox, self.meters))
            process.start()
            self.processes.append(process)

    def wait_until_ready(self) -> None:
        """Wait for the first client process to open the run, and check it against the run. The others
        are checked as they say they are ready (:meth:`ask_all`), while the first already asks: the
        first call leaves as soon as one process is ready, not when the slowest is."""
        while not self.opened:
            self._opening(*self._next_message({}))

    def _opening(self, kind: str, number: int, payload: Any) -> None:
        """A client process's word while it opens the run: ready (checked against the run, and against
        the first to open it), or why it could not."""
        if kind == "died":
            raise WinnowError(f"client process {number} died while opening the run (exit code {payload})")
        if kind == "error":
            raise WinnowError(f"client process {number} could not open the run: {payload}")
        if not self.opened:
            self.run.check_model_identities(payload["models"])
            self.run.token_counting = payload["token_counting"]
        elif payload["models"] != next(iter(self.opened.values()))["models"]:
            # the same files on one machine: only a change mid-start
            raise WinnowError("the client processes loaded different model files", "run the command again")
        self.opened[number] = payload

    def _next_message(self, finished: dict[int, int]) -> tuple[str, int, Any]:
        """The next message of any client process; a process that died without a word (killed, out of
        memory) is added to ``finished`` with its exit code, and one that died before the run
        started stops it."""
        while True:
            try:
                message: tuple[str, int, Any] = self.outbox.get(timeout=POLL_SECONDS)
                return message
            except queue.Empty:
                pass
            for number, process in enumerate(self.processes):
                # Exit code 0 follows a message already sent (readable before the process ended).
                if number not in finished and process.exitcode not in (None, 0):
                    finished[number] = process.exitcode
                    return "died", number, process.exitcode

    def ask_all(self, pending: Sequence[QAItem], *, on_answer: Callable[[QuestionRecord], None] | None = None,
                on_failure: Callable[[str, str], None] | None = None) -> None:
        """Ask every pending question on the client processes, keeping each outcome as it comes."""
        for item in pending:
            self.questions.put(item)
        for _ in self.processes:
            self.questions.put(None)  # one end mark each: a process stops at the first it takes
        returned: set[str] = set()
        finished: dict[int, int] = {}  # process number -> exit code (0: said done)
        died: list[str] = []
        try:
            while len(finished) < self.count:
                kind, number, payload = self._next_message(finished)
                if number not in self.opened and kind != "outcomes":
                    self._opening(kind, number, payload)  # a process still opening the run
                elif kind == "outcomes":
                    returned.update(o.id if isinstance(o, QuestionRecord) else o[0] for o in payload)
                    self.run.keep_outcomes(payload, on_answer, on_failure)
                elif kind == "done":
                    finished[number] = 0
                    self.stats.append(payload)
                elif kind == "died":
                    died.append(f"client process {number} died (exit code {payload})")
                elif kind == "error":
                    raise WinnowError(f"client process {number} stopped: {payload}")
        finally:
            self.run.folder.sync()
        if died:
            # Only the dead processes' questions never came back: the live ones drained the queue.
            reason = "; ".join(died)
            for item in pending:
                if item.id not in returned:
                    self.run.failed(item.id, reason, on_failure, backend=False)

    def meter(self) -> tuple[int, int]:
        """(calls in flight, tokens so far) summed over the processes, as they last reported them."""
        if self.meters is None:
            return 0, 0
        values = list(self.meters)
        return sum(values[0::2]), sum(values[1::2])

    def in_flight(self) -> int | None:
        return self.meter()[0]

    def notes(self) -> list[str]:
        return []

    def stale_cache_entries(self) -> int:
        """Cached answers the processes refused as unusable and asked again, summed over those that finished."""
        return sum(found["stale_cache_entries"] for found in self.stats)

    def dispatch_stats(self) -> list[dict[str, Any]]:
        """Each model's dispatcher statistics, summed over the processes that finished."""
        per_model = [found["dispatch"] for found in self.stats]
        return [merged_dispatch_stats(list(model)) for model in zip(*per_model, strict=True)] if per_model else []

    def close(self) -> None:
        """Stop the client processes that are still running."""
        for process in self.processes:
            if process.is_alive():
                process.terminate()
        for process in self.processes:
            process.join(timeout=5)
        self.processes.clear()
        for channel in (self.questions, self.outbox):
            if channel is None:
                continue
            channel.cancel_join_thread()  # questions never taken must not hold the driver at exit
            channel.close()

    def __enter__(self) -> ProcessEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
