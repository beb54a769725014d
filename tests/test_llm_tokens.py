"""Token counts with the model's own tokenizer, context sizes, and finish reasons, on real servers.

llama.cpp runs in-process and serves its HTTP routes on 127.0.0.1; a vLLM-speaking server on
loopback translates vLLM's routes (/v1/models with max_model_len, /tokenize, /detokenize) to that
same llama.cpp, so both dialects are checked against one real tokenizer. A server with neither
route gets the estimate, and says so.
"""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from fast_model import suite_model

from winnow.errors import WinnowError
from winnow.llm import LLM, load_llm
from winnow.llm.openai_http import OpenAICompatibleBackend
from winnow.llm.server_tokens import LlamaServerTokenIds
from winnow.llm.tokens import ModelTokens
from winnow.records import StageTrace

MODEL = suite_model()

pytestmark = pytest.mark.llm

CAPITAL = [{"role": "system", "content": "Answer with one word."},
           {"role": "user", "content": "Is Paris the capital of France? Answer True or False."}]
PREFILLED = [*CAPITAL, {"role": "assistant", "content": "The answer is"}]
STORY = [{"role": "user", "content": "Tell me a long story about a dragon and a knight."}]
UNICODE = "Héllo wörld — ünïcode ✓ 日本語のテキスト, Ελληνικά και русский текст. " * 20


@pytest.fixture
def local(llama_backend):
    return LLM(llama_backend)


def test_prompt_counts_match_what_llama_cpp_charges(local, llama_backend):
    for messages in (CAPITAL, PREFILLED):
        [scores] = llama_backend.choice_logprobs([messages], ["True", "False"])
        assert local.count_prompt_tokens(messages) == scores.prompt_tokens
    [generation] = llama_backend.generate([STORY], max_tokens=2)
    assert local.count_prompt_tokens(STORY) == generation.prompt_tokens
    assert local.context_size == 4096 and local.token_counts_exact


def test_truncation_keeps_a_prefix_within_the_limit(local):
    for text in (UNICODE, "word " * 2000):
        total = local.count_tokens(text)
        for limit in (1, 7, 50, total - 1):
            cut, was_cut = local.truncate_tokens(text, limit)
            assert was_cut and text.startswith(cut) and not cut.endswith("\ufffd")
            assert local.count_tokens(cut) <= limit
        assert local.truncate_tokens(text, total) == (text, False)
    assert local.truncate_tokens("", 5) == ("", False)
    assert local.truncate_tokens("hello there", 0) == ("", True)


def test_cutting_a_huge_text_tokenizes_only_a_prefix(llama_backend):
    class Recording(LlamaServerTokenIds):
        encoded: list[int] = []

        def encode(self, text):
            self.encoded.append(len(text))
            return super().encode(text)

    ids = Recording(httpx.Client(timeout=60), llama_backend.http_address, "llama.cpp")
    tokens = ModelTokens(ids, "exact")
    huge = "The quick brown fox jumps over the lazy dog. " * 450_000  # 20 MB
    cut, was_cut = tokens.truncate(huge, 300)
    assert was_cut and huge.startswith(cut) and tokens.count(cut) <= 300
    assert max(Recording.encoded) < 20_000  # never the 20 MB, only prefixes of it


def test_openai_backend_reads_the_context_from_a_llama_cpp_server(local, llama_backend):
    base_url = llama_backend.http_address + "/v1"
    remote = LLM(OpenAICompatibleBackend("smollm2", base_url=base_url))
    assert remote.context_size == 4096 and "/props" in remote.context_size_source
    assert remote.token_counting.startswith("exact: llama.cpp server's /tokenize")
    for messages in (CAPITAL, PREFILLED):
        assert remote.count_prompt_tokens(messages) == local.count_prompt_tokens(messages)
    assert remote.truncate_tokens(UNICODE, 40) == local.truncate_tokens(UNICODE, 40)
    smaller = OpenAICompatibleBackend("smollm2", base_url=base_url, context_size=1024)
    assert smaller.context_size == 1024 and "allows 4096" in smaller.context_size_source
    larger = OpenAICompatibleBackend("smollm2", base_url=base_url, context_size=100_000)
    assert larger.context_size == 4096 and "more than it allows" in larger.context_size_source
    for backend in (remote.backend, smaller, larger):
        backend.close()


