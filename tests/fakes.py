"""Fakes shared by test modules: servers that answer as a real one would, for the failures and timings
a real model cannot be made to produce on demand (the project's rule: real parts, fakes only where a
failure cannot be produced for real).

``ScriptedServer`` answers OpenAI-shaped chat completions after a delay, counts the requests it has
in flight at once, and can be told to fail its first requests (429, 503, a dropped connection) or to
leave out log-probabilities. With ``ranking=True`` it answers a listwise (RankGPT) prompt as a ranking
model would: the window's passages ordered by a hash of their text, so windows reorder their passages
and a question's final order depends on every window before it.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ScriptedServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, delay: float = 0.05, failures: list[str] | None = None, logprobs: bool = True,
                 ranking: bool = False) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.delay = delay
        self.failures = list(failures or [])  # "429", "503" or "drop", for the next requests in turn
        self.retry_after = ""  # a Retry-After header sent with each scripted failure, when set
        self.logprobs = logprobs
        self.ranking = ranking
        self.slow_word = ""  # a prompt containing it takes slow_factor times longer
        self.slow_factor = 10
        self.max_model_len = 0  # when set, GET /v1/models reports it, as vLLM does
        self.models_root = ""  # when set, GET /v1/models names it as model m's root (vLLM: the folder it loaded)
        self.lock = threading.Lock()
        self.inflight = self.max_inflight = self.requests = 0
        self.finished: list[str] = []  # prompts in the order their answers were sent
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


_PASSAGE = re.compile(r"\[[0-9]+\] ")


class _Handler(BaseHTTPRequestHandler):
    server: ScriptedServer

    def log_message(self, *args) -> None:  # keep the test output clean
        pass

    def do_GET(self) -> None:
        if self.path == "/v1/models" and (self.server.max_model_len or self.server.models_root):
            entry = {"id": "m", **({"max_model_len": self.server.max_model_len} if self.server.max_model_len else {}),
                     **({"root": self.server.models_root} if self.server.models_root else {})}
            self._send(200, {"data": [entry]})
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self) -> None:
        if not self.path.endswith("/chat/completions"):  # no /tokenize: Winnow estimates tokens
            self._send(404, {"error": "not found"})
            return
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        server = self.server
        with server.lock:
            server.requests += 1
            failure = server.failures.pop(0) if server.failures else ""
            server.inflight += 1
            server.max_inflight = max(server.max_inflight, server.inflight)
        prompt = body["messages"][-1]["content"]
        time.sleep(server.delay * (server.slow_factor if server.slow_word and server.slow_word in prompt else 1))
        # Counted out before the answer is written: the client may send its next request the
        # moment it reads this one, and that must not look like one more in flight.
        with server.lock:
            server.inflight -= 1
            server.finished.append(prompt)
        if failure == "drop":  # close the connection without an answer
            self.close_connection = True
            self.connection.shutdown(2)
            return
        if failure:
            headers = {"Retry-After": server.retry_after} if server.retry_after else {}
            self._send(int(failure), {"error": {"message": "busy"}}, headers)
            return
        self._send(200, self._answer(body, prompt))

    def _answer(self, body: dict, prompt: str) -> dict:
        text = f"re: {prompt}"
        if self.server.ranking and "passages above" in prompt:
            passages = [m["content"] for m in body["messages"] if m["role"] == "user" and _PASSAGE.match(m["content"])]
            order = sorted(range(len(passages)), key=lambda i: hashlib.sha256(passages[i].split("] ", 1)[-1].encode())
                           .hexdigest())
            text = " > ".join(f"[{i + 1}]" for i in order)
        choice: dict = {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
        if body.get("logprobs") and self.server.logprobs:
            top = [{"token": "True", "logprob": -0.2}, {"token": "False", "logprob": -1.7}]
            choice["logprobs"] = {"content": [{"token": "True", "logprob": -0.2, "top_logprobs": top}]}
        return {"choices": [choice], "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}}

    def _send(self, status: int, payload: dict, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
