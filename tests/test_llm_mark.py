"""The conftest check that every test loading a GGUF model carries the ``llm`` mark.

A pytest session of its own (a child process, in a folder with this suite's conftest.py) runs four
probe tests. Their loads are real calls to llama.cpp's loader on a file that is not a GGUF model, so
llama.cpp refuses it at once (about a second) and no model is held: the check counts a load when it
is asked for, whatever its outcome.
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
    import pytest

    from winnow.errors import WinnowError
    from winnow.llm.llamacpp import LlamaCppBackend


    def ask_llama_cpp_to_load(folder):
        bogus = folder / "bogus.gguf"
        bogus.write_text("not a model")
        with pytest.raises(WinnowError, match="could not load"):
            LlamaCppBackend(bogus, context_size=512)


    def test_unmarked_load(tmp_path):
        ask_llama_cpp_to_load(tmp_path)


    @pytest.mark.llm
    def test_marked_load(tmp_path):
        ask_llama_cpp_to_load(tmp_path)


    def test_unmarked_user_of_the_shared_model(llama_backend):
        pass


    def test_unmarked_without_a_model():
        pass
''')


@pytest.mark.subprocess
def test_a_model_load_without_the_llm_mark_fails_the_test(tmp_path):
    pytest.importorskip("xllamacpp")
    for name in ("conftest.py", "small_corpus.py", "fast_model.py", "file_costs.py", "file_costs.json"):
        shutil.copy(TESTS / name, tmp_path / name)
    (tmp_path / "test_probes.py").write_text(PROBES)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    llm: loads a GGUF model\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(tmp_path)])}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert "1 failed, 2 passed, 1 error" in out, out
    assert "PASSED test_probes.py::test_marked_load" in out and "PASSED test_probes.py::test_unmarked_without_a_model" in out
    assert "FAILED test_probes.py::test_unmarked_load" in out and "ERROR test_probes.py::test_unmarked_user_of" in out
    assert ("test_probes.py::test_unmarked_load loads a GGUF model through llama.cpp but is not marked "
            "@pytest.mark.llm") in out
    assert ("test_probes.py::test_unmarked_user_of_the_shared_model uses the loaded model (fixture llama_backend) "
            "but is not marked @pytest.mark.llm") in out
