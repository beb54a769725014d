"""Faulty servers, for real, on 127.0.0.1: what a run does when its cluster misbehaves.

Each test starts :class:`fault_server.FaultServer` (real HTTP) in the failure it names and asserts
the outcome a user needs: the same answers as a healthy run, the failover counted, the tokenizer kept,
or a clear non-zero exit naming the questions left unanswered. Timeouts and retry pauses are short so
that the whole file runs in seconds.
"""

from __future__ import annotations

import json
import re
import threading
import time

import pytest
from fault_server import FaultServer
from typer.testing import CliRunner

from winnow.cli import app
from winnow.errors import BackendError
from winnow.llm import LLM, server_tokens
from winnow.llm.dispatch import BreakerPolicy, RetryPolicy
from winnow.llm.openai_http import OpenAICompatibleBackend
from winnow.records import StageTrace

FAST_RETRY = RetryPolicy(attempts=4, base_seconds=0.01, cap_seconds=0.05)
QUESTIONS = [("q1", "What is the capital of France?", "Paris"), ("q2", "Which planet is the largest?", "Jupiter"),
             ("q3", "Who painted the Mona Lisa?", "Leonardo"), ("q4", "What is the capital of Italy?", "Rome")]


@pytest.fixture
def servers():
    started: list[FaultServer] = []

    def start(**options) -> FaultServer:
        started.append(FaultServer(**options))
        return started[-1]

    yield start
    for server in started:
        server.stop()


@pytest.fixture(autouse=True)
def quick_start_up_probes(monkeypatch):
    """Start-up questions to a failing server are retried with pauses of a few ms, not seconds."""
    monkeypatch.setattr(server_tokens, "PROBE_RETRY", RetryPolicy(attempts=4, base_seconds=0.01, cap_seconds=0.02))


