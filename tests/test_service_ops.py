"""What an operator reads from `winnow serve`: /metrics, /readyz, the JSON request log, and SIGTERM's drain.

In-process (Starlette's TestClient over the real app, Service and Pipeline) against an OpenAI-compatible
server on 127.0.0.1 (tests/fakes.py's ScriptedServer), except the SIGTERM test, which needs a real
`winnow serve` process to signal. /metrics is read back with prometheus_client's own text parser, as a
Prometheus server would read it.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("prometheus_client")

import httpx  # noqa: E402
from fakes import ScriptedServer  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402
from service_server import build_small_index  # noqa: E402

from winnow.evaluation.prices import read_prices  # noqa: E402
from winnow.llm.dispatch import RetryPolicy  # noqa: E402
from winnow.pipeline import Pipeline, RunSpec  # noqa: E402
from winnow.service import Limits, Service  # noqa: E402
from winnow.service.app import create_app  # noqa: E402
from winnow.service.lifecycle import Lifecycle  # noqa: E402

QUESTION = {"question": "Who wrote Hamlet?", "method": "vanilla"}


def scrape(client: TestClient, **headers: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """/metrics parsed by prometheus_client: {(sample name, sorted labels): value}."""
    response = client.get("/metrics", headers=headers)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(response.text) for sample in family.samples}


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
def llm_server():
    server = ScriptedServer(delay=0.0)
    yield server
    server.stop()


def _service(index, server, tmp_path, **options) -> Service:
    pipeline = Pipeline(RunSpec(method="vanilla", model="m", backend="openai", base_url=server.url,
                                settings={"k": 2, "n": 4}), index.path, cache=tmp_path / "calls.sqlite")
    return Service(pipeline, **options)


def test_metrics_count_requests_llm_calls_tokens_cost_and_cache_hits_by_model_and_role(index, llm_server, tmp_path):
    prices = tmp_path / "prices.toml"
    prices.write_text('[models."m"]\nprompt = 1.0\ncompletion = 2.0\n')
    # No answer cache: the second asking is answered from the call cache, its calls counted as hits.
    service = _service(index, llm_server, tmp_path, answer_capacity=0)
    with TestClient(create_app(service, prices=read_prices(prices)), base_url="http://127.0.0.1") as client:
        first = client.post("/v1/ask", json=QUESTION).json()
        second = client.post("/v1/ask", json=QUESTION).json()
        assert client.get("/v1/traces/nothing-here").status_code == 404
        samples = scrape(client)
    service.close()
    assert (first["served_from"], second["served_from"]) == ("llm", "call-cache")
    calls, prompt, completion = (first["usage"][k] for k in ("calls", "prompt_tokens", "completion_tokens"))
    assert calls == llm_server.requests >= 1 and second["usage"]["cache_hits"] == calls
    assert value(samples, "winnow_http_requests_total", route="/v1/ask", method="POST", status="200") == 2
    # The route's template, never the id: a scanner's paths add no series.
    assert value(samples, "winnow_http_requests_total", route="/v1/traces/{trace_id}", method="GET", status="404") == 1
    assert value(samples, "winnow_http_request_duration_seconds_count", route="/v1/ask", method="POST",
                 status="200") == 2
    role = {"model": "m", "role": "default"}
    assert value(samples, "winnow_llm_calls_total", **role) == calls
    assert value(samples, "winnow_llm_cache_hits_total", **role) == calls
    assert value(samples, "winnow_llm_tokens_total", type="prompt", **role) == prompt
    assert value(samples, "winnow_llm_tokens_total", type="completion", **role) == completion
    assert value(samples, "winnow_llm_cost_usd_total", **role) == pytest.approx((prompt * 1.0 + completion * 2.0) / 1e6)
    assert value(samples, "winnow_answers_total", kind="ask", served_from="llm") == 1
    assert value(samples, "winnow_answers_total", kind="ask", served_from="call-cache") == 1
    endpoint = llm_server.url
    assert value(samples, "winnow_llm_endpoint_up", endpoint=endpoint) == 1
    assert value(samples, "winnow_llm_endpoint_breaker_state", endpoint=endpoint) == 0
    assert value(samples, "winnow_questions_in_flight") == 0 and value(samples, "winnow_ready") == 1


def test_a_question_in_flight_is_counted_while_it_runs(index, tmp_path):
    server = ScriptedServer(delay=0.4)
    service = _service(index, server, tmp_path)
    try:
        with TestClient(create_app(service), base_url="http://127.0.0.1") as client:
            asking = threading.Thread(target=client.post, args=("/v1/ask",), kwargs={"json": QUESTION})
            asking.start()
            deadline = time.monotonic() + 10
            while server.inflight == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            during = scrape(client)
            asking.join()
            after = scrape(client)
    finally:
        service.close()
        server.stop()
    assert value(during, "winnow_questions_in_flight") == 1
    assert value(during, "winnow_llm_endpoint_inflight", endpoint=server.url) == 1
    assert value(after, "winnow_questions_in_flight") == 0


def test_readyz_is_503_while_starting_then_200_then_503_while_draining(index, llm_server, tmp_path):
    lifecycle = Lifecycle()
    app = create_app(None, limits=Limits(), lifecycle=lifecycle)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        starting = client.get("/readyz")
        assert starting.status_code == 503 and starting.json()["error"]["type"] == "starting"
        assert client.get("/healthz").json()["status"] == "starting"  # alive, not ready: a probe must not restart it
        refused = client.post("/v1/ask", json=QUESTION)
        assert refused.status_code == 503 and refused.json()["error"]["type"] == "starting"
        assert value(scrape(client), "winnow_ready") == 0
        service = _service(index, llm_server, tmp_path)
        lifecycle.opened(service)
        assert client.get("/readyz").json() == {"status": "ready"}
        assert client.post("/v1/ask", json=QUESTION).status_code == 200
        assert value(scrape(client), "winnow_answers_total", kind="ask", served_from="llm") == 1
        lifecycle.drain()
        draining = client.get("/readyz")
        assert draining.status_code == 503 and draining.json()["error"]["type"] == "draining"
    service.close()


def test_readyz_is_503_while_no_llm_endpoint_is_healthy(index, tmp_path):
    """An endpoint answering 503 to every call: its breaker opens after failures in a row, /readyz says
    so, and admits the replica again when the cool-down is over (the probe a request then makes decides)."""
    server = ScriptedServer(failures=["503"] * 20)
    service = _service(index, server, tmp_path, cache=False)
    dispatcher = service.pipeline.llm.backend.dispatcher
    dispatcher.retry = RetryPolicy(attempts=3, base_seconds=0.001, cap_seconds=0.001)
    with TestClient(create_app(service), base_url="http://127.0.0.1") as client:
        assert client.get("/readyz").status_code == 200  # no call has failed yet
        assert client.post("/v1/ask", json=QUESTION).status_code == 502
        unready = client.get("/readyz")
        samples = scrape(client)
        dispatcher.endpoints[0].breaker.open_until = time.monotonic()  # the cool-down is over
        again = client.get("/readyz")
    service.close()
    server.stop()
    assert unready.status_code == 503
    assert unready.json()["error"]["type"] == "no_healthy_endpoint" and server.url in unready.json()["error"]["message"]
    assert value(samples, "winnow_llm_endpoint_up", endpoint=server.url) == 0
    assert value(samples, "winnow_llm_endpoint_breaker_state", endpoint=server.url) == 2
    assert again.status_code == 200


def test_readyz_and_healthz_are_open_metrics_and_the_api_need_the_key_and_refusals_are_counted(index, llm_server,
                                                                                             tmp_path):
    service = _service(index, llm_server, tmp_path)
    with TestClient(create_app(service, api_key="k"), base_url="http://127.0.0.1") as client:
        assert client.get("/readyz").status_code == 200 and client.get("/healthz").status_code == 200
        assert client.get("/metrics").status_code == 401
        assert client.get("/v1/methods").status_code == 401
        samples = scrape(client, authorization="Bearer k")
    service.close()
    # Refused by the key's guard before any route ran, and still counted under the route's template.
    assert value(samples, "winnow_http_requests_total", route="/v1/methods", method="GET", status="401") == 1
    assert value(samples, "winnow_http_requests_total", route="/metrics", method="GET", status="401") == 1


def test_log_json_writes_one_line_per_request_with_the_trace_id_and_no_query_text(index, llm_server, tmp_path,
                                                                                    caplog):
    service = _service(index, llm_server, tmp_path)
    with caplog.at_level(logging.INFO, logger="winnow.access"):
        with TestClient(create_app(service, log_json=True), base_url="http://127.0.0.1") as client:
            answer = client.post("/v1/ask", json=QUESTION).json()
            client.get("/v1/search", params={"q": "a private question"})
            client.get("/no/such/path")
    service.close()
    lines = [json.loads(record.getMessage()) for record in caplog.records if record.name == "winnow.access"]
    assert [(line["method"], line["route"], line["status"]) for line in lines] == [
        ("POST", "/v1/ask", 200), ("GET", "/v1/search", 200), ("GET", "unmatched", 404)]
    assert lines[0]["trace_id"] == answer["trace_id"] and lines[0]["seconds"] > 0 and lines[0]["bytes"] > 0
    assert lines[1]["path"] == "/v1/search" and "private" not in json.dumps(lines)
    assert {"time", "client"} <= set(lines[0])


@pytest.mark.subprocess
def test_sigterm_drains_the_requests_in_flight_and_exits_0(tmp_path):
    """A real `winnow serve`: three questions in flight when SIGTERM comes all get their answers, new
    connections are refused meanwhile, and the process exits 0 well within --drain-seconds."""
    index_dir = build_small_index(tmp_path)
    server = ScriptedServer(delay=1.5)
    env = dict(os.environ, WINNOW_CACHE_DIR=str(tmp_path / "cache"))
    process = subprocess.Popen([sys.executable, "-m", "winnow.cli", "serve", "--index", str(index_dir),
                                "--backend", "openai", "--base-url", server.url, "--model", "m", "--method",
                                "vanilla", "--port", "0", "--drain-seconds", "30"],
                               env=env, stderr=subprocess.PIPE, text=True)
    log: list[str] = []
    threading.Thread(target=lambda: log.extend(process.stderr), daemon=True).start()  # type: ignore[arg-type]
    try:
        deadline = time.monotonic() + 60
        while not (found := re.search(r"listening on (http://[^/\s]+)/", "".join(log))):
            assert process.poll() is None and time.monotonic() < deadline, "".join(log)
            time.sleep(0.05)
        base = found.group(1)
        answers: dict[int, httpx.Response] = {}

        def ask(i: int) -> None:
            answers[i] = httpx.post(f"{base}/v1/ask", json=dict(QUESTION, question=f"Who wrote Hamlet {i}?"),
                                    timeout=60)

        askers = [threading.Thread(target=ask, args=(i,)) for i in range(3)]
        for asker in askers:
            asker.start()
        while server.inflight < 3:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        with pytest.raises(httpx.TransportError):  # no longer accepting
            httpx.get(f"{base}/readyz", timeout=2)
        for asker in askers:
            asker.join()
        code = process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        server.stop()
    assert code == 0, "".join(log)
    assert sorted(answers) == [0, 1, 2] and all(a.status_code == 200 for a in answers.values())
    assert time.monotonic() - started < 10
