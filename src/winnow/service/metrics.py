"""What `winnow serve` tells an operator's Prometheus at ``GET /metrics`` (the text exposition format).

Counted as they happen: HTTP requests and their latency by route template (``/v1/traces/{trace_id}``,
never the id itself, so the series stay few), method and status; answers by kind and where they came
from (the answer cache, the call cache, the model); and, from each computed answer's trace, the LLM
calls, call-cache hits, tokens and, with ``--prices``, USD by model and agent role (the split
GAR-meets-RAG App. B reports, :meth:`winnow.records.Trace.usage_split`). Read when scraped: the questions in
flight, the worker queue, each LLM endpoint's health and breaker state
(:meth:`winnow.llm.dispatch.Dispatcher.health`), the cache entries refused by their checksum (by the
models and their cache-only twins alike: a twin meets a bad entry first, and drops it), the shared
store's errors, and whether the server is ready (:mod:`.lifecycle`).

Each app has its own registry (not prometheus_client's global one), so two apps in one process, as in
the tests, keep their own counts.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..extras import import_extra
from ..records import DEFAULT_ROLE

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from ..evaluation.prices import PriceTable
    from .engine import Service
    from .lifecycle import Lifecycle

#: Request latency buckets, seconds: a cached answer takes milliseconds, an LLM answer up to minutes.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
#: A breaker's state as a number, for a gauge (Breaker.state).
BREAKER_STATES = {"closed": 0, "half-open": 1, "open": 2}


def _prometheus() -> Any:
    return import_extra("prometheus_client", "serve", "GET /metrics")


class ServiceMetrics:
    """The counters of one app, and a collector reading the live state of its :class:`Lifecycle` when scraped."""

    def __init__(self, lifecycle: Lifecycle, prices: PriceTable | None = None) -> None:
        prometheus = _prometheus()
        self.prices = prices
        self.registry = prometheus.CollectorRegistry()
        registry = self.registry
        self.requests = prometheus.Counter("winnow_http_requests", "HTTP requests answered, by route template, "
                                           "method and status", ["route", "method", "status"], registry=registry)
        self.latency = prometheus.Histogram("winnow_http_request_duration_seconds", "HTTP request latency, by "
                                            "route template, method and status", ["route", "method", "status"],
                                            buckets=LATENCY_BUCKETS, registry=registry)
        self.answers = prometheus.Counter("winnow_answers", "Answers computed, by kind (ask, rerank) and where "
                                          "they came from (answer-cache, call-cache, llm, computed)",
                                          ["kind", "served_from"], registry=registry)
        by_agent = ["model", "role"]
        self.llm_calls = prometheus.Counter("winnow_llm_calls", "LLM calls sent to a model, by model and agent "
                                            "role", by_agent, registry=registry)
        self.cache_hits = prometheus.Counter("winnow_llm_cache_hits", "LLM calls answered from the call cache, "
                                             "by model and agent role", by_agent, registry=registry)
        self.tokens = prometheus.Counter("winnow_llm_tokens", "Tokens of the LLM calls sent to a model, by model, "
                                         "agent role and type (prompt, completion)", [*by_agent, "type"],
                                         registry=registry)
        self.cost = prometheus.Counter("winnow_llm_cost_usd", "What the LLM calls cost at the --prices table, by "
                                       "model and agent role (models without a price are not counted)", by_agent,
                                       registry=registry)
        registry.register(_LiveState(lifecycle))
        lifecycle.when_open(self._watch)

    def _watch(self, service: Service) -> None:
        service.on_answer = self.answered

    def request_done(self, route: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(route, method, str(status)).inc()
        self.latency.labels(route, method, str(status)).observe(seconds)

    def answered(self, kind: str, served_from: str, payload: dict[str, Any]) -> None:
        """One answer, and (unless it is a stored answer given again) the LLM use its trace records."""
        self.answers.labels(kind, served_from).inc()
        if served_from == "answer-cache":
            return  # no LLM call was made or looked up for it
        for stage in payload.get("trace", {}).get("stages", []):
            role = stage.get("role") or DEFAULT_ROLE
            for call in stage.get("llm_calls", []):
                model = str(call.get("model", ""))
                if call.get("cached"):
                    self.cache_hits.labels(model, role).inc()
                    continue
                self._paid(model, role, int(call.get("prompt_tokens", 0)), int(call.get("completion_tokens", 0)))

    def _paid(self, model: str, role: str, prompt_tokens: int, completion_tokens: int) -> None:
        self.llm_calls.labels(model, role).inc()
        self.tokens.labels(model, role, "prompt").inc(prompt_tokens)
        self.tokens.labels(model, role, "completion").inc(completion_tokens)
        price = self.prices.price_of(model) if self.prices is not None else None
        if price is not None:
            self.cost.labels(model, role).inc(price.usd(prompt_tokens, completion_tokens))

    def exposition(self) -> tuple[bytes, str]:
        """The metrics in the text format, and its content type."""
        prometheus = _prometheus()
        return prometheus.generate_latest(self.registry), str(prometheus.CONTENT_TYPE_LATEST)


class _LiveState:
    """The values read when scraped: readiness, questions in flight, the worker queue, the endpoints, the store."""

    def __init__(self, lifecycle: Lifecycle) -> None:
        self.lifecycle = lifecycle

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        ready, _ = self.lifecycle.readiness()
        yield GaugeMetricFamily("winnow_ready", "1 when /readyz answers 200 (index open, an LLM endpoint healthy, "
                                                "not draining)", value=int(ready))
        service = self.lifecycle.service
        if service is None:
            return
        yield GaugeMetricFamily("winnow_questions_in_flight", "Requests being answered now (ask and rerank, "
                                                              "from any cache or the model)", value=service.in_flight)
        queue = GaugeMetricFamily("winnow_worker_jobs", "The model worker's jobs now, by state", labels=["state"])
        stats = service.worker.stats()
        for state in ("queued", "running"):
            queue.add_metric([state], stats[state])
        yield queue
        yield from self._endpoints(service, GaugeMetricFamily)
        rejected = CounterMetricFamily("winnow_llm_cache_rejected", "Cached LLM answers refused (a checksum that "
                                                                    "fails, or none) and asked again, by why",
                                       labels=["why"])
        for why, count in sorted(service.cache_rejections().items()):
            rejected.add_metric([why], count)
        yield rejected
        errors = service.store_errors()
        if errors is not None:
            counter = CounterMetricFamily("winnow_store_errors", "Calls to the shared store (--store) that failed "
                                                                 "(served as cache misses)", labels=["store"])
            counter.add_metric(["redis"], errors)
            yield counter

    @staticmethod
    def _endpoints(service: Service, family: Any) -> Iterator[Metric]:
        up = family("winnow_llm_endpoint_up", "1 when the endpoint's breaker admits requests", labels=["endpoint"])
        breaker = family("winnow_llm_endpoint_breaker_state", "The endpoint's circuit breaker: 0 closed, "
                                                               "1 half-open, 2 open", labels=["endpoint"])
        inflight = family("winnow_llm_endpoint_inflight", "Calls on the wire to the endpoint now", labels=["endpoint"])
        for url, health in service.endpoint_health().items():
            up.add_metric([url], int(health["healthy"]))
            breaker.add_metric([url], BREAKER_STATES[health["state"]])
            inflight.add_metric([url], health["inflight"])
        yield from (up, breaker, inflight)
