"""The package facade (``winnow.open_index``, ``build_index``, ``load_llm``, ``build_method``).

An index made by ``winnow index --dense`` opens through ``winnow.open_index`` for every retriever
the command line searches with, finding what ``winnow search`` finds; the functions are typed with
the real classes, not ``Any``; and the README's Python example runs as written, on the small
corpus with SmolLM2-135M instead of the README's model and Wikipedia.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import typing
from pathlib import Path

import pytest
from cli_runner import winnow as winnow_in_process
from fast_model import suite_model
from small_corpus import PASSAGES

import winnow
from winnow.errors import WinnowError
from winnow.index import RETRIEVER_KINDS, BM25Index, DenseIndex, HybridIndex
from winnow.llm import LLM
from winnow.methods.base import Method

README = Path(__file__).resolve().parents[1] / "README.md"
OPENED = {"bm25": BM25Index, "dense": DenseIndex, "hybrid": HybridIndex}
# Lucene starts a JVM, once per process: its facade test is in tests/test_lucene.py, with every Lucene test.
IN_JVM = {"lucene"}


def cli(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    result = winnow_in_process(*args, env={"WINNOW_CACHE_DIR": str(cache)})
    assert result.returncode == 0, f"winnow {' '.join(args)} failed:\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    source = tmp_path_factory.mktemp("facade") / "corpus.jsonl"
    source.write_text("".join(json.dumps(p) + "\n" for p in PASSAGES))
    return source


@pytest.fixture(scope="module")
def cli_index(corpus) -> Path:
    """An index built by the command line, with embeddings for dense and hybrid search."""
    cli("index", str(corpus), "--out", str(corpus.parent / "cli-index"), "--dense", cache=corpus.parent / "cache")
    return corpus.parent / "cli-index"


def test_every_retriever_kind_is_one_the_cli_offers():
    # The CLI's --retriever help names the kinds; open_index must open each of them.
    from winnow.commands.corpus import search

    help_text = typing.get_type_hints(search, include_extras=True)["retriever"].__metadata__[0].help
    assert all(kind in help_text for kind in RETRIEVER_KINDS)
    assert set(OPENED) | IN_JVM == set(RETRIEVER_KINDS)


@pytest.mark.parametrize("retriever", [kind for kind in RETRIEVER_KINDS if kind not in IN_JVM])
def test_open_index_finds_what_winnow_search_finds(cli_index, retriever):
    query = "who painted the mona lisa"
    found = json.loads(cli("search", "--index", str(cli_index), "--retriever", retriever, "--k", "4", "--json",
                           query, cache=cli_index.parent / "cache").stdout)
    index = winnow.open_index(cli_index, retriever)
    assert type(index) is OPENED[retriever] and index.name == retriever
    hits = index.search(query, k=4)
    assert hits.passages[0].id == "mona"
    assert [c.passage.id for c in hits] == [p["id"] for p in found["passages"]]
    assert [c.score for c in hits] == pytest.approx([p["scores"][-1]["score"] for p in found["passages"]], abs=1e-4)


def test_open_index_is_bm25_unless_told_otherwise(cli_index):
    assert type(winnow.open_index(cli_index)) is BM25Index


def test_open_index_refuses_an_unknown_retriever_naming_the_kinds(cli_index):
    with pytest.raises(WinnowError, match="unknown retriever 'splade'") as caught:
        winnow.open_index(cli_index, "splade")
    assert "bm25, dense, hybrid" in caught.value.hint


def test_build_index_with_dense_opens_every_way(corpus, tmp_path):
    built = winnow.build_index(corpus, tmp_path / "idx", dense=True, progress=False)
    assert type(built) is BM25Index and len(built.passages) == len(PASSAGES)
    for retriever in sorted(set(RETRIEVER_KINDS) - IN_JVM):  # an index of Winnow's BM25: not Lucene's
        assert winnow.open_index(tmp_path / "idx", retriever).search("Jupiter planet", k=1).passages[0].id == "jupiter"


def test_facade_functions_are_typed_with_the_real_classes():
    import winnow.index.embedder
    from winnow.index import DenseEncoder, LuceneIndex  # the class: importing it starts no JVM

    names = {**vars(winnow.index.embedder), "BM25Index": BM25Index, "DenseIndex": DenseIndex,
             "HybridIndex": HybridIndex, "LuceneIndex": LuceneIndex, "DenseEncoder": DenseEncoder, "Path": Path}
    assert (typing.get_type_hints(winnow.open_index, localns=names)["return"]
            == BM25Index | DenseIndex | HybridIndex | LuceneIndex)
    assert typing.get_type_hints(winnow.build_index, localns=names)["return"] is BM25Index
    assert typing.get_type_hints(winnow.load_llm)["return"] is LLM
    from winnow.models.rerankers import PairScorer  # a trained reranker's type, named only for type checkers

    assert typing.get_type_hints(winnow.build_method, localns={"PairScorer": PairScorer})["return"] is Method


@pytest.mark.subprocess
def test_load_llm_and_build_method_load_on_first_use():
    # `import winnow` imports no layer; the functions are the layers' own.
    code = ("import sys, winnow; print(sorted(m for m in sys.modules if m.startswith('winnow.'))); "
            "from winnow import build_method, load_llm; import winnow.llm, winnow.methods; "
            "print(load_llm is winnow.llm.load_llm, build_method is winnow.methods.build_method)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["['winnow.version']", "True True"]
    with pytest.raises(AttributeError, match="no attribute 'open_indexes'"):
        winnow.open_indexes  # noqa: B018 - the attribute access is the test


@pytest.mark.subprocess
def test_a_rerank_only_import_loads_no_index_code():
    # winnow.Winnower reranks or filters texts retrieved elsewhere: no BM25 (bm25s, PyStemmer, scipy)
    # and no index module beyond the package's own light __init__ and the passage text.
    code = ("import sys, winnow; winnow.Winnower; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('bm25s', 'scipy', 'Stemmer', 'faiss', "
            "'onnxruntime') or m.startswith('winnow.index')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['winnow.index', 'winnow.index.passage_text']"
    from winnow.integrations import Winnower

    assert winnow.Winnower is Winnower


def readme_python_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    [example] = [block for block in blocks if "import winnow\n" in block and "winnow.build_method" in block]
    return example


@pytest.mark.llm
def test_the_readme_python_example_runs_as_written(corpus, tmp_path, monkeypatch, capsys):
    example = readme_python_example()
    # The README's corpus and model, swapped for the small corpus and the test model; each must be there.
    for named, used in (('"wiki-vital"', json.dumps(str(corpus))), ('"qwen2.5-coder-1.5b"', json.dumps(suite_model()))):
        assert named in example, f"the README example no longer uses {named}: update this test"
        example = example.replace(named, used)
    monkeypatch.chdir(tmp_path)  # the example writes ./wiki-index
    namespace: dict[str, typing.Any] = {}
    exec(compile(example, str(README), "exec"), namespace)
    answer = namespace["answer"]
    assert isinstance(namespace["index"], BM25Index) and (tmp_path / "wiki-index" / "manifest.json").is_file()
    assert isinstance(namespace["rag"], Method) and answer.text.strip()
    out = capsys.readouterr().out
    assert out.startswith(answer.text + "\n")
    printed = out.splitlines()
    assert any(line.startswith("1 ") for line in printed) and any("Mona Lisa" in line for line in printed)
    assert answer.passages.passages[0].id in {p["id"] for p in PASSAGES}
