"""Load check for `winnow serve` (not a test: it prints figures) on 127.0.0.1 with smollm2-135m.

Starts a real server (one llama.cpp thread, a fresh call cache, the eight-passage test corpus),
then runs four bounded phases at a fixed concurrency, each a list of requests fed to that many
concurrent clients:

1. cold rerank: distinct /v1/rerank requests (pointwise P("True"), 3 documents each): every call
   goes through the one worker queue to the model;
2. cold ask: distinct /v1/ask requests (rankrag, N=3, k=1, 8 answer tokens): the model again;
3. warm, answer cache: ``--requests`` repeats of phases 1 and 2, mixed (the same requests again);
4. warm, call cache: ``--requests`` new /v1/rerank requests (reordered subsets of phase 1's
   documents) that the model has scored before, answered without the queue.

For each phase: throughput, p50/p95/p99 latency, errors, and mix-ups. Nothing may be lost or
mixed up: every response must be 200 and match its own request (the echoed question; the
document ids, which name their request; every document once, scores descending), and a warm
response must give the same scores and answer as the cold one for the same query.

Usage: .venv/bin/python bench/bench_service.py [--requests 500] [--concurrency 16]
       [--cold-rerank 36] [--cold-ask 16] [--url http://127.0.0.1:PORT]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import math
import random
import sys
import tempfile
import time
from collections import Counter
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from service_server import build_small_index, running_server  # noqa: E402
from small_corpus import PASSAGES  # noqa: E402

CORPUS = {p["id"]: p for p in PASSAGES}
ASK_SETTINGS = {"method": "rankrag", "n": 3, "k": 1, "options": {"max_answer_tokens": 8}}
PHRASINGS = ["What do you know about {}?", "Tell me one fact about {}.", "Why is {} famous?",
             "Where would I read about {}?"]

Check = Callable[[dict[str, Any]], str]  # a response body -> "" if it matches its request, else why not


@dataclass
class Phase:
    name: str
    requests: list[tuple[str, dict[str, Any], Check]]  # (path, body, check)
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    mixups: list[str] = field(default_factory=list)
    served: Counter = field(default_factory=Counter)
    wall: float = 0.0


# ---- the requests and how each response must look ----------------------------------------------

def rerank_request(i: int) -> dict[str, Any]:
    """Query i over three corpus passages; the document ids name the request (q{i}-...)."""
    chosen = [PASSAGES[(i + step) % len(PASSAGES)] for step in (0, 3, 5)]
    topic = PASSAGES[(i * 3) % len(PASSAGES)]["title"]
    return {"query": f"Request {i}: which passage is about {topic}?", "return_documents": True,
            "documents": [{"id": f"q{i}-{p['id']}", "text": p["text"]} for p in chosen]}


def check_rerank(body: dict[str, Any], reference: dict[str, dict[str, float]] | None = None) -> Check:
    """The response has exactly this request's documents, each once, scores descending; with a
    reference (query -> doc id -> score from the cold phase), the same scores."""
    sent = {i: doc["id"] for i, doc in enumerate(body["documents"])}

    def check(got: dict[str, Any]) -> str:
        results = got["results"]
        if sorted(r["index"] for r in results) != sorted(sent):
            return f"indices {[r['index'] for r in results]} for {len(sent)} documents"
        for r in results:
            if r["document"]["id"] != sent[r["index"]]:
                return f"document {r['document']['id']} at index {r['index']}, sent {sent[r['index']]}"
        scores = [r["relevance_score"] for r in results]
        if scores != sorted(scores, reverse=True):
            return f"scores not descending: {scores}"
        if reference is not None:
            expected = reference[body["query"]]
            if any(expected[r["document"]["id"]] != r["relevance_score"] for r in results):
                return "scores differ from the cold run's"
        return ""
    return check


def ask_request(i: int) -> dict[str, Any]:
    passage = PASSAGES[i % len(PASSAGES)]
    return {"question": PHRASINGS[(i // len(PASSAGES)) % len(PHRASINGS)].format(passage["title"]), **ASK_SETTINGS}


def check_ask(body: dict[str, Any], reference: dict[str, dict[str, Any]] | None = None) -> Check:
    def check(got: dict[str, Any]) -> str:
        if got["question"] != body["question"]:
            return f"asked {body['question']!r}, answered {got['question']!r}"
        if (got["settings"]["n"], got["settings"]["k"]) != (body["n"], body["k"]):
            return f"settings {got['settings']}"
        if not got["passages"] or any(p["id"] not in CORPUS or p["text"] != CORPUS[p["id"]]["text"]
                                      for p in got["passages"]):
            return f"passages {[p['id'] for p in got['passages']]}"
        if reference is not None:
            cold = reference[body["question"]]
            if (got["answer"], got["passages"]) != (cold["answer"], cold["passages"]):
                return "answer or passages differ from the cold run's"
        return ""
    return check


def reordered_subsets(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Every ordering of every non-empty subset of the documents but the original: new requests
    (new answer-cache keys) whose every P("True") is already in the call cache."""
    documents = body["documents"]
    out = []
    for size in range(1, len(documents) + 1):
        for chosen in itertools.permutations(documents, size):
            if list(chosen) != documents:
                out.append(dict(body, documents=list(chosen)))
    return out


