"""The light core: Winnow installed without any extra, in a real clean virtual environment.

A fresh venv (no system site-packages) gets exactly the core: pyproject's ``dependencies`` and what
they require, at the versions installed here, each placed in the venv as pip installed it here (the
files its RECORD lists, hard-linked, or copied across file systems: well under a second, where a
``pip install --no-deps`` of the same wheels took about 13 s), with the tree under test on
PYTHONPATH. In it, BM25 indexing and search, the Python API and the LLM rerankers run against a
real OpenAI-compatible server (llama.cpp's, started by this test process on 127.0.0.1) and give what
the full install gives; every command that needs an extra stops with one line naming the extra and
its pip command, exit status 2.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from small_corpus import PASSAGES

from winnow.extras import EXTRAS

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
#: Packages whose modules raise MissingExtra on import (they exist for an extra); all else is core.
EXTRA_ONLY_PACKAGES = {"winnow.service": "serve", "winnow.integrations.langchain": "langchain",
                       "winnow.integrations.llamaindex": "llamaindex", "winnow.integrations.haystack": "haystack"}


def core_distributions() -> dict[str, metadata.Distribution]:
    """pyproject's core dependencies and everything they require, as installed here, by name."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    found: dict[str, metadata.Distribution] = {}
    todo = [Requirement(line).name for line in project["dependencies"]]
    while todo:
        dist = metadata.distribution(todo.pop())
        name = canonicalize_name(dist.metadata["Name"])
        if name in found:
            continue
        found[name] = dist
        for requirement in map(Requirement, dist.requires or []):
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return found


def place_installed_files(dist: metadata.Distribution, site_packages: Path) -> int:
    """Put the files pip installed for ``dist`` here (its RECORD) into ``site_packages``: hard links
    (the same bytes, no copy), or copies where the two are on different file systems. Scripts pip
    put outside site-packages are left out: the tests run ``python -m``. Returns the count placed."""
    placed = 0
    for file in dist.files or ():
        if file.parts[0] == "..":
            continue
        source, target = Path(dist.locate_file(file)), site_packages / file
        if not source.is_file():  # RECORD may list a .pyc that was never written
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(source, target)
        except OSError:
            shutil.copy2(source, target)
        placed += 1
    return placed


@pytest.fixture(scope="module")
def core_python(tmp_path_factory) -> Path:
    """The python of a new venv holding only the core's packages, installed as they are here."""
    venv = tmp_path_factory.mktemp("core") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site_packages = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    assert site_packages.is_dir(), f"no {site_packages} in the new venv"
    for name, dist in core_distributions().items():
        assert dist.files, f"{name} has no RECORD: it cannot be placed in the core venv"
        assert place_installed_files(dist, site_packages) > 0, name
    return python


def run(python: Path, *args: str, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(SRC), "PYTHONNOUSERSITE": "1", "WINNOW_CACHE_DIR": str(cache),
           "COLUMNS": "200"}
    return subprocess.run([str(python), *args], capture_output=True, text=True, env=env, timeout=300)


def winnow(python: Path, *args: str, cache: Path) -> subprocess.CompletedProcess:
    return run(python, "-m", "winnow.cli", *args, cache=cache)


@pytest.fixture(scope="module")
def built(core_python, tmp_path_factory) -> Path:
    """A BM25 index of the small corpus, built by `winnow index` in the core environment."""
    folder = tmp_path_factory.mktemp("core-index")
    (folder / "corpus.jsonl").write_text("\n".join(json.dumps(p) for p in PASSAGES) + "\n")
    result = winnow(core_python, "index", str(folder / "corpus.jsonl"), "--out", str(folder / "idx"),
                    cache=folder / "cache")
    assert result.returncode == 0, result.stderr
    return folder


@pytest.mark.subprocess
def test_the_core_environment_has_no_extra(core_python, tmp_path):
    modules = sorted({module for modules in EXTRAS.values() for module in modules})
    code = "import importlib.util, sys; print(sorted(m for m in sys.argv[1:] if importlib.util.find_spec(m)))"
    result = run(core_python, "-c", code, *modules, cache=tmp_path)
    assert result.stdout.strip() == "[]", result.stderr


@pytest.mark.subprocess
def test_every_core_module_imports_and_the_rest_name_their_extra(core_python, tmp_path):
    modules = [".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")
               for path in sorted((SRC / "winnow").rglob("*.py"))]
    code = textwrap.dedent("""
        import importlib, json, sys
        from winnow.extras import MissingExtra
        outcome = {}
        for name in sys.argv[1:]:
            try:
                importlib.import_module(name)
                outcome[name] = "ok"
            except MissingExtra as error:
                outcome[name] = error.extra
            except Exception as error:
                outcome[name] = f"{type(error).__name__}: {error}"
        print(json.dumps(outcome))
    """)
    result = run(core_python, "-c", code, *modules, cache=tmp_path)
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout)
    assert {"winnow.cli", "winnow.index.bm25", "winnow.stages", "winnow.methods", "winnow.llm.openai_http"} <= set(outcome)
    for module, status in outcome.items():
        package = next((p for p in EXTRA_ONLY_PACKAGES if module == p or module.startswith(p + ".")), None)
        assert status == (EXTRA_ONLY_PACKAGES[package] if package else "ok"), f"{module}: {status}"


