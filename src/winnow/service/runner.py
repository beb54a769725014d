"""Running a plan for one HTTP request: caches first, then the worker, with a deadline and a record.

Every request gets a trace record (status, progress, the full payload when done) that
``GET /v1/traces/{id}`` shows, and events (queued, started, progress) for a streaming client. A
request that times out, or whose client goes away, cancels its job, which frees its slot: a
normal event, logged as one line on the ``winnow.service`` logger.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any, AsyncIterator, Awaitable, Callable

from starlette.concurrency import run_in_threadpool

from ..errors import BackendError, ModelError, WinnowError
from .engine import Plan, Service, new_trace_id
from .limits import ApiError
from .observe import note_request
from .worker import Cancelled, QueueFull

Emit = Callable[[dict[str, Any]], None]
log = logging.getLogger("winnow.service")


class ClientGone(Exception):
    """The client closed the connection; nobody is waiting for an answer."""


def open_record(service: Service, plan: Plan) -> dict[str, Any]:
    record: dict[str, Any] = {"trace_id": new_trace_id(), "kind": plan.kind, "status": "accepted",
                              "created": time.time(), "request": plan.request}
    service.traces.put(record["trace_id"], record)
    note_request(trace_id=record["trace_id"])
    return record


def _saved(service: Service, record: dict[str, Any], **changes: Any) -> None:
    """Change the record and write it to the trace store again (a shared store holds a copy)."""
    record.update(changes)
    service.traces.put(record["trace_id"], record)


def _recording(service: Service, record: dict[str, Any], emit: Emit | None) -> Emit:
    """An event listener (called from the worker thread) that keeps the record current and forwards."""
    def on_event(event: dict[str, Any]) -> None:
        kind = event["event"]
        if kind == "queued":
            _saved(service, record, status="queued", queue_position=event["position"])
        elif kind == "started":
            _saved(service, record, status="running", queue_position=0)
        elif kind == "progress":
            _saved(service, record, progress={k: event[k] for k in ("stage", "done", "total")})
        if emit is not None:
            emit(event)
    return on_event


async def execute(service: Service, plan: Plan, record: dict[str, Any], emit: Emit | None = None,
                  disconnected: Callable[[], Awaitable[bool]] | None = None) -> dict[str, Any]:
    """The response body for ``plan``; records the outcome under ``record``."""
    service.refuse_if_index_changed()
    service.in_flight += 1
    try:
        return await _execute(service, plan, record, emit, disconnected)
    finally:
        service.in_flight -= 1


async def _execute(service: Service, plan: Plan, record: dict[str, Any], emit: Emit | None,
                   disconnected: Callable[[], Awaitable[bool]] | None) -> dict[str, Any]:
    started = time.perf_counter()
    queue_seconds = 0.0
    try:
        cached = service.answers.get(plan.key) if plan.key else None
        if cached is not None:
            payload, served_from = dict(cached, original_trace_id=cached["trace_id"]), "answer-cache"
        elif not plan.needs_llm:
            payload, served_from = await run_in_threadpool(plan.compute, None), "computed"
        else:
            found = await run_in_threadpool(service.from_call_cache, plan)
            if found is not None:
                payload, served_from = found, "call-cache"
            else:
                listener = _recording(service, record, emit)
                payload, queue_seconds = await _on_worker(service, plan, listener, disconnected)
                served_from = "llm"
    except ApiError as exc:
        _saved(service, record, status="timeout" if exc.status == 504 else "failed", error=exc.body()["error"])
        if exc.status == 504:
            log.info("%s %s timed out: %s", plan.kind, record["trace_id"], exc.message)
        raise
    except (ClientGone, asyncio.CancelledError):
        _saved(service, record, status="cancelled")
        log.info("%s %s cancelled after %.1f s: the client disconnected", plan.kind, record["trace_id"],
                 time.perf_counter() - started)
        raise
    except BackendError as exc:
        _saved(service, record, status="failed", error={"type": "backend_error", "message": str(exc)})
        raise ApiError(502, "backend_error", str(exc)) from exc
    except ModelError as exc:  # a model the server cannot load: not the request's fault, nor a bug
        _saved(service, record, status="failed", error={"type": "model_unavailable", "message": str(exc)})
        raise ApiError(503, "model_unavailable", str(exc)) from exc
    except WinnowError as exc:
        _saved(service, record, status="failed", error={"type": "error", "message": str(exc)})
        raise ApiError(500, "error", str(exc)) from exc
    payload = dict(payload, trace_id=record["trace_id"], served_from=served_from,
                   seconds=round(time.perf_counter() - started, 4), queue_seconds=round(queue_seconds, 4))
    if plan.key and served_from != "answer-cache":
        service.answers.put(plan.key, payload)
    _saved(service, record, status="done", result=payload)
    if service.on_answer is not None:
        service.on_answer(plan.kind, served_from, payload)
    return plan.shape(payload)


async def _on_worker(service: Service, plan: Plan, on_event: Emit,
                     disconnected: Callable[[], Awaitable[bool]] | None) -> tuple[dict[str, Any], float]:
    try:
        job = service.worker.submit(lambda job: plan.compute(service.models), listener=on_event)
    except QueueFull as exc:
        raise ApiError(503, "busy", f"the model is busy: {exc}; retry shortly", headers={"Retry-After": "5"}) from exc
    loop = asyncio.get_running_loop()
    deadline = loop.time() + plan.timeout
    future = asyncio.wrap_future(job.future)

    def abandon(reason: str) -> None:
        # Cancelling the asyncio twin first means the job's eventual Cancelled exception is never
        # copied into a future nobody reads ("Future exception was never retrieved").
        future.cancel()
        service.worker.cancel(job, reason)

    try:
        while not future.done():
            remaining = deadline - loop.time()
            if remaining <= 0:
                abandon("timed out")
                raise ApiError(504, "timeout", f"no answer within {plan.timeout:g} s; the request was cancelled "
                                               f"and its slot freed", "timeout")
            await asyncio.wait({future}, timeout=min(0.5, remaining))
            if not future.done() and disconnected is not None and await disconnected():
                abandon("client disconnected")
                raise ClientGone()
    except asyncio.CancelledError:  # the client went away (a stream is cancelled by Starlette)
        abandon("client disconnected")
        raise
    try:
        return future.result(), job.queue_seconds
    except Cancelled as exc:
        raise ApiError(504, "timeout", f"cancelled: {exc}", "timeout") from exc


def _sse(event: str, data: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


async def stream(service: Service, plan: Plan) -> AsyncIterator[str]:
    """Server-sent events: accepted, then queued / started / progress as they happen, then result
    (the response body) or error. Closing the connection cancels the request."""
    record = open_record(service, plan)
    events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    loop = asyncio.get_running_loop()

    def emit(event: dict[str, Any]) -> None:
        loop.call_soon_threadsafe(events.put_nowait, event)

    task = asyncio.create_task(execute(service, plan, record, emit))
    getter: asyncio.Future[dict[str, Any]] | None = None
    yield _sse("accepted", {"trace_id": record["trace_id"]})
    try:
        while True:
            getter = asyncio.ensure_future(events.get())
            await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
            if getter.done():
                event = getter.result()
                yield _sse(event["event"], event)
                continue
            getter.cancel()
            while not events.empty():
                event = events.get_nowait()
                yield _sse(event["event"], event)
            break
        try:
            yield _sse("result", task.result())
        except ApiError as exc:
            yield _sse("error", exc.body())
        except Exception as exc:  # an unexpected failure still ends the stream with an error event
            yield _sse("error", {"error": {"type": "internal_error", "message": str(exc), "field": None}})
    finally:
        # A client that goes away closes this generator inside the wait: the pending read of the queue
        # is cancelled too, or asyncio destroys it pending and logs "Task exception was never retrieved".
        if getter is not None and not getter.done():
            getter.cancel()
        if not task.done():
            task.cancel()
