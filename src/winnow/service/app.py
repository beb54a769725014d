"""The HTTP API and the web inspector: ``create_app(service, api_key=..., hosts=...)`` returns a FastAPI app.

Routes (:mod:`winnow.service.routes`): ``POST /v1/ask``, ``POST /v1/rerank`` (the request and
response shape of hosted rerank APIs), ``GET /v1/search``, ``GET /v1/traces/{id}``,
``GET /v1/models``, ``GET /v1/methods``, ``GET /healthz`` (alive), ``GET /readyz`` (ready for
traffic: :mod:`winnow.service.lifecycle`), ``GET /metrics`` (Prometheus: :mod:`winnow.service.metrics`),
the inspector at ``/``, the vendor rerank
shapes at ``/v2/rerank`` (Cohere v2) and ``/rerank`` (Hugging Face TEI), and the schema at
``/openapi.json`` with its pages ``/docs`` (Swagger UI) and ``/redoc``. The guards
(:mod:`winnow.service.guards`) check the ``Host`` header on every path and, with an API key,
``Authorization: Bearer <key>`` on every path but ``/``, ``/static/…``, ``/healthz`` and ``/readyz``: the
schema and its pages need the key as the API does. Every error is JSON
``{"error": {"type", "message", "field"}}`` (:mod:`winnow.service.http_errors`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..extras import require

require("serve", "winnow.service (the HTTP API)")

if TYPE_CHECKING:
    from ..evaluation.prices import PriceTable

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from .engine import Service
from .guards import install_guards
from .hosts import HostPolicy
from .http_errors import install_error_handlers
from .lifecycle import Lifecycle
from .limits import Limits
from .metrics import ServiceMetrics
from .observe import Observe
from .routes import STATIC, pages, v1, vendors


def create_app(service: Service | None, *, api_key: str = "", hosts: HostPolicy | None = None,
               limits: Limits | None = None, lifecycle: Lifecycle | None = None, prices: PriceTable | None = None,
               log_json: bool = False) -> FastAPI:
    """The app over ``service``. ``hosts`` says which ``Host`` headers to answer (`winnow serve`
    passes one for its bound address); None answers any.

    `winnow serve` passes no service but its ``lifecycle`` and ``limits``: the app answers /healthz,
    /readyz (503 ``starting``) and /metrics while the index opens, and the API once
    :meth:`Lifecycle.opened` hands it the service. ``prices`` prices the LLM calls in /metrics;
    ``log_json`` logs each request as a JSON line (:mod:`.observe`)."""
    from ..version import __version__

    lifecycle = lifecycle or Lifecycle()
    if service is not None:
        lifecycle.opened(service)
    limits = service.limits if service is not None else limits
    if limits is None:
        raise ValueError("create_app needs the service or, while it opens, its limits")

    app = FastAPI(title="Winnow", version=__version__,
                  description="LLM-in-the-loop retrieval-augmented generation: ask, rerank, search, and "
                              "the trace of every decision. Errors are JSON {error: {type, message, field}}. "
                              "With an API key, every route here needs 'Authorization: Bearer <key>'.")
    app.state.lifecycle = lifecycle
    app.state.auth = bool(api_key)
    metrics = ServiceMetrics(lifecycle, prices)  # before the service opens: it counts every answer
    app.state.metrics = metrics
    install_error_handlers(app)
    install_guards(app, api_key=api_key, max_body_bytes=limits.max_body_bytes, hosts=hosts,
                   read_timeout=limits.read_timeout)
    # Outermost: the guards' refusals are counted and logged too.
    routes = [*pages.routes, *v1.routes, *vendors.routes]  # each with its full path template
    app.add_middleware(Observe, metrics=metrics, routes=lambda: [*routes, *app.router.routes], log_json=log_json)
    app.include_router(pages)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.include_router(v1)
    app.include_router(vendors)
    _state_limits_in_schema(app, limits)
    return app


def _state_limits_in_schema(app: FastAPI, limits: Limits) -> None:
    """/openapi.json with this server's checks and limits written in (:mod:`.openapi`)."""
    from ..methods import METHODS, PROFILES
    from ..rerank import RERANK_METHODS
    from .openapi import describe_limits

    made = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = describe_limits(made(), limits, methods=list(METHODS),
                                                 rerank_methods=list(RERANK_METHODS), profiles=list(PROFILES),
                                                 ask_options=request_option_names(),
                                                 rerank_options=["injection_guard", "step", "window"])
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def request_option_names() -> list[str]:
    """The settings an ``/v1/ask`` request's ``options`` may name: any method's, less the paths a
    request may not set (:data:`~winnow.settings.ModelPath`)."""
    from ..methods import METHODS, method_class

    names: set[str] = set()
    for method in METHODS:
        settings_type = method_class(method).Settings
        names |= set(settings_type.field_types()) - set(settings_type.path_settings())
    return sorted(names)
