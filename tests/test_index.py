"""The BM25 index: search quality basics, atomic builds, and refusal of corrupt indexes.

Every index here is built for real from a dozen short passages on distinct topics.
"""

import json
import math
import os
import shutil

import bm25s
import numpy as np
import pytest

from winnow import atomic
from winnow.errors import IndexLoadError, WinnowError
from winnow.index import BM25Index, build_bm25_index
from winnow.index import manifest as manifest_module
from winnow.index.analysis import LUCENE_STOPWORDS, indexed_text, make_stemmer, tokenize_corpus, tokenize_queries
from winnow.index.manifest import file_sha256, manifest_checksum
from winnow.index.verified import VERIFIED, cached_record, forget_verified
from winnow.records import Passage, Query

TOPICS = {
    "running": ("Running", "Running is a method of terrestrial locomotion allowing humans to move rapidly on foot."),
    "marathon": ("Marathon", "A marathon is a long-distance run of 42 kilometres through city streets."),
    "volcano": ("Volcano", "A volcano is a rupture in the crust of a planet that lets lava and ash escape."),
    "piano": ("Piano", "The piano is a keyboard instrument whose strings are struck by hammers."),
    "coffee": ("Coffee", "Coffee is a drink brewed from roasted coffee beans, the seeds of berries."),
    "glacier": ("Glacier", "A glacier is a persistent body of dense ice that moves under its own weight."),
    "chess": ("Chess", "Chess is a board game for two players on a checkered board of 64 squares."),
    "tiger": ("Tiger", "The tiger is the largest living cat species, with dark stripes on orange fur."),
    "bridge": ("Bridge", "A bridge is a structure built to span a river, road or valley."),
    "photosynthesis": ("Photosynthesis", "Plants turn sunlight, water and carbon dioxide into sugar and oxygen."),
    "saturn": ("Saturn", "Saturn is the sixth planet from the Sun, famous for its bright rings of ice."),
    "penicillin": ("Penicillin", "Penicillin, discovered by Alexander Fleming, was the first antibiotic."),
}
REBUILD_HINT = "winnow index SOURCE --out DIR"


def passages():
    return [Passage(id=k, title=t, text=x, metadata={"topic": k}) for k, (t, x) in TOPICS.items()]


def build(out, items=None, **options):
    options.setdefault("progress", False)
    return build_bm25_index(items or passages(), out, source="test", source_checksum="abc", **options)


def ids(hits):
    return [c.passage.id for c in hits]


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    out = tmp_path_factory.mktemp("idx") / "index"
    build(out, load_report={"passages": len(TOPICS), "skipped": []})
    return BM25Index.open(out)


# --- search ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("stemmer, stopwords", [("snowball-english", "en"), ("porter", list(LUCENE_STOPWORDS))])
def test_query_terms_are_bm25s_terms(stemmer, stopwords):
    # Queries skip bm25s.tokenize (its hidden progress bars lock across threads): the terms must
    # still be the ones it gives, or a query term would miss its indexed passage term.
    texts = [indexed_text(p) for p in passages()] + [
        "Who WROTE the U.S. constitution's 2nd draft in 1787?", "", "a an the", "x y z", "naïve café Zürich 東京 Ωμέγα",
        "it's under_score and hyphen-ated words, running runners ran", "\u00bd \u2160 ²³ 4th"]
    expected = bm25s.tokenize(texts, stopwords=stopwords, stemmer=make_stemmer(stemmer), return_ids=False,
                              show_progress=False)
    assert tokenize_queries(texts, make_stemmer(stemmer), stopwords) == expected



def test_search_finds_the_passage_and_scores_descend(index):
    hits = index.search("which instrument has hammers and strings", k=3)
    assert ids(hits)[0] == "piano"
    scores = [c.score for c in hits]
    assert scores == sorted(scores, reverse=True)
    assert [c.rank_of("bm25") for c in hits] == list(range(1, len(hits) + 1))
    assert all(c.scores[0].stage == "bm25" for c in hits)


@pytest.mark.parametrize("query, expected", [
    ("who discovered the first antibiotic", "penicillin"),
    ("planet with rings", "saturn"),
    ("how do plants make oxygen from sunlight", "photosynthesis"),
    ("board game with 64 squares", "chess"),
    ("molten lava", "volcano"),
])
def test_each_topic_is_found_first(index, query, expected):
    assert ids(index.search(query, k=3))[0] == expected


