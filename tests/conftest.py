"""Shared fixtures: the real SmolLM2-135M model through llama.cpp, loaded once per test session.

Every test that loads a GGUF model must carry ``@pytest.mark.llm`` (``-m "not llm"`` then runs the fast
part of the suite, and the slow part is named). The check below enforces it: a test fails when it
uses a fixture that loaded a model, or loads one itself (llama.cpp's ``xllamacpp.Server``, which every
in-process load and loopback llama.cpp server goes through), without the mark. Loads in a child
process (a CLI run with subprocess) are not seen; mark those tests by hand.
"""

from __future__ import annotations

import importlib.util
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


#: Fixtures known to hold a loaded model, and those seen loading one during this session.
MODEL_FIXTURES = {"llama_backend"}
_fixtures_in_setup: list[str] = []
_current: dict[str, pytest.Item | None] = {"item": None}
_loaded_by: set[str] = set()


def _marked_llm(item: pytest.Item) -> bool:
    return item.get_closest_marker("llm") is not None


def _unmarked(item: pytest.Item, how: str) -> str:
    return (f"{item.nodeid} {how} but is not marked @pytest.mark.llm: add the mark (tests that load a "
            f"model are slow, and `-m 'not llm'` must leave them out)")


@pytest.fixture(scope="session", autouse=True)
def _watch_model_loads():
    """Wrap llama.cpp's loader for the whole session: a load (asked for; whatever its outcome) is
    counted against the test being set up or run, and against every fixture being set up at the
    time (so later users of a shared fixture are checked too)."""
    if importlib.util.find_spec("xllamacpp") is None:
        yield
        return
    import xllamacpp

    real = xllamacpp.Server

    def server(*args, **kwargs):
        MODEL_FIXTURES.update(_fixtures_in_setup)
        if _current["item"] is not None:
            _loaded_by.add(_current["item"].nodeid)
        return real(*args, **kwargs)

    xllamacpp.Server = server
    yield
    xllamacpp.Server = real


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    _fixtures_in_setup.append(fixturedef.argname)
    try:
        return (yield)
    finally:
        _fixtures_in_setup.pop()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _current["item"] = item
    if not _marked_llm(item):
        shared = sorted(MODEL_FIXTURES & set(getattr(item, "fixturenames", ())))
        if shared:
            pytest.fail(_unmarked(item, f"uses the loaded model (fixture {', '.join(shared)})"), pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    try:
        return (yield)
    finally:
        _current["item"] = None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A test that loaded a GGUF model through llama.cpp (in its body or its fixtures' set-up)
    without the ``llm`` mark fails, with a line saying so, once it has run."""
    report = yield
    if report.when == "call" and item.nodeid in _loaded_by and not _marked_llm(item) and not report.failed:
        report.outcome = "failed"
        report.longrepr = _unmarked(item, "loads a GGUF model through llama.cpp")
    return report


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
