"""MaxScore (winnow.index.pruning) against exhaustive scoring: the same top k, ids and float32 scores
to the bit and ties in the same order, on real indexes (one bm25s matrix and shards, in each impact
format of winnow.index.impacts, passage rows in uint16) over a corpus whose words follow a Zipf law,
as text does, so that common terms are pruned."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from winnow.errors import IndexLoadError
from winnow.index import BM25Index, build_bm25_index, pruning
from winnow.index.analysis import tokenize_queries
from winnow.index.scoring import MAXIMA, TermScoreMatrix
from winnow.index.shards import build_sharded_index
from winnow.records import Passage

WORDS = [f"{a}{b}" for a in ("kal", "mor", "ten", "vix", "dru", "sel", "pon", "gar") for b in
         ("ap", "ek", "im", "os", "ut", "ra", "lo", "ne", "qu", "zi", "ba", "fo", "hy", "jo", "wu")]  # 120 words
WEIGHTS = [1 / (rank + 1) for rank in range(len(WORDS))]


def zipf_words(rng, count):
    return rng.choices(WORDS, weights=WEIGHTS, k=count)


def corpus(count=700, seed=11):
    rng = random.Random(seed)
    items = [Passage(id=f"p{i}", title=" ".join(zipf_words(rng, 2)), text=" ".join(zipf_words(rng, rng.randint(3, 70))))
             for i in range(count)]
    # Copies of passages, some in other shards: equal scores, so ties must fall by row as exhaustively.
    for copy, source in enumerate(rng.sample(range(count), 40)):
        items.append(Passage(id=f"copy{copy}", title=items[source].title, text=items[source].text))
    return items


def queries(count=150, seed=5):
    rng = random.Random(seed)
    found = []
    for _ in range(count):
        words = zipf_words(rng, rng.randint(1, 9))
        if rng.random() < 0.3:
            words += rng.sample(words, 1)  # a repeated term counts twice
        if rng.random() < 0.2:
            words.append("unknownword")
        if rng.random() < 0.2:
            words.append("the")  # a stop word
        rng.shuffle(words)
        found.append(" ".join(words))
    return found + ["unknownword", "the of", rng.choice(WORDS)]


FORMATS = ("float32", "float16", "uint8")


def named(layout, impacts):
    """The fixture's folder of ``layout`` in ``impacts`` (float32: the plain name, as before)."""
    return layout if impacts == "float32" else f"{layout}-{impacts}"


