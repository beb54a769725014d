"""Hostile input through the real command line: every case ends in one clear line and exit status 2.

Each test builds the bad file, folder or argument for real (a FIFO, a looping symbolic link, a file
the process may not read) and runs ``winnow`` as a user would: in this process through
tests/cli_runner.py, or in a subprocess where the process is part of the case (a byte argument that
is not UTF-8 as the interpreter decodes it, a file its capabilities may not read, a FIFO whose read
would block: the subprocess's timeout turns that hang into a failure).
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys

import pytest
from cli_runner import winnow as winnow_in_process
from fast_model import suite_model
from small_corpus import PASSAGES

from winnow.errors import WinnowError
from winnow.text import check_text, text_problem

MODEL = suite_model()

PR_CAPBSET_DROP = 24  # prctl(2)
CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 1, 2  # capability(7): what lets root read a chmod 000 file


def winnow(*args, preexec_fn=None, process=False):
    """``winnow ARGS``, its stdout and stderr as bytes: in a subprocess where arguments are bytes (a
    byte that is not UTF-8), with ``preexec_fn`` or with ``process``; in this process otherwise."""
    if not (process or preexec_fn or any(isinstance(arg, bytes) for arg in args)):
        return winnow_in_process(*args, env={"COLUMNS": "200"}, text=False)
    env = {**os.environ, "COLUMNS": "200"}
    # The timeout only turns a hang (a FIFO read forever) into a failure; no test measures time.
    return subprocess.run([sys.executable, "-m", "winnow.cli", *args], capture_output=True, env=env, timeout=300,
                          preexec_fn=preexec_fn)


def one_error_line(result) -> str:
    """The single ``error:`` line of a refused command (exit status 2, no traceback)."""
    stderr = result.stderr.decode("utf-8", "replace")
    assert result.returncode == 2, stderr
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, stderr
    assert "(" in errors[0], f"no hint on what to do: {errors[0]}"
    return errors[0]


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hostile")
    source = write_jsonl(folder / "corpus.jsonl", PASSAGES)
    result = winnow("index", str(source), "--out", str(folder / "idx"))
    assert result.returncode == 0, result.stderr
    return folder / "idx"


QA_OK = {"id": "q1", "question": "What is the capital of France?", "golden_answers": ["Paris"]}


def eval_with(index_dir, tmp_path, qa_text: str):
    queries = tmp_path / "qa.jsonl"
    queries.write_text(qa_text, encoding="utf-8")
    return winnow("eval", "--index", str(index_dir), "--queries", str(queries), "--out", str(tmp_path / "run"),
                  "--model", MODEL)


# --- corpora -------------------------------------------------------------------------------------

def test_a_corpus_of_only_stop_words_and_punctuation_is_refused(tmp_path):
    source = write_jsonl(tmp_path / "stop.jsonl", [{"id": "a", "text": "the of and it is"},
                                                   {"id": "b", "text": "!!! ... ,,, -- a"}])
    line = one_error_line(winnow("index", str(source), "--out", str(tmp_path / "idx")))
    assert "stop.jsonl: no passage has a word to index" in line
    assert not (tmp_path / "idx").exists()


def test_a_lone_surrogate_in_a_corpus_text_names_file_line_and_field(tmp_path):
    source = tmp_path / "c.jsonl"
    source.write_text('{"id": "a", "text": "fine"}\n{"id": "b", "text": "caf\\ud800 paris"}\n')
    line = one_error_line(winnow("index", str(source), "--out", str(tmp_path / "idx")))
    assert "c.jsonl, line 2, field 'text'" in line and "U+D800 at character 4" in line


def test_a_surrogate_pair_is_one_valid_character(tmp_path):
    source = tmp_path / "c.jsonl"
    source.write_text('{"id": "a", "text": "smile \\ud83d\\ude00 paris"}\n')
    assert winnow("index", str(source), "--out", str(tmp_path / "idx")).returncode == 0


def test_a_lone_surrogate_deep_in_metadata_names_its_top_level_key(tmp_path):
    source = tmp_path / "c.jsonl"
    source.write_text('{"id": "a", "text": "paris", "tags": [{"x": "ok"}, {"y": "\\udfff"}]}\n')
    assert "line 1, field 'tags'" in one_error_line(winnow("index", str(source), "--out", str(tmp_path / "idx")))


def test_json_nested_a_hundred_thousand_deep_is_refused(tmp_path):
    source = tmp_path / "deep.jsonl"
    source.write_text('{"id": "a", "text": "paris", "m": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    line = one_error_line(winnow("index", str(source), "--out", str(tmp_path / "idx")))
    assert "deep.jsonl, line 1: not readable JSON: nested too deeply" in line


def test_a_five_thousand_digit_integer_id_is_refused(tmp_path):
    source = tmp_path / "ids.jsonl"
    source.write_text('{"id": "a", "text": "rome"}\n{"id": ' + "7" * 5000 + ', "text": "paris"}\n')
    line = one_error_line(winnow("index", str(source), "--out", str(tmp_path / "idx")))
    assert "ids.jsonl, line 2" in line and "more than 4,300 digits at column 8" in line and "as strings" in line


def test_json_errors_read_naturally(tmp_path):
    source = tmp_path / "bad.jsonl"
    source.write_text('{"id": "a", "text": "unterminated}\n')
    line = one_error_line(winnow("index", str(source), "--out", str(tmp_path / "idx")))
    assert "Unterminated string starting at column 21" in line and "at at" not in line


def test_a_beir_folder_without_its_corpus_says_so(tmp_path):
    (tmp_path / "scifact" / "qrels").mkdir(parents=True)
    write_jsonl(tmp_path / "scifact" / "queries.jsonl", [{"_id": "1", "text": "q"}])
    (tmp_path / "scifact" / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n1\td\t1\n")
    line = one_error_line(winnow("index", str(tmp_path / "scifact"), "--out", str(tmp_path / "idx")))
    assert "a BEIR folder (it has queries.jsonl and qrels/*.tsv) without its corpus.jsonl" in line
    assert ".txt" not in line.split("(")[0]


# --- folders of text files -------------------------------------------------------------------------

def text_folder(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "paris.txt").write_text("Paris is the capital of France.")
    return folder


@pytest.mark.subprocess
def test_a_fifo_in_a_text_folder_is_skipped_and_reported(tmp_path):
    folder = text_folder(tmp_path)
    os.mkfifo(folder / "pipe.txt")  # nothing ever writes to it: reading it would block forever
    result = winnow("index", str(folder), "--out", str(tmp_path / "idx"), process=True)
    stderr = result.stderr.decode()
    assert result.returncode == 0, stderr
    assert "1 passage from" in stderr and f"skipped 1 file that is not a regular file ({folder / 'pipe.txt'}, a FIFO)" in stderr
    manifest = json.loads((tmp_path / "idx" / "manifest.json").read_text())
    assert manifest["load_report"]["not_regular_skipped"] == [{"file": str(folder / "pipe.txt"), "kind": "FIFO"}]


@pytest.mark.subprocess
def test_a_folder_of_only_a_fifo_says_what_it_found(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    os.mkfifo(folder / "pipe.txt")
    line = one_error_line(winnow("index", str(folder), "--out", str(tmp_path / "idx"), process=True))
    assert (f"no .txt or .md files in this folder (skipped 1 file that is not a regular file "
            f"({folder / 'pipe.txt'}, a FIFO))") in line


@pytest.mark.subprocess
def test_a_fifo_given_as_the_corpus_is_refused(tmp_path):
    os.mkfifo(tmp_path / "corpus.jsonl")
    line = one_error_line(winnow("index", str(tmp_path / "corpus.jsonl"), "--out", str(tmp_path / "idx"), process=True))
    assert "corpus.jsonl: not a regular file or folder" in line


@pytest.mark.parametrize("target, message", [
    ("loop.txt", "a symbolic link that leads back to itself"),
    ("gone.txt", "a symbolic link to gone.txt, which does not exist"),
])
def test_a_broken_symbolic_link_in_a_text_folder_is_named(tmp_path, target, message):
    folder = text_folder(tmp_path)
    os.symlink(target, folder / "loop.txt")
    line = one_error_line(winnow("index", str(folder), "--out", str(tmp_path / "idx")))
    assert f"{folder / 'loop.txt'}: {message}" in line and "remove the link" in line


def test_a_symbolic_link_to_a_text_file_is_followed(tmp_path):
    folder = text_folder(tmp_path)
    (tmp_path / "rome.txt").write_text("Rome is the capital of Italy.")
    os.symlink(tmp_path / "rome.txt", folder / "rome.txt")
    assert "2 passages from" in winnow("index", str(folder), "--out", str(tmp_path / "idx")).stderr.decode()


def test_a_file_name_that_is_not_utf8_is_named(tmp_path):
    folder = text_folder(tmp_path)
    with open(os.fsencode(folder) + b"/caf\xff.txt", "w") as handle:
        handle.write("Coffee.")
    line = one_error_line(winnow("index", str(folder), "--out", str(tmp_path / "idx")))
    assert "caf\\xff.txt: the file name is not UTF-8" in line and "rename it" in line


def drop_read_override():
    """Run by the child before exec: without these two capabilities root obeys file permissions."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def unreadable(path):
    """``chmod 000 path`` and the way to run the CLI so that it really cannot read it: as root (tests
    often run so), the capabilities that bypass permissions are dropped in the child; where that is
    not allowed, the case is skipped, saying why."""
    path.chmod(0)
    preexec = drop_read_override if os.geteuid() == 0 else None
    try:
        probe = subprocess.run([sys.executable, "-c", f"open({str(path)!r}, 'rb')"], preexec_fn=preexec,
                               capture_output=True)
    except subprocess.SubprocessError as error:
        pytest.skip(f"running as root and cannot drop CAP_DAC_OVERRIDE to make a file unreadable: {error}")
    if probe.returncode == 0:
        pytest.skip("chmod 000 does not stop this process from reading the file (root with CAP_DAC_OVERRIDE)")
    return preexec


