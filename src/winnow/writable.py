"""Where an output can go: its folders are made, or the reason they cannot be is one clear line.

An ``--out`` inside a read-only folder, on a read-only file system or under an existing file would
otherwise surface as a ``PermissionError`` or ``NotADirectoryError`` traceback from deep inside a
writer; every writer creates its output's folders and first files through here instead.
"""

from __future__ import annotations

import errno
from pathlib import Path

from .errors import WinnowError

ELSEWHERE = "choose another output path (--out), or make that folder writable"


def make_parent(path: Path) -> None:
    """Create the folders above ``path``; a failure is one :class:`WinnowError` naming ``path``."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise cannot_write(path, exc) from exc


def cannot_write(path: Path, exc: OSError) -> WinnowError:
    """The error for an output that cannot be created, saying why in the user's terms."""
    existing = path.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        reason = f"{existing} is a file, not a folder"
    elif exc.errno == errno.EROFS:
        reason = f"{existing} is on a read-only file system"
    elif exc.errno in (errno.EACCES, errno.EPERM):
        reason = f"no permission to write in {existing}"
    else:
        reason = exc.strerror or str(exc)
    return WinnowError(f"cannot write {path}: {reason}", ELSEWHERE)
