"""The Lucene first stage (``--retriever lucene``, ``winnow index --bm25-engine lucene``): Pyserini's runs exactly.

One file for every Lucene test: a JVM starts once per process and cannot be restarted, so the tests
that start it share one worker (``--dist loadfile``). It runs in this process (no ``subprocess``
mark: it is not a Python process). Java is Debian's openjdk-17 (the Makefile installs it, as it does
chromium); pyjnius is the ``lucene`` extra, Anserini's jar pyserini 0.21.0's.
"""

from __future__ import annotations

import importlib
import json
import random
import shutil
import sys
import types
from pathlib import Path

import pytest
from cli_runner import winnow

winnow_cli = winnow  # the module name `winnow` is the package inside tests that import it

# Words for a corpus with what Winnow's own tokeniser and Lucene's disagree on: one-letter and numeric
# tokens, stop words, inflected forms the Porter stemmer folds.
WORDS = ("river bank banks banking money flow flows flowing city cities capital x y 7 42 1999 a the of and is "
         "mountain mountains snow north south east west trade trading ship ships harbour bridge bridges").split()


def synthetic(count: int, seed: int = 7) -> list[dict[str, str]]:
    rng = random.Random(seed)
    return [{"id": f"d{i}", "title": " ".join(rng.choices(WORDS, k=2)),
             "text": " ".join(rng.choices(WORDS, k=rng.randint(5, 40)))} for i in range(count)]


def queries(count: int, seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(1, 5))) for _ in range(count)]