@pytest.mark.subprocess
def test_an_unreadable_corpus_file_is_named(tmp_path):
    source = write_jsonl(tmp_path / "corpus.jsonl", PASSAGES)
    preexec = unreadable(source)
    line = one_error_line(winnow("index", str(source), "--out", str(tmp_path / "idx"), preexec_fn=preexec))
    assert f"{source}: cannot read this file: Permission denied" in line and "chmod u+r" in line


@pytest.mark.subprocess
def test_an_unreadable_file_in_a_text_folder_is_named(tmp_path):
    folder = text_folder(tmp_path)
    secret = folder / "secret.md"
    secret.write_text("# Secret\nNothing to see.")
    preexec = unreadable(secret)
    line = one_error_line(winnow("index", str(folder), "--out", str(tmp_path / "idx"), preexec_fn=preexec))
    assert f"{secret}: cannot read this file: Permission denied" in line and "move it out of the folder" in line


# --- questions and queries -------------------------------------------------------------------------

ZERO_WIDTH = "\u200b\u200c\u200d\ufeff \u2060"


@pytest.mark.subprocess
@pytest.mark.parametrize("command", ["ask", "search"])
def test_a_non_utf8_byte_in_the_question_or_query_is_refused(index_dir, command):
    # Python decodes the byte 0xff of an argument to the lone surrogate U+DCFF (PEP 383).
    line = one_error_line(winnow(command, "--index", str(index_dir), b"capital of fr\xffnce"))
    what = "question" if command == "ask" else "query"
    assert f"the {what} holds U+DCFF at character 14" in line and "byte 0xff, which is not UTF-8" in line