# --- servers on loopback that speak vLLM's routes, or none --------------------------------------

class TranslatingServer(ThreadingHTTPServer):
    """Serves vLLM's tokenizer routes (``vllm``) or none, from a real llama.cpp server at ``upstream``;
    chat completions are passed through."""

    upstream: str
    vllm: bool
    max_model_len = 2048


class _Handler(BaseHTTPRequestHandler):
    def _send(self, status, value):
        body = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _upstream(self, route, body):
        return httpx.post(self.server.upstream + route, json=body, timeout=60).json()

    def do_GET(self):  # noqa: N802
        if self.path == "/v1/models" and self.server.vllm:
            self._send(200, {"object": "list", "data": [{"id": "smollm2", "max_model_len": self.server.max_model_len}]})
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self):  # noqa: N802
        request = json.loads(self.rfile.read(int(self.headers["content-length"])))
        if self.path == "/v1/chat/completions":
            return self._send(200, self._upstream("/v1/chat/completions", request))
        if not self.server.vllm:
            return self._send(404, {"error": "not found"})
        if self.path == "/tokenize" and "messages" in request:
            assert bool(request.get("continue_final_message")) == (request["messages"][-1]["role"] == "assistant")
            prompt = self._upstream("/apply-template", {"messages": request["messages"]})["prompt"]
            tokens = self._upstream("/tokenize", {"content": prompt, "add_special": True, "parse_special": True})["tokens"]
        elif self.path == "/tokenize":
            tokens = self._upstream("/tokenize", {"content": request["prompt"],
                                                  "add_special": request.get("add_special_tokens", True)})["tokens"]
        elif self.path == "/detokenize":
            return self._send(200, {"prompt": self._upstream("/detokenize", {"tokens": request["tokens"]})["content"]})
        else:
            return self._send(404, {"error": "not found"})
        self._send(200, {"count": len(tokens), "max_model_len": self.server.max_model_len, "tokens": tokens})

    def log_message(self, *args):
        pass


@contextmanager
def _serving(llama_backend, vllm):
    """A TranslatingServer on a free loopback port; yields its /v1 address."""
    server = TranslatingServer(("127.0.0.1", 0), _Handler)
    server.upstream, server.vllm = llama_backend.http_address, vllm
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def vllm_server(llama_backend):
    with _serving(llama_backend, vllm=True) as base_url:
        yield base_url


@pytest.fixture
def bare_server(llama_backend):
    with _serving(llama_backend, vllm=False) as base_url:
        yield base_url


def test_vllm_routes_give_exact_counts_and_the_context(local, vllm_server):
    remote = LLM(OpenAICompatibleBackend("smollm2", base_url=vllm_server))
    assert remote.context_size == 2048 and "max_model_len" in remote.context_size_source
    assert remote.token_counts_exact and "/tokenize" in remote.token_counting
    for messages in (CAPITAL, PREFILLED):
        assert remote.count_prompt_tokens(messages) == local.count_prompt_tokens(messages)
    assert remote.count_tokens(UNICODE) == local.count_tokens(UNICODE)
    assert remote.truncate_tokens(UNICODE, 25) == local.truncate_tokens(UNICODE, 25)
    [generation] = remote.generate([CAPITAL], stage=StageTrace("s", "test"), max_tokens=4)
    assert generation.prompt_tokens == remote.count_prompt_tokens(CAPITAL)
    remote.close()