def test_stemming_matches_word_forms(index):
    # "running" and "run" share the Snowball stem "run": the marathon passage only says "run".
    assert set(ids(index.search("running", k=5))) == {"running", "marathon"}
    assert ids(index.search("runs", k=1)) == ["running"]  # the title "Running" counts as well as the text
    assert ids(index.search("antibiotics", k=1)) == ["penicillin"]


def test_stop_words_do_not_change_the_result(index):
    bare, wordy = index.search("piano", k=5), index.search("the piano of a", k=5)
    assert [(c.passage.id, c.score) for c in bare] == [(c.passage.id, c.score) for c in wordy]


def test_the_title_is_indexed(index):
    assert ids(index.search("Glacier", k=1)) == ["glacier"]


def test_only_matching_passages_are_returned(index):
    # bm25s pads its top k with score-0 passages; none of those may come back as "retrieved".
    assert ids(index.search("volcano", k=12)) == ["volcano"]


@pytest.mark.parametrize("query", ["the of and", "", "   ", "zzxqw", "!!!", "a"])
def test_stop_words_unknown_terms_and_empty_queries_give_an_empty_list(index, query):
    hits = index.search(query, k=5)
    assert len(hits) == 0 and hits.query.text == query


def test_k_larger_than_the_corpus(index):
    assert len(index.search("a board game or a drink or a cat", k=100)) == 3
    assert len(index.search("is", k=1000)) == 0  # "is" is a stop word


def test_k_smaller_than_the_matches(index):
    hits = index.search("ice planet river", k=2)
    assert len(hits) == 2


def test_scores_are_lucene_bm25_with_k1_0_9_and_b_0_4(index):
    """Recompute one score by hand: idf = ln(1 + (N - df + 0.5) / (df + 0.5)),
    tf part = tf / (tf + k1 (1 - b + b dl / avgdl)), over the stemmed, stop-word-free terms."""
    items = passages()
    tokens = tokenize_corpus([indexed_text(p) for p in items], make_stemmer())
    term = tokens.vocab["ice"]
    lengths = [len(doc) for doc in tokens.ids]
    df = sum(term in doc for doc in tokens.ids)
    avgdl = sum(lengths) / len(lengths)
    row = [p.id for p in items].index("glacier")
    tf, dl = tokens.ids[row].count(term), lengths[row]
    expected = math.log(1 + (len(items) - df + 0.5) / (df + 0.5)) * tf / (tf + 0.9 * (1 - 0.4 + 0.4 * dl / avgdl))
    hit = next(c for c in index.search("ice", k=5) if c.passage.id == "glacier")
    assert hit.score == pytest.approx(expected, rel=1e-5)


def test_scores_agree_with_bm25s(index):
    model = bm25s.BM25.load(index.path / "bm25", mmap=True)
    stemmer = make_stemmer()
    for query in ["ice planet river", "coffee coffee beans", "largest living cat", "first antibiotic"]:
        terms = [t for t in bm25s.tokenize([query], stopwords="en", stemmer=stemmer, return_ids=False,
                                           show_progress=False)[0] if t in model.vocab_dict]
        reference = model.get_scores(terms)
        for candidate in index.search(query, k=12):
            assert candidate.score == pytest.approx(float(reference[index.passages.index(candidate.passage)]),
                                                    rel=1e-5)


def test_the_matrix_read_for_searching_is_the_one_bm25s_loads(index):
    from winnow.index.bm25 import read_bm25s_matrix

    model = bm25s.BM25.load(index.path / "bm25", mmap=True)
    data, indices, indptr, num_docs, vocabulary = read_bm25s_matrix(index.path / "bm25")
    for ours, theirs in ((data, model.scores["data"]), (indices, model.scores["indices"]),
                         (indptr, model.scores["indptr"])):
        assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs)
    assert num_docs == model.scores["num_docs"] == len(passages()) and vocabulary == model.vocab_dict


