"""Shared fixtures: the real SmolLM2-135M model through llama.cpp, loaded once per test session.

Every test that loads a GGUF model must carry ``@pytest.mark.llm``, and every test that starts a
Python process (``winnow`` or ``python`` in a subprocess, a ``winnow serve``, a Ray head, a
multiprocessing worker) must carry ``@pytest.mark.subprocess``: ``-m "not llm and not subprocess"``
then runs the fast part of the suite (``make check``), and the slow part is named. The checks below
enforce both marks: a test fails when it uses a fixture that loaded a model or started a process, or
does so itself (through llama.cpp's ``xllamacpp.Server``, which every in-process load and loopback
llama.cpp server goes through; through ``subprocess.Popen`` or ``multiprocessing``), without the
mark. Loads in a child process (a CLI run with subprocess) are not seen, but the child is.
"""

from __future__ import annotations

import importlib.util
import json
import multiprocessing.process
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fast_model import discard_run_copies, prepare_test_model, suite_model
from small_corpus import PASSAGES

# A rich Console keeps the width COLUMNS gave when it was made; Winnow's module-level consoles are made
# on first import, which must not happen inside a test's COLUMNS (one that sets 80 would narrow every
# later command's output, depending on which test a worker happens to run first).
os.environ.pop("COLUMNS", None)
import winnow.commands.common  # noqa: E402, F401, I001
import winnow.demo  # noqa: E402, F401

from winnow.corpus import load_corpus
from winnow.index import BM25Index, build_bm25_index
from winnow.llm import LLM, CallCache
from winnow.llm.llamacpp import LlamaCppBackend
from winnow.models import resolve_model

#: Fixtures known to hold a loaded model, and those seen loading one during this session, each named
#: by where it is defined and its name ("tests/test_cli.py::built", "tests::llama_backend" for this
#: file): two test files may each define a fixture of one name, and only the one that did it is to blame.
MODEL_FIXTURES = {"tests::llama_backend"}
#: Fixtures seen starting a Python process during this session (named as above).
PROCESS_FIXTURES: set[str] = set()
_fixtures_in_setup: list[str] = []
_current: dict[str, pytest.Item | None] = {"item": None}
_loaded_by: set[str] = set()
_started_by: set[str] = set()
#: Per mark: the fixtures known to do what it names, the tests seen doing it, and why it matters.
WATCHED = {
    "llm": (MODEL_FIXTURES, _loaded_by, "tests that load a model are slow, and `-m 'not llm'` must leave them out"),
    "subprocess": (PROCESS_FIXTURES, _started_by, "a new Python process costs seconds before it does any work, "
                   "and `-m 'not subprocess'` must leave them out"),
}


