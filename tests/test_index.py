"""The BM25 index: search quality basics, atomic builds, and refusal of corrupt indexes."""

import json

import bm25s
import pytest

from winnow.errors import IndexLoadError, WinnowError
from winnow.index import BM25Index, build_bm25_index
from winnow.records import Passage

TOPICS = {
    "run": ("Running", "Running is a method of terrestrial locomotion allowing humans to move rapidly on foot."),
    "volcano": ("Volcano", "A volcano is a rupture in the crust of a planet that lets lava and ash escape."),
    "piano": ("Piano", "The piano is a keyboard instrument whose strings are struck by hammers."),
    "coffee": ("Coffee", "Coffee is a drink brewed from roasted coffee beans, the seeds of berries."),
    "glacier": ("Glacier", "A glacier is a persistent body of dense ice that moves under its own weight."),
    "chess": ("Chess", "Chess is a board game for two players on a checkered board of 64 squares."),
    "tiger": ("Tiger", "The tiger is the largest living cat species, with dark stripes on orange fur."),
    "bridge": ("Bridge", "A bridge is a structure built to span a river, road or valley."),
}


def passages():
    return [Passage(id=k, title=t, text=x) for k, (t, x) in TOPICS.items()]


def build(out, items=None, **options):
    return build_bm25_index(items or passages(), out, source="test", source_checksum="abc", progress=False,
                            **options)


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    out = tmp_path_factory.mktemp("idx") / "index"
    build(out)
    return BM25Index.open(out)


def test_search_finds_the_passage_and_scores_descend(index):
    hits = index.search("which instrument has hammers and strings", k=3)
    assert hits.candidates[0].passage.id == "piano"
    scores = [c.score for c in hits]
    assert scores == sorted(scores, reverse=True)
    assert [c.rank_of("bm25") for c in hits] == list(range(1, len(hits) + 1))


def test_stemming_and_title_are_indexed(index):
    assert index.search("runs", k=1).candidates[0].passage.id == "run"  # "runs" and "Running" share a stem
    assert index.search("Glacier", k=1).candidates[0].passage.id == "glacier"


def test_only_matching_passages_are_returned(index):
    hits = index.search("volcano", k=8)
    assert [c.passage.id for c in hits] == ["volcano"]


def test_stop_words_and_unknown_terms_give_an_empty_list(index):
    assert len(index.search("the of and", k=5)) == 0
    assert len(index.search("zzxqw", k=5)) == 0


def test_k_larger_than_the_corpus(index):
    assert len(index.search("a board game or a drink or a cat", k=100)) == 3


def test_search_many_equals_search(index):
    queries = ["coffee beans", "largest cat", "river span", "the"]
    batch = index.search_many(queries, k=3)
    for query, hits in zip(queries, batch):
        single = index.search(query, k=3)
        assert [(c.passage.id, c.score) for c in hits] == [(c.passage.id, c.score) for c in single]


def test_bad_k_is_an_error(index):
    with pytest.raises(WinnowError, match="k must be at least 1"):
        index.search("coffee", k=0)


def test_get_and_manifest(index):
    assert index.get("tiger").title == "Tiger"
    with pytest.raises(WinnowError, match="'nope'"):
        index.get("nope")
    manifest = index.manifest
    assert manifest["counts"]["passages"] == len(TOPICS) == len(index)
    assert manifest["bm25"]["k1"] == 0.9 and manifest["bm25"]["b"] == 0.4
    assert manifest["bm25"]["method"] == "lucene" and manifest["source_checksum"] == "abc"
    assert "passages.jsonl" in manifest["files"]
    index.verify()


def test_ids_and_order_survive_a_rebuild(tmp_path):
    build(tmp_path / "a")
    build(tmp_path / "b")
    a, b = BM25Index.open(tmp_path / "a"), BM25Index.open(tmp_path / "b")
    assert [p.id for p in a.passages] == [p.id for p in b.passages]
    assert [c.passage.id for c in a.search("ice body", 3)] == [c.passage.id for c in b.search("ice body", 3)]


def test_existing_folder_needs_overwrite(tmp_path):
    out = tmp_path / "index"
    build(out)
    with pytest.raises(WinnowError, match="--overwrite"):
        build(out)
    build(out, items=passages()[:3], overwrite=True)
    assert len(BM25Index.open(out)) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index"]  # no temp or old folders left


def test_a_build_that_dies_leaves_nothing_behind(tmp_path, monkeypatch):
    # A crash mid-build cannot be produced on demand; make bm25s fail while saving.
    def explode(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(bm25s.BM25, "save", explode)
    with pytest.raises(RuntimeError, match="disk full"):
        build(tmp_path / "index")
    assert list(tmp_path.iterdir()) == []


def test_a_failed_overwrite_keeps_the_old_index(tmp_path, monkeypatch):
    out = tmp_path / "index"
    build(out)
    monkeypatch.setattr(bm25s.BM25, "save", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("boom")))
    with pytest.raises(RuntimeError):
        build(out, overwrite=True)
    assert len(BM25Index.open(out)) == len(TOPICS)


@pytest.fixture
def built(tmp_path):
    out = tmp_path / "index"
    build(out)
    return out


def test_missing_folder(tmp_path):
    with pytest.raises(IndexLoadError, match="no index folder.*winnow index"):
        BM25Index.open(tmp_path / "nothing")


def test_missing_manifest(built):
    (built / "manifest.json").unlink()
    with pytest.raises(IndexLoadError, match="manifest.json is missing"):
        BM25Index.open(built)


def test_unparseable_manifest(built):
    (built / "manifest.json").write_text("{not json")
    with pytest.raises(IndexLoadError, match="corrupt.*--overwrite"):
        BM25Index.open(built)


def test_wrong_format_version(built):
    manifest = json.loads((built / "manifest.json").read_text())
    manifest["format_version"] = 99
    (built / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexLoadError, match="format version 99"):
        BM25Index.open(built)


def test_missing_file(built):
    (built / "passages.jsonl").unlink()
    with pytest.raises(IndexLoadError, match="passages.jsonl is missing"):
        BM25Index.open(built)


def test_truncated_file(built):
    path = built / "passages.jsonl"
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(IndexLoadError, match="passages.jsonl has .* bytes"):
        BM25Index.open(built)


def test_verify_catches_a_flipped_byte(built):
    path = built / "passages.jsonl"
    path.write_bytes(path.read_bytes().replace(b"lava and ash", b"lava and asH"))
    index = BM25Index.open(built)  # same size: the cheap check passes
    with pytest.raises(IndexLoadError, match="passages.jsonl does not match its recorded sha256"):
        index.verify()


def test_not_a_winnow_manifest(built):
    (built / "manifest.json").write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(IndexLoadError, match="not a Winnow index"):
        BM25Index.open(built)


def test_no_passages_is_an_error(tmp_path):
    with pytest.raises(WinnowError, match="no passages"):
        build_bm25_index([], tmp_path / "x", source="t", source_checksum="", progress=False)
