"""Where an index keeps its passage store: the folder and file names of ``passages/``.

The store (:mod:`.store`) writes and reads these files; the manifest (:mod:`.manifest`) lists them among
the files an index must have. Both import the names from here, so neither imports the other to learn them.
"""

from __future__ import annotations

STORE_DIR = "passages"
RECORDS = "records.bin"
OFFSETS = "offsets.npy"
IDS = "ids.npy"
STORE_FILES = tuple(f"{STORE_DIR}/{name}" for name in (RECORDS, OFFSETS, IDS))