@pytest.mark.parametrize("command", ["ask", "search"])
def test_a_question_of_only_zero_width_characters_is_refused(index_dir, command):
    line = one_error_line(winnow(command, "--index", str(index_dir), ZERO_WIDTH))
    assert "is empty once zero-width and white-space characters are removed" in line


def test_a_search_without_hits_says_so(index_dir):
    result = winnow("search", "--index", str(index_dir), "zanzibar quokka")
    assert result.returncode == 0 and result.stdout.decode().strip() == ""
    assert "no passages matched 'zanzibar quokka' (bm25): none of its words is in the index" in result.stderr.decode()


@pytest.mark.parametrize("question, message", [
    ('"caf\\ud800"', "line 2, field 'question': holds U+D800 at character 4"),
    (json.dumps(ZERO_WIDTH), "line 2, field 'question': the question is empty once zero-width"),
])
def test_a_bad_eval_question_names_its_line(index_dir, tmp_path, question, message):
    text = json.dumps(QA_OK) + '\n{"id": "q2", "question": ' + question + ', "golden_answers": ["x"]}\n'
    line = one_error_line(eval_with(index_dir, tmp_path, text))
    assert "qa.jsonl, " + message in line
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("record, message", [
    ('{"id": "q2", "question": "x", "golden_answers": ' + "[" * 100_000 + "]" * 100_000 + "}",
     "line 2: not readable JSON: nested too deeply"),
    ('{"id": ' + "9" * 5000 + ', "question": "x", "golden_answers": []}', "line 2: not readable JSON: an integer"),
])
def test_unreadable_json_in_a_qa_file_names_its_line(index_dir, tmp_path, record, message):
    line = one_error_line(eval_with(index_dir, tmp_path, json.dumps(QA_OK) + "\n" + record + "\n"))
    assert "qa.jsonl, " + message in line


