"""Question-answering sets as JSONL: one ``{"id", "question", "golden_answers", "metadata"}`` per line.

A question of a dialogue (Doc2Dial, TopiOCQA, INSCIT) also has ``"history"``: its earlier turns,
oldest first, as ``[{"role": "user", "text": …}, {"role": "assistant", "text": …}, …]``
(:func:`winnow.records.dialogue_history` says what a valid one is).

This is the layout FlashRAG uses for its benchmark files. Gold answers that are regular expressions
(CuratedTREC, as in DPR's evaluation) are flagged with ``"answer_type": "regex"`` in ``metadata``.
Reading is strict: a malformed line or a repeated id is an :class:`InputError` naming the file, line
and field, since scoring against a silently altered question set gives numbers nobody can trust.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..atomic import write_lines
from ..corpus.jsonl import json_type, read_json_lines, require_object
from ..errors import InputError
from ..records import Query, Turn, dialogue_history
from ..text import TEXT_HINT, text_problem

REGEX = "regex"
QA_HINT = 'each line must be {"id": ..., "question": ..., "golden_answers": [...], "metadata": {...}}'


@dataclass(frozen=True, slots=True)
class QAItem:
    """One question with its gold answers. ``metadata`` holds anything else (source set, split,
    ``answer_type``, judged document ids)."""

    id: str
    question: str
    golden_answers: list[str]
    metadata: dict[str, Any] = field(default_factory=dict)
    history: tuple[Turn, ...] = ()  # the dialogue's earlier turns, for conversational QA

    @property
    def query(self) -> Query:
        """The question as a method asks it: its text, id and dialogue history."""
        return Query(self.question, id=self.id, history=self.history)

    @property
    def is_regex(self) -> bool:
        """The gold answers are regular expressions (CuratedTREC), not strings."""
        return self.metadata.get("answer_type") == REGEX

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "question": self.question, "golden_answers": list(self.golden_answers),
                "metadata": dict(self.metadata),
                **({"history": [turn.to_dict() for turn in self.history]} if self.history else {})}


def read_qa_jsonl(path: str | Path) -> list[QAItem]:
    """The questions of the QA JSONL file ``path`` (``.jsonl`` or ``.jsonl.gz``), in file order.

    An integer id is read as its string; an item may have no gold answers (an empty list) but every
    answer must be a non-empty string.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise InputError(path, "no such file", hint="give a QA JSONL file, e.g. from `winnow data export`")
    items: list[QAItem] = []
    first_line: dict[str, int] = {}
    for line, record in read_json_lines(path, hint=QA_HINT):
        item = qa_item_from_record(record, path, line)
        if item.id in first_line:
            raise InputError(path, f"duplicate id {item.id!r} (first at line {first_line[item.id]})", line=line,
                             field="id", hint="question ids must be unique")
        first_line[item.id] = line
        items.append(item)
    return items


def qa_item_from_record(record: Any, path: Path, line: int) -> QAItem:
    """The :class:`QAItem` a parsed JSON line describes; :class:`InputError` if it describes none."""
    record = require_object(record, path, line, hint=QA_HINT)
    if "id" not in record:
        raise InputError(path, "missing id", line=line, field="id", hint=QA_HINT)
    item_id = record["id"]
    if isinstance(item_id, bool) or not isinstance(item_id, (str, int)) or not str(item_id).strip():
        raise InputError(path, f"id must be a non-empty string or an integer, got {json_type(item_id)}",
                         line=line, field="id", hint=QA_HINT)
    question = record.get("question")
    if not isinstance(question, str) or not question.strip():
        got = "nothing" if "question" not in record else json_type(question)
        raise InputError(path, f"question must be a non-empty string, got {got}", line=line, field="question",
                         hint=QA_HINT)
    if (problem := text_problem(question)) is not None:
        raise InputError(path, f"the question {problem}", line=line, field="question",
                         hint=TEXT_HINT)
    answers = record.get("golden_answers")
    if not isinstance(answers, list):
        got = "nothing" if "golden_answers" not in record else json_type(answers)
        raise InputError(path, f"golden_answers must be a list of strings, got {got}", line=line,
                         field="golden_answers", hint=QA_HINT)
    for position, answer in enumerate(answers):
        if not isinstance(answer, str) or not answer.strip():
            raise InputError(path, f"golden_answers[{position}] must be a non-empty string, got "
                                   f"{json_type(answer)}", line=line, field="golden_answers", hint=QA_HINT)
    metadata = record.get("metadata", {})
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise InputError(path, f"metadata must be an object, got {json_type(metadata)}", line=line,
                         field="metadata", hint=QA_HINT)
    history: tuple[Turn, ...] = ()
    if record.get("history") is not None:
        try:
            history = dialogue_history(record["history"])
        except ValueError as exc:
            raise InputError(path, str(exc), line=line, field="history",
                             hint='"history": [{"role": "user", "text": ...}, {"role": "assistant", "text": ...}]'
                             ) from exc
    return QAItem(str(item_id), question, list(answers), dict(metadata), history)


def write_qa_jsonl(items: Iterable[QAItem], path: str | Path) -> int:
    """Write ``items`` to ``path`` atomically (temp file + rename); return how many were written.

    Refuses a repeated id, which :func:`read_qa_jsonl` would refuse to read back.
    """
    seen: set[str] = set()

    def lines() -> Iterator[str]:
        for item in items:
            if item.id in seen:
                raise InputError(path, f"duplicate id {item.id!r} among the questions to write", field="id",
                                 hint="question ids must be unique")
            seen.add(item.id)
            yield json.dumps(item.to_dict(), ensure_ascii=False)

    return write_lines(path, lines())