@pytest.mark.subprocess
def test_opening_and_searching_an_index_imports_neither_bm25s_nor_scipy(index):
    """bm25s imports scipy.sparse where it is installed: a quarter of a second of every query
    process's start, which only building an index needs."""
    import subprocess
    import sys

    code = (f"import sys; from winnow.index import BM25Index; "
            f"hits = BM25Index.open({str(index.path)!r}).search('ice planet', k=3); "
            f"print(len(hits), sorted(m for m in ('bm25s', 'scipy') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split(maxsplit=1) == ["3", "[]\n"], done.stdout + done.stderr


def test_search_many_equals_search(index):
    queries = [p.title for p in passages()] + ["coffee beans", "largest cat", "river span", "the", "", "ice ice"]
    batch = index.search_many(queries, k=3)
    assert len(batch) == len(queries)
    for query, hits in zip(queries, batch):
        single = index.search(query, k=3)
        assert hits.query.text == query
        assert [(c.passage.id, c.score, c.rank_of("bm25")) for c in hits] == \
               [(c.passage.id, c.score, c.rank_of("bm25")) for c in single]


def test_searches_answered_from_recent_hits_equal_fresh_ones(index):
    # The same terms searched again (the first stage, then the method's retriever) are answered
    # from the hits already scored: a shallower k is their prefix, a deeper one is scored anew.
    def listed(hits):
        return [(c.passage.id, c.score, c.rank_of("bm25")) for c in hits]

    asked = [("ice planet river", 5), ("ice planet river", 2), ("planets, ice and rivers", 3),
             ("ice planet river", 9), ("ice planet river", 12), ("coffee beans", 40), ("coffee beans", 1)]
    answers = [listed(index.search(query, k=k)) for query, k in asked]
    fresh = BM25Index.open(index.path)
    assert answers == [listed(fresh.search(query, k=k)) for query, k in reversed(asked)][::-1]
    assert answers[1] == answers[0][:2] and answers[3] == answers[4][:9] and len(answers[5]) < 40


def test_search_many_of_nothing(index):
    assert index.search_many([], k=3) == []


def test_query_objects_are_kept(index):
    query = Query(text="roasted beans", id="q7", metadata={"split": "dev"})
    hits = index.search(query, k=2)
    assert hits.query is query and ids(hits)[0] == "coffee"
    assert index.search_many([query, "chess"], k=1)[0].query is query


def test_bad_k_is_an_error(index):
    with pytest.raises(WinnowError, match="k must be at least 1"):
        index.search("coffee", k=0)


def test_ties_are_broken_by_corpus_order(tmp_path):
    twins = [Passage(id=f"twin-{n}", text="identical text about comets") for n in (3, 1, 2)]
    build(tmp_path / "index", items=[*twins, *passages()])
    hits = BM25Index.open(tmp_path / "index").search("comets", k=2)
    assert ids(hits) == ["twin-3", "twin-1"]  # corpus order, not id order or arbitrary
    assert hits.candidates[0].score == hits.candidates[1].score


def test_get_len_and_passages(index):
    assert len(index) == len(TOPICS)
    assert [p.id for p in index.passages] == list(TOPICS)  # corpus order
    tiger = index.get("tiger")
    assert tiger.title == "Tiger" and tiger.metadata == {"topic": "tiger"}
    with pytest.raises(WinnowError, match="'nope'"):
        index.get("nope")


def test_manifest(index):
    manifest = index.manifest
    assert manifest["format"] == "winnow-index" and manifest["format_version"] == 2
    assert manifest["source"] == "test" and manifest["source_checksum"] == "abc"
    assert manifest["counts"]["passages"] == len(TOPICS)
    assert manifest["counts"]["vocabulary"] > 50 and manifest["counts"]["tokens"] > 100
    assert manifest["bm25"] == {"method": "lucene", "k1": 0.9, "b": 0.4, "stopwords": "en",
                                "stemmer": "snowball-english", "fields": ["title", "text"], "profile": "default",
                                "impacts": "float32", "library": f"bm25s {bm25s.__version__}"}
    assert manifest["load_report"] == {"passages": len(TOPICS), "skipped": []}
    assert {"passages/records.bin", "bm25/data.csc.index.npy", "bm25/vocab.index.json"} <= set(manifest["files"])
    assert manifest["store"]["rows"] == len(TOPICS) and manifest["store"]["id_hash"] == "blake2b-64"
    for name, info in manifest["files"].items():
        assert (index.path / name).stat().st_size == info["size"] and len(info["sha256"]) == 64
    index.verify()


def test_no_load_report_is_recorded_when_none_is_given(tmp_path):
    build(tmp_path / "index")
    assert "load_report" not in BM25Index.open(tmp_path / "index").manifest


def test_the_passage_store_holds_the_passages_in_corpus_order(index):
    assert list(index.passages) == passages()
    assert index.passages[-1] == passages()[-1] and index.passages[2:4] == passages()[2:4]
    assert [index.passages.row_of(p.id) for p in passages()] == list(range(len(TOPICS)))
    assert index.passages.row_of("nope") is None and "tiger" in index.passages.ids and "x" not in index.passages.ids


def test_ids_and_order_survive_a_rebuild(tmp_path):
    build(tmp_path / "a")
    build(tmp_path / "b")
    a, b = BM25Index.open(tmp_path / "a"), BM25Index.open(tmp_path / "b")
    assert [p.id for p in a.passages] == [p.id for p in b.passages]
    assert [(c.passage.id, c.score) for c in a.search("ice body", 3)] == \
           [(c.passage.id, c.score) for c in b.search("ice body", 3)]


def test_duplicate_ids_are_refused(tmp_path):
    items = [*passages(), Passage(id="chess", text="another chess passage")]
    with pytest.raises(WinnowError, match="'chess' occurs more than once"):
        build(tmp_path / "index", items=items)
    assert list(tmp_path.iterdir()) == []


def test_no_passages_is_an_error(tmp_path):
    with pytest.raises(WinnowError, match="no passages"):
        build_bm25_index([], tmp_path / "x", source="t", source_checksum="", progress=False)


def test_a_build_with_a_progress_bar(tmp_path, capsys):
    build(tmp_path / "index", progress=True)
    assert len(BM25Index.open(tmp_path / "index")) == len(TOPICS)
    assert "it/s" not in capsys.readouterr().err  # bm25s's own tqdm bars stay silent


# --- atomic builds and overwriting ----------------------------------------------------------------

def fail(*args, **kwargs):
    raise RuntimeError("disk full")


@pytest.mark.parametrize("call", ["index", "save"])
def test_a_build_that_dies_leaves_nothing_behind(tmp_path, monkeypatch, call):
    # A crash mid-build cannot be produced on demand; make a bm25s call fail instead.
    monkeypatch.setattr(bm25s.BM25, call, fail)
    with pytest.raises(RuntimeError, match="disk full"):
        build(tmp_path / "index")
    assert list(tmp_path.iterdir()) == []  # neither `index` nor a `.index.tmp-*` folder


def test_an_interrupted_build_leaves_nothing_behind(tmp_path, monkeypatch):
    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(bm25s.BM25, "save", interrupt)
    with pytest.raises(KeyboardInterrupt):
        build(tmp_path / "index")
    assert list(tmp_path.iterdir()) == []


def test_the_build_happens_in_a_hidden_sibling(tmp_path, monkeypatch):
    seen = []
    save = bm25s.BM25.save

    def spy(self, folder, **kwargs):
        seen.append(folder.parent)
        assert not (tmp_path / "index").exists()  # nothing at `out` until the build is complete
        return save(self, folder, **kwargs)

    monkeypatch.setattr(bm25s.BM25, "save", spy)
    build(tmp_path / "index")
    assert seen[0].parent == tmp_path and seen[0].name.startswith(f".index.tmp-{os.getpid()}-")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index"]


def test_existing_folder_needs_overwrite(tmp_path):
    out = tmp_path / "index"
    build(out)
    with pytest.raises(WinnowError, match="already exists.*--overwrite"):
        build(out)
    build(out, items=passages()[:3], overwrite=True)
    assert len(BM25Index.open(out)) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index"]  # no temp or old folders left


def test_overwrite_replaces_a_corrupt_index(tmp_path):
    out = tmp_path / "index"
    build(out)
    (out / "manifest.json").unlink()
    build(out, overwrite=True)
    assert len(BM25Index.open(out)) == len(TOPICS)


def test_overwrite_fills_an_empty_folder(tmp_path):
    (tmp_path / "index").mkdir()
    with pytest.raises(WinnowError, match="already exists"):
        build(tmp_path / "index")
    build(tmp_path / "index", overwrite=True)
    assert len(BM25Index.open(tmp_path / "index")) == len(TOPICS)


@pytest.mark.parametrize("make", ["folder", "file"])
def test_overwrite_never_deletes_something_that_is_not_an_index(tmp_path, make):
    out = tmp_path / "documents"
    if make == "folder":
        out.mkdir()
        (out / "thesis.tex").write_text("years of work")
    else:
        out.write_text("years of work")
    with pytest.raises(WinnowError, match="not a Winnow index"):
        build(out, overwrite=True)
    assert (out / "thesis.tex" if make == "folder" else out).read_text() == "years of work"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["documents"]


def test_a_failed_overwrite_keeps_the_old_index(tmp_path, monkeypatch):
    out = tmp_path / "index"
    build(out)
    monkeypatch.setattr(bm25s.BM25, "save", fail)
    with pytest.raises(RuntimeError):
        build(out, items=passages()[:3], overwrite=True)
    assert len(BM25Index.open(out)) == len(TOPICS)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index"]


def test_a_failed_swap_puts_the_old_index_back(tmp_path, monkeypatch):
    out = tmp_path / "index"
    build(out)
    replace = os.replace

    def refuse_new(source, target):
        if ".tmp-" in str(source):  # the old index moved aside fine; the new one fails to move in
            raise OSError("rename failed")
        replace(source, target)

    monkeypatch.setattr(atomic.os, "replace", refuse_new)
    with pytest.raises(OSError, match="rename failed"):
        build(out, items=passages()[:3], overwrite=True)
    monkeypatch.undo()
    assert len(BM25Index.open(out)) == len(TOPICS)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index"]


# --- corrupt indexes ------------------------------------------------------------------------------

@pytest.fixture
def built(tmp_path):
    out = tmp_path / "index"
    build(out)
    return out


def edit_manifest(folder, change, *, reseal=True):
    """Change the manifest as a hand edit would; ``reseal`` also refreshes its own checksum, so the
    checks behind that one are reached."""
    manifest = json.loads((folder / "manifest.json").read_text())
    change(manifest)
    if reseal:
        manifest["manifest_sha256"] = manifest_checksum(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))