@pytest.mark.subprocess
def test_an_unreadable_qa_file_is_named(index_dir, tmp_path):
    queries = write_jsonl(tmp_path / "qa.jsonl", [QA_OK])
    preexec = unreadable(queries)
    result = winnow("eval", "--index", str(index_dir), "--queries", str(queries), "--out", str(tmp_path / "run"),
                    preexec_fn=preexec)
    stderr = result.stderr.decode()
    # Typer checks a path option before the command runs: its usage error, also exit status 2.
    assert result.returncode == 2 and "Traceback" not in stderr
    assert "Invalid value for '--queries'" in stderr and "is not readable" in stderr


# --- the shared check ----------------------------------------------------------------------------

def test_check_text_passes_real_text_and_names_the_input_otherwise():
    assert check_text("  who painted the mona lisa? ", "the question") == "  who painted the mona lisa? "
    assert text_problem("a\u200bb") is None  # zero-width characters beside visible ones are fine
    assert text_problem("") == "is empty"
    for value, expected in [("x\ud800", "the question holds U+D800 at character 2"),
                            ("\t\n\u00ad\x00", "the question is empty once zero-width")]:
        with pytest.raises(WinnowError) as caught:
            check_text(value, "the question")
        assert str(caught.value).startswith(expected)


def test_the_schemas_visible_character_pattern_agrees_with_the_check_on_every_bmp_character():
    """The HTTP schema's pattern for text fields (winnow.service.openapi) says what is_invisible says."""
    import re

    from winnow.text import is_invisible, visible_character_pattern

    visible = re.compile(visible_character_pattern())
    for code in range(0x10000):
        if not 0xD800 <= code <= 0xDFFF:
            assert bool(visible.search(chr(code))) is not is_invisible(chr(code)), hex(code)
    assert visible.search("  \u200b ?") and not visible.search(" \u200b\t\ufeff")
