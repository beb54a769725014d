"""The engines that ask a run's pending questions, behind one interface.

``winnow eval`` asks its questions in this process (:class:`LocalEngine`), on client processes of
this machine (:class:`~winnow.evaluation.process_engine.ProcessEngine`, ``--processes``) or on the
workers of a Ray cluster (:class:`~winnow.evaluation.ray_engine.RayEngine`, ``--engine ray``).
Each is an :class:`Engine`: it starts (opens the index and the models, wherever they run, and
checks them against the run folder), asks the pending questions, handing every outcome to the
:class:`~winnow.evaluation.runner.EvalRun` (the run folder's only writer, so an engine can be
stopped at any moment and the same command resumes), says how many LLM calls it has in flight, and
reports the stale cache entries and dispatcher statistics of its models. So the command drives
every engine the same way: start, progress, a signal to stop, the stale entries, once
(:mod:`winnow.commands.evaluate`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from .answering import ask_in_process, asking_note, dispatch_stats, llm_meter
from .schema import QuestionRecord

if TYPE_CHECKING:
    from ..datasets.qa import QAItem
    from ..pipeline import Pipeline
    from ..stages.retrieve import SearchIndex
    from .options import EvalOptions
    from .runner import EvalRun

#: What an engine's start names while the user waits: ``waiting("starting 2 client processes")``
#: wraps a wait (the command shows it as a status line).
Waiting = Callable[[str], AbstractContextManager[object]]
OnAnswer = Callable[[QuestionRecord], None]
OnFailure = Callable[[str, str], None]


class Engine(Protocol):
    """How a run's pending questions get asked; see the module notes."""

    def describe(self) -> str:
        """How the questions are asked, for the run's first line (" as they flow through the stages")."""
        ...

    def start(self, waiting: Waiting) -> str:
        """Open the index and the models and check them against the run folder; a line to print
        once started ("" for none)."""
        ...

    def ask_all(self, pending: Sequence[QAItem], *, on_answer: OnAnswer | None = None,
                on_failure: OnFailure | None = None) -> None:
        """Ask every pending question, each outcome kept by the run as it comes."""
        ...

    def meter(self) -> tuple[int, int]:
        """(LLM calls in flight, tokens answered so far), for the progress bar."""
        ...

    def in_flight(self) -> int | None:
        """LLM calls in flight now, for the line a stop prints; None where the engine cannot know."""
        ...

    def stale_cache_entries(self) -> int:
        """Cached answers refused as unusable and asked again (0 when the asking did not finish and
        the count cannot be gathered)."""
        ...

    def dispatch_stats(self) -> list[dict[str, Any]]:
        """Each server-backed model's dispatcher statistics (retries, failovers, hedges, breakers)."""
        ...

    def notes(self) -> list[str]:
        """Lines to print once the questions are asked (what a precomputed first stage lacked)."""
        ...

    def close(self) -> None:
        """Let go of the models, processes or workers (also after a stop)."""
        ...


class LocalEngine:
    """The questions asked in this process, over one pipeline (``--engine local``, one process)."""

    def __init__(self, run: EvalRun, open_pipeline: Callable[[SearchIndex | None], Pipeline], *,
                 first_stage_run: Path | None = None, batch_size: int | None = None) -> None:
        self.run = run
        self.open_pipeline = open_pipeline  # the command's: under its spinner, with the run's progress bars
        self.first_stage_run = first_stage_run
        self.batch_size = batch_size
        self.pipeline: Pipeline | None = None
        self.served: Any = None  # the precomputed first stage (--run), when one is given

    def describe(self) -> str:
        return asking_note(self.run.spec, self.batch_size)

    def start(self, waiting: Waiting) -> str:
        if self.first_stage_run is not None:
            from ..index.precomputed import PrecomputedRun

            self.served = PrecomputedRun.open(self.run.index_dir, self.first_stage_run)
        self.pipeline = self.open_pipeline(self.served)
        self.run.check_models(self.pipeline)
        return ""

    def ask_all(self, pending: Sequence[QAItem], *, on_answer: OnAnswer | None = None,
                on_failure: OnFailure | None = None) -> None:
        if self.pipeline is None:
            raise RuntimeError("LocalEngine.ask_all before start()")
        ask_in_process(self.run, self.pipeline, pending, on_answer, on_failure, batch_size=self.batch_size)

    def meter(self) -> tuple[int, int]:
        return llm_meter(self.pipeline.llms) if self.pipeline is not None else (0, 0)

    def in_flight(self) -> int | None:
        return self.meter()[0]

    def stale_cache_entries(self) -> int:
        return sum(llm.stale_cache_entries for llm in self.pipeline.llms) if self.pipeline is not None else 0

    def dispatch_stats(self) -> list[dict[str, Any]]:
        return dispatch_stats(self.pipeline.llms) if self.pipeline is not None else []

    def notes(self) -> list[str]:
        note = self.served.summary() if self.served is not None else ""
        return [f"--run: {note}"] if note else []

    def close(self) -> None:
        if self.pipeline is not None:
            self.pipeline.close()


def engine_for(run: EvalRun, chosen: EvalOptions, pending: int,
               open_pipeline: Callable[[SearchIndex | None], Pipeline]) -> Engine:
    """The engine ``winnow eval``'s options choose for ``pending`` questions: the Ray cluster's
    workers (``--engine ray``), client processes (``--processes``, by default one per 32 of a
    server's ``--max-inflight``), or this process (``open_pipeline`` opens its pipeline)."""
    if chosen.engine == "ray":
        from .ray_engine import RayEngine

        return RayEngine(run, address=chosen.ray_address, workers=chosen.ray_workers,
                         cpus_per_worker=chosen.cpus_per_worker, batch_size=chosen.batch_size)
    processes = chosen.processes_for(run.spec, pending)
    if processes > 1:
        from .process_engine import ProcessEngine

        return ProcessEngine(run, processes, batch_size=chosen.batch_size)
    return LocalEngine(run, open_pipeline, first_stage_run=chosen.first_stage_run, batch_size=chosen.batch_size)
