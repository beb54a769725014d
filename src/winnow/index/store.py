"""The passage store: an index's passages on disk, fetched by row or id without loading the corpus.

Three files in ``passages/`` (row i is BM25 document i and dense embedding row i):

* ``records.bin``: every passage as compact UTF-8 JSON (``Passage.to_dict()``), one after another;
* ``offsets.npy``: int64 ``[rows + 1]``, row i's record is ``records.bin[offsets[i]:offsets[i + 1]]``;
* ``ids.npy``: the id index, ``[2, rows]`` uint64: the ids' hashes sorted (the first 8 bytes of
  BLAKE2b of each id), and under each hash the row it belongs to. Hashes are one contiguous run, so
  a binary search over the memory map reads a few pages and copies nothing.

All three are memory-mapped: opening costs a few header reads whatever the corpus size, and memory
is what the operating system pages in. A row is two offset reads and one slice (O(1)); an id is a
binary search over the sorted hashes (O(log n), about 25 probes at 21M) and a comparison with the
stored id, so two ids sharing a hash (about 10^-5 likely at 21M) still find their own rows. The
writer streams records to disk as they come; only the offsets and hashes (16 bytes a passage) are
kept in memory until :meth:`PassageStoreWriter.finish` sorts and writes them. The store is written
inside the index's temporary build folder, so it appears whole or not at all
(:func:`winnow.atomic.atomic_folder`).
"""

from __future__ import annotations

import hashlib
import json
from array import array
from collections.abc import Container, Iterator, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, BinaryIO, Protocol, overload

import numpy as np

from ..errors import IndexLoadError, WinnowError
from ..records import Passage
from .manifest import read_manifest, rebuild_hint
from .store_layout import IDS, OFFSETS, RECORDS, STORE_DIR

ID_HASH = "blake2b-64"


def id_hash64(passage_id: str) -> int:
    """The id's 64-bit BLAKE2b hash, as the store sorts and searches it."""
    return int.from_bytes(hashlib.blake2b(passage_id.encode("utf-8", "surrogatepass"), digest_size=8).digest(),
                          "little")


#: Decoded passages a store keeps (about 1 KB each).
RECENT_PASSAGES = 4096

class PassageStoreWriter:
    """Appends passages to ``folder/passages/`` in row order; :meth:`finish` writes the id index."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder / STORE_DIR
        self.folder.mkdir(parents=True, exist_ok=True)
        self._records: BinaryIO = (self.folder / RECORDS).open("wb")
        self._offsets = array("q", [0])
        self._hashes = array("Q")

    def __len__(self) -> int:
        return len(self._hashes)

    def add(self, passage: Passage) -> int:
        """Write ``passage`` as the next row and return its row number."""
        data = json.dumps(passage.to_dict(), ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        self._records.write(data)
        self._offsets.append(self._offsets[-1] + len(data))
        self._hashes.append(id_hash64(passage.id))
        return len(self._hashes) - 1

    def finish(self) -> dict[str, Any]:
        """Close the records, write offsets and the sorted id index; refuse a repeated id.

        Returns the manifest's ``store`` section."""
        self._records.close()
        rows = len(self._hashes)
        offsets = np.frombuffer(self._offsets, dtype=np.int64)
        np.save(self.folder / OFFSETS, offsets)
        hashes = np.frombuffer(self._hashes, dtype=np.uint64)
        order = np.argsort(hashes, kind="stable")
        table = np.empty((2, rows), dtype=np.uint64)
        table[0] = hashes[order]
        table[1] = order
        check_unique(table, self.folder / RECORDS, offsets)
        np.save(self.folder / IDS, table)
        self._offsets, self._hashes = array("q"), array("Q")
        return {"rows": rows, "id_hash": ID_HASH, "bytes": int(offsets[-1])}


