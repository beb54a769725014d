"""The score arrays' formats (winnow.index.impacts): float32 impacts are bm25s's own, to the bit;
float16 and uint8 stay within their rounding of them; passage rows are uint16 where they fit and
give the same hits as int32; the format is recorded in the manifest, checked at open, and chosen
with ``winnow index --bm25-impacts``. (The exhaustive and pruned searches agree in every format:
tests/test_pruning.py.)"""

from __future__ import annotations

import json
import shutil

import bm25s
import numpy as np
import pytest
from cli_runner import winnow
from test_index import edit_manifest, reseal_file
from test_pruning import FORMATS, corpus, indexes, matrices, named, queries  # noqa: F401  (a fixture)

from winnow.errors import IndexLoadError
from winnow.index import BM25Index, pruning
from winnow.index.analysis import indexed_text, make_stemmer, stopword_list, tokenize_corpus, tokenize_queries
from winnow.index.impacts import SCALES, UINT16_ROWS, check_arrays, row_dtype, widen_all
from winnow.index.scoring import TermScoreMatrix


def test_float32_impacts_are_bm25s_own_to_the_bit(indexes):  # noqa: F811
    """The default format stores what bm25s computes, unchanged: only the rows' type narrows."""
    tokens = tokenize_corpus([indexed_text(p) for p in corpus()], make_stemmer("snowball-english"), stopword_list("en"))
    model = bm25s.BM25(method="lucene", k1=0.9, b=0.4)
    model.index(tokens, show_progress=False)
    index = BM25Index.open(indexes / "single")
    matrix, = matrices(index)
    assert index.manifest["bm25"]["impacts"] == "float32"
    assert matrix.data.dtype == np.float32 and np.array_equal(matrix.data, model.scores["data"])
    assert matrix.indices.dtype == np.uint16 and np.array_equal(matrix.indices, model.scores["indices"])
    assert np.array_equal(matrix.indptr, model.scores["indptr"])


@pytest.mark.parametrize("layout", ["single", "sharded"])
@pytest.mark.parametrize("impacts", ["float16", "uint8"])
def test_lossy_impacts_stay_within_their_rounding(indexes, layout, impacts):  # noqa: F811
    exact = matrices(BM25Index.open(indexes / layout))
    lossy = matrices(BM25Index.open(indexes / named(layout, impacts)))
    for precise, rounded in zip(exact, lossy, strict=True):
        assert np.array_equal(precise.indices, rounded.indices) and np.array_equal(precise.indptr, rounded.indptr)
        widened = widen_all(rounded.data, rounded.indptr, rounded.scales)
        assert widened.dtype == np.float32 and (widened > 0).all()  # a posting is never "no evidence"
        error = np.abs(widened.astype(np.float64) - precise.data)
        if impacts == "float16":
            assert (error <= precise.data * 2.0 ** -11).all()
        else:  # half a step of the term's, one step = its largest impact in the whole index / 255
            steps = np.repeat(np.asarray(rounded.scales, dtype=np.float64), np.diff(rounded.indptr))
            assert (error <= steps * (0.5 + 1e-4)).all()
            assert len(np.unique(rounded.data)) > 100  # the codes are used, not a handful of them
        # the stored bounds are those of the impacts as stored, so MaxScore's bounds hold for them
        listed = np.diff(rounded.indptr) > 0
        assert np.array_equal(np.asarray(rounded.maxima)[listed],
                              np.maximum.reduceat(widened, rounded.indptr[:-1][listed]))


@pytest.mark.parametrize("impacts", ["float16", "uint8"])
def test_lossy_impacts_keep_most_of_the_ranking(indexes, impacts):  # noqa: F811
    """One matrix and shards quantise alike (uint8's steps are the whole index's), so they agree to the
    bit; against float32 the top 10 mostly holds."""
    single = BM25Index.open(indexes / named("single", impacts)).search_many(queries(), 10)
    sharded = BM25Index.open(indexes / named("sharded", impacts)).search_many(queries(), 10)
    exact = BM25Index.open(indexes / "single").search_many(queries(), 10)
    shares = []
    for one, split, precise in zip(single, sharded, exact, strict=True):
        assert [(c.passage.id, c.score) for c in one] == [(c.passage.id, c.score) for c in split]
        if len(precise):
            shares.append(len({c.passage.id for c in one} & {c.passage.id for c in precise}) / len(precise))
    assert sum(shares) / len(shares) > 0.9


@pytest.mark.parametrize("impacts", FORMATS)
def test_uint16_rows_give_the_hits_of_int32_rows(indexes, impacts):  # noqa: F811
    index = BM25Index.open(indexes / named("sharded", impacts))
    terms = tokenize_queries(queries(), index._stemmer, index._stopwords)
    for matrix in matrices(index):
        wide = TermScoreMatrix(matrix.data, np.asarray(matrix.indices, dtype=np.int32), matrix.indptr,
                               matrix.num_docs, matrix.vocabulary, matrix.maxima, matrix.scales)
        for scorer in (lambda m: m.top_k(terms, 10), lambda m: pruning.pruned_top_k(m, terms, 10)):
            assert ([(h.rows.tolist(), h.scores.tolist()) for h in scorer(matrix)]
                    == [(h.rows.tolist(), h.scores.tolist()) for h in scorer(wide)])


