"""The dispatcher of OpenAI-compatible calls against real HTTP servers on 127.0.0.1.

``ScriptedServer`` (tests/fakes.py) answers OpenAI-shaped chat completions after a delay, counts the
requests it has in flight at once, and can be told to fail its first requests (429, 503, a dropped
connection) or to leave out log-probabilities. The last test runs llama.cpp's own server.
"""

from __future__ import annotations

import json
import time

import pytest
from fakes import ScriptedServer

from winnow.errors import BackendError
from winnow.llm import LLM
from winnow.llm.dispatch import MAX_RETRY_AFTER_SECONDS, RetryPolicy, retry_after_seconds
from winnow.llm.openai_http import OpenAICompatibleBackend
from winnow.records import StageTrace

FAST_RETRY = RetryPolicy(attempts=5, base_seconds=0.01, cap_seconds=0.05)


def _prompt(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


@pytest.fixture
def servers():
    started: list[ScriptedServer] = []

    def start(**options) -> ScriptedServer:
        started.append(ScriptedServer(**options))
        return started[-1]

    yield start
    for server in started:
        server.stop()


def _backend(*urls: str, max_inflight: int) -> OpenAICompatibleBackend:
    return OpenAICompatibleBackend("m", base_url=list(urls), max_inflight=max_inflight, timeout=10, retry=FAST_RETRY)


def test_calls_in_flight_never_exceed_the_bound_and_all_answers_keep_their_order(servers):
    server = servers(delay=0.05)
    backend = _backend(server.url, max_inflight=5)
    prompts = [_prompt(f"q{i}") for i in range(40)]
    answers = backend.generate(prompts, max_tokens=4)
    backend.close()
    assert server.max_inflight == 5
    assert [a.text for a in answers] == [f"re: q{i}" for i in range(40)]


def test_a_slow_call_does_not_hold_back_the_others(servers):
    # Chunks of two would wait for the slow call before starting the third; bounded in-flight
    # dispatch runs every other call on the second slot meanwhile.
    server = servers(delay=0.05)
    # 2 s against 0.3 s for the six others: a margin a loaded machine keeps.
    server.slow_word, server.slow_factor = "slow", 40
    backend = _backend(server.url, max_inflight=2)
    backend.generate([_prompt("slow"), *[_prompt(f"q{i}") for i in range(6)]], max_tokens=4)
    backend.close()
    assert server.finished[-1] == "slow"


def test_least_loaded_dispatch_spreads_calls_over_two_endpoints(servers):
    first, second = servers(delay=0.05), servers(delay=0.05)
    backend = _backend(first.url, second.url, max_inflight=8)
    backend.choice_logprobs([_prompt(f"q{i}") for i in range(48)], ["True", "False"])
    backend.close()
    assert first.requests + second.requests == 48
    assert (first.max_inflight, second.max_inflight) == (4, 4)  # never more on one while the other has fewer


def test_the_faster_endpoint_takes_more_calls(servers):
    fast, slow = servers(delay=0.01), servers(delay=0.2)
    backend = _backend(fast.url, slow.url, max_inflight=4)
    backend.generate([_prompt(f"q{i}") for i in range(40)], max_tokens=4)
    backend.close()
    assert fast.requests > 2 * slow.requests


def test_the_context_is_the_smallest_any_endpoint_reports(servers):
    """A call may go to any endpoint, so a prompt must fit the smallest of them."""
    large, small, silent = servers(), servers(), servers()
    large.max_model_len, small.max_model_len = 8192, 2048
    backend = _backend(large.url, small.url, silent.url, max_inflight=4)
    assert backend.context_size == 2048
    assert backend.context_size_source.startswith(f"the server's max_model_len of {small.url}, the smallest of its 3")
    assert f"{large.url}: 8192" in backend.context_size_source and f"{silent.url}: none reported" in (
        backend.context_size_source)
    backend.close()
    alone = _backend(large.url, max_inflight=4)
    assert (alone.context_size, alone.context_size_source) == (8192, "the server's max_model_len: 8192")
    alone.close()


def test_429_503_and_a_dropped_connection_are_retried_and_counted(servers):
    server = servers(delay=0.01, failures=["429", "503", "drop"])
    llm = LLM(_backend(server.url, max_inflight=1))
    stage = StageTrace("reader", "reader")
    [answer] = llm.generate([_prompt("capital?")], stage=stage, max_tokens=4)
    llm.close()
    assert answer.text == "re: capital?"
    assert server.requests == 4
    assert (stage.usage.calls, stage.usage.retries) == (1, 3)
    assert stage.llm_calls[0].retries == 3


def test_a_retry_after_header_is_waited_for_before_the_next_attempt(servers):
    server = servers(delay=0.0, failures=["429"])
    server.retry_after = "1"  # FAST_RETRY alone would retry within 0.05 s
    backend = _backend(server.url, max_inflight=1)
    started = time.perf_counter()
    [answer] = backend.generate([_prompt("q")], max_tokens=4)
    waited = time.perf_counter() - started
    backend.close()
    assert answer.text == "re: q" and server.requests == 2
    assert waited >= 1.0


def test_retry_after_reads_seconds_and_http_dates_and_caps_them():
    assert retry_after_seconds("3") == 3.0
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412480.0) == 10.0
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412490.0) == 0.0  # already past
    assert retry_after_seconds("86400") == MAX_RETRY_AFTER_SECONDS
    assert retry_after_seconds("soon") is None and retry_after_seconds(None) is None


