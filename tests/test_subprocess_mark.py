"""The conftest check that every test starting a Python process carries the ``subprocess`` mark.

A pytest session of its own (a child process, in a folder with this suite's conftest.py) runs five
probe tests, as tests/test_llm_mark.py does for the ``llm`` mark. Their processes are real and as
short as a process can be (``python -c pass``); a command that is not Python (``true``) is not counted.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
SRC = TESTS.parent / "src"

PROBES = textwrap.dedent('''
    import multiprocessing
    import subprocess
    import sys

    import pytest


    @pytest.fixture(scope="module")
    def started():
        subprocess.run([sys.executable, "-c", "pass"], check=True)


    def test_unmarked_start():
        subprocess.run([sys.executable, "-c", "pass"], check=True)


    @pytest.mark.subprocess
    def test_marked_start():
        subprocess.run([sys.executable, "-c", "pass"], check=True)


    def test_unmarked_multiprocessing_worker():
        worker = multiprocessing.get_context("fork").Process(target=int)
        worker.start()
        worker.join()


    @pytest.mark.subprocess
    def test_marked_user_of_the_fixture(started):
        pass


    def test_unmarked_user_of_the_fixture(started):
        pass


    def test_unmarked_command_that_is_not_python():
        subprocess.run(["true"], check=True)
''')


@pytest.mark.subprocess
def test_a_python_process_started_without_the_subprocess_mark_fails_the_test(tmp_path):
    for name in ("conftest.py", "small_corpus.py", "fast_model.py", "file_costs.py", "file_costs.json"):
        shutil.copy(TESTS / name, tmp_path / name)
    (tmp_path / "test_probes.py").write_text(PROBES)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    llm: loads a GGUF model\n"
                                         "    subprocess: starts a Python process\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(tmp_path)])}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert "2 failed, 3 passed, 1 error" in out, out
    for name in ("test_marked_start", "test_marked_user_of_the_fixture", "test_unmarked_command_that_is_not_python"):
        assert f"PASSED test_probes.py::{name}" in out, out
    assert "FAILED test_probes.py::test_unmarked_start" in out
    assert "FAILED test_probes.py::test_unmarked_multiprocessing_worker" in out
    assert "ERROR test_probes.py::test_unmarked_user_of_the_fixture" in out
    assert "test_probes.py::test_unmarked_start starts a Python process but is not marked @pytest.mark.subprocess" in out
    assert ("test_probes.py::test_unmarked_user_of_the_fixture uses a process a fixture started (fixture started) "
            "but is not marked @pytest.mark.subprocess") in out
