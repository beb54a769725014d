"""Replicas of `winnow serve` over one shared store (``--store redis://…``): the call cache and the traces.

Each test module run starts its own Redis (Debian's redis-server, `make test` installs it as root) on a
free loopback port in a temporary folder, with nothing saved to disk; without the binary the tests are
skipped, saying why. The two-replica test runs two real `winnow serve` processes against one
OpenAI-compatible server on 127.0.0.1 (tests/fakes.py's ScriptedServer, which counts the calls it gets)
and asks them in turn, as a round-robin load balancer would.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

pytest.importorskip("fastapi")
redis = pytest.importorskip("redis")

import httpx  # noqa: E402
from fakes import ScriptedServer  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402
from service_server import build_small_index  # noqa: E402

from winnow.errors import WinnowError  # noqa: E402
from winnow.llm.cache import CORRUPT, UNVERIFIED, entry_checksum  # noqa: E402
from winnow.llm.redis_cache import RedisCallCache  # noqa: E402
from winnow.pipeline import Pipeline, RunSpec  # noqa: E402
from winnow.service import Service  # noqa: E402
from winnow.service.app import create_app  # noqa: E402
from winnow.service.traces import RedisTraces  # noqa: E402
from winnow.shared_store import open_redis  # noqa: E402

REDIS_SERVER = shutil.which("redis-server")
QUESTION = {"question": "Who wrote Hamlet?", "method": "vanilla"}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory) -> Iterator[str]:
    """A redis-server of this module's own, on loopback, saving nothing."""
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed: `sudo apt-get install redis-server` (make test installs it)")
    folder = tmp_path_factory.mktemp("redis")
    port = _free_port()
    process = subprocess.Popen([REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder),
                                "--save", "", "--appendonly", "no", "--protected-mode", "yes"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis.from_url(url).ping()
                break
            except redis.ConnectionError:
                assert process.poll() is None and time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.02)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture
def store(redis_url) -> str:
    """The module's Redis, emptied for this test."""
    redis.Redis.from_url(redis_url).flushdb()
    return redis_url


def test_a_cache_entry_in_the_store_keeps_its_checksum_and_a_bad_one_is_dropped(store):
    cache, raw = RedisCallCache(store), redis.Redis.from_url(store)
    answer = {"text": "Shakespeare", "prompt_tokens": 7, "completion_tokens": 3, "seconds": 0.1}
    cache.put("k1", "generate", answer)
    assert cache.lookup("k1") == (answer, "") and cache.lookup("absent") == (None, "")
    stored = raw.hgetall(RedisCallCache.key("k1"))
    assert stored[b"checksum"].decode() == entry_checksum("k1", "generate", stored[b"response"])
    raw.hset(RedisCallCache.key("k1"), "response", stored[b"response"].replace(b"Shakespeare", b"Marlowe"))
    assert cache.lookup("k1") == (None, CORRUPT) and not raw.exists(RedisCallCache.key("k1"))  # never served
    cache.put("k2", "generate", answer)
    raw.hdel(RedisCallCache.key("k2"), "checksum")
    assert cache.lookup("k2") == (None, UNVERIFIED) and not raw.exists(RedisCallCache.key("k2"))
    assert cache.errors() == 0


def test_a_tampered_entry_is_asked_again_and_counted_as_cache_rejected(store, index, tmp_path):
    server = ScriptedServer(delay=0.0)
    pipeline = Pipeline(RunSpec(method="vanilla", model="m", backend="openai", base_url=server.url,
                                settings={"k": 2, "n": 4}), index.path, cache=store)
    service = Service(pipeline, answer_capacity=0)
    raw = redis.Redis.from_url(store)
    try:
        with TestClient(create_app(service), base_url="http://127.0.0.1") as client:
            first = client.post("/v1/ask", json=QUESTION).json()
            calls = server.requests
            for key in raw.scan_iter("winnow:call:*"):
                raw.hset(key, "response", raw.hget(key, "response") + b" ")
            again = client.post("/v1/ask", json=QUESTION).json()
            metrics = client.get("/metrics").text
    finally:
        service.close()
        server.stop()
    assert first["served_from"] == "llm" and calls >= 1
    # Never served: dropped by the cache-only twin that met it first, the model asked again, and counted.
    assert again["served_from"] == "llm" and server.requests == 2 * calls and again["answer"] == first["answer"]
    assert f'winnow_llm_cache_rejected_total{{why="corrupt"}} {float(calls)}' in metrics


