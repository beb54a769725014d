"""An OpenAI-compatible load-test server that models a GPU inference server (for bench_cluster.py).

It holds ``--capacity`` C sequences at once; a call beyond C waits in a queue for a free slot, as
in vLLM's continuous batching when the KV cache is full. A call in a slot takes

    base latency + prompt tokens / prefill rate + completion tokens / decode rate

seconds (rates as flags; tokens estimated at 4 characters each), then answers a well-formed chat
completion: a short text for generations, and for ``logprobs`` requests ``top_logprobs`` over
"True"/"False", "Yes"/"No" and the digits 1-5, so that every Winnow method can score with it. The
scores are a function of the prompt (deterministic), so rankings differ from passage to passage. A
listwise (RankGPT) prompt is answered with a ranking, its passages ordered by a hash of their text,
so windows reorder their passages as a ranking model's would. ``POST /v1/responses`` (OpenAI's
Responses API, which rank_llm's ``SafeOpenai`` calls; bench/bench_rank_llm.py) answers the same way:
its ``input`` is read as the chat's ``messages``, its text comes back as one ``output_text`` item.

``GET /stats`` reports calls, busy slot-seconds (the sum over calls of their time in a slot), the
span from the first slot taken to the last released, and the most calls in slots and in queue at
once; ``POST /stats/reset`` zeroes them. Utilisation over a span is busy / (C x span).
``GET /stats?bins=0.5`` adds ``occupancy``: the share of the C slots busy in each half second
from the first slot taken (where a run loses its slots: the start, a dip, the end).

Usage: python bench/loadtest_server.py --port 8100 --capacity 64 [--base-latency 0.4]
       [--prefill-rate 4000] [--decode-rate 40] [--rank-key text|alnum]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import math
import re
import time
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

CHARS_PER_TOKEN = 4
ANSWER = "The answer is in the passages above"
CHOICE_TOKENS = ("True", "False", "Yes", "No", "1", "2", "3", "4", "5")


class GpuModel:
    """C slots, a queue, and the time a call spends in a slot."""

    def __init__(self, capacity: int, base_latency: float, prefill_rate: float, decode_rate: float) -> None:
        self.capacity = capacity
        self.base_latency, self.prefill_rate, self.decode_rate = base_latency, prefill_rate, decode_rate
        self.slots = asyncio.Semaphore(capacity)
        self.reset()

    def reset(self) -> None:
        self.calls = 0
        self.busy = 0.0
        self.first_start: float | None = None
        self.last_end = 0.0
        self.in_slots = self.max_in_slots = 0
        self.waiting = self.max_waiting = 0
        self.intervals: list[tuple[float, float]] = []  # (slot taken, slot released) of every call

    def seconds(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (self.base_latency + prompt_tokens / self.prefill_rate + completion_tokens / self.decode_rate)

    async def run(self, prompt_tokens: int, completion_tokens: int) -> None:
        self.waiting += 1
        self.max_waiting = max(self.max_waiting, self.waiting)
        async with self.slots:
            self.waiting -= 1
            started = time.perf_counter()
            if self.first_start is None:
                self.first_start = started
            self.in_slots += 1
            self.max_in_slots = max(self.max_in_slots, self.in_slots)
            try:
                await asyncio.sleep(self.seconds(prompt_tokens, completion_tokens))
            finally:
                self.in_slots -= 1
                ended = time.perf_counter()
                self.busy += ended - started
                self.last_end = max(self.last_end, ended)
                self.calls += 1
                self.intervals.append((started, ended))

    def occupancy(self, width: float) -> list[float]:
        """The share of the slots busy in each ``width``-second bin from the first slot taken."""
        if self.first_start is None or width <= 0:
            return []
        origin = self.first_start
        busy = [0.0] * (int((self.last_end - origin) / width) + 1)
        for started, ended in self.intervals:
            first, last = int((started - origin) / width), int((ended - origin) / width)
            for b in range(first, last + 1):
                low, high = origin + b * width, origin + (b + 1) * width
                busy[b] += max(0.0, min(ended, high) - max(started, low))
        return [round(seconds / (self.capacity * width), 3) for seconds in busy]

    def stats(self) -> dict[str, Any]:
        span = (self.last_end - self.first_start) if self.first_start is not None else 0.0
        return {"capacity": self.capacity, "calls": self.calls, "busy_slot_seconds": round(self.busy, 3),
                "span_seconds": round(span, 3), "max_in_slots": self.max_in_slots, "max_waiting": self.max_waiting,
                "utilisation": round(self.busy / (self.capacity * span), 4) if span else 0.0,
                # time.perf_counter is the system's monotonic clock on Linux, so a client on the same
                # machine can place the span within its own run (time before the first call, after the last)
                "first_start": self.first_start, "last_end": self.last_end}


def _tokens(text: str) -> int:
    return max(1, len(text) // CHARS_PER_TOKEN)


def _choice_logprobs(prompt: str) -> list[dict[str, Any]]:
    """A deterministic, prompt-dependent distribution over the choice tokens (log-probabilities)."""
    digest = hashlib.sha256(prompt.encode()).digest()
    weights = [1 + digest[i] for i in range(len(CHOICE_TOKENS))]
    total = sum(weights)
    entries = [{"token": token, "logprob": math.log(w / total)} for token, w in zip(CHOICE_TOKENS, weights)]
    return sorted(entries, key=lambda e: -e["logprob"])


#: What a passage's hash is taken over: its text as sent ("text"), or only its ASCII letters and digits
#: ("alnum": two clients that clean text differently, e.g. rank_llm's ftfy turning ’ into ', still get
#: the same ranking for the same passage; bench/bench_rank_llm.py).
RANK_KEYS = {"text": lambda text: text, "alnum": lambda text: re.sub(r"[^0-9A-Za-z]+", "", text)}


def _ranking(messages: list[dict[str, Any]], key: str = "text") -> str | None:
    """"[3] > [1] > …" for a listwise prompt (its passages are user turns "[n] text"), else None."""
    if not messages or "passages above" not in str(messages[-1].get("content", "")):
        return None
    passages = [str(m.get("content", "")) for m in messages
                if m.get("role") == "user" and str(m.get("content", "")).startswith("[")]
    keyed = RANK_KEYS[key]
    order = sorted(range(len(passages)),
                   key=lambda i: hashlib.sha256(keyed(passages[i].split("] ", 1)[-1]).encode()).hexdigest())
    return " > ".join(f"[{i + 1}]" for i in order)


def make_app(model: GpuModel, rank_key: str = "text") -> Starlette:
    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        prompt = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
        prompt_tokens = _tokens(prompt)
        wants_scores = bool(body.get("logprobs"))
        max_tokens = int(body.get("max_tokens") or 16)
        ranking = None if wants_scores else _ranking(body.get("messages", []), rank_key)
        completion_tokens = 1 if wants_scores else min(max_tokens, _tokens(ranking or ANSWER))
        await model.run(prompt_tokens, completion_tokens)
        choice: dict[str, Any] = {"index": 0, "finish_reason": "stop"}
        if wants_scores:
            top = _choice_logprobs(prompt)
            choice["message"] = {"role": "assistant", "content": top[0]["token"]}
            choice["logprobs"] = {"content": [{**top[0], "top_logprobs": top}]}
        elif ranking is not None:
            choice["message"] = {"role": "assistant", "content": ranking}
        else:
            words = ANSWER.split()[:max(1, completion_tokens)]
            choice["message"] = {"role": "assistant", "content": " ".join(words)}
        return JSONResponse({"id": "loadtest", "object": "chat.completion", "model": body.get("model", ""),
                             "choices": [choice],
                             "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                                       "total_tokens": prompt_tokens + completion_tokens}})

    async def responses(request: Request) -> JSONResponse:
        body = await request.json()
        given = body.get("input", "")
        messages = given if isinstance(given, list) else [{"role": "user", "content": str(given)}]
        prompt_tokens = _tokens("\n".join(str(m.get("content", "")) for m in messages))
        text = _ranking(messages, rank_key) or ANSWER
        completion_tokens = min(int(body.get("max_output_tokens") or 10_000), _tokens(text))
        await model.run(prompt_tokens, completion_tokens)
        item = {"id": "msg_loadtest", "type": "message", "status": "completed", "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}]}
        return JSONResponse({"id": "resp_loadtest", "object": "response", "created_at": int(time.time()),
                             "status": "completed", "model": body.get("model", ""), "output": [item],
                             "usage": {"input_tokens": prompt_tokens, "output_tokens": completion_tokens,
                                       "total_tokens": prompt_tokens + completion_tokens}})

    async def stats(request: Request) -> JSONResponse:
        found = model.stats()
        if "bins" in request.query_params:
            found["occupancy"] = model.occupancy(float(request.query_params["bins"]))
        return JSONResponse(found)

    async def reset(request: Request) -> JSONResponse:
        model.reset()
        return JSONResponse({"reset": True})

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]),
                             Route("/v1/responses", responses, methods=["POST"]),
                             Route("/stats", stats, methods=["GET"]),
                             Route("/stats/reset", reset, methods=["POST"])])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument("--capacity", type=int, default=64, help="concurrent sequences C")
    parser.add_argument("--base-latency", type=float, default=0.4, help="seconds per call")
    parser.add_argument("--prefill-rate", type=float, default=4000.0, help="prompt tokens per second per call")
    parser.add_argument("--decode-rate", type=float, default=40.0, help="completion tokens per second per call")
    parser.add_argument("--rank-key", choices=sorted(RANK_KEYS), default="text",
                        help="listwise answers: hash each passage's text as sent, or its ASCII letters and digits")
    args = parser.parse_args()
    model = GpuModel(args.capacity, args.base_latency, args.prefill_rate, args.decode_rate)
    uvicorn.run(make_app(model, args.rank_key), host=args.host, port=args.port, log_level="warning", backlog=4096)


if __name__ == "__main__":
    main()
