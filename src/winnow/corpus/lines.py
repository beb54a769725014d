"""Reading a text file line by line with exact line numbers, for error messages that point at the line.

Each line is decoded on its own (rather than through a text-mode stream, which decodes in blocks) so
that a bad byte is reported on the line that holds it. ``.gz`` files are decompressed on the fly.
"""

from __future__ import annotations

import codecs
import gzip
import zlib
from collections.abc import Iterator
from pathlib import Path

from ..errors import InputError
from .meter import Meter

METER_EVERY = 1024  # lines between progress updates of a gzip file (its position costs a call)


def read_lines(path: Path, meter: Meter | None = None) -> Iterator[tuple[int, str]]:
    """Each line of the UTF-8 file ``path`` (gzip if it ends in ``.gz``) with its 1-based number.

    Line endings are removed; a UTF-8 byte-order mark at the start is dropped. ``meter``, if
    given, follows the bytes read from the file as stored (compressed bytes for gzip), so a
    progress bar can show a rate and an ETA against the file's size. Lines are read one at a
    time: memory does not grow with the file.
    """
    compressed = path.name.lower().endswith(".gz")
    try:
        raw_stream = open(path, "rb")  # noqa: SIM115 - closed by the with block below
    except OSError as error:
        raise unreadable(path, error, hint="make it readable (e.g. chmod u+r) or give another file") from error
    stream = gzip.GzipFile(fileobj=raw_stream, mode="rb") if compressed else raw_stream
    position = 0
    with raw_stream, stream:
        try:
            for number, raw in enumerate(stream, start=1):
                if meter is not None:
                    if not compressed:
                        position += len(raw)
                        meter.at(position)
                    elif number % METER_EVERY == 0:
                        meter.at(raw_stream.tell())
                if number == 1:
                    raw = raw.removeprefix(codecs.BOM_UTF8)
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as error:
                    raise InputError(path, f"not UTF-8 text ({error.reason} at column {error.start + 1})",
                                     line=number, hint="save the file as UTF-8") from error
                yield number, line.rstrip("\r\n")
        except (gzip.BadGzipFile, EOFError, zlib.error) as error:
            raise InputError(path, f"not a readable gzip file: {error}",
                             hint="re-compress it with gzip, or give the uncompressed file") from error
        except OSError as error:  # after BadGzipFile, which is an OSError too
            raise unreadable(path, error,
                             hint="check the disk, or copy the file elsewhere and give the copy") from error


def unreadable(path: Path, error: OSError, *, hint: str) -> InputError:
    """The error for a file the system will not let us read (permissions, a read error, a folder)."""
    return InputError(path, f"cannot read this file: {error.strerror or error}", hint=hint)
