"""The passage store: rows and ids fetched from disk, colliding hashes, repeated ids, damaged files."""

from __future__ import annotations

import numpy as np
import pytest

from winnow.errors import IndexLoadError, WinnowError
from winnow.index import store as store_module
from winnow.index.store import PassageStore, PassageStoreWriter
from winnow.records import Passage

PASSAGES = [Passage(f"id-{i}", f"text number {i} ünïcode", f"T{i}", {"n": i}) for i in range(50)]


def write(folder, passages=PASSAGES):
    writer = PassageStoreWriter(folder)
    for row, passage in enumerate(passages):
        assert writer.add(passage) == row
    return writer.finish()


def test_rows_and_ids_come_back_as_written(tmp_path):
    section = write(tmp_path)
    assert section["rows"] == len(PASSAGES) and section["id_hash"] == "blake2b-64"
    store = PassageStore.open(tmp_path, len(PASSAGES), "rebuild")
    assert list(store) == PASSAGES and store[-1] == PASSAGES[-1] and store[3:6] == PASSAGES[3:6]
    assert all(store.row_of(p.id) == row for row, p in enumerate(PASSAGES))
    assert store.get("id-7") == PASSAGES[7] and store.get("id-999") is None and store.get("") is None
    assert "id-0" in store.ids and "nope" not in store.ids
    assert isinstance(store._data, np.memmap) and isinstance(store._ids, np.memmap)  # nothing read whole
    with pytest.raises(IndexError):
        store[len(PASSAGES)]


def test_ids_sharing_a_hash_still_find_their_own_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "id_hash64", lambda passage_id: len(passage_id) % 2)  # collide at will
    write(tmp_path)
    store = PassageStore.open(tmp_path, len(PASSAGES), "rebuild")
    assert [store.row_of(p.id) for p in PASSAGES] == list(range(len(PASSAGES)))
    assert store.row_of("id-99") is None


def test_a_repeated_id_is_refused_even_among_colliding_hashes(tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "id_hash64", lambda passage_id: 7)
    with pytest.raises(WinnowError, match="passage id 'id-3' occurs more than once .rows 4 and 51."):
        write(tmp_path, [*PASSAGES, Passage("id-3", "again")])


def test_an_empty_store_opens(tmp_path):
    write(tmp_path, [])
    assert len(PassageStore.open(tmp_path, 0, "rebuild")) == 0


def test_a_store_of_another_size_is_refused_by_shape(tmp_path):
    write(tmp_path)
    with pytest.raises(IndexLoadError, match=r"offsets.npy holds int64 \[51\], not int64 \[41\]; ids.npy holds"):
        PassageStore.open(tmp_path, 40, "rebuild it")


def test_offsets_beyond_the_records_are_refused(tmp_path):
    write(tmp_path)
    records = tmp_path / "passages" / "records.bin"
    records.write_bytes(records.read_bytes()[:-5])
    with pytest.raises(IndexLoadError, match="spans bytes 0-.* of a .*-byte records.bin"):
        PassageStore.open(tmp_path, len(PASSAGES), "rebuild it")
