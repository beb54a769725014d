"""The service without HTTP: checked requests become plans, plans run from a cache or on the worker.

One :class:`Service` holds the open :class:`~winnow.pipeline.Pipeline` (index and models, loaded
once), the worker that alone calls the models, cache-only twins of the models for the fast path,
and bounded in-memory maps of recent traces and answers. A request may pick another method, N, k
or setting: methods are cheap objects built per request over the already-loaded models.

A plan is computed at most once, the cheapest way that gives the same result:
1. the answer cache (the same request, answered before);
2. the call cache alone (every LLM call the request makes was made before), on a request thread;
3. the worker queue (the real model).
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from ..index.watch import watch_open_index
from ..llm.client import LLM
from ..pipeline import Pipeline
from ..records import Query
from ..rerank import MODEL_RERANK_METHODS, RERANK_METHODS, relevance_score, rerank
from .cache_only import CacheMiss, cache_only
from .limits import (
    ApiError,
    Limits,
    check_history,
    check_range,
    check_text,
    invalid,
    request_overrides,
    request_settings,
    within_ceilings,
)
from .schemas import AskRequest, RerankRequest
from .store import LRU
from .traces import LocalTraces, TraceStore
from .worker import LLMWorker

log = logging.getLogger("winnow.service")

if TYPE_CHECKING:
    from ..index.embedder import Embedder
    from ..methods import Method, MethodSettings


@dataclass
class Models:
    """The LLMs a plan runs on: the real ones (on the worker) or their cache-only twins."""

    llm: LLM
    agents: dict[str, LLM] = field(default_factory=dict)


@dataclass
class Plan:
    """A checked request, ready to compute. ``compute(models)`` returns the JSON payload;
    ``models`` is None for plans that need no LLM."""

    kind: str
    key: str | None  # answer-cache key; None when caching is off
    compute: Callable[[Models | None], dict[str, Any]]
    needs_llm: bool
    request: dict[str, Any]  # what was asked, kept with the trace
    timeout: float
    shape: Callable[[dict[str, Any]], dict[str, Any]] = lambda payload: payload  # payload -> response body


def new_trace_id() -> str:
    return secrets.token_hex(8)


def _key(*parts: Any) -> str:
    text = json.dumps(parts, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def documents_seen(trace: Any) -> dict[str, dict[str, str]]:
    """Title and text of every passage any stage saw (the trace itself keeps only ids and scores)."""
    seen: dict[str, dict[str, str]] = {}
    for stage in trace.stages:
        for item in [*stage.input, *stage.output]:
            if "text" in item and item["id"] not in seen:
                seen[item["id"]] = {"title": item.get("title", ""), "text": item["text"]}
    return seen


class Service:
    def __init__(self, pipeline: Pipeline, *, limits: Limits | None = None, cache: bool = True,
                 trace_capacity: int = 256, answer_capacity: int = 1024,
                 rerank_models: dict[str, str] | None = None, traces: TraceStore | None = None) -> None:
        self.pipeline = pipeline
        # The cross-encoder and monoT5 models `winnow serve --rerank-model` named (a request cannot
        # name a folder on this machine); a method left out loads its default hub id on first use.
        self.rerank_models = {method: (rerank_models or {}).get(method, "") for method in MODEL_RERANK_METHODS}
        self.limits = limits or Limits()
        self.models = Models(pipeline.llm, dict(pipeline.agents))
        twins = {id(llm): cache_only(llm) for llm in pipeline.llms} if cache else {}
        ready = {key: twin for key, twin in twins.items() if twin is not None}
        self.cached_models: Models | None = None
        if twins and len(ready) == len(twins):
            self.cached_models = Models(ready[id(pipeline.llm)],
                                        {role: ready[id(llm)] for role, llm in pipeline.agents.items()})
        self.worker = LLMWorker(pipeline.llms, max_pending=self.limits.max_pending)
        # In memory, or in the store every replica reaches (`winnow serve --store`): :mod:`.traces`.
        self.traces: TraceStore = traces if traces is not None else LocalTraces(trace_capacity)
        self.answers: LRU[str, dict[str, Any]] = LRU(answer_capacity if cache else 0)
        self._embedder: Embedder | None = None
        self._embedder_lock = threading.Lock()
        self.started = time.time()
        self.in_flight = 0  # requests being answered now (runner.execute, on the event loop), for /metrics
        #: Told of every answer (kind, where it came from, the payload with its trace): /metrics counts them.
        self.on_answer: Callable[[str, str, dict[str, Any]], None] | None = None
        # The index's files as the server opened them: a request is refused (503) once one has changed.
        self.index_watch = watch_open_index(pipeline.index_dir)
        self._identity = {"models": [llm.identity for llm in pipeline.llms], **pipeline.describe()}

    def refuse_if_index_changed(self) -> None:
        """503 naming the file when a file of the open index changed under the server: its answers
        would come from another index than the one checked at start-up, and a mapped file that shrank
        would kill the process at the first read past its new end (:mod:`winnow.index.watch`)."""
        refusal = self._index_changed()
        if refusal is not None:
            log.error("%s: refusing requests", refusal.message)
            raise refusal

    def _index_changed(self) -> ApiError | None:
        changed = self.index_watch.changed() if self.index_watch is not None else None
        if changed is None:
            return None
        return ApiError(503, "index_changed", f"{self.pipeline.index_dir / changed} changed since the server opened "
                                              "the index: restart `winnow serve` to open it again (rebuild it first "
                                              "if it was damaged)", headers={"Retry-After": "60"})

    def endpoint_health(self) -> dict[str, dict[str, Any]]:
        """Each LLM endpoint's breaker state and whether it takes requests now (in-process models have none)."""
        health: dict[str, dict[str, Any]] = {}
        for llm in self.pipeline.llms:
            of_backend = getattr(llm.backend, "endpoint_health", None)
            if of_backend is not None:
                health.update(of_backend())
        return health

    def readiness_problem(self) -> ApiError | None:
        """Why this server should get no traffic now (/readyz's 503), or None: a file of the index changed,
        or a model served over HTTP has no endpoint its breaker admits (each admits again after its cool-down,
        so a replica whose endpoints came back is ready again without traffic)."""
        refusal = self._index_changed()
        if refusal is not None:
            return refusal
        for llm in self.pipeline.llms:
            of_backend = getattr(llm.backend, "endpoint_health", None)
            health = of_backend() if of_backend is not None else {}
            if health and not any(endpoint["healthy"] for endpoint in health.values()):
                model = llm.identity.get("model", "")
                return ApiError(503, "no_healthy_endpoint", f"no endpoint of model {model!r} takes requests: the "
                                                            f"breakers of {', '.join(health)} are open after failures "
                                                            "in a row", headers={"Retry-After": "5"})
        return None

    def cache_rejections(self) -> dict[str, int]:
        """Cached answers refused by their checksum so far, by why (:mod:`winnow.llm.cache`), over the
        models and their cache-only twins (the twin meets a bad entry first and drops it)."""
        twins = [] if self.cached_models is None else [self.cached_models.llm, *self.cached_models.agents.values()]
        counts: dict[str, int] = {}
        for llm in {id(llm): llm for llm in [*self.pipeline.llms, *twins]}.values():
            for why, count in llm.rejected_cache_entries.items():
                counts[why] = counts.get(why, 0) + count
        return counts

    def store_errors(self) -> int | None:
        """Failed calls to the shared store (``--store``), served as misses; None without one."""
        counts = [errors() for store in self.stores() if (errors := getattr(store, "errors", None)) is not None]
        return sum(counts) if counts else None

    def stores(self) -> list[Any]:
        """The call caches of the loaded models, and the trace store."""
        return [llm.cache for llm in self.pipeline.llms if llm.cache is not None] + [self.traces]

    # ---- requests -> plans ---------------------------------------------------------------------

    def _timeout(self, requested: float | None) -> float:
        if requested is None:
            return self.limits.timeout
        if not 0 < requested <= self.limits.timeout:
            raise invalid("timeout", f"timeout must be above 0 and at most {self.limits.timeout:g} seconds "
                                     f"(got {requested})")
        return float(requested)

    def plan_ask(self, request: AskRequest, *, container: str = "options") -> Plan:
        """The plan for ``request``; ``container`` is what errors call its ``options`` (the MCP
        ``ask`` tool takes them as ``settings``)."""
        from ..methods import METHODS, PROFILES

        limits = self.limits
        question = check_text("question", request.question, limits.max_question_chars)
        method = self.pipeline.spec.method if request.method is None else request.method  # "" is no method
        if method not in METHODS:
            raise invalid("method", f"unknown method {method!r}; choose one of: {', '.join(METHODS)}")
        if request.profile is not None and request.profile not in PROFILES:  # "" is no profile: refused too
            raise invalid("profile", f"unknown profile {request.profile!r}; choose one of: {', '.join(PROFILES)}")
        from ..methods import profile_named, profile_settings

        spec = self.pipeline.spec
        # The server's settings for its own method; for another, the server's profile's (if any, and
        # if it covers that method: a one-row profile such as rankgpt-quoted is its own method's alone).
        covered = not spec.profile or profile_named(spec.profile).applies_to(method)
        base = spec.settings if method == spec.method else profile_settings(spec.profile if covered else None, method)
        overrides = request_overrides(request.n, request.k, request.options, container=container)
        # Resolved once: a path the settings type marks is refused from the request and filled in here.
        settings = request_settings(method, base, overrides, limits, container=container, profile=request.profile,
                                    paths=self.rerank_models)
        values = settings.to_dict()
        history = check_history(request.history, settings.task, limits, container=container, method=method)
        turns = [turn.to_dict() for turn in history]
        # The profile is reported with the answer: two requests that differ only in it are two entries.
        profile = request.profile or spec.profile or None
        key = _key("ask", self._identity, method, values, question, turns, profile) if self.answers.capacity else None

        def compute(models: Models | None) -> dict[str, Any]:
            assert models is not None
            answer = self._build(method, settings, models).ask(Query(question, history=history))
            payload = answer.to_dict()
            payload["settings"].update(self.pipeline.describe())
            payload["profile"] = profile
            payload["model"] = models.llm.identity
            payload["trace"]["documents"] = documents_seen(answer.trace)
            return dict(payload)

        def shape(payload: dict[str, Any]) -> dict[str, Any]:
            body = {k: v for k, v in payload.items() if k != "trace"}
            if request.include_trace:
                body["trace"] = payload["trace"]
            return body

        described = {"question": question, **({"history": turns} if turns else {}), "method": method,
                     "settings": values}
        return Plan("ask", key, compute, True, described,
                    self._timeout(request.timeout), shape)

    def _build(self, method: str, settings: MethodSettings, models: Models) -> Method:
        # The server's --rerank-model models reach whatever the method reranks with (methods.reranking).
        return self.pipeline.method_with(method, settings, llm=models.llm, agents=models.agents,
                                         rerankers=self.rerank_models)

    def plan_rerank(self, request: RerankRequest) -> Plan:
        from ..records import Passage

        limits = self.limits
        query = check_text("query", request.query, limits.max_question_chars)
        method = "pointwise" if request.method is None else request.method  # "" is refused, not the default
        if method not in RERANK_METHODS:
            raise invalid("method", f"unknown rerank method {method!r}; choose one of: {', '.join(RERANK_METHODS)}")
        count = len(request.documents)
        check_range("documents", count, 1, limits.max_documents)
        passages = []
        for i, doc in enumerate(request.documents):
            if isinstance(doc, str):
                passages.append(Passage(str(i), check_text(f"documents[{i}]", doc, limits.max_document_chars)))
            else:
                text = check_text(f"documents[{i}].text", doc.text, limits.max_document_chars)
                meta = {"id": str(doc.id)} if doc.id is not None else {}
                passages.append(Passage(str(i), text, doc.title, meta))
        top_n = count if request.top_n is None else check_range("top_n", request.top_n, 1, limits.max_documents)
        window, step, guard = self._rerank_options(method, request.options)
        ignored = sorted(request.model_extra or {})
        notes = []
        trained = method in MODEL_RERANK_METHODS  # a cross-encoder or monoT5: no LLM
        model_name = ("all-MiniLM-L6-v2" if method == "embedding" else self.rerank_model_name(method) if trained
                      else self.pipeline.spec.model)
        if request.model and request.model not in {m["model"] for m in self._identity["models"]} | {model_name}:
            notes.append(f"model {request.model!r} ignored: this server reranks with "
                         f"{model_name if trained else self.pipeline.spec.model}")
        key = (_key("rerank", self._identity if method != "embedding" and not trained else model_name, method, window,
                    step, guard, query, [p.to_dict() for p in passages]) if self.answers.capacity else None)

        def compute(models: Models | None) -> dict[str, Any]:
            done = rerank(query, passages, method, llm=models.llm if models else None,
                          embedder=self.embedder() if method == "embedding" else None, window=window, step=step,
                          model=self.rerank_models.get(method, ""), injection_guard=guard)
            trace = done.trace
            results = [{"index": int(c.passage.id), "relevance_score": relevance_score(method, c.score, rank, count),
                        "score": c.score} for rank, c in enumerate(done.ranked, start=1)]
            trace_dict = trace.to_dict()
            trace_dict["documents"] = {p.id: {"title": p.title, "text": p.text} for p in passages}
            return {"query": query, "method": method, "model": model_name, "results": results,
                    "usage": trace.usage.to_dict(), "trace": trace_dict}

        def shape(payload: dict[str, Any]) -> dict[str, Any]:
            results = []
            for item in payload["results"][:top_n]:
                result = {"index": item["index"], "relevance_score": item["relevance_score"]}
                if request.return_documents:
                    p = passages[item["index"]]
                    result["document"] = {"text": p.text, **({"title": p.title} if p.title else {}), **p.metadata}
                results.append(result)
            usage = dict(payload["usage"], total_tokens=payload["usage"]["prompt_tokens"]
                         + payload["usage"]["completion_tokens"])
            warnings = [stage.get("details", {}).get("warning") for stage in payload["trace"].get("stages", [])
                        if stage.get("kind") == "injection-guard"]
            body = {"id": payload.get("trace_id", ""), "model": payload["model"], "method": method,
                    "results": results, "usage": usage,
                    "meta": {"documents": count, "ignored_fields": ignored,
                             "notes": notes + [w for w in warnings if w]}}
            body.update({k: payload[k] for k in ("trace_id", "served_from", "seconds", "queue_seconds")
                         if k in payload})
            if request.include_trace:
                body["trace"] = payload["trace"]
            return body

        return Plan("rerank", key, compute, method != "embedding" and not trained,
                    {"query": query, "method": method, "documents": count, "top_n": top_n},
                    self._timeout(request.timeout), shape)

    def _rerank_options(self, method: str, options: dict[str, Any]) -> tuple[int, int, str]:
        """A rerank request's ``options`` as checked :class:`~winnow.rerank.RerankSettings` (listwise
        takes window and step; every method the injection guard), within this server's caps, errors
        naming ``options.KEY``: the window, the step and the guard's mode."""
        from ..rerank import RerankSettings
        from ..settings import LayeredSettingError, SettingsLayer, resolve_layers

        allowed = {"window", "step", "injection_guard"} if method == "listwise" else {"injection_guard"}
        for key in options:
            if key not in allowed:
                raise invalid(f"options.{key}", f"rerank method {method!r} has no option {key!r}; it takes "
                                                f"{', '.join(sorted(allowed))}")
        layer = SettingsLayer("request", {"method": method, **options}, field_of=lambda key: f"options.{key}",
                              capped=True)
        try:
            settings = resolve_layers(RerankSettings, [layer], owner=f"rerank method {method!r}",
                                      caps=self.limits.setting_caps).settings
        except LayeredSettingError as exc:
            raise invalid(exc.field, str(exc)) from exc
        return settings.window, settings.step, settings.injection_guard

    def rerank_model_name(self, method: str) -> str:
        """The model a ``cross-encoder`` or ``monot5`` rerank request runs: the server's, or the default."""
        from ..models.rerankers import DEFAULT_RERANKER_MODELS

        return self.rerank_models.get(method) or DEFAULT_RERANKER_MODELS[method]

    def embedder(self) -> Embedder:
        """The MiniLM embedder for `embedding` reranking, loaded on first use."""
        with self._embedder_lock:
            if self._embedder is None:
                from ..index import load_embedder

                self._embedder = load_embedder()
            return self._embedder

    # ---- running plans -------------------------------------------------------------------------

    def from_call_cache(self, plan: Plan) -> dict[str, Any] | None:
        """The payload if every LLM call the plan makes is cached, else None. Runs on a request
        thread, never touching the real model."""
        if self.cached_models is None:
            return None
        try:
            return plan.compute(self.cached_models)
        except CacheMiss:
            return None

    def search(self, query: str, k: int | None = None, *, query_field: str = "q") -> dict[str, Any]:
        """The top ``k`` passages of first-stage retrieval; errors name the query ``query_field``
        (``q`` in /v1/search, ``query`` in the MCP ``search`` tool)."""
        check_text(query_field, query, self.limits.max_question_chars)
        k = min(10, self.limits.max_n) if k is None else check_range("k", k, 1, self.limits.max_n)
        self.refuse_if_index_changed()
        started = time.perf_counter()
        hits = self.pipeline.search(query, k=k)
        return {"query": query, "retriever": self.pipeline.retriever_name,
                "passages": hits.to_dicts(), "seconds": round(time.perf_counter() - started, 4)}

    # ---- descriptions --------------------------------------------------------------------------

    def model_list(self) -> dict[str, Any]:
        roles = self.pipeline.model_roles()
        data = [{"id": llm.identity.get("model", ""), "object": "model", "owned_by": "winnow",
                 "role": roles.get(id(llm), "agent"), "identity": llm.identity} for llm in self.pipeline.llms]
        data.append({"id": "all-MiniLM-L6-v2", "object": "model", "owned_by": "winnow",
                     "role": "rerank method 'embedding' (loaded on first use)"})
        data += [{"id": self.rerank_model_name(method), "object": "model", "owned_by": "winnow",
                  "role": f"rerank method {method!r} (loaded on first use)"} for method in MODEL_RERANK_METHODS]
        return {"object": "list", "data": data}

    def method_list(self) -> dict[str, Any]:
        from ..methods import METHODS, PROFILES

        spec = self.pipeline.spec
        methods = [{"name": name, "summary": cls.summary, "stages": list(cls.stages), "roles": dict(cls.roles),
                    "defaults": within_ceilings(name, cls.Settings().to_dict(), self.limits),
                    "profiles": {profile: dict(p.settings.get(name, {})) for profile, p in PROFILES.items()}}
                   for name, cls in METHODS.items()]
        return {"default": spec.method, "default_settings": within_ceilings(spec.method, spec.settings, self.limits),
                "profile": spec.profile or None,
                "profiles": {name: p.summary for name, p in PROFILES.items()},
                "methods": methods,
                "rerank_methods": [{"name": k, "summary": v} for k, v in RERANK_METHODS.items()],
                "limits": self.limits.to_dict()}

    def health(self) -> dict[str, Any]:
        return {"status": "ok", "uptime_seconds": round(time.time() - self.started, 1),
                "index": str(self.pipeline.index_dir), "method": self.pipeline.spec.method,
                "model": self.pipeline.spec.model, "queue": self.worker.stats(), "traces": len(self.traces),
                "answers_cached": len(self.answers), "call_cache": self.cached_models is not None}

    def close(self) -> None:
        self.worker.close()
        if self.cached_models is not None:
            for llm in {id(m): m for m in [self.cached_models.llm, *self.cached_models.agents.values()]}.values():
                llm.close()
        self.pipeline.close()


__all__ = ["ApiError", "Models", "Plan", "RERANK_METHODS", "Service", "new_trace_id"]