@pytest.mark.subprocess
def test_search_in_the_core(core_python, built):
    result = winnow(core_python, "search", "--index", str(built / "idx"), "--json", "mona lisa painter",
                    cache=built / "cache")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["passages"][0]["id"] == "mona"


@pytest.fixture(scope="module")
def server(llama_backend) -> str:
    """llama.cpp's OpenAI-compatible server on loopback, run by this (full) environment."""
    return llama_backend.http_address + "/v1"


@pytest.mark.subprocess
@pytest.mark.llm
def test_a_reranker_runs_in_the_core(core_python, built, server):
    result = winnow(core_python, "rerank", "--method", "pointwise", "--backend", "openai", "--base-url", server,
                    "--model", "smollm2", "--top-n", "3", "--no-cache", "--json", "capital of france",
                    str(built / "corpus.jsonl"), cache=built / "cache")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["usage"]["calls"] == len(PASSAGES)  # every passage scored by the server, nothing skipped
    scores = [r["score"] for r in data["results"]]
    assert len(scores) == 3 and all(0 < s < 1 for s in scores) and scores == sorted(scores, reverse=True)


@pytest.mark.subprocess
@pytest.mark.llm
def test_a_method_runs_in_the_core_through_the_python_api(core_python, built, server):
    code = textwrap.dedent("""
        import json, sys, winnow
        llm = winnow.load_llm("smollm2", backend="openai", base_url=sys.argv[2], cache=False)
        rag = winnow.build_method("rankrag", index=winnow.open_index(sys.argv[1]), llm=llm, n=4, k=2)
        print(json.dumps(rag.ask("which city is the capital").to_dict()))
    """)
    result = run(core_python, "-c", code, str(built / "idx"), server, cache=built / "cache")
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["answer"].strip() and len(answer["passages"]) == 2
    assert answer["usage"]["calls"] == 4 + 1  # RankRAG §4.3: one P("True") per retrieved passage, one answer


MISSING = {  # what a user of the core types → the extra it needs
    "serve": ["serve", "--index", "{idx}"],
    "mcp": ["mcp", "--index", "{idx}"],
    "report": ["report", "{folder}/run", "--out", "{folder}/report.md"],
    "eval --qrels": ["eval", "--index", "{idx}", "--queries", "{folder}/q.jsonl", "--qrels", "{folder}/qrels.txt",
                     "--out", "{folder}/run"],
    "eval --engine ray": ["eval", "--index", "{idx}", "--queries", "{folder}/q.jsonl", "--engine", "ray",
                          "--out", "{folder}/run"],
    "index --dense": ["index", "{folder}/corpus.jsonl", "--out", "{folder}/dense", "--dense"],
    "rerank --method embedding": ["rerank", "--method", "embedding", "q", "{folder}/corpus.jsonl"],
    "data export irds:": ["data", "export", "irds:beir/scifact/test", "--out", "{folder}/q.jsonl"],
    "ask (llama.cpp)": ["ask", "--index", "{idx}", "who painted the mona lisa"],
    "ask --backend transformers": ["ask", "--index", "{idx}", "--backend", "transformers", "--model", "m", "q"],
    "train sft": ["train", "sft", "--base", "smollm2-135m", "--data", "{folder}/blend", "--out", "{folder}/sft"],
    "tune": ["tune", "--index", "{idx}", "--queries", "{folder}/q.jsonl"],
}
EXTRA_OF = {"serve": "serve", "mcp": "mcp", "report": "eval", "eval --qrels": "eval", "eval --engine ray": "ray",
            "index --dense": "dense",
            "rerank --method embedding": "dense", "data export irds:": "data", "ask (llama.cpp)": "llamacpp",
            "ask --backend transformers": "train", "train sft": "train", "tune": "tune"}


@pytest.mark.subprocess
@pytest.mark.parametrize("command", list(MISSING))
def test_a_missing_extra_is_one_line_naming_it(core_python, built, command):
    args = [arg.format(idx=built / "idx", folder=built) for arg in MISSING[command]]
    result = winnow(core_python, *args, cache=built / "cache")
    extra = EXTRA_OF[command]
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"needs the '{extra}' extra: pip install 'winnow-rag[{extra}]'" in lines[0]
    assert "not installed" in lines[0]
