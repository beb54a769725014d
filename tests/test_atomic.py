"""Outputs written whole or not at all, one writer at a time, and clear errors when they cannot be.

The writing functions are tested on real files; the command-line cases run ``winnow`` for real: in
subprocesses where processes are the case (two real processes contend for one output, a real build
is killed with SIGKILL, a temporary of another live process), in this process through
tests/cli_runner.py otherwise.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from cli_runner import winnow as winnow_in_process
from fast_model import suite_model
from small_corpus import PASSAGES

from winnow.atomic import check_replaceable, staged_file, write_json, write_lines, write_text
from winnow.errors import WinnowError
from winnow.index import BM25Index
from winnow.lock import lock_path, output_lock, process_alive

MODEL = suite_model()

# A corpus big enough that its build takes a few seconds, so a test can act while it runs.
BIG_PASSAGES = 10_000


def winnow(*args, cache, check=True, process=False):
    """``winnow ARGS`` in this process, or in a subprocess of its own with ``process``."""
    if process:
        env = {**os.environ, "WINNOW_CACHE_DIR": str(cache), "COLUMNS": "200"}
        result = subprocess.run([sys.executable, "-m", "winnow.cli", *map(str, args)], capture_output=True,
                                text=True, env=env, timeout=300)
    else:
        result = winnow_in_process(*args, env={"WINNOW_CACHE_DIR": str(cache), "COLUMNS": "200"})
    if check and result.returncode != 0:
        raise AssertionError(f"winnow {' '.join(map(str, args))} failed ({result.returncode}):\n{result.stderr}")
    return result


def start_winnow(*args, cache):
    env = {**os.environ, "WINNOW_CACHE_DIR": str(cache), "COLUMNS": "200"}
    return subprocess.Popen([sys.executable, "-m", "winnow.cli", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def one_clear_line(result):
    """Exit 2, no traceback, one line on stderr; returns that line."""
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name != "cache")


def wait_for(condition, process=None, seconds=120):
    deadline = time.monotonic() + seconds
    while not condition():
        assert process is None or process.poll() is None, "the process ended before the test could act"
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpora")
    (folder / "small.jsonl").write_text("".join(json.dumps(p) + "\n" for p in PASSAGES))
    words = [f"{a}{b}{c}" for a in "bcdfgklmnprst" for b in "aeiou" for c in "dgklmnrst"]
    with (folder / "big.jsonl").open("w") as stream:
        for number in range(BIG_PASSAGES):
            text = " ".join(words[(number * 7 + i * 13) % len(words)] for i in range(30))
            stream.write(json.dumps({"id": f"b{number}", "text": text}) + "\n")
    return folder


@pytest.fixture
def cache(tmp_path):
    return tmp_path / "cache"


@pytest.fixture(params=["read-only folder", "under a file"])
def unwritable(request, tmp_path, read_only):
    """(a place where no output can be created, and the reason the error must give)."""
    if request.param == "under a file":
        blocker = tmp_path / "notes.txt"
        blocker.write_text("a file")
        return blocker, f"{blocker} is a file, not a folder"
    (tmp_path / "ro").mkdir()
    return read_only(tmp_path / "ro"), f"no permission to write in {tmp_path / 'ro'}"


# --- writing files and folders ----------------------------------------------------------------------

def test_files_are_written_whole_and_leave_no_temporary_behind(tmp_path):
    write_text(tmp_path / "a" / "b.txt", "héllo\n")
    assert write_lines(tmp_path / "lines.txt", iter(["x", "y"])) == 2
    write_json(tmp_path / "data.json", {"k": [1, "é"]})
    assert (tmp_path / "a" / "b.txt").read_text(encoding="utf-8") == "héllo\n"
    assert (tmp_path / "lines.txt").read_text() == "x\ny\n"
    assert json.loads((tmp_path / "data.json").read_text(encoding="utf-8")) == {"k": [1, "é"]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "data.json", "lines.txt"]


def test_a_write_that_fails_midway_keeps_the_old_file(tmp_path):
    path = tmp_path / "answers.txt"
    path.write_text("old\n")

    def lines():
        yield "new"
        raise RuntimeError("the producer failed")

    with pytest.raises(RuntimeError):
        write_lines(path, lines())
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["answers.txt"]


def test_deleting_the_staged_file_keeps_the_target(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"good")
    with staged_file(path) as temp:
        temp.write_bytes(b"bad checksum")
        temp.unlink()
    assert path.read_bytes() == b"good" and [p.name for p in tmp_path.iterdir()] == ["model.gguf"]


def test_the_overwrite_guard(tmp_path):
    def ours(folder):
        return (folder / "stats.json").is_file()

    check_replaceable(tmp_path / "free", overwrite=False, looks_ours=ours, what="a blend folder")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "stats.json").write_text("{}")
    with pytest.raises(WinnowError, match="already exists.*--overwrite"):
        check_replaceable(tmp_path / "mine", overwrite=False, looks_ours=ours, what="a blend folder")
    check_replaceable(tmp_path / "mine", overwrite=True, looks_ours=ours, what="a blend folder")
    (tmp_path / "thesis").mkdir()
    (tmp_path / "thesis" / "thesis.tex").write_text("years of work")
    with pytest.raises(WinnowError, match="thesis exists and is not a blend folder, so --overwrite will not"):
        check_replaceable(tmp_path / "thesis", overwrite=True, looks_ours=ours, what="a blend folder")


def test_a_write_under_a_file_or_into_a_read_only_folder_is_one_clear_error(unwritable):
    place, reason = unwritable
    with pytest.raises(WinnowError) as caught:
        write_json(place / "x.json", {})
    assert str(caught.value).startswith(f"cannot write {place / 'x.json'}: {reason} (choose another output path")


# --- the lock ---------------------------------------------------------------------------------------

HOLD = ("import sys; from winnow.lock import output_lock\n"
        "with output_lock(sys.argv[1]):\n"
        "    print('locked', flush=True); sys.stdin.read()\n")


@pytest.fixture
def holder():
    """``holder(path)``: another real process holding ``path``'s lock until the test ends."""
    processes = []

    def hold(path):
        process = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True)
        processes.append(process)
        assert process.stdout.readline().strip() == "locked"
        return process

    yield hold
    for process in processes:
        process.stdin.close()
        process.wait(timeout=30)


