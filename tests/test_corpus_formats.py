"""The field's corpus layouts (DPR's and MS MARCO's TSV, Parquet) and one-pass streaming of every source."""

from __future__ import annotations

import gzip
import json

import pytest

from winnow.corpus import load_corpus, open_corpus
from winnow.errors import InputError, WinnowError
from winnow.records import Passage


def error_of(source) -> WinnowError:
    with pytest.raises(WinnowError) as caught:
        load_corpus(source)
    return caught.value


# --- DPR's psgs_w100.tsv ------------------------------------------------------------------------------

DPR = ('id\ttext\ttitle\n'
       '1\t"Aaron Aaron ( or ; ""Ahärôn"") is a prophet, high priest, and the brother of Moses."\tAaron\n'
       '2\tSo Aaron became the founder of the Aaronic priesthood.\t"Aaron"\n'
       '3\t \tEmpty\n'
       '1\tA repeat of the first id.\tAaron\n')


def test_dpr_tsv_unwraps_csv_quoting_and_applies_the_skip_rules(tmp_path):
    path = tmp_path / "psgs_w100.tsv"
    path.write_text(DPR, encoding="utf-8")
    corpus = load_corpus(path)
    assert corpus.kind == "tsv" and corpus.files == [path]
    assert corpus.passages == [
        Passage("1", 'Aaron Aaron ( or ; "Ahärôn") is a prophet, high priest, and the brother of Moses.', "Aaron"),
        Passage("2", "So Aaron became the founder of the Aaronic priesthood.", "Aaron"),
    ]
    report = corpus.report
    assert (report.read, report.kept) == (4, 2)
    assert [(loc.line, loc.id) for loc in report.empty_skipped] == [(4, "3")]
    [duplicate] = report.duplicate_ids_skipped
    assert (duplicate.line, duplicate.id, duplicate.first_seen.line) == (5, "1", 2)
    assert "1 duplicate id ('1' at" in report.summary()


def test_gzipped_dpr_tsv_without_a_header(tmp_path):
    path = tmp_path / "psgs.tsv.gz"
    path.write_bytes(gzip.compress("7\tSome text here.\tA title\n".encode("utf-8")))
    assert load_corpus(path).passages == [Passage("7", "Some text here.", "A title")]


def test_ms_marco_tsv_keeps_quotes_as_written(tmp_path):
    path = tmp_path / "collection.tsv"
    path.write_text('0\t"Quoted" start, and a "quote" inside\n1\tplain text\n', encoding="utf-8")
    assert load_corpus(path).passages == [Passage("0", '"Quoted" start, and a "quote" inside'),
                                          Passage("1", "plain text")]


@pytest.mark.parametrize(("content", "line", "message"), [
    ("id\ttext\ttitle\n1\tonly two\n", 2, "expected 3 tab-separated fields, got 2"),
    ("0\tone\n1\ttwo\tthree\n", 2, "expected 2 tab-separated fields, got 3"),
    ("0\tone\n\tno id\n", 2, "empty id"),
    ("a\tb\tc\td\n", 1, "the first line has 4 tab-separated fields"),
    ("0\tok\n1\tbad \xff byte\n", 2, "not UTF-8"),
])
def test_a_broken_tsv_row_names_its_file_and_line(tmp_path, content, line, message):
    path = tmp_path / "bad.tsv"
    path.write_bytes(content.encode("utf-8", "surrogateescape") if "\xff" not in content
                     else content.encode("latin-1"))
    error = error_of(path)
    assert isinstance(error, InputError) and error.line == line and error.path == str(path)
    assert message in str(error)


# --- Parquet ------------------------------------------------------------------------------------------

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def write_parquet(path, columns, row_group_size=None):
    pq.write_table(pa.table(columns), path, row_group_size=row_group_size)
    return path