def _pin_the_worker_to_its_cores() -> None:
    """Under pytest-xdist (``make test`` runs one worker per core), each worker and every process it
    starts runs on cores of its own: the engines size their thread pools by the affinity mask
    (winnow.cores), so two workers do not each run a core's worth of llama.cpp threads on every core,
    where spinning threads wait on each other many-fold."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker or not hasattr(os, "sched_setaffinity"):
        return
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < count:
        return
    number = int(worker.removeprefix("gw"))
    share = len(cores) // count
    os.sched_setaffinity(0, cores[number * share:(number + 1) * share])


_pin_the_worker_to_its_cores()


def _unmarked(item: pytest.Item, how: str, mark: str = "llm") -> str:
    return f"{item.nodeid} {how} but is not marked @pytest.mark.{mark}: add the mark ({WATCHED[mark][2]})"


def _python_process(args) -> bool:
    """Whether a command starts a Python interpreter (``python``, ``winnow``, ``ray``, this interpreter)."""
    first = os.fsdecode(args if isinstance(args, (str, bytes, os.PathLike)) else (list(args) or [""])[0])
    first = (first.split() or [""])[0]
    name = Path(first).name
    return first == sys.executable or name.startswith("python") or name in ("winnow", "ray")


def _count_start(fixtures: set[str], tests: set[str]) -> None:
    fixtures.update(_fixtures_in_setup)
    if _current["item"] is not None:
        tests.add(_current["item"].nodeid)


@pytest.fixture(scope="session", autouse=True)
def _watch_process_starts():
    """Wrap ``subprocess.Popen`` and ``multiprocessing``'s process start for the whole session: a
    Python process started is counted against the test being set up or run, and against every
    fixture being set up at the time (as model loads are, below)."""
    real_init, real_start = subprocess.Popen.__init__, multiprocessing.process.BaseProcess.start

    def init(self, args, *rest, **options):
        if _python_process(args):
            _count_start(PROCESS_FIXTURES, _started_by)
        return real_init(self, args, *rest, **options)

    def start(self):
        _count_start(PROCESS_FIXTURES, _started_by)
        return real_start(self)

    subprocess.Popen.__init__ = init
    multiprocessing.process.BaseProcess.start = start
    yield
    subprocess.Popen.__init__ = real_init
    multiprocessing.process.BaseProcess.start = real_start


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
        _count_start(MODEL_FIXTURES, _loaded_by)
        return real(*args, **kwargs)

    xllamacpp.Server = server
    yield
    xllamacpp.Server = real


def _fixture_key(fixturedef) -> str:
    """A fixture named by the file (or folder) that defines it and its name."""
    return f"{fixturedef.baseid.split('::')[0] or 'tests'}::{fixturedef.argname}"


def _fixtures_of(item: pytest.Item) -> set[str]:
    """The fixtures a test uses, named as ``_fixture_key`` names them (the definition that applies to
    it: the closest one, where a test file overrides a shared fixture)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return set()
    return {_fixture_key(defs[-1]) for defs in info.name2fixturedefs.values() if defs}


def pytest_configure(config):
    """pytest-xdist hands files out in the order of :func:`pytest_collection_modifyitems` below:
    by default (``--loadscope-reorder``) it sorts them by their number of tests instead, which sent a
    file of two tests that take 80 s out among the last, with one worker busy on it and the other idle."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    # A large search_many batch is scored on every core, in worker processes (winnow.index.parallel):
    # only where a test says so (tests/test_parallel_scoring.py, marked subprocess), so that a run of
    # the suite without xdist's one core per worker starts no process a test did not ask for.
    from winnow.index import parallel

    parallel.PARALLEL_MIN_WORK = 10**18
    # Derived here, before pytest-xdist starts its workers: they and every process a test starts
    # inherit WINNOW_TEST_MODEL (tests/fast_model.py).
    root = derived_models_root()
    try:
        prepare_test_model(root)
    except OSError:  # a home that cannot be written: this run's own copy
        prepare_test_model(None)


def pytest_unconfigure(config):
    discard_run_copies()


def pytest_collection_modifyitems(session, config, items):
    """Files in order of the seconds they took in a full run (tests/file_costs.json), costliest
    first, each file's tests in their own order. Under ``--dist loadfile`` a worker takes a whole
    file at a time, in this order: a costly file taken last kept one worker busy for minutes while
    the other had nothing left to do."""
    from file_costs import cost_of, file_costs

    costs = file_costs()

    def path(item):
        return item.nodeid.split("::")[0]

    first: dict[str, int] = {}
    for number, item in enumerate(items):
        first.setdefault(path(item), number)
    items.sort(key=lambda item: (-cost_of(path(item), costs), first[path(item)]))  # stable: a file's order kept


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    _fixtures_in_setup.append(_fixture_key(fixturedef))
    try:
        return (yield)
    finally:
        _fixtures_in_setup.pop()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _current["item"] = item
    for mark, (fixtures, _, _) in WATCHED.items():
        if item.get_closest_marker(mark) is None:
            shared = sorted(key.rsplit("::", 1)[-1] for key in fixtures & _fixtures_of(item))
            if shared:
                what = "the loaded model" if mark == "llm" else "a process a fixture started"
                pytest.fail(_unmarked(item, f"uses {what} (fixture {', '.join(shared)})", mark), pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    try:
        return (yield)
    finally:
        _current["item"] = None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A test that loaded a GGUF model through llama.cpp, or started a Python process (in its body or
    its fixtures' set-up), without the ``llm`` or ``subprocess`` mark fails, with a line saying so,
    once it has run."""
    report = yield
    if report.when != "call" or report.failed:
        return report
    for mark, how in (("llm", "loads a GGUF model through llama.cpp"), ("subprocess", "starts a Python process")):
        if item.nodeid in WATCHED[mark][1] and item.get_closest_marker(mark) is None:
            report.outcome = "failed"
            report.longrepr = _unmarked(item, how, mark)
            break
    return report


