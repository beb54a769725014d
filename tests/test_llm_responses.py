"""Malformed answers from model servers are one clear BackendError, never a crash or a NaN score.

The fuzz tests feed generated responses to every reader: well-formed answers with one to three
fields replaced by random JSON values (or deleted), and random JSON values outright. The server test
sends bad bodies from a real HTTP server on 127.0.0.1 through the real OpenAI-compatible backend.
"""

from __future__ import annotations

import copy
import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from winnow.errors import BackendError
from winnow.llm.openai_format import read_choice_scores, read_generation
from winnow.llm.server_tokens import count_at, read_text_field, read_token_ids, read_vllm_context

GENERATION = {
    "choices": [{"index": 0, "finish_reason": "length",
                 "message": {"role": "assistant", "content": "Paris"}}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13},
}
SCORES = {
    "choices": [{"index": 0, "finish_reason": "length", "message": {"role": "assistant", "content": "True"},
                 "logprobs": {"content": [{"token": "True", "logprob": -0.1, "top_logprobs": [
                     {"token": "True", "logprob": -0.1}, {"token": "False", "logprob": -2.4},
                     {"token": " true", "logprob": -5.0}]}]}}],
    "usage": {"prompt_tokens": 30, "completion_tokens": 1},
}

TOKENS = {"count": 3, "max_model_len": 2048, "tokens": [19556, 905, 28]}
DETOKENIZED = {"prompt": "Hello world"}
MODELS = {"object": "list", "data": [{"id": "m", "max_model_len": 4096}, {"id": "other", "max_model_len": 8192}]}
PROPS = {"default_generation_settings": {"n_ctx": 4096, "params": {"seed": 1}}, "total_slots": 1}

SCALARS = (st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30)
           | st.sampled_from([10**400, -(10**400), 2**53 + 1]) | st.floats(allow_nan=True, allow_infinity=True)
           | st.text(max_size=6))
#: Keys a reader looks for, so random objects often look almost right.
KEYS = st.sampled_from(["choices", "message", "content", "logprobs", "top_logprobs", "token", "logprob",
                        "usage", "prompt_tokens", "completion_tokens", "finish_reason", "error", "tokens",
                        "prompt", "data", "id", "max_model_len", "default_generation_settings", "n_ctx", "x"])
SMALL = st.lists(SCALARS, max_size=2) | st.dictionaries(KEYS, SCALARS, max_size=2)
JSON = SCALARS | SMALL | st.lists(SMALL, max_size=2) | st.dictionaries(KEYS, SMALL, max_size=2)


def paths(value, prefix=()):
    """Every path to a value inside ``value`` (dict keys and list indexes)."""
    found = [prefix]
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in children:
        found.extend(paths(child, (*prefix, key)))
    return found


@st.composite
def mutated(draw, template):
    """``template`` with one to three of its fields replaced by random JSON or deleted."""
    response = copy.deepcopy(template)
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(paths(response)))
        if not where:
            return draw(JSON)
        parent = response
        for key in where[:-1]:
            parent = parent[key]
        if draw(st.booleans()) and isinstance(parent, dict):
            del parent[where[-1]]
        else:
            parent[where[-1]] = draw(JSON)
        if not isinstance(response, (dict, list)):
            break
    return response


def responses(template):
    return st.one_of(mutated(template), mutated(template), mutated(template), JSON)


PER_EXAMPLE = 100
EXAMPLES = 100  # 100 x 100 = 10,000 responses per reader


def feed(reader, batch):
    """Run ``reader`` on each response; count answers and BackendErrors (anything else fails the test)."""
    read = refused = 0
    for response in batch:
        try:
            result = reader(response)
        except BackendError as exc:
            assert "\n" not in str(exc)
            refused += 1
        else:
            read += 1
            yield result
    feed.totals[0] += read
    feed.totals[1] += refused


# Shrinking a batch of 100 responses takes minutes; the failing batch is printed as found instead.
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))


def _generation_ok(generation):
    assert isinstance(generation.text, str) and isinstance(generation.finish_reason, str)
    assert generation.prompt_tokens >= 0 and generation.completion_tokens >= 0


def _scores_ok(scores):
    assert all(math.isfinite(v) and v <= 0 for v in scores.logprobs.values())
    assert sum(math.exp(v) for v in scores.logprobs.values()) == pytest.approx(1.0)


def _ids_ok(ids):
    assert all(isinstance(i, int) and 0 <= i <= 2**53 for i in ids)


def _text_ok(text):
    assert isinstance(text, str)


def _size_ok(size):
    assert size is None or (isinstance(size, int) and 0 < size <= 2**53)


READERS = {
    "read_generation": (GENERATION, lambda r: read_generation(r, 0.1, "http://server/v1", max_tokens=4),
                        _generation_ok),
    "read_choice_scores": (SCORES, lambda r: read_choice_scores(r, ("True", "False"), 0.1, "http://server/v1"),
                           _scores_ok),
    "read_token_ids": (TOKENS, lambda r: read_token_ids(r, "http://server/v1"), _ids_ok),
    "read_text_field": (DETOKENIZED, lambda r: read_text_field(r, "prompt", "http://server/v1"), _text_ok),
    # What a server says about its context is optional: these readers answer None, never raise.
    "read_vllm_context": (MODELS, lambda r: read_vllm_context(r, "m"), _size_ok),
    "llama.cpp /props n_ctx": (PROPS, lambda r: count_at(r, "default_generation_settings", "n_ctx"), _size_ok),
}


