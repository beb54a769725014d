"""A configuration asked questions, scored the way ``winnow eval`` scores them.

Each batch goes through :meth:`Pipeline.ask_batch` (each stage over the whole batch, its LLM calls
sent together through the one call cache) and each answer becomes the record ``winnow eval`` writes
(:func:`winnow.evaluation.record.question_record`), from which :mod:`.objectives` reads the question's
quality and cost. Nothing here is a second evaluation path: the same answers, the same scores.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ..evaluation.prices import PriceTable
from ..evaluation.record import question_record
from ..records import CandidateList
from .objectives import Objective, question_cost

if TYPE_CHECKING:
    from ..datasets.qa import QAItem
    from ..pipeline import Pipeline


@dataclass
class Measured:
    """A configuration's results on some questions, in question order, and what measuring them spent.

    ``quality`` and ``cost`` are per question (:mod:`.objectives`); ``calls`` and ``tokens`` are what
    was sent to the model (cache misses), ``cache_hits`` the calls the call cache answered, so
    ``calls + cache_hits`` is what the same questions cost without the cache. ``answers`` holds each
    answer's text and the ids of the passages it was read from (what a run file must reproduce).
    """

    ids: list[str] = field(default_factory=list)
    quality: list[float] = field(default_factory=list)
    cost: list[float] = field(default_factory=list)
    calls: int = 0
    cache_hits: int = 0
    tokens: int = 0
    seconds: float = 0.0
    answers: list[list[Any]] = field(default_factory=list)  # [answer text, [passage ids]] per question

    @property
    def uncached_calls(self) -> int:
        return self.calls + self.cache_hits

    def extend(self, other: Measured) -> None:
        self.ids += other.ids
        self.quality += other.quality
        self.cost += other.cost
        self.calls += other.calls
        self.cache_hits += other.cache_hits
        self.tokens += other.tokens
        self.seconds += other.seconds
        self.answers += other.answers

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["seconds"] = round(self.seconds, 3)
        data["quality"] = [round(v, 6) for v in self.quality]
        data["cost"] = [round(v, 9) for v in self.cost]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Measured:
        return cls(list(data["ids"]), [float(v) for v in data["quality"]], [float(v) for v in data["cost"]],
                   int(data["calls"]), int(data["cache_hits"]), int(data["tokens"]), float(data["seconds"]),
                   [list(a) for a in data.get("answers", [])])


def joined(parts: Sequence[Measured]) -> Measured:
    """The parts one after another (a configuration's rungs, in order)."""
    whole = Measured()
    for part in parts:
        whole.extend(part)
    return whole


def measure(pipeline: Pipeline, items: Sequence[QAItem], *, objective: Objective, cost: str,
            qrels: Mapping[str, Mapping[str, int]] | None = None, prices: PriceTable | None = None,
            batch_size: int = 8, on_questions: Callable[[int], None] | None = None) -> Measured:
    """Ask ``items`` in batches of ``batch_size`` and score each answer. A backend that refuses a
    call raises :class:`~winnow.errors.BackendError` (the caller decides what the trial becomes)."""
    found = Measured()
    retriever = pipeline.retriever_name
    for start in range(0, len(items), max(1, batch_size)):
        batch = list(items[start:start + max(1, batch_size)])
        began = time.perf_counter()
        answers = pipeline.ask_batch([item.query for item in batch])
        share = (time.perf_counter() - began) / len(batch)
        for item, answer in zip(batch, answers, strict=True):
            # No first-stage baseline row is needed here: an empty list stands for it.
            record = question_record(item, answer, CandidateList(item.query, []), retriever=retriever, seconds=share)
            found.ids.append(item.id)
            found.quality.append(objective.question_value(record, qrels))
            found.cost.append(question_cost(cost, record, prices))
            found.calls += record.usage.calls
            found.cache_hits += record.usage.cache_hits
            found.tokens += record.usage.prompt_tokens + record.usage.completion_tokens
            found.answers.append([answer.text, [c.passage.id for c in answer.passages]])
        found.seconds += share * len(batch)
        if on_questions:
            on_questions(len(batch))
    return found