# ---- running a phase ----------------------------------------------------------------------------

async def run_phase(client: httpx.AsyncClient, phase: Phase, concurrency: int) -> list[dict[str, Any]]:
    """Send the phase's requests from ``concurrency`` clients; returns the bodies in request order."""
    bodies: list[dict[str, Any]] = [{} for _ in phase.requests]
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(len(phase.requests)):
        queue.put_nowait(i)

    async def client_loop() -> None:
        while not queue.empty():
            i = queue.get_nowait()
            path, body, check = phase.requests[i]
            started = time.perf_counter()
            try:
                response = await client.post(path, json=body)
            except httpx.HTTPError as exc:
                phase.errors.append(f"{path}: {type(exc).__name__}: {exc}")
                continue
            phase.latencies.append(time.perf_counter() - started)
            if response.status_code != 200:
                phase.errors.append(f"{path}: {response.status_code} {response.text[:200]}")
                continue
            got = response.json()
            phase.served[got.get("served_from", "?")] += 1
            problem = check(got)
            if problem:
                phase.mixups.append(f"{path} request {i}: {problem}")
            bodies[i] = got

    started = time.perf_counter()
    await asyncio.gather(*(client_loop() for _ in range(concurrency)))
    phase.wall = time.perf_counter() - started
    return bodies


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def report(phases: list[Phase], concurrency: int) -> None:
    print("\n| phase | requests | concurrency | wall s | req/s | p50 ms | p95 ms | p99 ms | errors | mix-ups "
          "| served from |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for p in phases:
        ms = [x * 1000 for x in p.latencies] or [float("nan")]
        served = ", ".join(f"{k} {v}" for k, v in sorted(p.served.items()))
        print(f"| {p.name} | {len(p.requests)} | {concurrency} | {p.wall:.1f} | {len(p.requests) / p.wall:.1f} "
              f"| {percentile(ms, 50):.0f} | {percentile(ms, 95):.0f} | {percentile(ms, 99):.0f} | {len(p.errors)} "
              f"| {len(p.mixups)} | {served} |")
    for p in phases:
        for problem in (p.errors + p.mixups)[:5]:
            print(f"  {p.name}: {problem}")


async def bench(base: str, args: argparse.Namespace) -> int:
    rng = random.Random(0)
    reranks = [rerank_request(i) for i in range(args.cold_rerank)]
    asks = [ask_request(i) for i in range(args.cold_ask)]
    limits = httpx.Limits(max_connections=args.concurrency, max_keepalive_connections=args.concurrency)
    async with httpx.AsyncClient(base_url=base, timeout=600, limits=limits) as client:
        cold_rerank = Phase("cold rerank (model)", [("/v1/rerank", b, check_rerank(b)) for b in reranks])
        scored = await run_phase(client, cold_rerank, args.concurrency)
        reference = {b["query"]: {r["document"]["id"]: r["relevance_score"] for r in got.get("results", [])}
                     for b, got in zip(reranks, scored)}
        cold_ask = Phase("cold ask (model)", [("/v1/ask", b, check_ask(b)) for b in asks])
        answered = await run_phase(client, cold_ask, args.concurrency)
        answers = {b["question"]: got for b, got in zip(asks, answered)}

        repeats = [("/v1/rerank", b, check_rerank(b, reference)) for b in reranks]
        repeats += [("/v1/ask", b, check_ask(b, answers)) for b in asks]
        warm = Phase("warm rerank + ask (answer cache)", [rng.choice(repeats) for _ in range(args.requests)])
        await run_phase(client, warm, args.concurrency)

        fresh = [b for body in reranks for b in reordered_subsets(body)]
        rng.shuffle(fresh)
        calls = Phase("warm rerank, new requests (call cache)",
                      [("/v1/rerank", b, check_rerank(b, reference)) for b in fresh[:args.requests]])
        await run_phase(client, calls, args.concurrency)
        queue = (await client.get("/healthz")).json()["queue"]

    phases = [cold_rerank, cold_ask, warm, calls]
    report(phases, args.concurrency)
    print(f"\nworker queue at the end: {queue}")
    lost = sum(len(p.requests) - len(p.latencies) for p in phases)
    bad = sum(len(p.errors) + len(p.mixups) for p in phases)
    print(f"lost (no response): {lost}; errors + mix-ups: {bad}")
    return 1 if lost or bad else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=500, help="Requests in each warm phase.")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--cold-rerank", type=int, default=36, help="Distinct rerank requests (3 documents each).")
    parser.add_argument("--cold-ask", type=int, default=16, help="Distinct ask requests.")
    parser.add_argument("--url", help="An already running, freshly started server (default: start one).")
    args = parser.parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        if args.url:
            server = nullcontext(args.url.rstrip("/"))
        else:
            server = running_server(build_small_index(Path(tmp)), Path(tmp) / "cache")
        with server as base:
            print(f"server {base}: smollm2-135m, 1 llama.cpp thread, eight-passage corpus, fresh call cache")
            code = asyncio.run(bench(base, args))
    print(f"total {time.perf_counter() - started:.0f} s")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
