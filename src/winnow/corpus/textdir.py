"""Folders of ``.txt`` and ``.md`` files, each file cut into passages of about ``chunk_words`` words.

Passage ids are ``<relative/path>#<n>``: they depend only on the file's path and its own text, so
they stay stable across runs and when other files are added or edited.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

from ..errors import InputError, WinnowError
from ..records import Passage
from .chunking import split_into_passages
from .corpus import Corpus
from .report import Location, collect_passages

TEXT_SUFFIXES = (".txt", ".md")
_MARKDOWN_TITLE = re.compile(r"^#[ \t]+(.+?)[ \t#]*$", re.MULTILINE)


def load_text_folder(folder: Path, *, chunk_words: int, source: str | None = None) -> Corpus:
    """The passages of every ``.txt``/``.md`` file under ``folder``; hidden files and folders are skipped."""
    label = source if source is not None else str(folder)
    files = list_text_files(folder)
    if not files:
        raise WinnowError(f"{label}: no .txt or .md files in this folder",
                          "a folder corpus is read from its .txt and .md files (hidden ones are skipped)")
    passages, report = collect_passages(iter_text_passages(folder, files, chunk_words), source=label)
    return Corpus(passages, label, "textdir", files, report)


def list_text_files(folder: Path) -> list[Path]:
    """The ``.txt``/``.md`` files under ``folder``, recursively, sorted by relative path."""
    found = []
    for directory, subfolders, names in os.walk(folder, onerror=_raise_unreadable):
        subfolders[:] = [name for name in subfolders if not name.startswith(".")]  # don't descend
        found += [Path(directory, name) for name in names
                  if not name.startswith(".") and name.lower().endswith(TEXT_SUFFIXES)]
    return sorted(found, key=lambda file: file.relative_to(folder).as_posix())


def iter_text_passages(folder: Path, files: list[Path], chunk_words: int) -> Iterator[tuple[Passage, Location]]:
    """The passages of each file in turn. A file without words yields one empty passage, so the
    report counts it as skipped rather than losing it without a word."""
    for file in files:
        relative = file.relative_to(folder).as_posix()
        text = read_utf8(file)
        title = title_of(file, text)
        chunks = split_into_passages(text, chunk_words) or [""]
        for n, chunk in enumerate(chunks):
            passage = Passage(id=f"{relative}#{n}", text=chunk, title=title,
                              metadata={"source": relative, "chunk": n})
            yield passage, Location(str(file), None, passage.id)


def read_utf8(file: Path) -> str:
    data = file.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise InputError(file, f"not UTF-8 text ({error.reason}, byte 0x{data[error.start]:02x})", line=line,
                         hint="save it as UTF-8, or move it out of the folder") from error


def title_of(file: Path, text: str) -> str:
    """The first ``# heading`` of a Markdown file, else the file name with ``_`` and ``-`` as spaces."""
    if file.suffix.lower() == ".md" and (heading := _MARKDOWN_TITLE.search(text)):
        return heading.group(1)
    return file.stem.replace("_", " ").replace("-", " ")


def _raise_unreadable(error: OSError) -> None:
    # os.walk skips folders it cannot list unless told otherwise: that would lose files silently.
    raise InputError(error.filename, f"cannot read this folder: {error.strerror}") from error