@pytest.fixture(scope="module")
def indexes(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pruning")
    for impacts in FORMATS:
        build_bm25_index(corpus(), folder / named("single", impacts), source="test", source_checksum="abc",
                         progress=False, impacts=impacts)
        build_sharded_index(corpus(), folder / named("sharded", impacts), source="test", source_checksum="abc",
                            shard_size=170, progress=False, report=lambda line: None, impacts=impacts)
    return folder


def same(pruned, exhaustive):
    for a, b in zip(pruned, exhaustive, strict=True):
        assert [c.passage.id for c in a] == [c.passage.id for c in b]
        assert [c.score for c in a] == [c.score for c in b]  # the same float32 sums, not just close


@pytest.mark.parametrize("impacts", FORMATS)
@pytest.mark.parametrize("layout", ["single", "sharded"])
def test_pruned_search_equals_exhaustive_to_the_bit(indexes, layout, impacts):
    pruned = BM25Index.open(indexes / named(layout, impacts), exhaustive=False)
    exhaustive = BM25Index.open(indexes / named(layout, impacts), exhaustive=True)
    assert pruned.manifest["bm25"]["impacts"] == impacts
    for matrix in matrices(pruned):  # every matrix here has at most 65,536 passages: rows in 2 bytes
        assert matrix.indices.dtype == np.uint16 and matrix.data.dtype == impacts
    # by default: a sharded index pruned, one bm25s matrix scored in one sparse product
    assert BM25Index.open(indexes / layout).exhaustive == (layout == "single")
    same(pruned.search_many(queries(), 10), exhaustive.search_many(queries(), 10))
    for text in queries(20, seed=9):  # one at a time, the way a service asks
        same([pruned.search(text, k=7)], [exhaustive.search(text, k=7)])
    terms = tokenize_queries(queries(), pruned._stemmer, pruned._stopwords)
    for k in (1, 3, 40, 5000):  # 5000: more than any query matches
        for a, b in zip(pruning.pruned_top_k(pruned._scorer, terms, k), pruned._scorer.top_k(terms, k), strict=True):
            assert a.rows.tolist() == b.rows.tolist() and a.scores.tolist() == b.scores.tolist()


def matrices(index):
    scorer = index._scorer
    return [scorer] if isinstance(scorer, TermScoreMatrix) else scorer.shards


@pytest.mark.parametrize("impacts", FORMATS)
def test_ties_fall_by_row_as_exhaustively(indexes, impacts):
    pruned = BM25Index.open(indexes / named("sharded", impacts))
    copied = corpus()[-1]  # a copy: the original scores the same and comes first
    words = " ".join(copied.text.split()[:4])
    hits = pruned.search(words, k=5000)
    scores = [c.score for c in hits]
    assert len(scores) > len(set(scores))  # there are ties to order
    exhaustive = BM25Index.open(indexes / named("sharded", impacts), exhaustive=True)
    assert hits.candidates == exhaustive.search(words, k=5000).candidates


def test_common_terms_are_not_read_in_full(indexes, monkeypatch):
    """A test of the pruning itself: the hits above could be equal by scoring everything."""
    index = BM25Index.open(indexes / "single", exhaustive=False)
    accumulated: list[int] = []
    real = pruning._accumulate
    monkeypatch.setattr(pruning, "_accumulate", lambda matrix, terms: (
        accumulated.extend(term.end - term.start for term in terms), real(matrix, terms))[1])
    scorer = index._scorer
    assert isinstance(scorer, TermScoreMatrix)
    common, rare = WORDS[0], WORDS[-1]
    assert scorer.postings_length(scorer.vocabulary[common]) > 10 * scorer.postings_length(scorer.vocabulary[rare])
    index.search(f"{common} {rare}", k=3)
    assert accumulated == [scorer.postings_length(scorer.vocabulary[rare])]  # the common term's postings: unread


@pytest.mark.parametrize("layout", ["single", "sharded"])
def test_the_bounds_are_stored_and_an_index_without_them_finds_them(indexes, layout, tmp_path):
    manifest = json.loads((indexes / layout / "manifest.json").read_text())
    stored = [name for name in manifest["files"] if name.endswith(MAXIMA)]
    assert len(stored) == (1 if layout == "single" else 5)
    index = BM25Index.open(indexes / layout)
    matrices = [index._scorer] if isinstance(index._scorer, TermScoreMatrix) else index._scorer.shards
    for matrix in matrices:
        assert matrix.stored_maxima
        # an index built before the bounds were stored: found per term, the same values
        bare = TermScoreMatrix(matrix.data, matrix.indices, matrix.indptr, matrix.num_docs, matrix.vocabulary)
        assert np.isnan(bare.maxima).all()
        expected = pruning.pruned_top_k(matrix, [q.split() for q in queries(40)], 10)
        assert [(h.rows.tolist(), h.scores.tolist()) for h in pruning.pruned_top_k(
            bare, [q.split() for q in queries(40)], 10)] == [(h.rows.tolist(), h.scores.tolist()) for h in expected]
        seen = ~np.isnan(bare.maxima)
        assert seen.any() and np.array_equal(bare.maxima[seen], np.asarray(matrix.maxima)[seen])


def test_bounds_of_the_wrong_shape_are_refused(indexes, tmp_path):
    import shutil

    from test_index import reseal_file

    shutil.copytree(indexes / "sharded", tmp_path / "idx")
    np.save(tmp_path / "idx" / "bm25" / "shard-0002" / MAXIMA, np.zeros(3, dtype=np.float32))
    reseal_file(tmp_path / "idx", f"bm25/shard-0002/{MAXIMA}")
    with pytest.raises(IndexLoadError, match=f"shard-0002/{MAXIMA} holds"):
        BM25Index.open(tmp_path / "idx")


def test_float32_rounding_cannot_drop_a_passage_that_ties():
    """Row 0 scores 1 + 2^-25 and row 1 scores 1 + 2^-24 in exact arithmetic; both round to 1.0 in
    float32, where the exhaustive search ranks row 0 first. Bounds without their slack would drop it."""
    data = np.array([1.0, 1.0, 2.0 ** -25, 2.0 ** -24], dtype=np.float32)
    matrix = TermScoreMatrix(data, np.array([0, 1, 0, 1], dtype=np.int32), np.array([0, 2, 4]), 2, {"a": 0, "b": 1})
    exhaustive = matrix.top_k([["a", "b"]], 1)[0]
    assert exhaustive.rows.tolist() == [0] and exhaustive.scores.tolist() == [1.0]
    pruned = pruning.pruned_top_k(matrix, [["a", "b"]], 1)[0]
    assert pruned.rows.tolist() == [0] and pruned.scores.tolist() == [1.0]


def test_terms_without_postings_in_a_matrix_give_no_hits():
    """Several query terms none of which lists a passage of this matrix (a small last shard), with no
    floor from earlier shards: every term is essential and nothing is found."""
    matrix = TermScoreMatrix(np.array([1.0], dtype=np.float32), np.array([0], dtype=np.uint16),
                             np.array([0, 0, 0, 1]), 2, {"a": 0, "b": 1, "c": 2})
    for query in (["a", "b"], ["a", "b", "a"]):
        assert pruning.pruned_top_k(matrix, [query], 5)[0].rows.tolist() == []
        assert matrix.top_k([query], 5)[0].rows.tolist() == []
