"""`winnow serve`: the HTTP API and the web inspector over one index and one set of loaded models."""

from __future__ import annotations

import copy
import ipaddress
import socket
import threading
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer

from ..errors import WinnowError
from ..extras import require
from ..run_spec import RunOptions, resolve_run
from ..shared_store import open_redis
from ..shared_store import shown as without_password
from .common import (
    IndexOption,
    MaxDocumentCharsOption,
    MaxDocumentsOption,
    MaxKOption,
    MaxNOption,
    MaxPendingOption,
    MaxQuestionCharsOption,
    RerankModelOption,
    TimeoutOption,
    app,
    err,
    open_pipeline,
    rerank_models,
    with_run_options,
)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _bind(host: str, port: int) -> socket.socket:
    """Bind before serving, so `--port 0` can report the port it got and a taken port fails clearly."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise WinnowError(f"cannot listen on {host}:{port}: {exc.strerror}", "choose another --port or --host") from exc
    sock.listen(2048)
    return sock


def _log_config(log_json: bool = False) -> dict[str, Any]:
    """uvicorn's logging set-up, plus the service's own one-line notes (a request cancelled
    because its client went away or its time ran out) in the same format on stderr; with
    ``log_json``, those notes and one line per request (``winnow.access``) as JSON objects."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"]["winnow.service"] = {"handlers": ["default"], "level": "INFO", "propagate": False}
    if log_json:
        config["formatters"]["json"] = {"()": "winnow.service.observe.JsonLogFormatter"}
        config["handlers"]["json"] = {"formatter": "json", "class": "logging.StreamHandler",
                                      "stream": "ext://sys.stderr"}
        for name in ("winnow.service", "winnow.access"):
            config["loggers"][name] = {"handlers": ["json"], "level": "INFO", "propagate": False}
    return config


def _drain_on_sigterm(server: Any, lifecycle: Any) -> None:
    """SIGTERM drains: uvicorn stops accepting and waits up to ``--drain-seconds`` for the requests in
    flight, /readyz answers 503 meanwhile, and the process then exits 0 (uvicorn raises the signal
    again once stopped: a handler that ignores it keeps the exit status ours, not 143)."""
    import signal

    signal.signal(signal.SIGTERM, lambda number, frame: None)  # what uvicorn restores and re-raises
    handle_exit = server.handle_exit

    def draining(sig: int, frame: Any) -> None:
        lifecycle.drain()
        handle_exit(sig, frame)

    server.handle_exit = draining


@app.command()
# --api-key is the key this server asks of its clients, --timeout a request's deadline: the run options
# keep their other names here (--backend-api-key, --llm-timeout).
@with_run_options(taken={"--api-key", "--timeout"})
def serve(
    index_dir: IndexOption,
    options: RunOptions,
    host: Annotated[str, typer.Option("--host", help="Address to listen on (loopback unless you say so).")]
        = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port (0: any free port, printed).")] = 8080,
    api_key: Annotated[str, typer.Option("--api-key", envvar="WINNOW_API_KEY", show_default=False,
                                         help="Require 'Authorization: Bearer KEY' on every route but /, "
                                              "/static and /healthz, /docs and /openapi.json included (or "
                                              "WINNOW_API_KEY).")] = "",
    allowed_hosts: Annotated[Optional[list[str]], typer.Option(
        "--allowed-host", metavar="NAME", show_default=False,
        help="Also answer requests whose Host header is NAME (repeatable; *.example.com for subdomains). "
             "IP addresses, localhost and the --host name are always answered; others get 400, "
             "against DNS rebinding.")] = None,
    allow_any_host: Annotated[bool, typer.Option("--allow-any-host", help="Answer any Host header (behind a "
                                                                          "proxy that checks it).")] = False,
    max_pending: MaxPendingOption = 64,
    timeout: TimeoutOption = 600.0,
    max_question_chars: MaxQuestionCharsOption = 2000,
    max_documents: MaxDocumentsOption = 200,
    max_document_chars: MaxDocumentCharsOption = 20_000,
    max_n: MaxNOption = 100,
    max_k: MaxKOption = 50,
    max_body_bytes: Annotated[int, typer.Option("--max-body-bytes", min=1, help="Largest request body.")] = 8_000_000,
    read_timeout: Annotated[float, typer.Option(
        "--read-timeout", min=0.1, help="Seconds a client has to send a request's headers, and between parts of "
                                        "its body; a slower one is closed (408 once its headers are in).")] = 30.0,
    traces: Annotated[int, typer.Option("--traces", min=1, help="Recent traces kept in memory.")] = 256,
    rerank_model: RerankModelOption = None,
    require_signature: Annotated[bool, typer.Option(
        "--require-signature", help="Refuse an index that is not signed with the key in WINNOW_INDEX_KEY (or the "
                                    "file WINNOW_INDEX_KEY_FILE names): see `winnow sign`.")] = False,
    drain_seconds: Annotated[int, typer.Option(
        "--drain-seconds", min=1, help="On SIGTERM, stop accepting and give the requests in flight this many "
                                       "seconds to finish (then cancel them); exit 0.")] = 10,
    log_json: Annotated[bool, typer.Option("--log-json", help="Log each request as one JSON line on stderr "
                                                               "(and the server's notes as JSON).")] = False,
    store: Annotated[str, typer.Option(
        "--store", metavar="URL", show_default=False,
        help="Keep the LLM call cache and the recent traces in a store every replica reaches "
             "(redis://HOST:PORT/DB, rediss://, unix://): replicas behind a load balancer share them "
             "(docs/deployment.md). Default: the local cache file and this process's memory.")] = "",
    prices: Annotated[Optional[Path], typer.Option(
        "--prices", help="TOML or JSON price table (USD per million prompt and completion tokens per model), "
                         "for the LLM cost in /metrics.")] = None,
) -> None:
    """Serve the HTTP API (/v1/ask, /v1/rerank, /v1/search, /v1/traces) and the web inspector at /."""
    require("serve", "winnow serve")

    from ..evaluation.prices import read_prices
    from ..service import Limits, Service
    from ..service.app import create_app
    from ..service.hosts import HostPolicy
    from ..service.lifecycle import Lifecycle
    from ..service.traces import open_traces

    trained_models = rerank_models(rerank_model)  # checked before any model loads
    if require_signature:
        check_signed(index_dir)
    spec = resolve_run(options, agents_for_method=False)  # requests choose their method; mainrag's use the agents
    limits = Limits(max_question_chars=max_question_chars, max_documents=max_documents,
                    max_document_chars=max_document_chars, max_n=max_n, max_k=max_k, max_pending=max_pending,
                    timeout=timeout, max_body_bytes=max_body_bytes, read_timeout=read_timeout)
    price_table = read_prices(prices) if prices is not None else None
    if store:
        open_redis(store).close()  # a bad URL or an unreachable store: one line, before anything loads
    sock = _bind(host, port)
    hosts = HostPolicy.for_bind(host, allowed_hosts or (), any_host=allow_any_host)
    # The port answers at once: /healthz (alive) and /readyz (503 'starting') while the index opens.
    app_ = create_app(None, limits=limits, api_key=api_key, hosts=hosts, lifecycle=(lifecycle := Lifecycle()),
                      prices=price_table, log_json=log_json)
    server = _uvicorn_server(app_, log_json=log_json, drain_seconds=drain_seconds, read_timeout=read_timeout)

    def open_service() -> Any:
        return Service(open_pipeline(spec, index_dir, options, store=store), limits=limits, cache=options.cache,
                       rerank_models=trained_models, traces=open_traces(store, traces))

    _run_server(server, sock, lifecycle, open_service,
                lambda: _announce(spec, index_dir, sock, host=host, api_key=api_key, store=store))


