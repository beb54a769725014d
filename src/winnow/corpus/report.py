"""What loading a corpus kept and skipped, and the rule that decides it.

Nothing is dropped silently: the first occurrence of a passage id wins, and every later duplicate and
every passage whose text is empty (or only whitespace) is skipped and recorded with its location, so
the user can see and fix them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..records import Passage

SHOWN_LOCATIONS = 3  # how many locations a summary line names before "and N more"


@dataclass(frozen=True, slots=True)
class Location:
    """Where a record came from: a file, its 1-based line (``None`` when the file has no record lines,
    as in a text folder or a JSON document) and the record's id.

    For a skipped duplicate, ``first_seen`` is where the id first appeared (the occurrence kept).
    """

    file: str
    line: int | None
    id: str
    first_seen: Location | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"file": self.file, "line": self.line, "id": self.id}
        if self.first_seen is not None:
            data["first_seen"] = self.first_seen.to_dict()
        return data


@dataclass(frozen=True, slots=True)
class SkippedFile:
    """A file of a folder corpus that was not read because it is not a regular file: ``kind`` is
    "FIFO", "socket", "character device", …"""

    file: str
    kind: str

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "kind": self.kind}


@dataclass(slots=True)
class LoadReport:
    """Counts of what a corpus load read and kept, with the location of every skipped record."""

    source: str
    read: int = 0
    kept: int = 0
    empty_skipped: list[Location] = field(default_factory=list)
    duplicate_ids_skipped: list[Location] = field(default_factory=list)
    not_regular_skipped: list[SkippedFile] = field(default_factory=list)

    def summary(self) -> str:
        """One line for the user, e.g. ``"9 passages from c.jsonl; skipped 2 with empty text
        (c.jsonl:5, :9) and 1 duplicate id ('x' at c.jsonl:12, first seen at line 3)"``."""
        skipped = []
        if self.empty_skipped:
            skipped.append(f"{len(self.empty_skipped)} with empty text ({_places(self.empty_skipped)})")
        if self.duplicate_ids_skipped:
            count = len(self.duplicate_ids_skipped)
            skipped.append(f"{count} duplicate {'id' if count == 1 else 'ids'} "
                           f"({_duplicates(self.duplicate_ids_skipped)})")
        if self.not_regular_skipped:
            skipped.append(not_regular_files(self.not_regular_skipped))
        kept = f"{self.kept} {'passage' if self.kept == 1 else 'passages'} from {self.source}"
        return f"{kept}; skipped {' and '.join(skipped)}" if skipped else kept

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "read": self.read,
            "kept": self.kept,
            "empty_skipped": [location.to_dict() for location in self.empty_skipped],
            "duplicate_ids_skipped": [location.to_dict() for location in self.duplicate_ids_skipped],
            "not_regular_skipped": [entry.to_dict() for entry in self.not_regular_skipped],
        }


def collect_passages(records: Iterable[tuple[Passage, Location]], *, source: str) -> tuple[list[Passage], LoadReport]:
    """The passages to keep from ``records``, in order, and the report of what was skipped and why."""
    report = LoadReport(source)
    passages = list(keep_passages(records, report))
    return passages, report


def keep_passages(records: Iterable[tuple[Passage, Location]], report: LoadReport) -> Iterator[Passage]:
    """The passages to keep from ``records``, one at a time, recording in ``report`` what was skipped.

    Memory does not hold the passages, only a 128-bit hash of each kept id with where it was seen
    (about 100 bytes a passage in CPython: 2 GB for DPR's 21M). A 128-bit hash makes two distinct
    ids colliding practically impossible (about 10^-24 at 21M ids), so no id is kept or dropped
    wrongly. ``report.kept`` counts as passages are yielded.
    """
    files: dict[str, int] = {}
    names: list[str] = []
    first_seen: dict[int, int] = {}  # id hash -> file number << 40 | line (0 for none)
    for passage, location in records:
        report.read += 1
        if not passage.text.strip():
            report.empty_skipped.append(location)
            continue
        key = id_hash(passage.id)
        if (seen := first_seen.get(key)) is not None:
            line = seen & LINE_MASK
            report.duplicate_ids_skipped.append(Location(location.file, location.line, location.id, first_seen=Location(
                names[seen >> LINE_BITS], line or None, passage.id)))
            continue
        if (number := files.get(location.file)) is None:
            number = files[location.file] = len(names)
            names.append(location.file)
        first_seen[key] = number << LINE_BITS | (location.line or 0)
        report.kept += 1
        yield passage


LINE_BITS = 40
LINE_MASK = (1 << LINE_BITS) - 1


def id_hash(passage_id: str) -> int:
    """A 128-bit hash of a passage id (BLAKE2b), as an int."""
    return int.from_bytes(hashlib.blake2b(passage_id.encode("utf-8", "surrogatepass"), digest_size=16).digest())


def _where(location: Location, previous: Location | None = None) -> str:
    """``file:line``, shortened to ``:line`` when ``previous`` named the same file."""
    if location.line is None:
        return location.file
    if previous is not None and previous.file == location.file:
        return f":{location.line}"
    return f"{location.file}:{location.line}"


def _more(count: int) -> str:
    return f", and {count - SHOWN_LOCATIONS} more" if count > SHOWN_LOCATIONS else ""


def _places(locations: list[Location]) -> str:
    shown = locations[:SHOWN_LOCATIONS]
    places = [_where(location, shown[i - 1] if i else None) for i, location in enumerate(shown)]
    return ", ".join(places) + _more(len(locations))


def _duplicates(locations: list[Location]) -> str:
    described = []
    for location in locations[:SHOWN_LOCATIONS]:
        text = f"{location.id!r} at {_where(location)}"
        if (first := location.first_seen) is not None:
            same_file = first.file == location.file and first.line is not None
            text += f", first seen at {f'line {first.line}' if same_file else _where(first)}"
        described.append(text)
    return "; ".join(described) + _more(len(locations))


def not_regular_files(entries: list[SkippedFile]) -> str:
    """"2 files that are not regular files (docs/a.txt, a FIFO; docs/b.txt, a socket)"."""
    count = len(entries)
    named = "; ".join(f"{entry.file}, a {entry.kind}" for entry in entries[:SHOWN_LOCATIONS]) + _more(count)
    files = "file that is not a regular file" if count == 1 else "files that are not regular files"
    return f"{count} {files} ({named})"
