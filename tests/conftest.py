"""Shared fixtures: the real SmolLM2-135M model through llama.cpp, loaded once per test session."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from small_corpus import PASSAGES
from winnow.corpus import load_corpus
from winnow.index import BM25Index, build_bm25_index

from winnow.llm import LLM, CallCache
from winnow.llm.llamacpp import LlamaCppBackend
from winnow.models import resolve_model


@pytest.fixture(autouse=True)
def isolated_cache_dir(tmp_path_factory, monkeypatch):
    """Keep tests away from the user's cache (joined models are found by package, not cache)."""
    monkeypatch.setenv("WINNOW_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "winnow-cache"))


@pytest.fixture
def read_only():
    """``read_only(folder)`` makes nothing creatable in ``folder`` until the test ends. Root ignores
    permission bits, so as root the folder is made immutable (``chattr +i``) instead."""
    made = []

    def make(folder):
        folder.chmod(0o555)
        made.append(folder)
        if os.geteuid() == 0:
            if not shutil.which("chattr") or subprocess.run(["chattr", "+i", str(folder)]).returncode != 0:
                pytest.skip("running as root on a file system without chattr +i: no folder is read-only")
        try:
            (folder / ".probe").touch()
        except OSError:
            return folder
        pytest.skip(f"{folder} stays writable here")

    yield make
    for folder in made:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(folder)], check=False)
        folder.chmod(0o755)


@pytest.fixture(scope="session")
def smollm2():
    return resolve_model("smollm2-135m", progress=False)


@pytest.fixture(scope="session")
def llama_backend(smollm2):
    backend = LlamaCppBackend(smollm2.path, model_name=smollm2.name, model_sha256=smollm2.sha256, context_size=4096)
    yield backend
    backend.close()


@pytest.fixture
def llm(llama_backend, tmp_path):
    """The real model behind a fresh call cache."""
    return LLM(llama_backend, CallCache(tmp_path / "calls.sqlite"))


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    """A real BM25 index of the eight-passage corpus in tests/small_corpus.py."""
    folder = tmp_path_factory.mktemp("small-corpus")
    source = folder / "corpus.jsonl"
    source.write_text("\n".join(json.dumps(p) for p in PASSAGES) + "\n")
    build_bm25_index(load_corpus(source).passages, folder / "index", source=str(source), source_checksum="x",
                     progress=False)
    return BM25Index.open(folder / "index")