def test_rows_narrow_only_where_they_fit():
    assert row_dtype(UINT16_ROWS) == np.uint16 and row_dtype(UINT16_ROWS + 1) == np.int32
    data, narrow = np.ones(2, dtype=np.float32), np.zeros(2, dtype=np.uint16)
    check_arrays("x", data, narrow, UINT16_ROWS, "float32", "rebuild")
    with pytest.raises(IndexLoadError, match="passage rows are uint16 for 65537 passages"):
        check_arrays("x", data, narrow, UINT16_ROWS + 1, "float32", "rebuild")


@pytest.mark.parametrize("layout", ["single", "sharded"])
def test_the_recorded_format_is_checked_at_open(indexes, layout, tmp_path):  # noqa: F811
    shutil.copytree(indexes / named(layout, "uint8"), tmp_path / "idx")
    edit_manifest(tmp_path / "idx", lambda m: m["bm25"].update(impacts="float16"))
    with pytest.raises(IndexLoadError, match="its impacts are uint8, the manifest records float16"):
        BM25Index.open(tmp_path / "idx")
    edit_manifest(tmp_path / "idx", lambda m: m["bm25"].update(impacts="int4"))
    with pytest.raises(IndexLoadError, match="bm25.impacts 'int4' is not a format this Winnow reads") as caught:
        BM25Index.open(tmp_path / "idx")
    assert "--bm25-impacts int4" in caught.value.hint  # the hint rebuilds it as it was asked for


@pytest.mark.parametrize("layout", ["single", "sharded"])
def test_an_index_built_before_the_format_was_recorded_opens_as_float32(indexes, layout, tmp_path):  # noqa: F811
    shutil.copytree(indexes / layout, tmp_path / "idx")
    edit_manifest(tmp_path / "idx", lambda m: m["bm25"].pop("impacts"))
    before, now = BM25Index.open(tmp_path / "idx"), BM25Index.open(indexes / layout)
    assert "impacts" not in before.manifest["bm25"]
    for a, b in zip(before.search_many(queries(), 10), now.search_many(queries(), 10), strict=True):
        assert [(c.passage.id, c.score) for c in a] == [(c.passage.id, c.score) for c in b]


@pytest.mark.parametrize("layout", ["single", "sharded"])
def test_uint8_scales_are_required_and_checked(indexes, layout, tmp_path):  # noqa: F811
    folder = tmp_path / "idx"
    shutil.copytree(indexes / named(layout, "uint8"), folder)
    assert f"bm25/{SCALES}" in json.loads((folder / "manifest.json").read_text())["files"]
    np.save(folder / "bm25" / SCALES, np.ones(3, dtype=np.float32))
    reseal_file(folder, f"bm25/{SCALES}")
    with pytest.raises(IndexLoadError, match=f"bm25/{SCALES} holds"):
        BM25Index.open(folder)
    edit_manifest(folder, lambda m: m["files"].pop(f"bm25/{SCALES}"))
    with pytest.raises(IndexLoadError, match=f"does not list bm25/{SCALES}"):
        BM25Index.open(folder)


def test_winnow_index_bm25_impacts(tmp_path):
    source = tmp_path / "corpus.jsonl"
    source.write_text("".join(json.dumps({"id": p.id, "title": p.title, "text": p.text}) + "\n"
                              for p in corpus(60)))
    result = winnow("index", source, "--out", tmp_path / "idx", "--bm25-impacts", "uint8", "--shard-size", "25")
    assert result.returncode == 0, result.stderr
    index = BM25Index.open(tmp_path / "idx")
    assert index.manifest["bm25"]["impacts"] == "uint8"
    assert index.manifest["bm25"]["shards"] == [25] * 4  # 60 passages and 40 copies
    assert all(matrix.data.dtype == np.uint8 for matrix in matrices(index))
    assert "p7" in [c.passage.id for c in index.search(corpus(60)[7].text, k=5)]
    refused = winnow("index", source, "--out", tmp_path / "other", "--bm25-impacts", "int4")
    assert refused.returncode == 2 and "--bm25-impacts 'int4' is not an impact format" in refused.stderr
    assert "float32, float16, uint8" in refused.stderr
    lucene = winnow("index", source, "--out", tmp_path / "other", "--bm25-engine", "lucene", "--bm25-impacts", "uint8")
    assert lucene.returncode == 2 and "--bm25-impacts cannot be combined with --bm25-engine lucene" in lucene.stderr
    assert not (tmp_path / "other").exists()
