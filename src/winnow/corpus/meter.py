"""How far a reader has got through its input, for a progress bar with a rate and an ETA.

Readers advance a :class:`Meter` in the unit their input is measured in (bytes of a file as stored,
so a gzip file's compressed bytes; rows of a Parquet file), and the progress bar reads it. Plain
integer adds: cheap enough to do per line.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Meter:
    """``done`` of ``total`` units read (``total`` is ``None`` when the size is unknown)."""

    total: int | None = None
    done: int = 0
    unit: str = "bytes"
    base: int = 0  # units of the files already finished, when one meter spans several files

    def at(self, position: int) -> None:
        """The current file has been read up to ``position``."""
        self.done = self.base + position

    def file_done(self, size: int) -> None:
        """The current file is finished; the next starts after its ``size`` units."""
        self.base += size
        self.done = self.base
