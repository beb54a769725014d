"""Writing a file so that it appears whole or not at all: write a hidden sibling, then rename.

A rename within one directory is atomic on POSIX file systems, so a reader (or a run killed half-way)
sees the old file or the new one, never a truncated one.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable
from pathlib import Path


def write_text_atomic(path: str | Path, lines: Iterable[str]) -> int:
    """Write ``lines`` (each without its newline) to ``path`` as UTF-8; return how many were written."""
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    count = 0
    try:
        with temp.open("w", encoding="utf-8", newline="\n") as stream:
            for line in lines:
                stream.write(line)
                stream.write("\n")
                count += 1
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)  # also on KeyboardInterrupt: leave no stray temp file behind
        raise
    return count
