"""The HTTP API and the web inspector: ``create_app(service, api_key=..., hosts=...)`` returns a FastAPI app.

Routes (:mod:`winnow.service.routes`): ``POST /v1/ask``, ``POST /v1/rerank`` (the request and
response shape of hosted rerank APIs), ``GET /v1/search``, ``GET /v1/traces/{id}``,
``GET /v1/models``, ``GET /v1/methods``, ``GET /healthz``, the inspector at ``/``, the vendor rerank
shapes at ``/v2/rerank`` (Cohere v2) and ``/rerank`` (Hugging Face TEI), and the schema at
``/openapi.json`` with its pages ``/docs`` (Swagger UI) and ``/redoc``. The guards
(:mod:`winnow.service.guards`) check the ``Host`` header on every path and, with an API key,
``Authorization: Bearer <key>`` on every path but ``/``, ``/static/…`` and ``/healthz``: the
schema and its pages need the key as the API does. Every error is JSON
``{"error": {"type", "message", "field"}}`` (:mod:`winnow.service.http_errors`).
"""

from __future__ import annotations

from typing import Any

from ..extras import require

require("serve", "winnow.service (the HTTP API)")

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from .engine import Service
from .guards import install_guards
from .hosts import HostPolicy
from .http_errors import install_error_handlers
from .routes import STATIC, pages, v1, vendors


def create_app(service: Service, *, api_key: str = "", hosts: HostPolicy | None = None) -> FastAPI:
    """The app over ``service``. ``hosts`` says which ``Host`` headers to answer (`winnow serve`
    passes one for its bound address); None answers any."""
    from ..version import __version__

    app = FastAPI(title="Winnow", version=__version__,
                  description="LLM-in-the-loop retrieval-augmented generation: ask, rerank, search, and "
                              "the trace of every decision. Errors are JSON {error: {type, message, field}}. "
                              "With an API key, every route here needs 'Authorization: Bearer <key>'.")
    app.state.service = service
    app.state.auth = bool(api_key)
    install_error_handlers(app)
    install_guards(app, api_key=api_key, max_body_bytes=service.limits.max_body_bytes, hosts=hosts,
                   read_timeout=service.limits.read_timeout)
    app.include_router(pages)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.include_router(v1)
    app.include_router(vendors)
    _state_limits_in_schema(app, service)
    return app


def _state_limits_in_schema(app: FastAPI, service: Service) -> None:
    """/openapi.json with this server's checks and limits written in (:mod:`.openapi`)."""
    from ..methods import METHODS, PROFILES
    from ..rerank import RERANK_METHODS
    from .openapi import describe_limits

    made = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = describe_limits(made(), service.limits, methods=list(METHODS),
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