def write_jsonl(path: Path, records: list[dict[str, str]]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A Winnow index of 150 synthetic passages built with ``--bm25-engine lucene`` (the JVM starts here)."""
    folder = tmp_path_factory.mktemp("lucene")
    source = write_jsonl(folder / "corpus.jsonl", synthetic(150))
    result = winnow("index", source, "--out", folder / "idx", "--bm25-engine", "lucene")
    assert result.returncode == 0, result.stderr
    return folder / "idx"


def pyserini_searcher():
    """Pyserini's own ``LuceneSearcher`` class. ``pyserini.search``'s and ``pyserini.search.lucene``'s
    package files import its dense search (torch, scikit-learn, ...), which a --no-deps install lacks:
    they are replaced by empty packages over the same folders, so ``_searcher.py`` itself loads unchanged."""
    import pyserini

    root = Path(pyserini.__path__[0])
    saved = {name: sys.modules.get(name) for name in ("pyserini.search", "pyserini.search.lucene")}
    try:
        search = types.ModuleType("pyserini.search")
        search.__path__ = [str(root / "search")]
        sys.modules["pyserini.search"] = search
        base = importlib.import_module("pyserini.search._base")
        search.JQuery, search.JQueryGenerator = base.JQuery, base.JQueryGenerator
        lucene = types.ModuleType("pyserini.search.lucene")
        lucene.__path__ = [str(root / "search" / "lucene")]
        sys.modules["pyserini.search.lucene"] = lucene
        return importlib.import_module("pyserini.search.lucene._searcher").LuceneSearcher
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def test_lucene_retriever_gives_pyserini_s_top_100_ids_and_scores(built):
    from winnow.index import open_retriever

    index = open_retriever(built, "lucene")
    theirs = pyserini_searcher()(str(built / "lucene"))  # BM25 k1=0.9, b=0.4: its defaults and the manifest's
    asked = queries(25)
    batched = index.search_many(asked, k=100)
    compared = 0
    for query, ours in zip(asked, batched, strict=True):
        expected = [(hit.docid, hit.score) for hit in theirs.search(query, k=100)]
        single = index.search(query, k=100)
        assert [(c.passage.id, c.scores[0].score) for c in ours] == expected, query
        assert [(c.passage.id, c.scores[0].score) for c in single] == expected, query
        assert all(c.scores[0].stage == "lucene" for c in ours)
        compared += len(expected)
    assert compared > 25 * 30  # most queries match many passages: the lists are long, not trivially equal
    hit = batched[0].candidates[0]
    assert hit.passage == index.get(hit.passage.id)  # the text comes from Winnow's passage store


def test_open_index_finds_what_winnow_search_finds(built):
    import winnow
    from winnow.index import LuceneIndex

    query = "river bank of the north"
    found = json.loads(winnow_cli("search", query, "--index", built, "--retriever", "lucene", "--k", "5",
                                  "--json").stdout)
    index = winnow.open_index(built, "lucene")
    assert type(index) is LuceneIndex and index.name == "lucene" and len(index) == 150
    hits = index.search(query, k=5)
    assert [(c.passage.id, c.score) for c in hits] == [(p["id"], p["score"]) for p in found["passages"]]


def test_winnow_s_own_bm25_is_not_lucene_on_the_same_corpus(built, tmp_path):
    """Why the stage exists: the `pyserini` profile of Winnow's BM25 keeps Lucene's parameters but not
    its tokens (one-letter and numeric ones) nor its lossy length norm, so its scores differ."""
    from winnow.index import BM25Index, LuceneIndex

    source = write_jsonl(tmp_path / "corpus.jsonl", synthetic(150))
    result = winnow("index", source, "--out", tmp_path / "own", "--bm25-profile", "pyserini")
    assert result.returncode == 0, result.stderr
    own, lucene = BM25Index.open(tmp_path / "own"), LuceneIndex.open(built)
    query = "x 7 river banks"
    assert ([(c.passage.id, round(c.score, 4)) for c in own.search(query, 20)]
            != [(c.passage.id, round(c.score, 4)) for c in lucene.search(query, 20)])


def test_eval_runs_end_to_end_with_the_lucene_retriever(built, tmp_path):
    from fakes import ScriptedServer
    from test_evaluation import CORPUS, QUESTIONS

    from winnow.index import LuceneIndex

    source = write_jsonl(tmp_path / "corpus.jsonl", [{"id": i, "title": t, "text": x} for i, t, x in CORPUS])
    assert winnow("index", source, "--out", tmp_path / "idx", "--bm25-engine", "lucene").returncode == 0
    (tmp_path / "qa.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    server = ScriptedServer(delay=0.0)
    try:
        result = winnow("eval", "--index", tmp_path / "idx", "--queries", tmp_path / "qa.jsonl", "--out",
                        tmp_path / "out", "--retriever", "lucene", "--method", "vanilla", "--n", "3", "--k", "2",
                        "--backend", "openai", "--base-url", server.url, "--model", "m", "--no-cache")
    finally:
        server.stop()
    assert result.returncode == 0, result.stderr
    records = {r["id"]: r for r in map(json.loads, (tmp_path / "out" / "answers.jsonl").read_text().splitlines())}
    assert sorted(records) == sorted(q["id"] for q in QUESTIONS)
    index = LuceneIndex.open(tmp_path / "idx")
    for question in QUESTIONS:
        record = records[question["id"]]
        ids = record["first_stage"]["ids"]  # eval's first-stage list, as deep as its recall needs
        assert ids and ids == [c.passage.id for c in index.search(question["question"], len(ids))]
        assert record["stages"][0]["kind"] == "lucene" and record["answer"].startswith("re: ")
    assert records["q1"]["first_stage"]["ids"][0] in ("paris", "france")
    run = json.loads((tmp_path / "out" / "metrics.json").read_text())["run"]
    assert run["retriever"] == "lucene" and run["label"].endswith(" lucene")


def test_a_tampered_lucene_file_is_refused_by_the_manifest(built, tmp_path):
    copy = tmp_path / "idx"
    shutil.copytree(built, copy)
    term_file = next(path for path in sorted((copy / "lucene").iterdir()) if path.suffix == ".tim")
    data = bytearray(term_file.read_bytes())
    data[len(data) // 2] ^= 0x01
    term_file.write_bytes(bytes(data))
    result = winnow("search", "river", "--index", copy, "--retriever", "lucene")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"lucene/{term_file.name} does not match its recorded sha256" in result.stderr
    assert "--bm25-engine lucene --overwrite" in result.stderr  # the rebuild hint rebuilds a Lucene index


def test_a_lucene_file_dropped_from_the_manifest_is_refused(built, tmp_path):
    from winnow.index.manifest import read_manifest, save_manifest

    copy = tmp_path / "idx"
    shutil.copytree(built, copy)
    manifest = read_manifest(copy)
    name = next(name for name in manifest["files"] if name.startswith("lucene/") and name.endswith(".tim"))
    del manifest["files"][name]
    save_manifest(copy, manifest)  # resealed: its own checksum is right again
    result = winnow("search", "river", "--index", copy, "--retriever", "lucene")
    assert result.returncode == 2 and f"does not list {name}" in result.stderr


def test_the_retrievers_refuse_an_index_of_the_other_engine(built, tmp_path):
    result = winnow("search", "river", "--index", built)
    assert result.returncode == 2 and "search it with --retriever lucene" in result.stderr
    source = write_jsonl(tmp_path / "corpus.jsonl", synthetic(30))
    assert winnow("index", source, "--out", tmp_path / "own").returncode == 0
    result = winnow("search", "river", "--index", tmp_path / "own", "--retriever", "lucene")
    assert result.returncode == 2 and "holds Winnow's own BM25" in result.stderr
    result = winnow("index", source, "--out", tmp_path / "x", "--bm25-engine", "lucene", "--dense")
    assert result.returncode == 2 and "--dense cannot be combined with --bm25-engine lucene" in result.stderr


def test_missing_java_is_one_line_naming_the_package(built, tmp_path):
    source = write_jsonl(tmp_path / "corpus.jsonl", synthetic(30))
    nowhere = tmp_path / "no-java"
    nowhere.mkdir()
    for env, said in (({"JAVA_HOME": str(nowhere)}, f"JAVA_HOME={nowhere} holds no Java runtime"),
                      ({"JAVA_HOME": None, "PATH": str(nowhere)}, "JAVA_HOME is not set and there is no java on PATH")):
        for args in (("index", source, "--out", tmp_path / "out", "--bm25-engine", "lucene"),
                     ("search", "river", "--index", built, "--retriever", "lucene")):
            result = winnow(*args, env=env)
            assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
            assert said in result.stderr and "openjdk-17-jre-headless" in result.stderr
            assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "out").exists()
    old = tmp_path / "java8"
    (old / "lib" / "server").mkdir(parents=True)
    (old / "lib" / "server" / "libjvm.so").write_bytes(b"")
    (old / "release").write_text('JAVA_VERSION="1.8.0_392"\n')
    result = winnow("search", "river", "--index", built, "--retriever", "lucene", env={"JAVA_HOME": str(old)})
    assert result.returncode == 2 and "needs Java 11 or later" in result.stderr and "is Java 8" in result.stderr


def test_missing_pyjnius_names_the_lucene_extra(built, monkeypatch):
    # pyjnius cannot be uninstalled for one test: its module is reported absent, as find_spec would.
    import importlib.util

    from winnow import extras

    real = importlib.util.find_spec
    monkeypatch.setattr(extras.importlib.util, "find_spec",
                        lambda name, *rest: None if name == "jnius" else real(name, *rest))
    result = winnow("search", "river", "--index", built, "--retriever", "lucene")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "needs the 'lucene' extra: pip install 'winnow-rag[lucene]'" in result.stderr
    assert "jnius is not installed" in result.stderr


def test_a_prebuilt_index_offline_is_one_line(built):
    result = winnow("search", "river", "--index", "pyserini:cacm", "--retriever", "lucene")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "pyserini:cacm: Pyserini's prebuilt index is not in its cache and could not be downloaded" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    result = winnow("search", "river", "--index", "pyserini:no-such-index", "--retriever", "lucene")
    assert result.returncode == 2 and "Pyserini has no prebuilt Lucene index of that name" in result.stderr