def check_unique(table: np.ndarray, records: Path, offsets: np.ndarray) -> None:
    """Refuse two rows with the same id. Only rows whose hashes are equal can share an id, so only
    runs of equal hashes are read back and their ids compared (none at all, nearly always)."""
    same = np.flatnonzero(table[0, 1:] == table[0, :-1])
    if not len(same):
        return
    data = np.memmap(records, dtype=np.uint8, mode="r") if offsets[-1] else np.zeros(0, np.uint8)
    # Each position p in `same` joins sorted entries p and p + 1; consecutive positions form one run.
    starts = same[np.r_[True, np.diff(same) > 1]]
    ends = same[np.r_[np.diff(same) > 1, True]] + 1
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        first_row: dict[str, int] = {}
        for row in sorted(int(row) for row in table[1, start:end + 1]):
            passage_id = _record(data, offsets, row)["id"]
            if passage_id in first_row:
                raise WinnowError(f"passage id {passage_id!r} occurs more than once (rows {first_row[passage_id] + 1} "
                                  f"and {row + 1})", "passage ids must be unique within a corpus")
            first_row[passage_id] = row


def _record(data: np.ndarray, offsets: np.ndarray, row: int) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(data[int(offsets[row]):int(offsets[row + 1])].tobytes())
    return parsed


class PassageStore(Sequence[Passage]):
    """An index's passages, memory-mapped: ``store[row]``, ``store.get(id)``, ``id in store.ids``, ``len``."""

    def __init__(self, folder: Path, rows: int, data: np.ndarray, offsets: np.ndarray, ids: np.ndarray) -> None:
        self.folder = folder
        self.rows = rows
        self._data = data
        self._offsets = offsets
        self._ids = ids
        # Recently read passages, kept decoded: a question's passages are read by its first-stage
        # list and again by its method's retrieval (Passage is frozen, so sharing one is safe).
        self._read = lru_cache(maxsize=RECENT_PASSAGES)(self._decode)

    @classmethod
    def open(cls, index: Path, rows: int, rebuild: str) -> PassageStore:
        """Map the store of the index folder ``index``, which must hold ``rows`` passages; the
        shapes of the three files are checked against each other (cheap: no record is read)."""
        folder = index / STORE_DIR
        try:
            offsets = np.load(folder / OFFSETS, mmap_mode="r", allow_pickle=False)
            ids = np.load(folder / IDS, mmap_mode="r", allow_pickle=False)
            size = (folder / RECORDS).stat().st_size
            data = np.memmap(folder / RECORDS, dtype=np.uint8, mode="r") if size else np.zeros(0, np.uint8)
        except (OSError, ValueError, EOFError) as exc:
            raise IndexLoadError(f"{folder} is corrupt: {exc}", rebuild) from exc
        problems = []
        if offsets.dtype != np.int64 or offsets.shape != (rows + 1,):
            problems.append(f"{OFFSETS} holds {offsets.dtype} {list(offsets.shape)}, not int64 [{rows + 1}]")
        elif int(offsets[0]) != 0 or int(offsets[-1]) != size:
            problems.append(f"{OFFSETS} spans bytes {int(offsets[0])}-{int(offsets[-1])} of a {size}-byte {RECORDS}")
        if ids.dtype != np.uint64 or ids.shape != (2, rows):
            problems.append(f"{IDS} holds {ids.dtype} {list(ids.shape)}, not uint64 [2, {rows}]")
        if problems:
            raise IndexLoadError(f"{folder} is inconsistent with the index's {rows} passages: {'; '.join(problems)}",
                                 rebuild)
        return cls(folder, rows, data, offsets, ids)

    def __len__(self) -> int:
        return self.rows

    @overload
    def __getitem__(self, row: int) -> Passage: ...

    @overload
    def __getitem__(self, row: slice) -> list[Passage]: ...

    def __getitem__(self, row: int | slice) -> Passage | list[Passage]:
        if isinstance(row, slice):
            return [self[i] for i in range(*row.indices(self.rows))]
        if not -self.rows <= row < self.rows:
            raise IndexError(f"row {row} is outside the store's {self.rows} passages")
        return self._read(row % self.rows)

    def _decode(self, row: int) -> Passage:
        start, end = int(self._offsets[row]), int(self._offsets[row + 1])
        try:
            if not 0 <= start <= end <= len(self._data):
                raise ValueError(f"offsets {start}-{end} outside {len(self._data)} bytes")
            return Passage.from_dict(json.loads(self._data[start:end].tobytes()))
        except (ValueError, KeyError, TypeError) as exc:
            raise IndexLoadError(f"{self.folder / RECORDS}, passage row {row + 1} is corrupt: {exc!r}",
                                 "rebuild the index with `winnow index SOURCE --out DIR --overwrite`") from exc

    def __iter__(self) -> Iterator[Passage]:
        for row in range(self.rows):
            yield self[row]

    def row_of(self, passage_id: str) -> int | None:
        """The row of ``passage_id``, or ``None`` if the store has no such passage."""
        key = np.uint64(id_hash64(passage_id))
        hashes = self._ids[0]
        position = int(np.searchsorted(hashes, key, side="left"))
        while position < self.rows and hashes[position] == key:
            row = int(self._ids[1, position])
            if self[row].id == passage_id:
                return row
            position += 1
        return None

    def get(self, passage_id: str) -> Passage | None:
        row = self.row_of(passage_id)
        return None if row is None else self[row]

    def has_id(self, passage_id: str) -> bool:
        return self.row_of(passage_id) is not None

    @property
    def ids(self) -> StoreIds:
        """The store's ids as a container: ``passage_id in store.ids``."""
        return StoreIds(self)


