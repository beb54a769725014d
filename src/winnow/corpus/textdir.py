"""Folders of ``.txt`` and ``.md`` files, each file cut into passages of about ``chunk_words`` words.

Passage ids are ``<relative/path>#<n>``: they depend only on the file's path and its own text, so
they stay stable across runs and when other files are added or edited.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

from ..errors import InputError
from ..records import Passage
from ..text import lone_surrogate
from .chunking import split_into_passages
from .lines import unreadable
from .meter import Meter
from .report import Location, SkippedFile

TEXT_SUFFIXES = (".txt", ".md")
REGULAR = "regular file"
UNREADABLE_HINT = "make it readable (e.g. chmod u+r), or move it out of the folder"
_SPECIAL_KINDS = {stat.S_IFIFO: "FIFO", stat.S_IFSOCK: "socket", stat.S_IFCHR: "character device",
                  stat.S_IFBLK: "block device", stat.S_IFDIR: "folder"}
_MARKDOWN_TITLE = re.compile(r"^#[ \t]+(.+?)[ \t#]*$", re.MULTILINE)


def list_text_files(folder: Path) -> tuple[list[Path], list[SkippedFile]]:
    """The ``.txt``/``.md`` files under ``folder``, recursively, sorted by relative path, and those
    skipped because they are not regular files (a FIFO would block the read forever, a device
    would never end). A symbolic link to a regular file is followed; a broken one is an error."""
    found, skipped = [], []
    for directory, subfolders, names in os.walk(folder, onerror=_raise_unreadable):
        subfolders[:] = [name for name in subfolders if not name.startswith(".")]  # don't descend
        for name in names:
            if name.startswith(".") or not name.lower().endswith(TEXT_SUFFIXES):
                continue
            file = Path(directory, name)
            if (kind := _file_kind(file)) == REGULAR:
                found.append(file)
            else:
                skipped.append(SkippedFile(str(file), kind))
    found.sort(key=lambda file: file.relative_to(folder).as_posix())
    skipped.sort(key=lambda entry: entry.file)
    return found, skipped


def _file_kind(file: Path) -> str:
    """What ``file`` is once symbolic links are followed: "regular file", "FIFO", "socket", …;
    an :class:`InputError` for a name that is not UTF-8 or a link that leads nowhere."""
    if lone_surrogate(str(file)) is not None:
        raise InputError(os.fsencode(file).decode("utf-8", "backslashreplace"),
                         "the file name is not UTF-8, so it cannot be a passage id",
                         hint="rename it, or move it out of the folder")
    try:
        mode = file.stat().st_mode
    except OSError as error:
        if file.is_symlink():
            raise InputError(file, _broken_link(file, error),
                             hint="remove the link or point it at a file, or move it out of the folder") from error
        raise unreadable(file, error, hint=UNREADABLE_HINT) from error
    if stat.S_ISREG(mode):
        return REGULAR
    return _SPECIAL_KINDS.get(stat.S_IFMT(mode), "special file")


def _broken_link(file: Path, error: OSError) -> str:
    if error.errno == errno.ELOOP:
        return "a symbolic link that leads back to itself (a loop)"
    return f"a symbolic link to {os.readlink(file)}, which does not exist"


def iter_text_passages(folder: Path, files: list[Path], chunk_words: int,
                       meter: Meter | None = None) -> Iterator[tuple[Passage, Location]]:
    """The passages of each file in turn. A file without words yields one empty passage, so the
    report counts it as skipped rather than losing it without a word. ``meter`` counts the bytes
    of the files read so far."""
    for file in files:
        relative = file.relative_to(folder).as_posix()
        text = read_utf8(file)
        if meter is not None:
            meter.file_done(file.stat().st_size)
        title = title_of(file, text)
        chunks = split_into_passages(text, chunk_words) or [""]
        for n, chunk in enumerate(chunks):
            passage = Passage(id=f"{relative}#{n}", text=chunk, title=title,
                              metadata={"source": relative, "chunk": n})
            yield passage, Location(str(file), None, passage.id)


def read_utf8(file: Path) -> str:
    try:
        data = file.read_bytes()
    except OSError as error:
        raise unreadable(file, error, hint=UNREADABLE_HINT) from error
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
    raise InputError(error.filename, f"cannot read this folder: {error.strerror}",
                     hint="make it readable (e.g. chmod u+rx), or move it out of the corpus folder") from error
