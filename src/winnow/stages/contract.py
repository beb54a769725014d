"""The Stage contract: every stage takes a batch of questions in flight and moves each one on.

A :class:`QuestionState` is one question on its way through a method: the query, the candidate list
the last stage left, what earlier stages found out about it (MAIN-RAG's per-document answers, RRR's
grades and rewrites) and its trace. A :class:`Stage` has one verb::

    stage.run(batch)    # batch: Sequence[QuestionState]; each state's candidates (and the fields
                        # the stage owns) are replaced, and a StageTrace is added to its trace

A stage issues the LLM calls of the whole batch together (RankRAG: every (question, passage) pair of
the batch in one request to the backend), so a method over many questions keeps the backend as
busy as it can take; a method asked one question runs the same code with a batch of one. Each
question still gets its own StageTrace, with the calls made for it alone, so results, traces and
usage per question do not depend on the batch it ran in.

Stages that reorder or cut one list also offer :meth:`ListStage.rank`, the one-list verb for using
a reranker alone: ``reranker.rank(candidates) -> CandidateList``.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Iterator,
    Protocol,
    Sequence,
    runtime_checkable,
)

from ..records import CandidateList, Query, StageTrace, Trace
from .recipe import Composable

if TYPE_CHECKING:
    from ..llm.base import Generation
    from .relevance_grade import RelevanceGrade


@dataclass
class QuestionState:
    """One question in flight through a method's stages.

    ``search_text`` is what the retriever searches: the question (after its dialogue history, if it
    has one), or RRR's current rewrite q_t.
    ``document_answers`` are MAIN-RAG Agent-1's answers by passage id; ``grades`` RRR's σ by
    passage id (kept across rounds, so a document retrieved again is not graded twice);
    ``feedback`` RRR's π_t, the queries tried and their top documents; ``answer`` the reader's
    generation. ``round`` is a loop's round (stages inside it record it); ``done`` marks a question
    that left a loop (RRR's stop rule) while others go on.
    """

    query: Query
    trace: Trace = field(default_factory=Trace)
    candidates: CandidateList | None = None
    search_text: str = ""
    document_answers: dict[str, str] = field(default_factory=dict)
    grades: dict[str, RelevanceGrade] = field(default_factory=dict)
    feedback: list[tuple[str, list[Any]]] = field(default_factory=list)
    answer: Generation | None = None
    round: int = 0  # a loop's round (RRR: t in 1..N_rw); 0 outside loops
    done: bool = False

    def __post_init__(self) -> None:
        self.search_text = self.search_text or self.query.search_text
        if self.candidates is None:
            self.candidates = CandidateList(self.query)

    @property
    def ranked(self) -> CandidateList:
        """The current candidate list (never None after construction)."""
        assert self.candidates is not None
        return self.candidates


@runtime_checkable
class Stage(Protocol):
    """One step of a method over a batch of questions (see the module docstring)."""

    name: str

    def run(self, batch: Sequence[QuestionState]) -> None: ...


Settings = dict[str, Any] | Callable[[QuestionState], dict[str, Any]]


@contextmanager
def recording(batch: Sequence[QuestionState], name: str, kind: str, settings: Settings,
              *, with_input: bool = True) -> Iterator[list[StageTrace]]:
    """Open one :class:`StageTrace` per question of ``batch`` (in order) on its own trace.

    ``settings`` is a dict, or a function of the question when they differ (RRR's round and query).
    The stage's wall time is shared evenly among the batch, so summing ``seconds`` over questions
    gives the time spent, and a batch of one records the time as before.
    """
    traces = []
    for state in batch:
        stage = StageTrace(name=name, kind=kind, settings=settings(state) if callable(settings) else dict(settings),
                           input=state.ranked.to_dicts() if with_input else [], batch=len(batch))
        state.trace.stages.append(stage)
        traces.append(stage)
    started = time.perf_counter()
    try:
        yield traces
    finally:
        share = (time.perf_counter() - started) / max(1, len(batch))
        for stage in traces:
            stage.seconds = share


def round_settings(state: QuestionState) -> dict[str, object]:
    """A loop's round and the text searched in it (RRR's q_t), for stages inside a loop."""
    return {"round": state.round, "query": state.search_text} if state.round else {}


def run_stages(stages: Sequence[Stage], batch: Sequence[QuestionState]) -> None:
    """Run ``stages`` in order over the whole batch: a linear recipe."""
    for stage in stages:
        stage.run(batch)


class ListStage(Composable):
    """Mixin for stages that turn one candidate list into another: adds the one-list verb ``rank``
    (and, as every stage, the composition operators of :mod:`.recipe`)."""

    name: str

    def run(self, batch: Sequence[QuestionState]) -> None:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def rank(self, candidates: CandidateList, trace: Trace | None = None) -> CandidateList:
        """Run this stage on one list (a batch of one) and return the list it leaves."""
        state = QuestionState(candidates.query, trace if trace is not None else Trace(), candidates)
        self.run([state])
        return state.ranked