def test_parquet_with_beir_column_names_read_in_batches(tmp_path, monkeypatch):
    from winnow.corpus import parquet

    monkeypatch.setattr(parquet, "BATCH_ROWS", 2)  # several batches from a small file
    path = write_parquet(tmp_path / "corpus.parquet", {
        "_id": ["d1", "d2", "d3", "d1", "d5"], "title": ["T1", None, "T3", "again", "T5"],
        "text": ["one", "two", "", "dup", "five"], "extra": [1, 2, 3, 4, 5]}, row_group_size=2)
    corpus = load_corpus(path)
    assert corpus.kind == "parquet"
    assert corpus.passages == [Passage("d1", "one", "T1"), Passage("d2", "two"), Passage("d5", "five", "T5")]
    assert [(loc.line, loc.id) for loc in corpus.report.empty_skipped] == [(3, "d3")]
    assert [(loc.line, loc.first_seen.line) for loc in corpus.report.duplicate_ids_skipped] == [(4, 1)]


def test_parquet_with_pyserini_contents_and_integer_ids(tmp_path):
    path = write_parquet(tmp_path / "c.parquet", {"id": [10, 11], "contents": ["ten", "eleven"]})
    assert load_corpus(path).passages == [Passage("10", "ten"), Passage("11", "eleven")]


def test_parquet_without_a_text_column_or_with_a_null_text_is_refused(tmp_path):
    error = error_of(write_parquet(tmp_path / "a.parquet", {"id": ["x"], "body": ["no"]}))
    assert "no text column (text or contents); its columns are id, body" in str(error)
    error = error_of(write_parquet(tmp_path / "b.parquet", {"id": ["x", "y"], "text": ["fine", None]}))
    assert isinstance(error, InputError) and error.field == "text" and "row 2: text must be a string" in str(error)


def test_a_file_that_is_not_parquet_is_refused_by_name(tmp_path):
    path = tmp_path / "fake.parquet"
    path.write_text("not parquet", encoding="utf-8")
    assert "not a readable Parquet file" in str(error_of(path))


# --- streaming ------------------------------------------------------------------------------------------

def test_a_stream_reads_lazily_and_reports_as_it_goes(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps({"id": str(i), "text": f"text {i}"}) + "\n" for i in range(5))
                    + "{broken\n", encoding="utf-8")
    stream = open_corpus(path)  # opening reads nothing: the broken line is not seen yet
    passages = stream.passages()
    assert [next(passages).id for _ in range(3)] == ["0", "1", "2"]
    assert (stream.report.read, stream.report.kept) == (3, 3)
    with pytest.raises(InputError, match="line 6"):
        list(passages)


def test_the_progress_bar_runs_to_the_end_of_the_file(tmp_path, capsys):
    path = tmp_path / "c.tsv"
    path.write_text("".join(f"{i}\tpassage number {i}\n" for i in range(2500)), encoding="utf-8")
    stream = open_corpus(path)
    assert stream.total == path.stat().st_size and stream.unit == "bytes"
    assert sum(1 for _ in stream.passages(progress=True)) == 2500
    assert stream.report.kept == 2500


def test_winnow_index_reads_a_dpr_tsv_in_one_pass_with_the_pyserini_profile(tmp_path):
    from cli_runner import winnow

    from winnow.index import BM25Index

    path = tmp_path / "psgs_w100.tsv"
    path.write_text(DPR, encoding="utf-8")
    result = winnow("index", str(path), "--out", str(tmp_path / "idx"), "--bm25-profile", "pyserini",
                    env={"COLUMNS": "200"})
    assert result.returncode == 0, result.stderr
    assert f"2 passages from {path}; skipped 1 with empty text ({path}:4) and 1 duplicate id" in result.stderr
    index = BM25Index.open(tmp_path / "idx")
    assert index.manifest["bm25"]["profile"] == "pyserini" and index.manifest["load_report"]["kept"] == 2
    assert [c.passage.id for c in index.search("priesthood founder", k=1)] == ["2"]
    assert index.get("1").text.startswith('Aaron Aaron ( or ; "Ahärôn")')