#: Cache folders that hold what Winnow derives from a GGUF once per sha256 (transformers' dequantised
#: weights, about a minute of a core; its tokenizer, about 15 s): the same for every test.
DERIVED_FROM_MODELS = ("transformers", "tokenizers")
#: The modules that derive them: a change to either makes the suite derive them afresh.
DERIVING_MODULES = ("winnow.models.loading", "winnow.llm.hf_tokens")


def derived_models_root() -> Path | None:
    """``$WINNOW_TEST_DERIVED_MODELS``, else ``~/.cache/winnow-tests``; None for ``off``."""
    root = os.environ.get("WINNOW_TEST_DERIVED_MODELS", str(Path.home() / ".cache" / "winnow-tests"))
    return None if root == "off" else Path(root)


def derived_models_folder() -> Path | None:
    """Where the suite keeps the models Winnow derives from a GGUF, from one run to the next (like the
    model packages pip caches): ``$WINNOW_TEST_DERIVED_MODELS``, else ``~/.cache/winnow-tests``, in a
    folder named for the deriving code and the transformers release, so new code derives them again.
    ``WINNOW_TEST_DERIVED_MODELS=off``: derive them in every run (the session's folder)."""
    import hashlib
    from importlib.metadata import PackageNotFoundError, version

    root = derived_models_root()
    if root is None:
        return None
    digest = hashlib.sha256()
    for module in DERIVING_MODULES:
        digest.update(Path(importlib.util.find_spec(module).origin).read_bytes())
    try:
        digest.update(version("transformers").encode())
    except PackageNotFoundError:
        pass
    return root / f"derived-models-{digest.hexdigest()[:12]}"


@pytest.fixture(scope="session", autouse=True)
def derived_models_shared(tmp_path_factory):
    """The cache's folders of models derived from a GGUF point to one folder that the workers share and
    later runs find (:func:`derived_models_folder`), so a model is converted once, not once per worker
    and run (Winnow makes them under a lock and renames them into place)."""
    cache = tmp_path_factory.getbasetemp() / "winnow-cache"
    session = tmp_path_factory.getbasetemp().parent / "winnow-derived-models"
    shared = derived_models_folder() or session

    def make_folders() -> None:
        for name in DERIVED_FROM_MODELS:
            (shared / name).mkdir(parents=True, exist_ok=True)

    try:
        make_folders()
    except OSError:  # a home that cannot be written: derive them in this run, as =off does
        shared = session
        make_folders()
    cache.mkdir(parents=True, exist_ok=True)
    for name in DERIVED_FROM_MODELS:
        if not (cache / name).exists():
            (cache / name).symlink_to(shared / name, target_is_directory=True)


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
    """The suite's SmolLM2 (tests/fast_model.py: the registry's weights at Q8_0)."""
    return resolve_model(suite_model(), progress=False)


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


#: The loggers `winnow serve` configures (uvicorn's logging config, plus the service's own).
_SERVE_LOGGERS = ("", "uvicorn", "uvicorn.error", "uvicorn.access", "winnow.service", "winnow.access")


@pytest.fixture(autouse=True)
def _keep_logging_handlers():
    """A `winnow serve` run in process (typer's CliRunner) points uvicorn's log handlers at the
    runner's stderr, which is closed when the run ends: later log lines would then fail on a closed
    file, and with them pytest's own output. Each test gets the handlers it started with back."""
    import logging

    saved = {name: (logging.getLogger(name).handlers[:], logging.getLogger(name).level,
                    logging.getLogger(name).propagate) for name in _SERVE_LOGGERS}
    yield
    for name, (handlers, level, propagate) in saved.items():
        logger = logging.getLogger(name)
        logger.handlers[:] = handlers
        logger.setLevel(level)
        logger.propagate = propagate