class StoreIds(Container[str]):
    """``id in ids`` looked up in a :class:`PassageStore` (on disk, nothing read whole)."""

    def __init__(self, store: PassageStore) -> None:
        self.store = store

    def __contains__(self, passage_id: object) -> bool:
        return isinstance(passage_id, str) and self.store.has_id(passage_id)


def open_passage_store(index: Path) -> PassageStore:
    """The passage store of the index folder ``index``, after the manifest's checks (no BM25 arrays loaded)."""
    manifest = read_manifest(index)
    return PassageStore.open(index, manifest["counts"]["passages"], rebuild_hint(index, manifest))


def merge_stores(parts: list[Path], index: Path) -> dict[str, Any]:
    """Concatenate the stores of ``parts`` (each a folder holding a ``passages/`` store, in row order)
    into ``index/passages/``; refuse an id that two parts share. Returns the manifest's ``store`` section.

    Records are copied in blocks; the offsets are shifted, and the parts' sorted hashes merged into
    one sorted index (16 bytes a passage in memory while sorting)."""
    folder = index / STORE_DIR
    folder.mkdir(parents=True, exist_ok=True)
    offsets = [np.zeros(1, dtype=np.int64)]
    hashes, rows = [], []
    base_bytes = base_rows = 0
    with (folder / RECORDS).open("wb") as out:
        for part in parts:
            with (part / STORE_DIR / RECORDS).open("rb") as records:
                while block := records.read(1 << 24):
                    out.write(block)
            local = np.load(part / STORE_DIR / OFFSETS)
            offsets.append(local[1:] + base_bytes)
            table = np.load(part / STORE_DIR / IDS)
            hashes.append(table[0])
            rows.append(table[1] + np.uint64(base_rows))
            base_bytes += int(local[-1])
            base_rows += len(local) - 1
    all_offsets = np.concatenate(offsets)
    np.save(folder / OFFSETS, all_offsets)
    all_hashes, all_rows = np.concatenate(hashes), np.concatenate(rows)
    order = np.lexsort((all_rows, all_hashes))
    table = np.empty((2, base_rows), dtype=np.uint64)
    table[0], table[1] = all_hashes[order], all_rows[order]
    check_unique(table, folder / RECORDS, all_offsets)
    np.save(folder / IDS, table)
    return {"rows": base_rows, "id_hash": ID_HASH, "bytes": base_bytes}


class PassageLookup(Protocol):
    """Passages by id: Winnow's store, or what another engine stores (a Lucene index of Pyserini's)."""

    def __len__(self) -> int: ...

    def get(self, passage_id: str) -> Passage | None: ...


class PassagesById:
    """``len`` and ``get`` of an index whose passages come from ``self.passages``; an id it lacks is
    refused naming the index."""

    path: Path
    passages: PassageLookup

    def __len__(self) -> int:
        return len(self.passages)

    def get(self, passage_id: str) -> Passage:
        """The passage ``passage_id``; WinnowError if the index has none."""
        passage = self.passages.get(passage_id)
        if passage is None:
            raise WinnowError(f"no passage with id {passage_id!r} in the index {self.path}",
                              "ids are those of the corpus the index was built from")
        return passage