def reseal_file(folder, name):
    """Record ``name``'s present size and sha256 in the manifest, as if the damage had been built in,
    so the checks that follow the checksum one are reached."""
    path = folder / name
    edit_manifest(folder, lambda m: m["files"][name].update(size=path.stat().st_size, sha256=file_sha256(path)))


def flip_byte(path, offset=None):
    """Flip one bit in the middle of ``path`` (or at ``offset``), keeping its size and its mtime."""
    before = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2 if offset is None else offset] ^= 0x01
    path.write_bytes(bytes(data))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # only the ctime can still tell


def refused(folder, match):
    with pytest.raises(IndexLoadError, match=match) as caught:
        BM25Index.open(folder)
    return caught.value


def test_missing_folder(tmp_path):
    error = refused(tmp_path / "nothing", "no index folder at .*nothing")
    assert "winnow index SOURCE --out" in error.hint


def test_missing_manifest(built):
    (built / "manifest.json").unlink()
    error = refused(built, "index is not a Winnow index: manifest.json is missing")
    assert REBUILD_HINT in error.hint


def test_unparseable_manifest(built):
    (built / "manifest.json").write_text("{not json")
    error = refused(built, r"manifest.json is corrupt")
    assert REBUILD_HINT in str(error)


def test_not_a_winnow_manifest(built):
    (built / "manifest.json").write_text(json.dumps({"format": "something-else"}))
    refused(built, "not a Winnow index manifest")