def test_retries_are_bounded_and_then_a_clear_error(servers):
    server = servers(delay=0.01, failures=["503"] * 10)
    backend = _backend(server.url, max_inflight=1)
    with pytest.raises(BackendError, match=r"answered 503, still after 5 attempts"):
        backend.generate([_prompt("q")], max_tokens=4)
    backend.close()
    assert server.requests == 5


def test_an_endpoint_without_logprobs_is_a_clear_error(servers):
    good, bare = servers(delay=0.01), servers(delay=0.01, logprobs=False)
    backend = _backend(good.url, bare.url, max_inflight=4)
    with pytest.raises(BackendError, match=rf"{bare.url} returned no log-probabilities"):
        backend.choice_logprobs([_prompt(f"q{i}") for i in range(8)], ["True", "False"])
    backend.close()


def test_identical_calls_in_one_batch_are_sent_once_and_progress_counts_each_call(servers):
    server = servers(delay=0.01)
    reports: list[tuple[str, int, int]] = []
    llm = LLM(_backend(server.url, max_inflight=4), cache=None, progress=lambda *r: reports.append(r))
    stage = StageTrace("judge", "judge")
    scores = llm.choice_scores([_prompt("a"), _prompt("b"), _prompt("a")], ["True", "False"], stage=stage)
    llm.close()
    assert server.requests == 2
    assert scores[0] == scores[2]
    assert (stage.usage.calls, stage.usage.cache_hits) == (2, 1)
    assert [call.cached for call in stage.llm_calls] == [False, False, True]
    assert sorted(reports) == [("judge", 1, 2), ("judge", 2, 2)]


def test_sampled_calls_are_each_sent(servers):
    server = servers(delay=0.01)
    llm = LLM(_backend(server.url, max_inflight=4), cache=None)
    llm.generate([_prompt("a"), _prompt("a")], stage=StageTrace("r", "reader"), max_tokens=4, temperature=0.7)
    llm.close()
    assert server.requests == 2


def test_ask_spreads_its_calls_over_repeated_base_urls(servers, index, capsys):
    # The command line end to end: repeated --base-url and --max-inflight reach the dispatcher.
    from typer.testing import CliRunner

    from winnow.cli import app

    first, second = servers(delay=0.02), servers(delay=0.02)
    result = CliRunner().invoke(app, ["ask", "What is the capital of France?", "--index", str(index.path),
                                      "--backend", "openai", "--model", "m", "--base-url", first.url,
                                      "--base-url", second.url, "--max-inflight", "4", "--n", "6", "--no-cache",
                                      "--json"])
    assert result.exit_code == 0, result.output
    assert first.requests > 0 and second.requests > 0
    assert first.requests + second.requests >= 3  # the passages BM25 found scored, and one answer
    assert max(first.max_inflight, second.max_inflight) <= 2


@pytest.mark.llm
def test_llamacpp_server_answers_are_unchanged_by_dispatch(llama_backend):
    # llama.cpp's own HTTP server for the same model: many calls in flight over the dispatcher give
    # the answers the in-process backend gives one at a time.
    prompts = [_prompt(f"Is {city} in France? Answer True or False.") for city in ("Paris", "Lyon", "Berlin", "Rome")]
    remote = OpenAICompatibleBackend("smollm2", base_url=llama_backend.http_address + "/v1", max_inflight=4)
    try:
        sent_scores = remote.choice_logprobs(prompts, ["True", "False"])
        sent_texts = remote.generate(prompts, max_tokens=6)
    finally:
        remote.close()
    local_scores = llama_backend.choice_logprobs(prompts, ["True", "False"])
    local_texts = llama_backend.generate(prompts, max_tokens=6)
    assert [g.text for g in sent_texts] == [g.text for g in local_texts]
    for sent, local in zip(sent_scores, local_scores):
        assert sent.logprobs["True"] == pytest.approx(local.logprobs["True"], abs=1e-3)


def test_eval_fills_max_inflight_with_no_other_flag(servers, index, tmp_path):
    # Questions flow (winnow.evaluation.flow): with nothing but --max-inflight, vanilla's one call a
    # question fills every one of the 6 slots, and never more.
    from typer.testing import CliRunner

    from winnow.cli import app

    server = servers(delay=0.1)
    queries = tmp_path / "q.jsonl"
    queries.write_text("".join(json.dumps({"id": f"q{i}", "question": f"Where is place {i}?", "golden_answers":
                                           ["Paris"]}) + "\n" for i in range(30)))
    result = CliRunner().invoke(app, ["eval", "--index", str(index.path), "--queries", str(queries), "--out",
                                      str(tmp_path / "run"), "--method", "vanilla", "--backend", "openai",
                                      "--model", "m", "--base-url", server.url, "--max-inflight", "6",
                                      "--no-cache", "--json"])
    assert result.exit_code == 0, result.output
    assert server.requests == 30 and server.max_inflight == 6