def test_traces_in_the_store_are_the_last_capacity_ones(store):
    traces = RedisTraces(store, capacity=3)
    for i in range(5):
        traces.put(f"t{i}", {"trace_id": f"t{i}", "created": 1000.0 + i, "status": "accepted"})
    traces.put("t4", {"trace_id": "t4", "created": 1004.0, "status": "done"})  # an update keeps its place
    assert len(traces) == 3 and traces.get("t0") is None and traces.get("t1") is None
    assert traces.get("t4") == {"trace_id": "t4", "created": 1004.0, "status": "done"}
    assert not redis.Redis.from_url(store).exists(RedisTraces.key("t0"))  # trimmed records are deleted too


def test_a_bad_store_url_or_an_unreachable_store_is_one_line_without_the_password():
    with pytest.raises(WinnowError, match=r"--store 'http://x' is not a store URL.*redis://HOST:PORT/DB"):
        open_redis("http://x")
    with pytest.raises(WinnowError, match=r"cannot reach the store redis://:\*\*\*@127\.0\.0\.1:\d+/0") as refused:
        open_redis(f"redis://:hunter2@127.0.0.1:{_free_port()}/0")
    assert "hunter2" not in str(refused.value)


@contextmanager
def replicas(count: int, index_dir: Path, folder: Path, llm_url: str, store_url: str) -> Iterator[list[str]]:
    """``count`` `winnow serve` processes over ``index_dir``, started together, each with its own local
    cache folder; their base URLs."""
    processes, logs = [], []
    for i in range(count):
        env = dict(os.environ, WINNOW_CACHE_DIR=str(folder / f"home{i}"))
        processes.append(subprocess.Popen([sys.executable, "-m", "winnow.cli", "serve", "--index", str(index_dir),
                                           "--backend", "openai", "--base-url", llm_url, "--model", "m", "--method",
                                           "vanilla", "--port", "0", "--store", store_url],
                                          env=env, stderr=subprocess.PIPE, text=True))
        logs.append(log := [])
        threading.Thread(target=log.extend, args=(processes[-1].stderr,), daemon=True).start()
    try:
        bases, deadline = [], time.monotonic() + 60
        for process, log in zip(processes, logs, strict=True):
            while not (found := re.search(r"listening on (http://[^/\s]+)/", "".join(log))):
                assert process.poll() is None and time.monotonic() < deadline, "".join(log)
                time.sleep(0.05)
            assert "call cache and traces in redis://127.0.0.1" in "".join(log)
            bases.append(found.group(1))
        yield bases
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=30)


@pytest.mark.subprocess
def test_two_replicas_over_one_store_pay_a_question_once_and_open_each_others_traces(store, tmp_path):
    index_dir = build_small_index(tmp_path)
    server = ScriptedServer(delay=0.0)
    questions = [dict(QUESTION, question=q) for q in ("Who wrote Hamlet?", "What is the capital of France?")]
    try:
        with replicas(2, index_dir, tmp_path, server.url, store) as bases:
            answers, calls = [], []
            # Round robin over the replicas: each question asked twice lands once on each.
            for turn, body in enumerate([questions[0], questions[0], questions[1], questions[1]]):
                answers.append(httpx.post(f"{bases[turn % 2]}/v1/ask", json=body, timeout=30).json())
                calls.append(server.requests)
            traces = {(answer["trace_id"], base): httpx.get(f"{base}/v1/traces/{answer['trace_id']}", timeout=10)
                      for answer in answers for base in bases}
    finally:
        server.stop()
    assert [a["served_from"] for a in answers] == ["llm", "call-cache", "llm", "call-cache"]
    # The second asking of each question, on the other replica, cost no LLM call at the server.
    assert calls[0] >= 1 and calls[1] == calls[0] and calls[3] == calls[2] > calls[1]
    assert answers[0]["answer"] == answers[1]["answer"] and answers[2]["answer"] == answers[3]["answer"]
    assert len(traces) == 8 and all(r.status_code == 200 and r.json()["status"] == "done" for r in traces.values())
    assert {r.json()["trace_id"] for r in traces.values()} == {a["trace_id"] for a in answers}
