"""faiss ANN indexes (HNSW, IVF-PQ) beside exact dense search, on real MiniLM embeddings.

250 sentences of the wiki-vital summaries are embedded with the packaged all-MiniLM-L6-v2 into an
index; the ANN indexes built into it must find what exact search finds (recall@10 against exact),
be listed and checked like every index file, and be refused when they do not fit the embeddings.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from cli_runner import winnow as winnow_in_process
from test_index import reseal_file

from winnow.errors import IndexLoadError, WinnowError
from winnow.index import DenseIndex, add_ann_index, ann_settings, build_index, load_embedder
from winnow.index.ann import parse_assignments
from winnow.records import Passage
from winnow.settings import SettingError

pytest.importorskip("faiss")
K = 10


def sentences(count):
    from winnow.corpus import load_corpus, split_sentences

    articles = load_corpus("wiki-vital").passages
    step = len(articles) // count
    return [Passage(a.id, split_sentences(a.text)[0], title=a.title) for a in articles[::step][:count]]


@pytest.fixture(scope="module")
def embedder():
    return load_embedder()


@pytest.fixture(scope="module")
def indexed(tmp_path_factory, embedder):
    out = tmp_path_factory.mktemp("ann") / "index"
    build_index(sentences(250), out, source="test", source_checksum="x", embedder=embedder, progress=False)
    add_ann_index(out, ann_settings("hnsw"), progress=False)
    add_ann_index(out, ann_settings("ivfpq", {"nbits": 6}), progress=False)
    return out


QUERIES = ["the largest planet", "a famous painter of the renaissance", "an infectious disease", "a river in Africa",
           "world war battles", "a programming language", "ancient greek philosopher", "a musical instrument",
           "the capital city of a country", "a chemical element", "olympic sport", "an empire in asia"]


def recall(approximate, exact):
    return np.mean([len({c.passage.id for c in a} & {c.passage.id for c in e}) / K
                    for a, e in zip(approximate, exact, strict=True)])


@pytest.mark.parametrize("kind, floor", [("hnsw", 0.98), ("ivfpq", 0.9)])
def test_ann_search_finds_what_exact_search_finds(indexed, embedder, kind, floor):
    exact = DenseIndex.open(indexed, embedder=embedder).search_many(QUERIES, K)
    approximate = DenseIndex.open(indexed, embedder=embedder, ann=kind)
    found = approximate.search_many(QUERIES, K)
    assert recall(found, exact) >= floor
    for hits in found:  # best first, scores as exact inner products would give them (float16 rows)
        assert [c.score for c in hits] == sorted((c.score for c in hits), reverse=True)
    first = {c.passage.id: c.score for c in exact[0]}
    assert all(abs(c.score - first[c.passage.id]) < 2e-3 for c in found[0] if c.passage.id in first)


def test_ann_files_are_listed_and_described_in_the_manifest(indexed):
    manifest = json.loads((indexed / "manifest.json").read_text())
    assert {"dense/ann-hnsw.faiss", "dense/ann-ivfpq.faiss"} <= set(manifest["files"])
    ann = manifest["dense"]["ann"]
    assert ann["hnsw"]["settings"] == {"M": 32, "efConstruction": 200, "efSearch": 256}
    assert ann["ivfpq"]["settings"]["nbits"] == 6 and ann["ivfpq"]["settings"]["m"] == 96  # 384 / 4
    assert ann["ivfpq"]["settings"]["nlist"] == 3  # few rows: at least 64 training points per cell


def test_an_ann_index_not_built_is_refused_with_the_command_that_builds_it(tmp_path, embedder):
    out = build_index(sentences(20), tmp_path / "index", source="test", source_checksum="x", embedder=embedder,
                      progress=False)
    with pytest.raises(IndexLoadError, match=r"has no hnsw index.*winnow ann .* --ann hnsw"):
        DenseIndex.open(out, embedder=embedder, ann="hnsw")


def test_an_ann_index_of_other_embeddings_is_refused_even_resealed(indexed, tmp_path, embedder):
    other = build_index(sentences(20), tmp_path / "other", source="test", source_checksum="x", embedder=embedder,
                        progress=False)
    add_ann_index(other, ann_settings("hnsw"), progress=False)
    copy = shutil.copytree(indexed, tmp_path / "copy")
    shutil.copy(other / "dense" / "ann-hnsw.faiss", copy / "dense" / "ann-hnsw.faiss")
    with pytest.raises(IndexLoadError, match="ann-hnsw.faiss"):  # the manifest's size or sha256 check
        DenseIndex.open(copy, embedder=embedder, ann="hnsw")
    reseal_file(copy, "dense/ann-hnsw.faiss")
    with pytest.raises(IndexLoadError, match=r"holds 20 vectors of 384 dimensions; the embeddings are 250"):
        DenseIndex.open(copy, embedder=embedder, ann="hnsw")


def test_ann_settings_are_checked():
    assert ann_settings("hnsw", parse_assignments(["efSearch=64"])).efSearch == 64
    with pytest.raises(SettingError, match="hnsw has no setting 'nprobe'"):
        ann_settings("hnsw", {"nprobe": 4})
    with pytest.raises(SettingError, match="'flat' is not an ANN index kind"):
        ann_settings("flat")
    with pytest.raises(SettingError, match="expected a whole number"):
        ann_settings("ivfpq", {"nprobe": "many"})
    with pytest.raises(SettingError, match="expected NAME=VALUE"):
        parse_assignments(["efSearch"])


def test_cli_builds_an_ann_index_later_and_searches_through_it(indexed, tmp_path):
    copy = shutil.copytree(indexed, tmp_path / "copy")

    def winnow(*args):
        return winnow_in_process(*args, env={"WINNOW_CACHE_DIR": str(tmp_path / "cache")})

    built = winnow("ann", str(copy), "--ann", "hnsw", "--ann-set", "M=16")
    assert built.returncode == 0, built.stderr
    assert "built the hnsw index" in built.stderr and "'M': 16" in built.stderr
    found = winnow("search", "the largest planet", "-i", str(copy), "-r", "dense", "--ann", "hnsw",
                   "--ann-set", "efSearch=64", "--json", "-k", "3")
    assert found.returncode == 0, found.stderr
    assert len(json.loads(found.stdout)["passages"]) == 3
    refused = winnow("search", "x", "-i", str(copy), "--ann", "hnsw")
    assert refused.returncode != 0 and "--ann needs --retriever dense or hybrid" in refused.stderr


def test_cli_index_refuses_ann_or_an_encoder_without_dense_and_unknown_presets(tmp_path):
    source = tmp_path / "corpus.jsonl"
    source.write_text(json.dumps({"id": "a", "text": "some words here"}) + "\n")

    def winnow(*args):
        return winnow_in_process("index", str(source), "--out", str(tmp_path / "idx"), *args,
                                 env={"WINNOW_CACHE_DIR": str(tmp_path / "cache")})

    assert "--encoder and --ann need --dense" in winnow("--ann", "hnsw").stderr
    assert "'colbert' is not an encoder preset" in winnow("--dense", "--encoder", "colbert").stderr
    assert "'flat' is not an ANN index kind" in winnow("--dense", "--ann", "flat").stderr
    assert not (tmp_path / "idx").exists()


def test_ann_over_int8_storage_searches_the_dequantised_vectors(indexed, tmp_path):
    from winnow.index.ann import AnnSearcher, build_ann
    from winnow.index.vectors import inner_products, quantise

    vectors = np.load(indexed / "dense" / "embeddings.npy").astype(np.float32)
    codes, scales = quantise(vectors, "int8")
    queries = vectors[:20] + 0.01  # near known rows
    exact = np.argsort(-inner_products(queries, codes, scales), axis=1, kind="stable")[:, :K]
    for kind in ("hnsw", "ivfpq"):
        described = build_ann(codes, scales, ann_settings(kind, {"nbits": 6} if kind == "ivfpq" else {}),
                              tmp_path / f"ann-{kind}.faiss")
        rows, _ = AnnSearcher.open(tmp_path, described, codes, scales).search(queries, K)
        assert np.mean([len(set(r) & set(e)) / K for r, e in zip(rows.tolist(), exact.tolist(), strict=True)]) >= 0.9


def test_ivfpq_over_fewer_passages_than_its_codewords_is_refused_naming_the_setting(indexed):
    from winnow.index.ann import build_ann
    from winnow.settings import SettingError

    stored = np.zeros((40, 8), dtype=np.float32)
    with pytest.raises(SettingError, match=r"nbits=8 learns 256 codewords .* this index has 40") as caught:
        build_ann(stored, None, ann_settings("ivfpq", {}), indexed / "unused.faiss")
    assert caught.value.setting == "nbits"


# --- --ann as a run option of ask / eval (and serve, mcp: the same RunOptions) ------------------------

@pytest.fixture(scope="module")
def llm_server():
    from fault_server import FaultServer

    server = FaultServer()  # a real OpenAI-compatible server on loopback; answers are a function of the prompt
    yield server
    server.stop()


def run_cli(*args):
    from typer.testing import CliRunner

    from winnow.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


def ask_json(index, server, *extra):
    result = run_cli("ask", "a famous painter of the renaissance", "--index", index, "--backend", "openai",
                     "--base-url", server.url, "--model", "m", "--method", "vanilla", "--n", "5", "--k", "5",
                     "--no-cache", "--json", *extra)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_ask_with_ann_answers_from_the_passages_exact_search_finds(indexed, llm_server):
    exact = ask_json(indexed, llm_server, "--retriever", "dense")
    approximate = ask_json(indexed, llm_server, "--retriever", "dense", "--ann", "hnsw", "--ann-set", "efSearch=64")
    assert [p["id"] for p in approximate["passages"]] == [p["id"] for p in exact["passages"]]
    assert len(exact["passages"]) == 5
    assert approximate["settings"]["ann"] == "hnsw" and approximate["settings"]["ann_set"] == {"efSearch": 64}
    assert "ann" not in exact["settings"]


def test_ask_with_ann_is_refused_where_there_is_nothing_to_search_it_with(tmp_path, embedder):
    bm25_only = build_index(sentences(20), tmp_path / "bm25", source="test", source_checksum="x", progress=False)
    exact_only = build_index(sentences(20), tmp_path / "dense", source="test", source_checksum="x",
                             embedder=embedder, progress=False)

    def refusal(index, *extra):
        result = run_cli("ask", "q", "--index", index, "--backend", "openai", "--base-url", "http://127.0.0.1:9/v1",
                         "--model", "m", *extra)
        assert isinstance(result.exception, WinnowError), result.output  # the CLI prints it as one line, exit 2
        return f"{result.exception.message} {result.exception.hint}"

    assert ("--ann hnsw: " + str(tmp_path / "bm25") + " has no embeddings to search"
            in refusal(bm25_only, "--retriever", "dense", "--ann", "hnsw"))
    said = refusal(exact_only, "--retriever", "hybrid", "--ann", "ivfpq")
    assert "has no ivfpq index" in said and f"winnow ann {tmp_path / 'dense'} --ann ivfpq" in said
    assert "but the retriever is 'bm25'" in refusal(exact_only, "--ann", "hnsw")
    assert "not a search setting of hnsw" in refusal(exact_only, "--retriever", "dense", "--ann", "hnsw",
                                                        "--ann-set", "M=8")
    assert "no --ann is given" in refusal(exact_only, "--retriever", "dense", "--ann-set", "efSearch=8")


def test_eval_records_ann_in_the_run_identity_and_will_not_resume_without_it(indexed, llm_server, tmp_path):
    questions = tmp_path / "qa.jsonl"
    questions.write_text(json.dumps({"id": "q1", "question": "the largest planet", "golden_answers": ["Jupiter"]})
                         + "\n")
    out = tmp_path / "run"

    def evaluate(*extra):
        return run_cli("eval", "--index", indexed, "--queries", questions, "--out", out, "--backend", "openai",
                       "--base-url", llm_server.url, "--model", "m", "--method", "vanilla", "--n", "4", "--k", "2",
                       "--no-cache", "--retriever", "dense", *extra)

    first = evaluate("--ann", "ivfpq", "--ann-set", "nprobe=2")
    assert first.exit_code == 0, first.output
    identity = json.loads((out / "config.json").read_text())["identity"]
    assert identity["spec"]["ann"] == "ivfpq" and identity["spec"]["ann_set"] == {"nprobe": 2}
    assert "dense/ann-ivfpq.faiss" in identity["index"]["dense"]
    assert "dense/ann-hnsw.faiss" not in identity["index"]["dense"]  # another ANN index does not change this run
    exact = evaluate()
    assert isinstance(exact.exception, WinnowError), exact.output
    assert 'spec.ann: "ivfpq" → null' in str(exact.exception), str(exact.exception)


def test_winnow_embed_adds_embeddings_and_an_ann_index_to_a_sharded_bm25_index(tmp_path):
    """A corpus too large for one BM25 build is indexed in shards, which --dense cannot join: its
    passages are embedded afterwards by `winnow embed`, then searched densely through HNSW."""
    source = tmp_path / "corpus.jsonl"
    source.write_text("".join(json.dumps({"id": p.id, "title": p.title, "text": p.text}) + "\n"
                              for p in sentences(20)))
    index = tmp_path / "sharded"
    built = run_cli("index", source, "--out", index, "--shard-size", "8")
    assert built.exit_code == 0, built.output
    refused = run_cli("ask", "q", "--index", index, "--retriever", "dense", "--ann", "hnsw", "--backend", "openai",
                      "--base-url", "http://127.0.0.1:9/v1", "--model", "m")
    assert isinstance(refused.exception, WinnowError) and f"`winnow embed {index} --ann hnsw`" in refused.exception.hint
    embedded = run_cli("embed", index, "--ann", "hnsw", "--dense-storage", "int8")
    assert embedded.exit_code == 0, embedded.output
    assert "built the hnsw index" in embedded.stderr
    found = DenseIndex.open(index, ann="hnsw").search(sentences(20)[3].text, k=1)
    assert [c.passage.id for c in found] == [sentences(20)[3].id]