def test_a_server_without_a_tokenizer_gets_a_flagged_estimate(local, bare_server):
    remote = LLM(OpenAICompatibleBackend("smollm2", base_url=bare_server))
    assert not remote.token_counts_exact and remote.token_counting.startswith("estimated")
    assert remote.context_size == 4096 and "default" in remote.context_size_source
    # 4.4 characters a token is English's average less 6-7% (llm/tokens.py): near the model's own count
    # (here within a tenth), where the old 3 bytes a token over-counted by a third.
    text = "The Mona Lisa is a portrait by Leonardo da Vinci. " * 20
    assert abs(remote.count_tokens(text) - local.count_tokens(text)) <= 0.1 * local.count_tokens(text)
    assert abs(remote.count_prompt_tokens(CAPITAL) - local.count_prompt_tokens(CAPITAL)) <= 0.1 * local.count_prompt_tokens(
        CAPITAL)
    cut, was_cut = remote.truncate_tokens(UNICODE, 10)
    assert was_cut and UNICODE.startswith(cut) and remote.count_tokens(cut) <= 10
    assert remote.truncate_tokens("a" * 45, 10) == ("a" * 44, True)
    given = OpenAICompatibleBackend("smollm2", base_url=bare_server, context_size=1500)
    assert given.context_size == 1500 and given.context_size_source == "context_size=1500"
    remote.close()
    given.close()


def test_load_llm_takes_the_context_size(smollm2):
    llm = load_llm(MODEL, context_size=1024, cache=False, threads=1)
    try:
        assert llm.context_size == 1024
    finally:
        llm.close()
    with pytest.raises(WinnowError, match="context_size must be a whole number of tokens, at least 64"):
        load_llm(MODEL, context_size=10, cache=False)


# --- why a generation ended ----------------------------------------------------------------------

def test_finish_reason_says_when_the_token_limit_cut_the_answer(local, llama_backend):
    remote = LLM(OpenAICompatibleBackend("smollm2", base_url=llama_backend.http_address + "/v1"))
    for llm in (local, remote):
        trace = StageTrace("answer", "test")
        cut, whole = llm.generate([STORY], stage=trace, max_tokens=3) + llm.generate(
            [CAPITAL], stage=trace, max_tokens=64)
        assert (cut.finish_reason, cut.completion_tokens) == ("length", 3)
        assert whole.finish_reason == "stop" and whole.completion_tokens < 64
        assert [c.finish_reason for c in trace.llm_calls] == ["length", "stop"]
    remote.close()


def test_a_backend_with_only_the_two_verbs_gets_the_default_and_the_estimate():
    class TwoVerbs:  # a backend written elsewhere, before context sizes existed
        identity = {"backend": "two-verbs"}

        def generate(self, prompts, *, max_tokens, temperature=0.0, stop=()):
            return []

        def choice_logprobs(self, prompts, choices):
            return []

        def close(self):
            pass

    llm = LLM(TwoVerbs())
    assert llm.context_size == 4096 and "reports no context size" in llm.context_size_source
    assert llm.token_counting.startswith("estimated") and "no tokenizer" in llm.token_counting
    assert llm.count_tokens("abcdef") == 2


def test_the_service_cache_only_twin_counts_like_the_real_model(llama_backend, tmp_path):
    from winnow.llm import CallCache
    from winnow.service.cache_only import cache_only

    real = LLM(llama_backend, CallCache(tmp_path / "calls.sqlite"))
    twin = cache_only(real)
    assert (twin.context_size, twin.token_counting) == (real.context_size, real.token_counting)
    assert twin.count_prompt_tokens(PREFILLED) == real.count_prompt_tokens(PREFILLED)
    twin.close()


def test_an_openai_backend_asks_its_server_only_when_counting(tmp_path):
    from winnow.errors import BackendError

    llm = load_llm("m", backend="openai", base_url="http://127.0.0.1:9/v1", cache=False)
    with pytest.raises(BackendError, match=r"cannot reach http://127.0.0.1:9/props"):
        llm.context_size
    llm.close()