def test_wrong_format_version(built):
    edit_manifest(built, lambda m: m.update(format_version=99))
    refused(built, "format version 99; this Winnow reads version 2")


def test_a_version_1_index_is_refused_with_the_command_that_rebuilds_it(built):
    edit_manifest(built, lambda m: m.update(format_version=1))
    error = refused(built, "format version 1; this Winnow reads version 2 .version 1 kept its passages in "
                           "passages.jsonl")
    assert error.hint == f"rebuild it with `winnow index test --out {built} --overwrite`"


def test_a_manifest_without_its_own_checksum_is_refused(built):
    edit_manifest(built, lambda m: m.pop("manifest_sha256"), reseal=False)
    refused(built, "its own checksum .manifest_sha256. is missing")


def test_dropping_a_file_and_the_checksum_from_the_manifest_does_not_get_a_damaged_passage_served(built):
    # The attack of issue 27: damage a file, delete its entry and the manifest's own checksum.
    path = built / "passages/records.bin"
    path.write_bytes(path.read_bytes().replace(b"Tiger", b"Tigre"))
    edit_manifest(built, lambda m: (m.pop("manifest_sha256"), m["files"].pop("passages/records.bin")),
                  reseal=False)
    refused(built, "checksum .manifest_sha256. is missing")
    edit_manifest(built, lambda m: None)  # even resealed, the unlisted file is refused
    refused(built, "does not list passages/records.bin, which the index needs")


