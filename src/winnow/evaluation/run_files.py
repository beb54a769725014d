"""A run folder's TREC run files (``RUNDIR/runs/<row>.trec``), their lines made as questions finish.

Each row of the metrics (the first stage, each stage that ranks, the final list) gets one file, a
ranking per question with the scores its stage gave. The lines are made when a question is kept,
while the run still waits on the server, not all at the end: at 1,000 RankGPT questions (four lists
of up to 100 passages each) making them took 0.17-0.28 s after the last call, a sixth of the command's
time outside the server's span (docs/benchmarks.md, "The start and the end of a command"). What is
left for the end is joining the made text and writing it, each file atomically.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..atomic import write_text
from ..datasets.trec import check_tag, ranking_lines, scores_in_order
from ..errors import WinnowError
from .schema import QuestionRecord

#: One question's text in one run file: its lines, or why they cannot be written.
Text = str | WinnowError


def row_ranking(record: QuestionRecord, row: str) -> list[tuple[str, float]] | None:
    """The (document id, score) pairs ``record`` lists in ``row`` (``first_stage``, ``final`` or a stage
    label), with the scores :func:`~winnow.datasets.trec.scores_in_order` writes; None when the stage
    did not run for this question (no line rather than a guess). A document listed twice keeps its
    first place, with rank scores."""
    scores: Sequence[float] | None
    if row == "first_stage":
        ids, scores = record.first_stage.ids, record.first_stage.scores
    elif row == "final":
        ids, scores = record.final.ids, record.final.scores
    else:
        entry = record.stage(row)
        if entry is None:
            return None
        ids, scores = entry.ids, entry.scores
    if len(set(ids)) < len(ids):
        ids, scores = list(dict.fromkeys(ids)), None
    return list(zip(ids, scores_in_order(scores, len(ids)), strict=True))


class RunFiles:
    """The run files of ``folder`` for ``method``: :meth:`add` makes a kept question's lines, :meth:`write`
    writes the rows the metrics name (making the lines of questions not added, such as those a resumed
    run read back)."""

    def __init__(self, folder: Path, method: str) -> None:
        self.folder = folder
        self.method = method
        self._texts: dict[str, dict[str, Text]] = {}  # question id -> row -> its text in that row's file
        self._checked: set[str] = set()  # document ids known to be writable (they recur over questions)

    def add(self, record: QuestionRecord) -> None:
        """Make ``record``'s lines in every file it can appear in."""
        rows = ["first_stage", *(entry.stage for entry in record.stages), "final"]
        self._texts[record.id] = {row: self._text(record, row) for row in rows}

    def write(self, records: Sequence[QuestionRecord], rows: Sequence[str]) -> str:
        """``<row>.trec`` for every row over ``records`` in their order; "" or why they could not be
        written (an id with white space cannot go in a TREC file), so a finished run is never lost over
        its run files."""
        try:
            for row in rows:
                path = self._path(row)
                check_tag(self._tag(row), path)
                texts = []
                for record in records:
                    made = self._texts.get(record.id, {})
                    text = made[row] if row in made else self._text(record, row)
                    if isinstance(text, WinnowError):
                        raise text
                    texts.append(text)
                write_text(path, "".join(texts))
        except WinnowError as exc:
            return str(exc)
        return ""

    def _text(self, record: QuestionRecord, row: str) -> Text:
        ranking = row_ranking(record, row)
        if not ranking:
            return ""
        try:
            lines = ranking_lines(record.id, ranking, self._path(row), tag=self._tag(row), checked=self._checked)
        except WinnowError as exc:
            return exc
        return "\n".join(lines) + "\n"

    def _path(self, row: str) -> Path:
        return self.folder / f"{row}.trec"

    def _tag(self, row: str) -> str:
        return f"winnow.{self.method}.{row}"

