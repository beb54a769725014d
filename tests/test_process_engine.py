"""``winnow eval --processes N``: a server's questions shared over client processes on this machine
(winnow.evaluation.process_engine), run for real: ``winnow eval`` processes against a loopback server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from fakes import ScriptedServer

from winnow.evaluation.process_engine import default_processes, inflight_shares, merged_dispatch_stats
from winnow.run_spec import RunSpec

INCOMPLETE = 3  # winnow eval's exit code for a run that left questions unanswered


@pytest.fixture
def server():
    """A loopback OpenAI-compatible server answering "re: PROMPT" (test_llm_dispatch.py's)."""
    started = ScriptedServer(delay=0.05)
    yield started
    started.stop()


def _questions(path: Path, count: int) -> Path:
    path.write_text("".join(json.dumps({"id": f"q{i}", "question": f"Where is place {i}?",
                                        "golden_answers": ["Paris"]}) + "\n" for i in range(count)))
    return path


def _eval(index: Path, queries: Path, out: Path, url: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "winnow.cli", "eval", "--index", str(index), "--queries", str(queries),
            "--out", str(out), "--backend", "openai", "--model", "m", "--base-url", url, "--no-cache", *extra]


def _answers(out: Path) -> dict[str, dict]:
    lines = [json.loads(line) for line in (out / "answers.jsonl").read_text().splitlines()]
    assert len(lines) == len({line["id"] for line in lines}), "a question was recorded twice"
    return {line["id"]: line for line in lines}


def _what_depends_on_the_answer(value):
    """A record less the times it holds (wall and server seconds depend on the load, not the answer)."""
    if isinstance(value, dict):
        return {key: _what_depends_on_the_answer(item) for key, item in value.items() if "seconds" not in key}
    if isinstance(value, list):
        return [_what_depends_on_the_answer(item) for item in value]
    return value


@pytest.mark.subprocess
@pytest.mark.parametrize("method", ["vanilla", "rankrag"])
def test_client_processes_give_one_process_answers_and_share_max_inflight(server, index, tmp_path, method):
    queries = _questions(tmp_path / "q.jsonl", 24)
    one = subprocess.run(_eval(index.path, queries, tmp_path / "one", server.url, "--method", method,
                               "--max-inflight", "6", "--processes", "1"), capture_output=True, text=True)
    assert one.returncode == 0, one.stderr
    server.max_inflight = 0
    two = subprocess.run(_eval(index.path, queries, tmp_path / "two", server.url, "--method", method,
                               "--max-inflight", "6", "--processes", "2", "--json"), capture_output=True, text=True)
    assert two.returncode == 0, two.stderr
    assert "shared by 2 client processes (--processes)" in two.stderr
    # The two processes hold 3 slots each: together never more than --max-inflight.
    assert 1 < server.max_inflight <= 6
    # Tokens are estimated (the server has no /tokenize): said once, not once per process.
    assert two.stderr.count("passages fitted to the context are cut by this estimate") == 1
    alone, shared = _answers(tmp_path / "one"), _answers(tmp_path / "two")
    assert list(shared) != [] and set(shared) == set(alone)
    for qid, record in alone.items():
        assert _what_depends_on_the_answer(shared[qid]) == _what_depends_on_the_answer(record)
    metrics = json.loads(two.stdout)
    assert metrics["questions"]["answered"] == 24
    config = json.loads((tmp_path / "two" / "config.json").read_text())
    assert config["sessions"][-1]["token_counting"]["model"].startswith("estimated")


@pytest.mark.subprocess
def test_spawned_client_processes_answer_as_forked_ones(server, index, tmp_path):
    # In this test process the loopback server's thread runs, so the processes are spawned (a fork
    # would copy that thread's locks); the subprocess runs above forked theirs.
    import threading

    from typer.testing import CliRunner

    from winnow.cli import app
    from winnow.evaluation.process_engine import start_method

    assert threading.active_count() > 1 and start_method() == "spawn"
    queries = _questions(tmp_path / "q.jsonl", 12)
    forked = subprocess.run(_eval(index.path, queries, tmp_path / "forked", server.url, "--method", "vanilla",
                                  "--max-inflight", "4", "--processes", "2"), capture_output=True, text=True)
    assert forked.returncode == 0, forked.stderr
    result = CliRunner().invoke(app, _eval(index.path, queries, tmp_path / "spawned", server.url, "--method",
                                           "vanilla", "--max-inflight", "4", "--processes", "2")[3:])
    assert result.exit_code == 0, result.output
    spawned, alone = _answers(tmp_path / "spawned"), _answers(tmp_path / "forked")
    assert len(spawned) == 12 and all(_what_depends_on_the_answer(spawned[qid]) == _what_depends_on_the_answer(record)
                                      for qid, record in alone.items())


@pytest.mark.subprocess
def test_a_killed_client_process_fails_only_its_questions_and_the_rerun_asks_them(server, index, tmp_path):
    server.delay = 0.3
    queries = _questions(tmp_path / "q.jsonl", 40)
    out = tmp_path / "run"
    command = _eval(index.path, queries, out, server.url, "--method", "vanilla", "--max-inflight", "4",
                    "--processes", "2")
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=os.environ.copy())
    answers = out / "answers.jsonl"
    deadline = time.monotonic() + 120
    while not (answers.is_file() and answers.read_bytes().count(b"\n") >= 4):
        assert process.poll() is None, "the run ended before a client process could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    clients = [child for child in psutil.Process(process.pid).children()
               if "resource_tracker" not in " ".join(child.cmdline())]  # forked: the same command
    assert len(clients) == 2, [child.cmdline() for child in psutil.Process(process.pid).children()]
    os.kill(clients[0].pid, signal.SIGKILL)
    _, stderr = process.communicate(timeout=120)
    # The other process asked the rest; the dead one's questions (at most 2 in flight and its
    # flow's headroom) are recorded as failed, and the run says it is incomplete.
    assert process.returncode == INCOMPLETE, stderr
    errors = [json.loads(line) for line in (out / "errors.jsonl").read_text().splitlines()]
    assert errors and all("client process" in e["error"] and "died (exit code -9)" in e["error"] for e in errors)
    answered = _answers(out)
    assert len(answered) + len(errors) == 40 and not set(answered) & {e["id"] for e in errors}
    assert "incomplete" in stderr

    rerun = subprocess.run(command, capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    assert f"{len(answered)} already answered, {len(errors)} to ask" in rerun.stderr
    assert set(_answers(out)) == {f"q{i}" for i in range(40)}


@pytest.mark.parametrize(("extra", "message"), [
    (["--backend", "llama.cpp", "--processes", "2"], "--processes 2 needs --backend openai"),
    (["--processes", "8", "--max-inflight", "4"], "--processes 8 is more than --max-inflight 4"),
    (["--processes", "2", "--engine", "ray"], "--processes 2 runs with --engine local, not with --engine ray"),
])
@pytest.mark.subprocess
def test_processes_that_cannot_be_honoured_are_refused_before_anything_loads(index, tmp_path, extra, message):
    queries = _questions(tmp_path / "q.jsonl", 2)
    command = _eval(index.path, queries, tmp_path / "run", "http://127.0.0.1:9/v1", *extra)
    if "llama.cpp" in extra:  # the last --backend wins
        command = [part for part in command if part not in ("--base-url", "http://127.0.0.1:9/v1")]
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode != 0 and message in " ".join(done.stderr.split()), done.stderr
    assert not (tmp_path / "run" / "answers.jsonl").exists()


def test_the_default_is_one_process_per_32_slots_within_the_cores_and_the_questions(monkeypatch):
    monkeypatch.setattr("winnow.evaluation.process_engine.available_cores", lambda: 4)
    server = RunSpec(model="m", backend="openai", max_inflight=64)
    assert default_processes(server, pending=1000) == 2
    assert default_processes(RunSpec(model="m", backend="openai", max_inflight=256), pending=1000) == 4
    assert default_processes(RunSpec(model="m", backend="openai"), pending=1000) == 2  # 64 by default
    assert default_processes(server, pending=100) == 1  # too few questions to be worth a second process
    assert default_processes(RunSpec(model="m", backend="openai", max_inflight=16), pending=1000) == 1
    assert default_processes(RunSpec(model="m", backend="llama.cpp"), pending=1000) == 1


def test_slots_are_shared_out_exactly_and_endpoint_statistics_summed():
    assert inflight_shares(6, 2) == [3, 3] and inflight_shares(7, 3) == [3, 2, 2] and sum(inflight_shares(64, 5)) == 64
    one = {"calls": 5, "retries": 2, "failovers": 1, "hedges": 2, "hedges_won": 1,
           "endpoints": {"a": {"requests": 7, "failures": 2, "breaker_opened": 1, "open": False}}}
    two = {"calls": 4, "retries": 1, "failovers": 0, "hedges": 0, "hedges_won": 0,
           "endpoints": {"a": {"requests": 5, "failures": 1, "breaker_opened": 0, "open": True},
                         "b": {"requests": 0, "failures": 0, "breaker_opened": 0, "open": False}}}
    assert merged_dispatch_stats([one, two]) == {
        "calls": 9, "retries": 3, "failovers": 1, "hedges": 2, "hedges_won": 1,
        "endpoints": {"a": {"requests": 12, "failures": 3, "breaker_opened": 1, "open": True},
                      "b": {"requests": 0, "failures": 0, "breaker_opened": 0, "open": False}}}


def test_the_first_process_ready_is_checked_against_the_run_and_each_later_one_against_it():
    # The first ready process starts asking at once; the others are checked as their word comes
    # (a process that loads other model files, or dies opening the run, still stops the run).
    from types import SimpleNamespace

    from winnow.errors import WinnowError
    from winnow.evaluation.process_engine import ProcessEngine

    checked = []
    run = SimpleNamespace(spec=RunSpec(model="m", backend="openai", max_inflight=8), token_counting={},
                          check_model_identities=checked.append)
    engine = ProcessEngine(run, 3)
    ready = {"models": {"model": "m sha256:1"}, "token_counting": {"model": "estimated"}}
    engine._opening("ready", 2, ready)
    assert checked == [ready["models"]] and run.token_counting == ready["token_counting"] and list(engine.opened) == [2]
    engine._opening("ready", 0, dict(ready))
    assert checked == [ready["models"]] and set(engine.opened) == {0, 2}  # the run was checked once
    with pytest.raises(WinnowError, match="the client processes loaded different model files"):
        engine._opening("ready", 1, {**ready, "models": {"model": "m sha256:2"}})
    with pytest.raises(WinnowError, match=r"client process 1 died while opening the run \(exit code -9\)"):
        engine._opening("died", 1, -9)
    with pytest.raises(WinnowError, match="client process 1 could not open the run: no index"):
        engine._opening("error", 1, "no index")
