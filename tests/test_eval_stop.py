"""Stopping ``winnow eval`` with a signal, the same on every engine (in this process, ``--processes``):
SIGINT (Ctrl-C, ``kill -INT``) and SIGTERM (``kill``) say at once that the run is stopping and how
many LLM calls it waits for, keep the answers so far, and exit 128 + the signal's number.

A command started in the background by a script (``nohup winnow eval … &``) starts with SIGINT
ignored, as POSIX shells start background jobs; ``kill -INT`` must still stop it. Run for real:
``winnow eval`` processes against a loopback server whose calls hang, so the calls in flight are known.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from fault_server import FaultServer

QUESTIONS = [("q1", "What is the capital of France?", "Paris"), ("q2", "Which planet is the largest?", "Jupiter"),
             ("q3", "Who painted the Mona Lisa?", "Leonardo"), ("q4", "What is the capital of Italy?", "Rome"),
             ("q5", "What is the capital of Spain?", "Madrid"), ("q6", "What is the capital of Japan?", "Tokyo")]


@pytest.fixture
def hanging_server():
    """Every rankrag relevance call hangs (its prompt holds "Passage"); answers to the rest come at once."""
    server = FaultServer(hang_word="Passage")
    yield server
    server.stop()


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # what a shell does to `cmd &` (no job control)


def _stopped(server: FaultServer, index, tmp_path: Path, processes: int,
             signum: int) -> tuple[int, str, list[psutil.Process]]:
    """Start ``winnow eval --processes N`` with SIGINT ignored; once its calls hang at the server and
    stay so, send ``signum``. (exit status, stderr, pids of the processes it had started)."""
    queries = tmp_path / "qa.jsonl"
    queries.write_text("".join(json.dumps({"id": i, "question": q, "golden_answers": [a]}) + "\n"
                               for i, q, a in QUESTIONS))
    env = dict(os.environ, WINNOW_CACHE_DIR=str(tmp_path / "cache"), COLUMNS="200")
    command = [sys.executable, "-m", "winnow.cli", "eval", "--index", str(index.path), "--queries", str(queries),
               "--out", str(tmp_path / "run"), "--method", "rankrag", "--n", "4", "--k", "2", "--max-inflight", "4",
               "--processes", str(processes), "--backend", "openai", "--model", "m", "--base-url", server.url,
               "--no-cache"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=_ignore_sigint)
    try:
        deadline = time.monotonic() + 60
        steady, seen = 0.0, -1
        while time.monotonic() < deadline and process.poll() is None:
            if server.hung != seen:  # the calls in flight, and how many the run counts, settle
                seen, steady = server.hung, time.monotonic()
            if seen >= 2 and time.monotonic() - steady > 1.0:
                break
            time.sleep(0.05)
        assert process.poll() is None and server.hung >= 2, process.communicate(timeout=10)
        children = psutil.Process(process.pid).children(recursive=True)
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=30)
        return process.returncode, stderr, children
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.subprocess
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("processes", [1, 2], ids=["in-process", "client-processes"])
def test_a_signal_stops_eval_the_same_on_every_engine_even_started_with_sigint_ignored(hanging_server, index,
                                                                                       tmp_path, processes, signum):
    status, stderr, children = _stopped(hanging_server, index, tmp_path, processes, signum)
    said = " ".join(stderr.split())
    assert status == 128 + signum, stderr
    found = re.search(r"stopping: waiting for (\d+) calls? in flight to be cancelled", said)
    assert found, stderr
    assert int(found.group(1)) == hanging_server.hung  # the calls hanging at the server, counted where they are
    assert f"the answers so far are saved in {tmp_path / 'run'}" in said
    assert "run the same command again to continue" in said
    assert "Traceback" not in stderr
    assert (tmp_path / "run" / "config.json").is_file()  # what was saved stays for the next run to continue
    _, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, [p.cmdline() for p in alive]  # no client process outlives the run
