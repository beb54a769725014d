"""The files of an open index, watched for changes under a long-running process (``winnow serve``).

An index is opened once: its manifest and files are checked then (:mod:`.manifest`, :mod:`.verified`)
and its arrays memory-mapped. A file edited afterwards is not checked again, and a mapped file that
shrinks makes the next read of a page past its new end a SIGBUS, which kills the process with
nothing logged. :class:`IndexWatch` keeps what the open saw of each file (size, mtime_ns, ctime_ns,
inode: any write changes the ctime, any replacement the inode) and :meth:`IndexWatch.changed` names
the first file that is no longer so, for the server to refuse the request (503) before anything
reads the maps. The check is a ``stat`` a file, so a request pays microseconds; a file changed
between the check and a read can still fault, which only a private copy of the index would avoid.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from .manifest import MANIFEST, read_manifest
from .verified import file_states


@dataclass
class IndexWatch:
    """What the open saw of each file of the index in ``folder``; ``interval`` seconds between stats
    at most (0: every call)."""

    folder: Path
    states: dict[str, list[int]]
    interval: float = 0.0
    _checked_at: float = field(default=0.0, repr=False)
    _changed: str | None = field(default=None, repr=False)

    @classmethod
    def of(cls, folder: str | Path, interval: float = 0.0) -> IndexWatch:
        """The watch of the index folder ``folder`` as it is now (its manifest and every file it lists)."""
        folder = Path(folder)
        manifest = read_manifest(folder, verify=False)
        return cls(folder, file_states(folder, [MANIFEST, *sorted(manifest["files"])]), interval)

    def changed(self) -> str | None:
        """The first file (relative to the folder) changed, replaced or removed since the open, or None.
        Once a change is seen it is reported until the process reopens the index."""
        if self._changed is not None:
            return self._changed
        now = time.monotonic()
        if self.interval and now - self._checked_at < self.interval:
            return None
        self._checked_at = now
        for name, seen in self.states.items():
            try:
                stat = os.stat(self.folder / name)
            except OSError:
                self._changed = name
                return name
            if [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino] != seen:
                self._changed = name
                return name
        return None


def watch_open_index(folder: str | Path, interval: float = 0.0) -> IndexWatch | None:
    """The watch of ``folder`` when it is an index folder (a pipeline built from parts has none)."""
    folder = Path(folder)
    return IndexWatch.of(folder, interval) if (folder / MANIFEST).is_file() else None