def test_a_vocabulary_from_another_index_is_refused_even_resealed(built, tmp_path):
    other = tmp_path / "other"
    build(other, items=[Passage(id=p.id, title=p.title, text=p.text.upper() + " zebra") for p in passages()])
    shutil.copy(other / "bm25/vocab.index.json", built / "bm25/vocab.index.json")
    reseal_file(built, "bm25/vocab.index.json")
    refused(built, "inconsistent: bm25/vocab.index.json has")


def test_a_vocabulary_shuffled_within_its_size_is_refused_even_resealed(built):
    path = built / "bm25/vocab.index.json"
    vocabulary = json.loads(path.read_text())
    terms = sorted(term for term in vocabulary if term)
    ids = [vocabulary[term] for term in terms]
    vocabulary.update(zip(terms, ids[1:] + ids[:1], strict=True))  # every term points at another's row
    path.write_text(json.dumps(vocabulary))
    reseal_file(built, "bm25/vocab.index.json")
    refused(built, "whose postings in bm25/ do not list it")


@pytest.mark.parametrize("change, field", [
    (lambda m: m.pop("files"), "files"),
    (lambda m: m.update(files={}), "files"),
    (lambda m: m.pop("counts"), "counts.passages"),
    (lambda m: m["bm25"].update(method="bm25+"), "bm25"),
    (lambda m: m["files"]["passages/records.bin"].pop("size"), "passages/records.bin"),
    (lambda m: m["files"].update({"../outside": {"size": 1, "sha256": "0" * 64}}), "not a path inside"),
])
def test_malformed_manifest(built, change, field):
    edit_manifest(built, change)
    refused(built, f"manifest.json is corrupt: missing or malformed .*{field}")


@pytest.mark.parametrize("name", ["passages/records.bin", "passages/ids.npy", "bm25/data.csc.index.npy",
                                  "bm25/vocab.index.json"])
def test_missing_file(built, name):
    (built / name).unlink()
    error = refused(built, f"index is incomplete: {name} is missing")
    assert error.hint == f"rebuild it with `winnow index test --out {built} --overwrite`"


@pytest.mark.parametrize("name", ["passages/records.bin", "bm25/indices.csc.index.npy"])
def test_truncated_file(built, name):
    path = built / name
    size = path.stat().st_size
    path.write_bytes(path.read_bytes()[:-10])
    refused(built, f"{name} has {size - 10} bytes, the manifest records {size}")


INDEX_FILES = ["bm25/data.csc.index.npy", "bm25/indices.csc.index.npy", "bm25/indptr.csc.index.npy", "bm25/maxima.npy",
               "bm25/params.index.json", "bm25/vocab.index.json", "passages/ids.npy", "passages/offsets.npy",
               "passages/records.bin"]


def test_the_manifest_lists_every_data_file(built):
    assert sorted(json.loads((built / "manifest.json").read_text())["files"]) == INDEX_FILES


