"""A faulty OpenAI-compatible server on 127.0.0.1 for the fault tests (tests/test_llm_faults.py).

It answers like vLLM (chat completions with log-probabilities, ``/tokenize`` and ``/detokenize`` with
one token per UTF-8 byte, so counts are exact and easy to check), and can be told to misbehave in
the ways a real cluster does: answer 500 to everything (``dead``), hang on requests whose prompt
holds a word (``hang_word``), garble one answer in ``garble_every`` (valid JSON without ``choices``,
or a body that is not JSON), answer its first requests 429 with a ``Retry-After`` (``storm``), answer
its first ``/tokenize`` requests 503 (``tokenize_failures``), refuse prompts holding a word with a
400 (``refuse_word``), or answer a scoring call with top log-probabilities that hold none of the
choices asked for (``missing_choices``: "Maybe", "The", …, no "True" or "False"). Answers are a pure function of
the prompt, so a faulty run's answers can be compared with a healthy run's.
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FaultServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, *, dead: bool = False, hang_word: str = "", garble_every: int = 0, storm: int = 0,
                 retry_after: str = "0", tokenize_failures: int = 0, refuse_word: str = "",
                 missing_choices: bool = False) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.dead, self.hang_word, self.garble_every = dead, hang_word, garble_every
        self.storm, self.retry_after, self.tokenize_failures = storm, retry_after, tokenize_failures
        self.refuse_word = refuse_word  # a prompt holding it is refused with a 400 (the request's fault)
        self.missing_choices = missing_choices  # scoring answers whose top tokens hold no choice
        self.lock = threading.Lock()
        self.released = threading.Event()  # set on stop: a hung handler returns
        self.completions = self.tokenizes = self.garbled = self.refused = self.hung = 0
        self.seen_headers: dict[str, str] = {}  # the last POST's headers, names lower-cased
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def stop(self) -> None:
        self.released.set()
        self.shutdown()
        self.server_close()


def _text_of(body: dict[str, Any]) -> str:
    if "prompt" in body:
        return str(body["prompt"])
    return "\n".join(str(m.get("content", "")) for m in body.get("messages", []))


class _Handler(BaseHTTPRequestHandler):
    server: FaultServer
    protocol_version = "HTTP/1.1"  # keep-alive, as real servers do

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._send(200, {"data": [{"id": "m", "max_model_len": 4096}]})
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        server = self.server
        server.seen_headers = {name.lower(): value for name, value in self.headers.items()}
        if server.dead:
            self._send(500, {"error": {"message": "internal error"}})
        elif self.path == "/tokenize":
            with server.lock:
                server.tokenizes += 1
                failing = server.tokenize_failures > 0
                server.tokenize_failures -= failing
            if failing:
                self._send(503, {"error": "loading"})
                return
            tokens = list(_text_of(body).encode())
            self._send(200, {"tokens": tokens, "count": len(tokens), "max_model_len": 4096})
        elif self.path == "/detokenize":
            self._send(200, {"prompt": bytes(body["tokens"]).decode("utf-8", "replace")})
        elif self.path.endswith("/completions"):
            self._complete(body)
        else:
            self._send(404, {"error": "not found"})

    def _complete(self, body: dict[str, Any]) -> None:
        server = self.server
        text = _text_of(body)
        with server.lock:
            server.completions += 1
            n = server.completions
            storming = server.storm > 0
            server.storm -= storming
            garble = bool(server.garble_every) and n % server.garble_every == 0
            server.garbled += garble
            server.refused += storming
            hang = bool(server.hang_word) and server.hang_word in text
            server.hung += hang
        if server.refuse_word and server.refuse_word in text:
            self._send(400, {"error": {"message": "this prompt is refused"}})
        elif storming:
            self._send(429, {"error": {"message": "too many requests"}}, {"Retry-After": server.retry_after})
        elif hang and not server.released.wait(30):  # until the test ends: the client's timeout gives up first
            return
        elif garble and not hang:
            if n % (2 * server.garble_every) == 0:
                self._raw(200, b"<html>upstream hiccup</html>")
            else:
                self._send(200, {"id": "x", "object": "chat.completion"})  # JSON, but no choices
        else:
            self._send(200, self._answer(body, text))

    def _answer(self, body: dict[str, Any], text: str) -> dict[str, Any]:
        digest = hashlib.sha256(text.encode()).digest()
        prompt_tokens = len(text.encode())
        if body.get("logprobs"):
            yes = -0.05 - digest[0] / 100  # a score that depends on the prompt, so rankings are real
            top = [{"token": "True", "logprob": yes}, {"token": "False", "logprob": -2.0}]
            if self.server.missing_choices:
                top = [{"token": "Maybe", "logprob": yes}, {"token": "The", "logprob": -2.0},
                       {"token": "I", "logprob": -3.5}]
            said = top[0]["token"]
            choice = {"index": 0, "finish_reason": "length", "message": {"role": "assistant", "content": said},
                      "logprobs": {"content": [{"token": said, "logprob": yes, "top_logprobs": top}]}}
            return {"choices": [choice], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 1}}
        answer = f"answer {digest.hex()[:6]}"
        choice = {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": answer}}
        return {"choices": [choice], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 2}}

    def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        self._raw(status, json.dumps(payload).encode(), headers)

    def _raw(self, status: int, data: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
