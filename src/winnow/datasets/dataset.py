"""A loaded dataset: questions (or queries) with their gold answers, and relevance judgments if any."""

from __future__ import annotations

from dataclasses import dataclass

from .qa import QAItem
from .trec import Qrels

QA = "qa"  # questions with gold answers
BEIR = "beir"  # queries with qrels
TREC_DL = "trec-dl"  # queries with graded qrels
RETRIEVAL = "retrieval"  # any other queries with qrels (ir_datasets)


@dataclass(slots=True)
class Dataset:
    """Questions (or queries) and, for retrieval sets, their relevance judgments."""

    name: str
    kind: str
    questions: list[QAItem]
    qrels: Qrels | None
    source: str
    licence: str

    @property
    def judged(self) -> int:
        """How many questions have at least one judgment (relevant or not)."""
        if self.qrels is None:
            return 0
        return sum(1 for item in self.questions if self.qrels.get(item.id))
