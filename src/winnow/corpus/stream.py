"""A corpus read in one pass: passages yielded one at a time, memory bounded whatever the corpus size.

:func:`open_corpus` checks the source (its kind, that it exists, a text folder's file list) and
returns a :class:`CorpusStream` without reading a passage. Iterating :meth:`CorpusStream.passages`
reads the source once, applies the skip rules of :mod:`.report` (empty texts, repeated ids) and
fills ``stream.report``; with ``progress`` it shows a bar on stderr with passages read, passages per
second and the time left, measured against the file sizes (a Parquet file's rows).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..records import Passage
from .meter import Meter
from .report import LoadReport, Location, SkippedFile, keep_passages

RecordReader = Callable[[Meter], Iterator[tuple[Passage, Location]]]
PROGRESS_EVERY = 1000  # passages between progress bar updates


@dataclass(slots=True)
class CorpusStream:
    """A source opened for one-pass reading; ``report`` is filled as :meth:`passages` is iterated.

    ``kind`` is ``"jsonl"``, ``"tsv"``, ``"parquet"``, ``"beir"``, ``"textdir"`` or ``"wiki-vital"``;
    ``files`` the files read, sorted (for :func:`~winnow.corpus.source_checksum`); ``total`` their
    size in ``unit`` (bytes, or rows for Parquet), ``None`` if unknown.
    """

    source: str
    kind: str
    files: list[Path]
    reader: RecordReader
    total: int | None = None
    unit: str = "bytes"
    not_regular: list[SkippedFile] = field(default_factory=list)
    report: LoadReport = field(init=False)

    def __post_init__(self) -> None:
        self.report = LoadReport(self.source, not_regular_skipped=list(self.not_regular))

    def passages(self, *, progress: bool = False) -> Iterator[Passage]:
        """The passages to keep, in source order; each call reads the source again from a fresh report."""
        self.report = LoadReport(self.source, not_regular_skipped=list(self.not_regular))
        meter = Meter(self.total, unit=self.unit)
        kept = keep_passages(self.reader(meter), self.report)
        if not progress:
            yield from kept
            return
        # rich on first use: reading a corpus without a bar (the datasets, the Python API) needs only the core
        from rich.console import Console
        from rich.progress import BarColumn, TextColumn, TimeRemainingColumn

        from ..progress import progress_bar

        started = time.perf_counter()
        with progress_bar(TextColumn("reading {task.description}"), BarColumn(),
                      TextColumn("{task.fields[passages]:,} passages, {task.fields[rate]:,.0f}/s"),
                      TimeRemainingColumn(), console=Console(stderr=True), transient=True) as bar:
            task = bar.add_task(self.source, total=self.total, passages=0, rate=0.0)
            for count, passage in enumerate(kept, start=1):
                if count % PROGRESS_EVERY == 0:
                    bar.update(task, completed=meter.done, passages=count,
                               rate=count / max(time.perf_counter() - started, 1e-9))
                yield passage