def _prompt(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def _backend(*urls: str, timeout: float = 5.0, max_inflight: int = 4, **options) -> OpenAICompatibleBackend:
    return OpenAICompatibleBackend("m", base_url=list(urls), max_inflight=max_inflight, timeout=timeout,
                                   retry=options.pop("retry", FAST_RETRY), **options)


# --- the pool: failover, breakers, hung calls -------------------------------------------------------

def test_a_dead_endpoint_beside_a_healthy_one_is_taken_out_and_every_call_fails_over(servers):
    dead, healthy = servers(dead=True), servers()
    backend = _backend(dead.url, healthy.url, breaker=BreakerPolicy(failures=2, cooldown_seconds=60))
    answers = backend.generate([_prompt(f"q{i}") for i in range(24)], max_tokens=4)
    stats = backend.dispatch_stats()
    backend.close()
    alone = _backend(healthy.url)
    assert [a.text for a in answers] == [a.text for a in alone.generate([_prompt(f"q{i}") for i in range(24)],
                                                                        max_tokens=4)]
    alone.close()
    assert stats["failovers"] == stats["retries"] == stats["endpoints"][dead.url]["failures"] >= 1
    assert stats["endpoints"][dead.url]["breaker_opened"] == 1
    # Once open, its breaker keeps calls off it: a few calls in flight when it opened, not half of 24.
    assert stats["endpoints"][dead.url]["requests"] <= 2 + 4


def test_an_open_breaker_lets_one_probe_through_after_its_cool_down_and_closes_on_success(servers):
    flaky = servers(dead=True)
    backend = _backend(flaky.url, breaker=BreakerPolicy(failures=1, cooldown_seconds=0.05))
    with pytest.raises(BackendError, match="answered 500, still after 4 attempts"):
        backend.generate([_prompt("q")], max_tokens=4)
    assert backend.dispatch_stats()["endpoints"][flaky.url]["open"]
    flaky.dead = False  # the server comes back
    time.sleep(0.06)
    [answer] = backend.generate([_prompt("q")], max_tokens=4)
    assert answer.text.startswith("answer ") and not backend.dispatch_stats()["endpoints"][flaky.url]["open"]
    backend.close()


def test_a_hung_endpoint_costs_one_timeout_per_call_sent_there_and_the_other_answers(servers):
    hung, healthy = servers(hang_word="q"), servers()
    backend = _backend(hung.url, healthy.url, timeout=0.3, breaker=BreakerPolicy(failures=1, cooldown_seconds=60))
    started = time.perf_counter()
    answers = backend.generate([_prompt(f"q{i}") for i in range(6)], max_tokens=4)
    seconds = time.perf_counter() - started
    stats = backend.dispatch_stats()
    backend.close()
    assert all(a.text.startswith("answer ") for a in answers)
    assert stats["failovers"] == hung.hung >= 1
    assert seconds < 3  # one timeout of 0.3 s per call sent to the hung server, not 600 s


def test_the_timeout_bounds_a_call_to_a_lone_hung_server(servers):
    hung = servers(hang_word="slow")
    backend = _backend(hung.url, timeout=0.2, retry=RetryPolicy(attempts=2, base_seconds=0.01, cap_seconds=0.01))
    with pytest.raises(BackendError, match=r"no answer within 0.2 s \(timed out\), still after 2 attempts"):
        backend.generate([_prompt("slow")], max_tokens=4)
    backend.close()
    assert hung.hung == 2


def test_a_429_storm_is_waited_out_as_retry_after_asks_and_every_call_answered(servers):
    stormy = servers(storm=4, retry_after="1")
    llm = LLM(_backend(stormy.url, max_inflight=4, retry=RetryPolicy(attempts=5, base_seconds=0.01,
                                                                     cap_seconds=0.02)))
    stage = StageTrace("reader", "reader")
    started = time.perf_counter()
    answers = llm.generate([_prompt(f"q{i}") for i in range(8)], stage=stage, max_tokens=4)
    seconds = time.perf_counter() - started
    llm.close()
    assert all(a.text.startswith("answer ") for a in answers)
    assert stormy.refused == 4 and stage.usage.retries == 4
    assert seconds >= 1.0  # the server's Retry-After, not the 20 ms backoff


def test_a_garbled_200_is_retried_like_a_5xx(servers):
    garbling = servers(garble_every=3)  # a body that is JSON without choices, and one that is not JSON
    backend = _backend(garbling.url, max_inflight=1)
    answers = backend.generate([_prompt(f"q{i}") for i in range(8)], max_tokens=4)
    backend.close()
    assert garbling.garbled >= 3 and sum(a.retries for a in answers) == garbling.garbled
    assert all(a.text.startswith("answer ") for a in answers)


# --- the tokenizer at start-up ------------------------------------------------------------------------

def test_a_transient_tokenize_failure_at_start_up_is_retried_not_a_demotion(servers):
    server = servers(tokenize_failures=2)
    backend = _backend(server.url)
    assert backend.tokens.exact and backend.tokens.description.startswith("exact: the server's /tokenize")
    assert backend.tokens.count("Paris") == 5 and server.tokenizes == 4  # 2 refused, the probe, the count
    backend.close()


def test_a_tokenizer_that_keeps_failing_is_an_estimate_announced_once_with_the_right_reason(servers, capsys):
    server = servers(tokenize_failures=100)
    llm = LLM(_backend(server.url))
    assert not llm.token_counts_exact
    assert llm.token_counting.endswith("/tokenize answered 503 on 4 attempts, so the server's tokenizer "
                                       "could not be used")
    llm.count_tokens("Paris")
    llm.close()
    announced = capsys.readouterr().err
    assert announced.count("winnow: tokens for m are estimated") == 1 and "answered 503 on 4 attempts" in announced


# --- winnow eval end to end --------------------------------------------------------------------------

@pytest.fixture
def qa_file(tmp_path):
    path = tmp_path / "qa.jsonl"
    path.write_text("".join(json.dumps({"id": i, "question": q, "golden_answers": [a]}) + "\n"
                            for i, q, a in QUESTIONS))
    return path


def _eval(index, qa_file, out, *urls: str, extra: tuple[str, ...] = ()):
    args = ["eval", "--index", str(index.path), "--queries", str(qa_file), "--out", str(out), "--backend", "openai",
            "--model", "m", "--method", "rankrag", "--n", "4", "--k", "2", "--max-inflight", "4", "--no-cache",
            *extra]
    for url in urls:
        args += ["--base-url", url]
    return CliRunner().invoke(app, args)


def _answers(out) -> dict[str, tuple[str, list[str]]]:
    records = [json.loads(line) for line in (out / "answers.jsonl").read_text().splitlines()]
    return {r["id"]: (r["answer"], r["final"]["ids"]) for r in records}


def test_eval_beside_a_dead_endpoint_answers_as_a_healthy_run_and_counts_the_failover(servers, index, qa_file,
                                                                                     tmp_path):
    dead, healthy = servers(dead=True), servers()
    faulty = _eval(index, qa_file, tmp_path / "faulty", dead.url, healthy.url)
    assert faulty.exit_code == 0, faulty.output
    clean = _eval(index, qa_file, tmp_path / "clean", servers().url)
    assert clean.exit_code == 0, clean.output
    assert _answers(tmp_path / "faulty") == _answers(tmp_path / "clean") and len(_answers(tmp_path / "clean")) == 4
    said = " ".join(faulty.stderr.split())
    assert re.search(rf"endpoints: \d+ calls, (\d+) retried, \1 failed over to another endpoint; taken out of the "
                     rf"pool: {re.escape(dead.url)} \(\d+ failures, breaker opened 1×\)", said), said
    config = json.loads((tmp_path / "faulty" / "config.json").read_text())
    assert config["sessions"][-1]["token_counting"]["model"].startswith("exact: the server's /tokenize at http")


def test_eval_against_a_server_garbling_one_answer_in_ten_finishes_in_one_invocation(servers, index, qa_file,
                                                                                     tmp_path):
    garbling = servers(garble_every=10)
    result = _eval(index, qa_file, tmp_path / "run", garbling.url)
    assert result.exit_code == 0, result.output
    assert garbling.garbled >= 1 and len(_answers(tmp_path / "run")) == 4
    assert _answers(tmp_path / "run") == _answers(tmp_path / "run")  # read twice: stable on disk


def test_eval_with_an_estimated_tokenizer_records_why_in_config_and_traces(servers, index, qa_file, tmp_path):
    server = servers(tokenize_failures=1000)
    result = _eval(index, qa_file, tmp_path / "run", server.url)
    assert result.exit_code == 0, result.output
    assert result.stderr.count("are estimated") == 1
    session = json.loads((tmp_path / "run" / "config.json").read_text())["sessions"][-1]
    assert "/tokenize answered 503 on 4 attempts" in session["token_counting"]["model"]


def test_eval_exits_non_zero_naming_the_questions_left_unanswered(servers, index, qa_file, tmp_path):
    server = servers(refuse_word="Mona Lisa")  # q3's prompts are refused (a 400: not worth a retry)
    result = _eval(index, qa_file, tmp_path / "run", server.url)
    assert result.exit_code == 3, result.output
    said = " ".join(result.stderr.split())
    assert "1 of 4 question(s) remain unanswered (q3): 1 × " in said and "answered 400" in said
    assert sorted(_answers(tmp_path / "run")) == ["q1", "q2", "q4"]


# --- winnow serve: one hung upstream call ------------------------------------------------------------

def test_one_hung_upstream_call_does_not_hold_back_unrelated_requests_in_serve(servers, index):
    """Before, `winnow serve` ran one request at a time on the model: a request whose upstream call
    hung held the worker until its call timed out (600 s × 5 attempts), and every request behind it
    got 504. With a model server each request runs on its own thread."""
    import asyncio

    pytest.importorskip("starlette")
    from winnow.pipeline import Pipeline, RunSpec
    from winnow.service import Service
    from winnow.service.limits import ApiError
    from winnow.service.runner import execute, open_record
    from winnow.service.schemas import AskRequest

    server = servers(hang_word="zebra")
    pipeline = Pipeline(RunSpec(method="vanilla", model="m", backend="openai", base_url=server.url,
                                settings={"k": 1}), index.path, cache=False)
    service = Service(pipeline, cache=False)
    assert service.worker.concurrency > 1

    async def both() -> tuple[object, object, float]:
        hung = service.plan_ask(AskRequest(question="Where does the zebra live?", timeout=1.5))
        fast = service.plan_ask(AskRequest(question="What is the capital of France?", timeout=1.0))
        first = asyncio.create_task(execute(service, hung, open_record(service, hung)))
        while not server.hung:  # the hung call is on the wire
            await asyncio.sleep(0.01)
        started = time.perf_counter()
        answer = await execute(service, fast, open_record(service, fast))
        seconds = time.perf_counter() - started
        try:
            await first
        except ApiError as timed_out:
            return timed_out.status, answer, seconds
        return 200, answer, seconds

    try:
        hung_status, answer, seconds = asyncio.run(both())
    finally:
        server.released.set()  # let the hung call end, so the worker's thread can stop
        service.close()
        pipeline.close()
    assert hung_status == 504  # the hung request times out, as it should
    assert answer["answer"].startswith("answer ") and seconds < 1.0  # the unrelated one is answered at once


def test_ask_timeout_reaches_the_dispatcher_and_a_hung_endpoint_costs_one_timeout(servers, index):
    hung, healthy = servers(hang_word="capital"), servers()
    started = time.perf_counter()
    result = CliRunner().invoke(app, ["ask", "What is the capital of France?", "--index", str(index.path),
                                      "--backend", "openai", "--model", "m", "--base-url", hung.url, "--base-url",
                                      healthy.url, "--method", "vanilla", "--k", "1", "--timeout", "0.3",
                                      "--no-cache", "--json"])
    seconds = time.perf_counter() - started
    assert result.exit_code == 0, result.output
    assert hung.hung == 1 and seconds < 5  # without --timeout the call would wait 30 s for the hung server
    assert json.loads(result.stdout)["answer"].startswith("answer ")


def test_eval_with_questions_flowing_answers_as_one_at_a_time(servers, index, qa_file, tmp_path):
    """Against a server the questions flow, several in progress at once; each question's record is
    the one the one-question path gives, and every question is written once."""
    server = servers()
    flowing = _eval(index, qa_file, tmp_path / "flow", server.url)
    assert flowing.exit_code == 0, flowing.output
    single = _eval(index, qa_file, tmp_path / "one", server.url, extra=("--batch-size", "1", "--max-inflight", "1"))
    assert single.exit_code == 0, single.output
    assert _answers(tmp_path / "flow") == _answers(tmp_path / "one")
    ids = [json.loads(line)["id"] for line in (tmp_path / "flow" / "answers.jsonl").read_text().splitlines()]
    assert sorted(ids) == ["q1", "q2", "q3", "q4"]


def test_a_slow_question_does_not_hold_back_the_others(servers, index, qa_file, tmp_path):
    """Issue 28: no question waits for another. The server holds every call of q3 (its prompts name
    the Mona Lisa) until released; the other three are answered and written meanwhile, and q3 is
    written once its calls return. A batch of the four would write nothing until q3 is done."""
    server = servers(hang_word="Mona Lisa")
    answers = tmp_path / "run" / "answers.jsonl"
    result: list = []
    asking = threading.Thread(target=lambda: result.append(_eval(index, qa_file, tmp_path / "run", server.url,
                                                                 extra=("--max-inflight", "8"))))
    asking.start()
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (not answers.exists() or len(answers.read_text().splitlines()) < 3):
            time.sleep(0.02)
        written = [json.loads(line)["id"] for line in answers.read_text().splitlines()] if answers.exists() else []
        assert sorted(written) == ["q1", "q2", "q4"] and server.hung >= 1  # q3 still waits on the server
    finally:
        server.released.set()
        asking.join(30)
    assert result and result[0].exit_code == 0, result[0].output if result else "the run did not finish"
    assert [json.loads(line)["id"] for line in answers.read_text().splitlines()][-1] == "q3"


# --- a gateway's own headers ------------------------------------------------------------------------

def test_a_gateways_headers_are_sent_with_every_call(servers, monkeypatch):
    server = servers()
    monkeypatch.setenv("WINNOW_OPENAI_HEADERS", '{"x-gateway": "from-env", "api-key": "env-key"}')
    backend = _backend(server.url, headers={"api-key": "given-key"}, api_key="k")
    try:
        backend.generate([_prompt("What is the capital of France?")], max_tokens=2)
    finally:
        backend.close()
    seen = server.seen_headers
    assert seen["x-gateway"] == "from-env" and seen["api-key"] == "given-key"  # the argument wins
    assert seen["authorization"] == "Bearer k"


@pytest.mark.parametrize("text", ["api-key: x", '["api-key"]', '{"api-key": 3}'])
def test_malformed_gateway_headers_are_one_clear_error(monkeypatch, text):
    monkeypatch.setenv("WINNOW_OPENAI_HEADERS", text)
    with pytest.raises(BackendError, match="WINNOW_OPENAI_HEADERS"):
        _backend("http://127.0.0.1:9/v1")


# --- Ctrl-C -------------------------------------------------------------------------------------------

def _interrupted(server: FaultServer, args: list[str], tmp_path) -> tuple[int, str, float]:
    """Run ``winnow ARGS`` in a real process against ``server``; once its calls hang there, send
    SIGINT. (exit status, stderr, seconds from the signal to the exit)."""
    import os
    import signal
    import subprocess
    import sys

    env = dict(os.environ, WINNOW_CACHE_DIR=str(tmp_path / "cache"), COLUMNS="200")
    process = subprocess.Popen([sys.executable, "-m", "winnow.cli", *args, "--backend", "openai", "--model", "m",
                                "--base-url", server.url, "--no-cache"], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        # Every call of the rerank stage on the wire: N = 4 passages, --max-inflight 4.
        while server.hung < 4 and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.hung == 4, process.communicate(timeout=10)
        signalled = time.monotonic()
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=15)
        return process.returncode, stderr, time.monotonic() - signalled
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.subprocess
def test_ctrl_c_during_eval_says_at_once_how_many_calls_it_waits_for_and_exits_130(servers, index, qa_file,
                                                                                  tmp_path):
    server = servers(hang_word="Passage")  # rankrag's relevance prompts hold the passages: they hang
    out = tmp_path / "run"
    status, stderr, seconds = _interrupted(server, ["eval", "--index", str(index.path), "--queries", str(qa_file),
                                                    "--out", str(out), "--method", "rankrag", "--n", "4", "--k", "2",
                                                    "--max-inflight", "4"], tmp_path)
    said = " ".join(stderr.split())
    assert status == 130, stderr
    # The dispatcher's count: the four calls hanging at the server.
    assert "stopping: waiting for 4 calls in flight to be cancelled" in said
    assert f"the answers so far are saved in {out}" in said
    assert "run the same command again to continue" in said
    assert (out / "config.json").is_file()  # what was saved stays for the next run to continue
    assert seconds < 5


@pytest.mark.subprocess
def test_ctrl_c_during_ask_says_it_is_stopping_and_exits_130(servers, index, tmp_path):
    server = servers(hang_word="Passage")
    status, stderr, seconds = _interrupted(server, ["ask", "--index", str(index.path), "--method", "rankrag",
                                                    "--n", "4", "--k", "2", "--max-inflight", "4",
                                                    "What is the capital of France?"], tmp_path)
    assert status == 130, stderr
    assert "stopping: waiting for 4 calls in flight to be cancelled" in " ".join(stderr.split()), stderr
    assert seconds < 5
