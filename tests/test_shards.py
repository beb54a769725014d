"""BM25 built in shards: the same top k, to the bit, as one index of the whole corpus; resumable builds."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from winnow.errors import IndexLoadError, WinnowError
from winnow.index import BM25Index, build_bm25_index
from winnow.index import shards as shards_module
from winnow.index.shards import build_sharded_index, work_folder
from winnow.records import Passage

WORDS = ("river mountain glacier volcano piano violin coffee tea chess board tiger lion bridge tunnel planet comet "
         "orbit ring ice fire water stone music painting portrait museum city capital country island ocean desert "
         "forest winter summer harvest engine railway ship harbour castle king queen war peace treaty language "
         "grammar poem novel theatre opera dance bread cheese wine market bank coin gold silver copper").split()


def corpus(count=330, seed=7):
    rng = random.Random(seed)
    return [Passage(id=f"p{i}", title=" ".join(rng.choices(WORDS, k=2)).title(),
                    text=" ".join(rng.choices(WORDS, k=rng.randint(5, 40))) + ".") for i in range(count)]


def queries(count=60, seed=3):
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(1, 6))) for _ in range(count)]


def sharded(out, items, **options):
    return build_sharded_index(items, out, source="test", source_checksum="abc", progress=False,
                               report=lambda line: None, **options)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shards")
    build_bm25_index(corpus(), folder / "single", source="test", source_checksum="abc", progress=False)
    sharded(folder / "sharded", corpus(), shard_size=70)  # 5 shards, the last of 50
    return BM25Index.open(folder / "single"), BM25Index.open(folder / "sharded")


def test_sharded_search_equals_one_index_to_the_bit(pair):
    single, split = pair
    assert split.manifest["bm25"]["layout"] == "sharded" and split.manifest["bm25"]["shards"] == [70] * 4 + [50]
    for count in ("passages", "tokens"):
        assert split.manifest["counts"][count] == single.manifest["counts"][count]
    # bm25s's vocabulary may hold an empty term besides the words.
    assert 0 <= single.manifest["counts"]["vocabulary"] - split.manifest["counts"]["vocabulary"] <= 1
    for k in (1, 10, 100):
        one, many = single.search_many(queries(), k), split.search_many(queries(), k)
        for a, b in zip(one, many, strict=True):
            assert [c.passage.id for c in a] == [c.passage.id for c in b]
            assert [c.score for c in a] == [c.score for c in b]  # exactly: same floats, same sums
    assert split.get("p123") == single.get("p123") and list(split.passages) == list(single.passages)


def test_a_killed_build_resumes_from_the_last_finished_shard(tmp_path, monkeypatch, pair):
    written = []
    real = shards_module._write_shard

    def dies_on_the_third(folder, *args):
        if folder.name == "shard-0002":  # killed part-way: a shard folder without its marker
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "terms.npy").write_text("half written")
            raise RuntimeError("killed")
        written.append(folder.name)
        return real(folder, *args)

    monkeypatch.setattr(shards_module, "_write_shard", dies_on_the_third)
    with pytest.raises(RuntimeError, match="killed"):
        sharded(tmp_path / "idx", corpus(), shard_size=70)
    assert not (tmp_path / "idx").exists() and written == ["shard-0000", "shard-0001"]
    monkeypatch.setattr(shards_module, "_write_shard", lambda folder, *args: written.append(folder.name)
                        or real(folder, *args))
    sharded(tmp_path / "idx", corpus(), shard_size=70)
    assert written == ["shard-0000", "shard-0001", "shard-0002", "shard-0003", "shard-0004"]  # 0, 1 not redone
    assert not work_folder(tmp_path / "idx").exists()
    resumed = BM25Index.open(tmp_path / "idx")
    single = pair[0]
    assert [[c.passage.id for c in hits] for hits in resumed.search_many(queries(), 10)] == \
           [[c.passage.id for c in hits] for hits in single.search_many(queries(), 10)]


def test_another_shard_size_starts_over(tmp_path, monkeypatch):
    monkeypatch.setattr(shards_module, "_write_shard", lambda *args: (_ for _ in ()).throw(RuntimeError("x")))
    with pytest.raises(RuntimeError):
        sharded(tmp_path / "idx", corpus(40), shard_size=20)
    monkeypatch.undo()
    lines = []
    build_sharded_index(corpus(40), tmp_path / "idx", source="test", source_checksum="abc", progress=False,
                        report=lines.append, shard_size=30)
    assert any("a shard build of another source or settings" in line for line in lines)


def test_an_id_in_two_shards_is_refused(tmp_path):
    items = corpus(30) + [Passage("p3", "again")]
    with pytest.raises(WinnowError, match="passage id 'p3' occurs more than once .rows 4 and 31."):
        sharded(tmp_path / "idx", items, shard_size=10)
    assert not (tmp_path / "idx").exists()


def test_every_shard_file_is_required_and_checked(tmp_path):
    sharded(tmp_path / "idx", corpus(40), shard_size=15)
    manifest = json.loads((tmp_path / "idx" / "manifest.json").read_text())
    assert {"bm25/vocab.json", "bm25/shard-0002/indptr.npy", "passages/records.bin"} <= set(manifest["files"])
    from test_index import edit_manifest, reseal_file

    path = tmp_path / "idx" / "bm25" / "shard-0001" / "indptr.npy"
    np.save(path, np.load(path)[:-1])
    reseal_file(tmp_path / "idx", "bm25/shard-0001/indptr.npy")
    with pytest.raises(IndexLoadError, match="shard 1's score arrays"):
        BM25Index.open(tmp_path / "idx")
    edit_manifest(tmp_path / "idx", lambda m: m["files"].pop("bm25/shard-0001/indptr.npy"))
    with pytest.raises(IndexLoadError, match="does not list bm25/shard-0001/indptr.npy"):
        BM25Index.open(tmp_path / "idx")


def test_a_shard_without_a_word_to_index_and_a_corpus_without_any(tmp_path):
    empty = [Passage(f"e{i}", "the a of to") for i in range(10)]
    items = corpus(10) + empty + [Passage("z", "zebra crossing")]
    sharded(tmp_path / "idx", items, shard_size=10)  # the second shard has no term at all
    index = BM25Index.open(tmp_path / "idx")
    assert [c.passage.id for c in index.search("zebra", k=3)] == ["z"]
    with pytest.raises(WinnowError, match="no passage has a word to index"):
        sharded(tmp_path / "none", empty, shard_size=4)


def test_the_rebuild_hint_of_a_corrupt_sharded_index_rebuilds_the_same_index(tmp_path):
    sharded(tmp_path / "idx", corpus(40), shard_size=15, profile="pyserini")
    path = tmp_path / "idx" / "bm25" / "shard-0001" / "indptr.npy"
    path.write_bytes(path.read_bytes()[:-8])  # truncated: the manifest's size no longer matches
    with pytest.raises(IndexLoadError) as caught:
        BM25Index.open(tmp_path / "idx")
    assert caught.value.hint == (f"rebuild it with `winnow index test --out {tmp_path / 'idx'} --bm25-profile pyserini "
                                 "--shard-size 15 --overwrite`")


def test_the_rebuild_hint_of_a_dense_index_adds_its_embeddings_and_ann_indexes(tmp_path):
    from winnow.index.manifest import rebuild_hint

    manifest = {"source": "docs/", "source_options": {"chunk_words": 100}, "bm25": {"profile": "default"},
                "dense": {"preset": "e5", "dtype": "int8", "ann": {"hnsw": {"settings": {"M": 16, "efSearch": 0}}}}}
    assert rebuild_hint(tmp_path, manifest) == (
        f"rebuild it with `winnow index docs/ --out {tmp_path} --chunk-words 100 --overwrite`, then "
        f"`winnow embed {tmp_path} --encoder e5 --dense-storage int8`, then "
        f"`winnow ann {tmp_path} --ann hnsw --ann-set M=16 --ann-set efSearch=0`")