@pytest.mark.subprocess
def test_a_second_writer_is_told_which_process_holds_the_lock(tmp_path, holder):
    out = tmp_path / "out"
    other = holder(out)
    with pytest.raises(WinnowError, match=rf"{out} is in use by process {other.pid}, which is writing it"):
        with output_lock(out):
            pass


@pytest.mark.subprocess
def test_the_lock_is_free_again_after_its_holder_is_killed(tmp_path, holder):
    out = tmp_path / "out"
    other = holder(out)
    other.kill()
    other.wait()
    with output_lock(out):
        assert lock_path(out).read_text().strip() == str(os.getpid())
    assert not lock_path(out).exists()  # released and removed


@pytest.mark.subprocess
def test_a_waiting_writer_gets_the_lock_when_the_holder_ends(tmp_path, holder):
    out = tmp_path / "out"
    other = holder(out)
    waiting = subprocess.Popen([sys.executable, "-c", "import sys; from winnow.lock import output_lock\n"
                                "with output_lock(sys.argv[1], wait=True): print('got it')", str(out)],
                               stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
    assert waiting.poll() is None  # still waiting
    other.stdin.close()
    other.wait()
    assert waiting.communicate(timeout=60)[0].strip() == "got it"


@pytest.mark.subprocess
def test_process_alive():
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    assert process_alive(os.getpid()) and not process_alive(finished.pid)


# --- winnow index -----------------------------------------------------------------------------------

def test_an_empty_source_is_refused_not_the_current_folder(corpora, tmp_path, cache):
    result = winnow("index", "", "--out", tmp_path / "idx", cache=cache, check=False)
    assert "the corpus SOURCE is empty ('')" in one_clear_line(result)
    assert not (tmp_path / "idx").exists()


def test_an_index_option_naming_a_file_says_what_to_pass(corpora, tmp_path, cache):
    winnow("index", corpora / "small.jsonl", "--out", tmp_path / "idx", cache=cache)
    for given in (corpora / "small.jsonl", tmp_path / "idx" / "manifest.json"):
        line = one_clear_line(winnow("search", "--index", given, "paris", cache=cache, check=False))
        assert f"{given} is a file, not an index folder" in line and "winnow index SOURCE --out DIR" in line
        assert f"build one with `winnow index SOURCE --out {given}`" not in line
    line = one_clear_line(winnow("search", "--index", tmp_path / "idx" / "manifest.json", "x", cache=cache,
                                 check=False))
    assert f"here {tmp_path / 'idx'}" in line


def test_index_out_that_cannot_be_written_is_one_clear_line(corpora, cache, unwritable):
    place, reason = unwritable
    out = place / "idx"
    line = one_clear_line(winnow("index", corpora / "small.jsonl", "--out", out, cache=cache, check=False))
    assert f"cannot write {out}: {reason}" in line and "--out" in line


@pytest.mark.subprocess
def test_two_index_builds_on_one_out_the_second_is_refused(corpora, tmp_path, cache):
    out = tmp_path / "idx"
    first = start_winnow("index", corpora / "big.jsonl", "--out", out, cache=cache)
    try:
        lock = lock_path(out)
        wait_for(lambda: lock.is_file() and lock.read_text().strip() == str(first.pid), first)
        first.send_signal(signal.SIGSTOP)  # freeze it holding the lock: the second arrives while it builds
        second = winnow("index", corpora / "small.jsonl", "--out", out, cache=cache, check=False)
        assert f"{out} is in use by process {first.pid}" in one_clear_line(second)
    finally:
        first.send_signal(signal.SIGCONT)
    assert first.wait(timeout=300) == 0, first.stderr.read()
    assert len(BM25Index.open(out)) == BIG_PASSAGES  # the first build, untouched by the second
    assert leftovers(tmp_path) == ["idx"]  # no lock file or temporary folder left


@pytest.mark.subprocess
def test_a_killed_build_leaves_a_temporary_that_the_next_build_removes(corpora, tmp_path, cache):
    out = tmp_path / "idx"
    killed = start_winnow("index", corpora / "big.jsonl", "--out", out, cache=cache)
    temporaries = lambda: [p for p in tmp_path.iterdir() if p.name.startswith(".idx.tmp-")]  # noqa: E731
    wait_for(lambda: any((p / "bm25").exists() for p in temporaries()), killed)  # mid-build, files half written
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    [leftover] = temporaries()
    assert leftover.name.startswith(f".idx.tmp-{killed.pid}-") and not out.exists()

    result = winnow("index", corpora / "small.jsonl", "--out", out, cache=cache)
    assert f"removed {leftover}" in result.stderr and f"left by interrupted process {killed.pid}" in result.stderr
    assert leftovers(tmp_path) == ["idx"]
    assert len(BM25Index.open(out)) == len(PASSAGES)


@pytest.mark.subprocess
def test_a_live_builders_temporary_is_left_alone(corpora, tmp_path, cache):
    out = tmp_path / "idx"
    live = tmp_path / f".idx.tmp-{os.getpid()}-0123abcd"  # this test process is alive
    live.mkdir()
    winnow("index", corpora / "small.jsonl", "--out", out, cache=cache, process=True)  # a builder of its own
    assert live.is_dir()


@pytest.mark.subprocess
def test_a_rebuild_killed_between_its_renames_gets_the_old_index_back(corpora, tmp_path, cache):
    out = tmp_path / "idx"
    winnow("index", corpora / "small.jsonl", "--out", out, cache=cache)
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    moved_aside = tmp_path / f".idx.old-{finished.pid}-0123abcd"
    out.rename(moved_aside)  # where a rebuild killed after its first rename leaves the old index
    result = winnow("index", corpora / "small.jsonl", "--out", out, cache=cache, check=False)
    assert f"restored {out} from {moved_aside.name}" in result.stderr
    assert "already exists" in result.stderr  # the restored index is protected like any other
    assert len(BM25Index.open(out)) == len(PASSAGES)


# --- winnow eval --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def eval_inputs(corpora, tmp_path_factory):
    folder = tmp_path_factory.mktemp("eval")
    winnow("index", corpora / "small.jsonl", "--out", folder / "idx", cache=folder / "cache")
    questions = [{"id": "q1", "question": "What is the capital of France?", "golden_answers": ["Paris"]},
                 {"id": "q2", "question": "Who painted the Mona Lisa?", "golden_answers": ["Leonardo"]}]
    (folder / "qa.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    return folder


def eval_args(inputs, out):
    return ("eval", "--index", inputs / "idx", "--queries", inputs / "qa.jsonl", "--model", MODEL,
            "--method", "vanilla", "--k", "2", "--out", out)


def test_eval_out_that_cannot_be_written_is_one_clear_line(eval_inputs, cache, unwritable):
    place, reason = unwritable
    out = place / "run"
    line = one_clear_line(winnow(*eval_args(eval_inputs, out), cache=cache, check=False))
    assert f"cannot write {out}: {reason}" in line


def test_eval_out_that_is_a_file_is_one_clear_line(eval_inputs, tmp_path, cache):
    out = tmp_path / "run"
    out.write_text("not a folder")
    line = one_clear_line(winnow(*eval_args(eval_inputs, out), cache=cache, check=False))
    assert f"cannot write {out / 'config.json'}: {out} is a file, not a folder" in line


@pytest.mark.subprocess
@pytest.mark.llm
def test_two_evals_on_one_run_folder_the_second_is_refused(eval_inputs, tmp_path, cache):
    out = tmp_path / "run"
    first = start_winnow(*eval_args(eval_inputs, out), "--no-cache", cache=cache)
    try:
        lock = lock_path(out)
        wait_for(lambda: lock.is_file() and lock.read_text().strip() == str(first.pid), first)
        first.send_signal(signal.SIGSTOP)
        second = winnow(*eval_args(eval_inputs, out), "--no-cache", cache=cache, check=False)
        assert f"{out} is in use by process {first.pid}" in one_clear_line(second)
    finally:
        first.send_signal(signal.SIGCONT)
    assert first.wait(timeout=300) == 0, first.stderr.read()
    ids = [json.loads(line)["id"] for line in (out / "answers.jsonl").read_text().splitlines()]
    assert ids == ["q1", "q2"]  # each question answered once
    assert not lock.exists()


def test_data_export_out_under_a_file_is_one_clear_line(tmp_path, cache):
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text(json.dumps({"_id": "d1", "text": "Paris"}) + "\n")
    (beir / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "capital of france"}) + "\n")
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    (tmp_path / "notes.txt").write_text("a file")
    out = tmp_path / "notes.txt" / "q.jsonl"
    line = one_clear_line(winnow("data", "export", beir, "--out", out, cache=cache, check=False))
    assert f"cannot write {out}: {tmp_path / 'notes.txt'} is a file, not a folder" in line
