"""Where a `winnow serve` process is in its life, for /readyz, /metrics and the routes.

``starting`` (the index is opening and the models loading: the port already answers, /healthz says
so, /readyz and the API answer 503), ``ready`` (a :class:`~winnow.service.engine.Service` is there),
``draining`` (SIGTERM: requests in flight finish within ``--drain-seconds``, /readyz answers 503 so a
load balancer sends nothing new), ``failed`` (the index or a model could not be opened: the server
stops and the command reports why). Liveness (/healthz) and readiness (/readyz) are kept apart as an
orchestrator expects: a replica that is alive but not ready is taken out of rotation, not restarted.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Callable

from .limits import ApiError

if TYPE_CHECKING:
    from .engine import Service

STARTING, READY, DRAINING, FAILED = "starting", "ready", "draining", "failed"


class Lifecycle:
    """The phase of one server, and its :class:`Service` once open. Changed from the opening thread
    and the signal handler, read by the request handlers."""

    def __init__(self, service: Service | None = None) -> None:
        self.service = service
        self.phase = READY if service is not None else STARTING
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._on_open: list[Callable[[Service], None]] = []

    def when_open(self, callback: Callable[[Service], None]) -> None:
        """Call ``callback`` with the service once it is open (now, if it is)."""
        with self._lock:
            self._on_open.append(callback)
            service = self.service
        if service is not None:
            callback(service)

    def opened(self, service: Service) -> None:
        with self._lock:
            self.service = service
            if self.phase == STARTING:
                self.phase = READY
            callbacks = list(self._on_open)
        for callback in callbacks:
            callback(service)

    def failed(self, error: BaseException) -> None:
        with self._lock:
            self.error, self.phase = error, FAILED

    def drain(self) -> None:
        with self._lock:
            self.phase = DRAINING

    def readiness(self) -> tuple[bool, ApiError | None]:
        """(True, None) when the server should get traffic, else (False, the 503 saying why)."""
        phase, service = self.phase, self.service
        if phase == DRAINING:
            return False, ApiError(503, "draining", "the server is shutting down: requests in flight finish, "
                                                    "new ones go to another replica")
        if phase == FAILED:
            return False, ApiError(503, "failed", f"the server could not open its index or models: {self.error}")
        if service is None:
            return False, ApiError(503, "starting", "the server is opening its index and loading its models",
                                   headers={"Retry-After": "5"})
        problem = service.readiness_problem()
        return problem is None, problem

    def require_service(self) -> Service:
        """The open service, or the 503 a request gets while the server is starting."""
        service = self.service
        if service is None:
            raise self.readiness()[1] or ApiError(503, "starting", "the server is starting")
        return service