def _uvicorn_server(app: Any, *, log_json: bool, drain_seconds: int, read_timeout: float) -> Any:
    """uvicorn for ``app``: requests drained for ``drain_seconds`` at shutdown, and a connection closed
    when its headers or a part of its body are later than ``read_timeout``."""
    import uvicorn

    from ..service.slow_clients import header_deadline_protocol

    return uvicorn.Server(uvicorn.Config(app, log_level="warning", log_config=_log_config(log_json),
                                         timeout_graceful_shutdown=drain_seconds,
                                         http=header_deadline_protocol(read_timeout)))


def _run_server(server: Any, sock: socket.socket, lifecycle: Any, open_service: Callable[[], Any],
                announce: Callable[[], None]) -> None:
    """Serve on ``sock`` while another thread opens the service; stop on SIGTERM (draining) or when
    the opening failed, whose error the command then raises."""
    def opening() -> None:
        try:
            lifecycle.opened(open_service())
        except BaseException as exc:  # reported by the command once the server has stopped
            lifecycle.failed(exc)
            server.should_exit = True
            return
        announce()

    threading.Thread(target=opening, name="winnow-serve-open", daemon=True).start()
    _drain_on_sigterm(server, lifecycle)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        if lifecycle.service is not None:
            lifecycle.service.close()
            err.print(f"stopped; {lifecycle.service.worker.counts['completed']} LLM jobs served", highlight=False)
    if lifecycle.error is not None:
        raise lifecycle.error


def _announce(spec: Any, index_dir: Path, sock: socket.socket, *, host: str, api_key: str, store: str) -> None:
    """The lines `winnow serve` prints once it is ready (tests and scripts wait for 'listening on')."""
    if not api_key and not _is_loopback(host):
        err.print(f"[bold yellow]warning:[/] listening on {host} without an API key: anyone who can reach it "
                  f"can use the model (set WINNOW_API_KEY or --api-key)")
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    shared = f"; call cache and traces in {without_password(store)}" if store else ""
    err.print(f"winnow serve: {spec.method} with {spec.model} over {index_dir}; "
              f"API key {'required' if api_key else 'not required'}{shared}", highlight=False, soft_wrap=True)
    err.print(f"listening on http://{shown}:{bound_port}/ (inspector), API under /v1, docs at /docs, "
              f"schema at /openapi.json, readiness at /readyz, metrics at /metrics",
              highlight=False, soft_wrap=True)


def check_signed(index_dir: Path) -> None:
    """`--require-signature`: the index's manifest signed under the key in the environment."""
    from ..index.manifest import MANIFEST
    from ..index.signature import KEY_FILE_VARIABLE, KEY_VARIABLE, check_signature, index_key

    key = index_key()
    if key is None:
        raise WinnowError("--require-signature needs the key the index was signed with",
                          f"set {KEY_VARIABLE} to the key, or {KEY_FILE_VARIABLE} to a file holding it")
    manifest = index_dir / MANIFEST
    if not manifest.is_file():
        raise WinnowError(f"{index_dir} is not a Winnow index: {MANIFEST} is missing")
    check_signature(index_dir, manifest.read_bytes(), key, required=True)
