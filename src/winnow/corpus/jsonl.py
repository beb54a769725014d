"""JSONL corpora: one ``{"id", "title", "text"}`` object per line (BEIR's ``_id`` is accepted too).

Any other keys go to the passage's metadata. A line that cannot be read as a passage stops the load
with an :class:`InputError` naming the file, line and field: guessing at malformed data would index
something other than what the user meant.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..records import Passage
from .corpus import Corpus
from .json_line import parse_json_line
from .lines import read_lines
from .meter import Meter
from .report import Location, collect_passages

JSONL_SUFFIXES = (".jsonl", ".jsonl.gz")
RECORD_HINT = 'each line must be {"id": ..., "title": ..., "text": ...}'
_JSON_TYPES = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number",
               float: "a number", type(None): "null"}


def is_jsonl(path: Path) -> bool:
    return path.name.lower().endswith(JSONL_SUFFIXES)


def load_jsonl(path: Path, *, source: str | None = None, kind: str = "jsonl") -> Corpus:
    """The passages of the JSONL file ``path`` (``.jsonl`` or ``.jsonl.gz``)."""
    label = source if source is not None else str(path)
    passages, report = collect_passages(iter_jsonl_passages(path), source=label)
    return Corpus(passages, label, kind, [path], report)


def iter_jsonl_passages(path: Path, meter: Meter | None = None) -> Iterator[tuple[Passage, Location]]:
    """Each record of ``path`` as a passage, with where it came from (``meter`` follows the bytes read)."""
    for line, record in read_json_lines(path, hint=RECORD_HINT, meter=meter):
        passage = passage_from_record(record, path, line)
        yield passage, Location(str(path), line, passage.id)


def read_json_lines(path: Path, *, hint: str, meter: Meter | None = None) -> Iterator[tuple[int, Any]]:
    """Each non-blank line of ``path`` parsed as JSON, with its 1-based line number."""
    for line, text in read_lines(path, meter):
        if not text.strip():
            continue
        yield line, parse_json_line(text, path, line, hint=hint)


def passage_from_record(record: Any, path: Path, line: int) -> Passage:
    """The passage a JSONL record describes; raises :class:`InputError` if it describes none."""
    record = require_object(record, path, line, hint=RECORD_HINT)
    id_key, passage_id = record_id(record, path, line, hint=RECORD_HINT)
    text = string_field(record, "text", path, line, hint=RECORD_HINT, required=True)
    title = string_field(record, "title", path, line, hint=RECORD_HINT, required=False)
    extra = {key: value for key, value in record.items() if key not in (id_key, "title", "text")}
    return Passage(id=passage_id, text=text, title=title, metadata=_metadata(extra, path, line))


def require_object(record: Any, path: Path, line: int, *, hint: str) -> dict[str, Any]:
    if not isinstance(record, dict):
        raise InputError(path, f"expected a JSON object, got {json_type(record)}", line=line, hint=hint)
    return record


def record_id(record: dict[str, Any], path: Path, line: int, *, hint: str) -> tuple[str, str]:
    """The key holding the record's id (``id``, else ``_id``) and the id as a string."""
    key = "id" if "id" in record else "_id"
    if key not in record:
        raise InputError(path, 'missing id (or "_id")', line=line, field="id", hint=hint)
    value = record[key]
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InputError(path, f"id must be a string or an integer, got {json_type(value)}", line=line,
                         field=key, hint=hint)
    if not str(value).strip():
        raise InputError(path, "empty id", line=line, field=key, hint=hint)
    return key, str(value)


def string_field(record: dict[str, Any], name: str, path: Path, line: int, *, hint: str, required: bool) -> str:
    """The string ``record[name]``; an optional field that is absent or null reads as ``""``."""
    value = record.get(name)
    if value is None and not required:
        return ""
    if name not in record:
        raise InputError(path, f"missing {name}", line=line, field=name, hint=hint)
    if not isinstance(value, str):
        raise InputError(path, f"{name} must be a string, got {json_type(value)}", line=line, field=name,
                         hint=hint)
    return value


def json_type(value: Any) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _metadata(extra: dict[str, Any], path: Path, line: int) -> dict[str, Any]:
    """The record's other keys. A ``metadata`` object (as :meth:`Passage.to_dict` writes) is unpacked,
    so exported passages load back as they were."""
    nested = extra.pop("metadata", None)
    if not isinstance(nested, dict):
        return extra if nested is None else {**extra, "metadata": nested}
    if clash := sorted(nested.keys() & extra.keys()):
        raise InputError(path, f"{clash[0]!r} is both a top-level key and a key of metadata", line=line,
                         field=clash[0], hint="keep one of the two")
    return {**nested, **extra}
