"""What a method is: a named recipe of stages with the paper's defaults, asked one question at a time."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from ..errors import WinnowError
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

    def validate(self, method: str) -> None:
        """Refuse settings that cannot work, naming the option."""
        if self.n < 1 or self.k < 1:
            raise WinnowError(f"--n and --k must be at least 1 (got n={self.n}, k={self.k})")
        if method != "vanilla" and self.k > self.n:
            raise WinnowError(f"--k ({self.k}) cannot exceed --n ({self.n}): the k answered from are chosen "
                              f"among the N retrieved")
        if self.max_answer_tokens < 1:
            raise WinnowError(f"--max-answer-tokens must be at least 1 (got {self.max_answer_tokens})")


@dataclass
class RerankingSettings(MethodSettings):
    """Settings of methods that rerank the first-stage list."""

    fusion_alpha: float = 0.0  # blend with the first-stage score; 0 reproduces the paper

    def validate(self, method: str) -> None:
        super().validate(method)
        if not 0.0 <= self.fusion_alpha <= 1.0:
            raise WinnowError(f"--fusion-alpha must be between 0 and 1 (got {self.fusion_alpha})",
                              "0 reproduces the paper, 1 keeps the retriever's order")


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