@pytest.mark.parametrize("name", INDEX_FILES)
def test_a_flipped_byte_in_any_file_is_refused_on_open(built, name):
    BM25Index.open(built)  # opened once: the verified state is recorded, later opens only stat
    flip_byte(built / name)
    error = refused(built, f"index is corrupt: {name} does not match its recorded sha256")
    assert error.hint == f"rebuild it with `winnow index test --out {built} --overwrite`"
    assert "\n" not in str(error)


def test_a_flipped_byte_in_the_manifest_is_refused(built):
    text = (built / "manifest.json").read_text()
    offset = text.index('"source": "test"') + len('"source": "te')
    flip_byte(built / "manifest.json", offset)  # "test" -> "tert": still valid JSON
    refused(built, "manifest.json is corrupt: its content does not match its own checksum")


def test_several_damaged_files_are_all_named(built):
    flip_byte(built / "passages/records.bin")
    flip_byte(built / "bm25/vocab.index.json")
    refused(built, "bm25/vocab.index.json, passages/records.bin do not match their recorded sha256")


def test_a_fresh_build_and_later_opens_do_not_rehash(built, monkeypatch):
    # The build hashed the files it wrote and recorded them as verified.
    assert (built / VERIFIED).is_file()
    hashed = []
    real = manifest_module.file_sha256
    monkeypatch.setattr(manifest_module, "file_sha256", lambda path: hashed.append(path) or real(path))
    BM25Index.open(built)
    BM25Index.open(built)
    assert hashed == []


def test_a_copied_index_is_hashed_once_then_trusted(built, tmp_path, monkeypatch):
    copy = tmp_path / "copy"
    shutil.copytree(built, copy)  # new inodes: the copied record does not vouch for these files
    hashed = []
    real = manifest_module.file_sha256
    monkeypatch.setattr(manifest_module, "file_sha256", lambda path: hashed.append(path.name) or real(path))
    BM25Index.open(copy)
    assert sorted(hashed) == sorted(name.rsplit("/", 1)[-1] for name in INDEX_FILES)
    BM25Index.open(copy)
    assert len(hashed) == len(INDEX_FILES)


def test_a_damaged_record_only_means_hashing_again(built):
    (built / VERIFIED).write_text("{not json")
    assert len(BM25Index.open(built)) == len(TOPICS)
    flip_byte(built / "passages/records.bin")
    (built / VERIFIED).write_text("{not json")
    refused(built, "passages/records.bin does not match")


def test_a_read_only_index_keeps_its_record_in_the_cache(built, read_only):
    forget_verified(built)
    read_only(built)
    assert len(BM25Index.open(built)) == len(TOPICS)
    assert not (built / VERIFIED).exists() and cached_record(built).is_file()
    assert len(BM25Index.open(built)) == len(TOPICS)


def test_verify_rehashes_on_demand(built):
    index = BM25Index.open(built)
    flip_byte(built / "passages/records.bin")
    with pytest.raises(IndexLoadError, match="passages/records.bin does not match its recorded sha256"):
        index.verify()


def test_a_garbled_passage_record_is_named(built):
    path = built / "passages/records.bin"
    data = bytearray(path.read_bytes())
    data[:5] = b"#####"  # the first record (checked at every open) is no longer JSON
    path.write_bytes(bytes(data))
    reseal_file(built, "passages/records.bin")
    refused(built, r"passages/records.bin, passage row 1 is corrupt")


def test_passages_and_bm25_arrays_must_agree(built, tmp_path):
    from winnow.index.store import PassageStoreWriter

    writer = PassageStoreWriter(tmp_path / "other")  # a store of one passage fewer, resealed in
    for passage in passages()[:-1]:
        writer.add(passage)
    writer.finish()
    for name in ("records.bin", "offsets.npy", "ids.npy"):
        shutil.copy(tmp_path / "other/passages" / name, built / "passages" / name)
        reseal_file(built, f"passages/{name}")
    refused(built, r"offsets.npy holds int64 \[12\], not int64 \[13\]")
    edit_manifest(built, lambda m: m["counts"].update(passages=len(TOPICS) - 1))
    refused(built, f"inconsistent: {len(TOPICS) - 1} passages in the store and the manifest, {len(TOPICS)} in bm25/")


