"""The :class:`Corpus` record: the passages of one source, where they came from, and what was skipped."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..records import Passage
from .report import LoadReport


@dataclass(slots=True)
class Corpus:
    """Passages loaded from ``source`` (as the user gave it).

    ``kind`` is ``"jsonl"``, ``"tsv"``, ``"parquet"``, ``"beir"``, ``"textdir"`` or ``"wiki-vital"``;
    ``files`` are the files read, sorted, so the source can be checksummed (see :func:`source_checksum`).
    """

    passages: list[Passage]
    source: str
    kind: str
    files: list[Path]
    report: LoadReport
