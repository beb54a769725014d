"""A fingerprint of a corpus's files, so an index can tell when its source has changed."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

BLOCK_BYTES = 1 << 20


def source_checksum(files: list[Path], root: Path | None = None) -> str:
    """The sha256 over the files' paths relative to ``root`` and their contents, in path order.

    ``root`` defaults to the files' common folder, so the checksum does not change when the corpus
    is moved or copied elsewhere, but does when a file is renamed, added, removed or edited. Files
    are read in blocks, never whole.
    """
    resolved = [Path(file).resolve() for file in files]
    if root is not None:
        base = Path(root).resolve()
    elif resolved:
        base = Path(os.path.commonpath([file.parent for file in resolved]))
    else:
        base = Path.cwd()
    named = sorted((file.relative_to(base).as_posix(), file) for file in resolved)
    total = hashlib.sha256()
    for name, file in named:
        # Hashing each file separately and feeding its digest frames the stream unambiguously:
        # no choice of names and contents can make two different sets of files hash alike.
        content = hashlib.sha256()
        with file.open("rb") as stream:
            while block := stream.read(BLOCK_BYTES):
                content.update(block)
        total.update(name.encode("utf-8") + b"\0" + content.digest())
    return total.hexdigest()
