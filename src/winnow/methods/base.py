"""What a method is: a named recipe of stages with the paper's defaults, asked one question at a time."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from ..records import Answer, CandidateList, Query, Trace


@dataclass
class MethodSettings:
    """Settings every method has; subclasses add their own. ``n`` passages are retrieved,
    ``k`` reach the reader."""

    n: int = 20
    k: int = 5
    max_answer_tokens: int = 32

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Method(ABC):
    name: ClassVar[str]
    summary: ClassVar[str]
    stages: ClassVar[tuple[str, ...]]
    #: The method's settings type: MethodSettings or a subclass adding the method's own knobs.
    Settings: ClassVar[type[MethodSettings]] = MethodSettings

    def __init__(self, settings: MethodSettings) -> None:
        self.settings = settings

    @abstractmethod
    def _run(self, query: Query, trace: Trace) -> tuple[str, CandidateList]:
        """Run the stages; return the answer and the passages it was read from, best first."""

    def ask(self, question: str | Query) -> Answer:
        query = question if isinstance(question, Query) else Query(text=question)
        trace = Trace()
        started = time.perf_counter()
        text, passages = self._run(query, trace)
        trace.seconds = time.perf_counter() - started
        return Answer(question=query.text, text=text, method=self.name, passages=passages, trace=trace,
                      settings={"method": self.name, **self.settings.to_dict()})
