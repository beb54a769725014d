"""Hedged requests (winnow.llm.dispatch, ``--hedge``): a call with no answer after a while is sent
again to another endpoint, the first answer winning, against real loopback servers."""

from __future__ import annotations

import subprocess
import time

import pytest
from cli_runner import winnow
from fakes import ScriptedServer

from winnow.errors import BackendError, WinnowError
from winnow.llm import load_llm
from winnow.llm.openai_http import OpenAICompatibleBackend


@pytest.fixture
def slow_and_fast():
    slow, fast = ScriptedServer(delay=3.0), ScriptedServer(delay=0.05)
    yield slow, fast
    slow.stop()
    fast.stop()


def _prompts(count: int) -> list[list[dict[str, str]]]:
    return [[{"role": "user", "content": f"question {i}"}] for i in range(count)]


def test_a_straggler_is_hedged_to_the_other_endpoint_and_the_first_answer_wins(slow_and_fast):
    slow, fast = slow_and_fast
    backend = OpenAICompatibleBackend("m", base_url=[slow.url, fast.url], max_inflight=4, timeout=30, hedge=0.2)
    try:
        started = time.perf_counter()
        answers = backend.generate(_prompts(4), max_tokens=5)
        took = time.perf_counter() - started
        stats = backend.dispatch_stats()
    finally:
        backend.close()
    # Least-loaded dispatch sends two calls to each; the slow server's two are hedged once the fast
    # one's answers free their slots, and the copies answer long before the 3 s originals would.
    assert [a.text for a in answers] == [f"re: question {i}" for i in range(4)]
    assert took < 2.0
    assert (stats["hedges"], stats["hedges_won"]) == (2, 2)
    assert fast.requests == 4 and slow.requests == 2
    # A lost race is not a failure: the slow endpoint stays in the pool.
    assert stats["endpoints"][slow.url.rstrip("/")]["failures"] == 0
    assert stats["endpoints"][slow.url.rstrip("/")]["breaker_opened"] == 0


def test_a_hedge_never_takes_a_slot_a_first_attempt_needs():
    server = ScriptedServer(delay=0.6)
    backend = OpenAICompatibleBackend("m", base_url=server.url, max_inflight=1, timeout=30, hedge=0.1)
    try:
        answers = backend.generate(_prompts(2), max_tokens=5)
        stats = backend.dispatch_stats()
    finally:
        backend.close()
        server.stop()
    assert [a.text for a in answers] == ["re: question 0", "re: question 1"]
    assert stats["hedges"] == 0 and server.requests == 2 and server.max_inflight == 1


def test_without_hedge_a_straggler_is_waited_for(slow_and_fast):
    slow, fast = slow_and_fast
    slow.delay = 0.8
    backend = OpenAICompatibleBackend("m", base_url=[slow.url, fast.url], max_inflight=4, timeout=30)
    try:
        started = time.perf_counter()
        backend.generate(_prompts(4), max_tokens=5)
        took = time.perf_counter() - started
        stats = backend.dispatch_stats()
    finally:
        backend.close()
    assert took >= 0.8 and stats["hedges"] == 0 and slow.requests == 2


def test_hedge_is_refused_where_it_cannot_be_honoured(index, tmp_path):
    with pytest.raises(BackendError, match="--hedge must be above 0 seconds"):
        OpenAICompatibleBackend("m", base_url="http://127.0.0.1:9/v1", hedge=0)
    with pytest.raises(WinnowError, match="hedge applies to the openai backend, not 'llama.cpp'"):
        load_llm("smollm2-135m", backend="llama.cpp", hedge=1.0, cache=False)
    done = winnow("ask", "q", "--index", str(index.path), "--backend", "openai", "--base-url", "http://127.0.0.1:9/v1",
                  "--model", "m", "--hedge", "0")
    assert done.returncode != 0 and "--hedge" in done.stderr


def test_eval_with_hedge_answers_as_without_and_says_how_many_calls_were_hedged(slow_and_fast, index, tmp_path):
    import json

    slow, fast = slow_and_fast
    slow.delay = 1.5
    queries = tmp_path / "q.jsonl"
    queries.write_text("".join(json.dumps({"id": f"q{i}", "question": f"Where is place {i}?",
                                           "golden_answers": ["Paris"]}) + "\n" for i in range(8)))

    def run(out: str, *extra: str) -> subprocess.CompletedProcess:
        return winnow("eval", "--index", str(index.path), "--queries", str(queries), "--out", str(tmp_path / out),
                      "--method", "vanilla", "--backend", "openai", "--model", "m", "--base-url", slow.url,
                      "--base-url", fast.url, "--max-inflight", "4", "--no-cache", *extra)

    hedged = run("hedged", "--hedge", "0.2")
    assert hedged.returncode == 0, hedged.stderr
    assert "hedged (" in hedged.stderr and "answered first)" in hedged.stderr
    plain = run("plain")
    assert plain.returncode == 0, plain.stderr
    answers = {out: {r["id"]: r["answer"] for r in map(json.loads, (tmp_path / out / "answers.jsonl").open())}
               for out in ("hedged", "plain")}
    assert answers["hedged"] == answers["plain"] and len(answers["plain"]) == 8
