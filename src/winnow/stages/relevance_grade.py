"""What RRR's relevance model σ (Arora et al., 2023, App. A.2) said about one passage."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True, slots=True)
class RelevanceGrade:
    """What the relevance model said about one passage."""

    passage_id: str
    expected: float  # E[σ] under the next-token distribution; the stage's score
    argmax: int  # the most probable grade: a greedy model's answer, the paper's σ
    distribution: dict[str, float]  # P(grade), renormalised over 1..5
    source: Literal["logprobs", "generated"]
    answer: str = ""  # the generated text, when the grade was parsed from one
    readable: bool = True  # False when no grade could be parsed (then argmax = UNREADABLE_GRADE)
    missing: tuple[str, ...] = ()  # grades absent from the top next tokens (given an upper bound)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.passage_id, "expected": round(self.expected, 4), "argmax": self.argmax,
                               "distribution": {g: round(p, 6) for g, p in self.distribution.items()},
                               "source": self.source}
        if self.source == "generated":
            out["answer"] = self.answer
            out["readable"] = self.readable
        if self.missing:
            out["missing"] = list(self.missing)
        return out