def test_garbled_bm25_arrays_of_the_right_size(built):
    path = built / "bm25" / "data.csc.index.npy"
    path.write_bytes(b"\0" * path.stat().st_size)  # header destroyed, size unchanged
    reseal_file(built, "bm25/data.csc.index.npy")
    refused(built, "bm25 is corrupt")


def test_score_arrays_are_memory_mapped(built):
    array = BM25Index.open(built)._scorer.data
    while not isinstance(array, np.memmap) and isinstance(array.base, np.ndarray):
        array = array.base  # the scorer reads a plain ndarray view of the memmap: follow it to the mapping
    assert isinstance(array, np.memmap) and str(array.filename).endswith("data.csc.index.npy")


# --- the pyserini profile --------------------------------------------------------------------------

def test_the_pyserini_profile_uses_lucenes_stop_words_and_porter_and_is_recorded(tmp_path):
    from winnow.index.analysis import LUCENE_STOPWORDS, stopword_list, tokenize_queries

    assert len(LUCENE_STOPWORDS) == 33 and set(LUCENE_STOPWORDS) == set(bm25s.stopwords.STOPWORDS_EN)
    porter, snowball = make_stemmer("porter"), make_stemmer("snowball-english")
    # Porter (Lucene's PorterStemFilter) and Snowball English stem these apart.
    assert tokenize_queries(["the generously"], porter, stopword_list("lucene-en")) == [["gener"]]
    assert tokenize_queries(["the generously"], snowball, stopword_list("en")) == [["generous"]]
    items = [*passages(), Passage(id="gift", text="She gave generously to the hospital.")]
    build(tmp_path / "pyserini", items=items, profile="pyserini")
    index = BM25Index.open(tmp_path / "pyserini")
    assert {key: index.manifest["bm25"][key] for key in ("profile", "stopwords", "stemmer", "k1", "b")} == {
        "profile": "pyserini", "stopwords": "lucene-en", "stemmer": "porter", "k1": 0.9, "b": 0.4}
    assert ids(index.search("general", k=1)) == ["gift"]  # Porter conflates general and generously: "gener"
    build(tmp_path / "default", items=items)
    assert ids(BM25Index.open(tmp_path / "default").search("general", k=1)) == []


def test_an_unknown_profile_or_a_manifest_naming_an_unknown_stemmer_is_refused(tmp_path, built):
    with pytest.raises(WinnowError, match="unknown BM25 profile 'lucene'.*default, pyserini"):
        build(tmp_path / "x", profile="lucene")
    edit_manifest(built, lambda m: m["bm25"].update(stemmer="krovetz"))
    refused(built, "unknown stemmer 'krovetz' in the index manifest")


@pytest.mark.parametrize("num_docs", [4, 100_000])  # a scan of the sums buffer; sorted keys (a big corpus)
def test_a_query_sums_its_terms_in_float32_in_alphabetical_order(num_docs):
    from winnow.index.scoring import TermScoreMatrix

    # Passage 2 holds "apple" (1.0) and "berry" and "cherry" (2^-24 each). Added one after the other
    # in float32, alphabetically, each small one rounds away (1 + 2^-24 = 1); added in any other
    # order (the two small ones first) the sum is 1 + 2^-23. The ids run against the alphabet.
    vocabulary = {"cherry": 0, "berry": 1, "apple": 2}
    tiny = np.float32(2.0 ** -24)
    data = np.array([tiny, tiny, 1.0, 0.5], dtype=np.float32)
    indices = np.array([2, 2, 2, 3], dtype=np.int32)
    indptr = np.array([0, 1, 2, 4], dtype=np.int64)
    scorer = TermScoreMatrix(data, indices, indptr, num_docs, vocabulary)
    found = scorer.top_k([["cherry", "apple", "berry"], ["berry", "cherry"], ["apple", "apple"], ["durian"]], k=5)
    assert all(hits.scores.dtype == np.float32 for hits in found)
    solo, small, twice, none = found
    assert solo.rows.tolist() == [2, 3] and solo.scores.tolist() == [1.0, 0.5]
    assert small.rows.tolist() == [2] and small.scores.tolist() == [2.0 ** -23]
    assert twice.rows.tolist() == [2, 3] and twice.scores.tolist() == [2.0, 1.0]  # a repeated term counts twice
    assert none.rows.tolist() == [] and none.scores.tolist() == []
