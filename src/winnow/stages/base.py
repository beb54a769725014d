"""Recording a stage: its settings, the list it got and gave, its time and LLM use."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any, Iterator

from ..records import CandidateList, StageTrace, Trace


@contextmanager
def stage_record(trace: Trace, name: str, kind: str, settings: dict[str, Any],
                 candidates: CandidateList | None = None) -> Iterator[StageTrace]:
    """Open a :class:`StageTrace` on ``trace``; the caller sets ``output`` (and ``details``)."""
    stage = StageTrace(name=name, kind=kind, settings=settings,
                       input=candidates.to_dicts() if candidates is not None else [])
    trace.stages.append(stage)
    started = time.perf_counter()
    try:
        yield stage
    finally:
        stage.seconds = time.perf_counter() - started