@pytest.mark.slow  # 10,000 generated responses per reader
@pytest.mark.parametrize("name", READERS)
def test_fuzzed_responses_raise_only_backend_errors(name):
    template, reader, check = READERS[name]
    feed.totals = [0, 0]

    @FUZZ
    @given(st.lists(responses(template), min_size=PER_EXAMPLE, max_size=PER_EXAMPLE))
    def run(batch):
        for result in feed(reader, batch):
            check(result)

    run()
    read, refused = feed.totals
    assert read + refused == PER_EXAMPLE * EXAMPLES
    assert read > 20  # well-formed answers are read, not refused wholesale
    if name.startswith("read_") and name != "read_vllm_context":
        assert refused > 1000


@pytest.mark.parametrize("bad, expected", [
    (float("nan"), "not a finite log-probability"),
    (float("inf"), "not a finite log-probability"),
    (float("-inf"), "not a finite log-probability"),
    (0.5, "at most 0"),
    ("-0.1", "not a log-probability"),
    (None, "not a log-probability"),
    (True, "not a log-probability"),
])
def test_invalid_log_probabilities_are_refused(bad, expected):
    response = copy.deepcopy(SCORES)
    response["choices"][0]["logprobs"]["content"][0]["top_logprobs"][1]["logprob"] = bad
    with pytest.raises(BackendError, match=expected) as caught:
        read_choice_scores(response, ("True", "False"), 0.1, "llama.cpp (m)")
    assert "choices[0].logprobs.content[0].top_logprobs[1].logprob" in str(caught.value)


def test_a_rounding_error_above_zero_is_read_as_zero():
    response = copy.deepcopy(SCORES)
    response["choices"][0]["logprobs"]["content"][0]["top_logprobs"][0]["logprob"] = 3e-7
    scores = read_choice_scores(response, ("True", "False"), 0.1, "s")
    assert scores.raw_top["True"] == 0.0


def test_well_formed_answers_are_read():
    generation = read_generation(GENERATION, 0.5, "s")
    assert (generation.text, generation.prompt_tokens, generation.completion_tokens,
            generation.finish_reason) == ("Paris", 12, 1, "length")
    scores = read_choice_scores(SCORES, ("True", "False"), 0.5, "s")
    assert scores.probability("True") > 0.9 and scores.prompt_tokens == 30


# --- a real server on loopback that answers with bad bodies -----------------------------------------

class BadServer(ThreadingHTTPServer):
    """Answers every POST with the next body of ``bodies`` (bytes), status 200."""

    bodies: list[bytes]


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (the http.server hook's name)
        self.rfile.read(int(self.headers.get("content-length") or 0))
        body = self.server.bodies.pop(0)
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def bad_server():
    server = BadServer(("127.0.0.1", 0), _Handler)
    server.bodies = []
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _with(template, path, value):
    response = copy.deepcopy(template)
    parent = response
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return json.dumps(response).encode()


BAD_BODIES = [
    ("generate", b"<html><body>502 Bad Gateway</body></html>", "its body is not JSON", "<html><body>502"),
    ("generate", b"[" * 100_000 + b"]" * 100_000, "its body is not JSON (RecursionError)", "[[[["),
    ("generate", b'{"choices": 7}', "choices is the number 7, not a list", '{"choices": 7}'),
    ("generate", b'{"choices": ["Paris"]}', "choices[0] is a string, not an object", '{"choices": ["Paris"]}'),
    ("generate", _with(GENERATION, ("choices", 0, "message"), "Paris"),
     "choices[0].message is a string, not an object", '{"choices": [{"index": 0'),
    ("generate", _with(GENERATION, ("usage", "prompt_tokens"), "twelve"),
     "usage.prompt_tokens is a string, not a count", '{"choices"'),
    ("generate", b'{"id": "x"}', "choices is null, not a list", '{"id": "x"}'),
    ("choices", _with(SCORES, ("choices", 0, "logprobs", "content", 0, "top_logprobs"), {"True": -0.1}),
     "top_logprobs is an object, not a list", '{"choices"'),
    ("choices", _with(SCORES, ("choices", 0, "logprobs", "content", 0, "top_logprobs", 0, "logprob"), float("nan")),
     "top_logprobs[0].logprob is nan, not a finite log-probability", '{"choices"'),
    ("choices", b'{"choices": [{"logprobs": {"content": [{"token": "True", "logprob": 1e999}]}}]}',
     "content[0].logprob is inf", '{"choices": [{"logprobs"'),
]


@pytest.mark.parametrize("kind, body, problem, start", BAD_BODIES)
def test_bad_bodies_from_a_real_server_are_one_line_errors(bad_server, kind, body, problem, start):
    from winnow.llm.openai_http import OpenAICompatibleBackend

    base_url = f"http://127.0.0.1:{bad_server.server_address[1]}/v1"
    from winnow.llm.dispatch import RetryPolicy

    # An unreadable 200 is retried like a 5xx (a proxy may garble one answer in many): one that comes
    # back unreadable on every attempt is the error, as it reads.
    bad_server.bodies.extend([body, body])
    backend = OpenAICompatibleBackend("m", base_url=base_url, max_inflight=1, timeout=30,
                                      retry=RetryPolicy(attempts=2, base_seconds=0.001, cap_seconds=0.001))
    try:
        with pytest.raises(BackendError) as caught:
            if kind == "generate":
                backend.generate([[{"role": "user", "content": "hi"}]], max_tokens=4)
            else:
                backend.choice_logprobs([[{"role": "user", "content": "hi"}]], ("True", "False"))
    finally:
        backend.close()
    message = str(caught.value)
    assert bad_server.bodies == []  # both attempts made
    assert "\n" not in message
    assert message.startswith(f"{base_url} sent a response Winnow cannot read: ")
    assert problem in message
    assert f"it began {start!r}"[:-1] in message  # the start of the body, quoted
    assert len(message) < 700
