"""``winnow eval --engine ray``: the questions of one run shared out over the workers of a Ray cluster.

The driver (the ``winnow eval`` process) keeps everything that makes a run safe to stop: the run
folder, its lock, and the ids already answered. Each worker is a Ray actor that opens the index and
the models once (a :class:`~winnow.pipeline.Pipeline` built from the run's own spec, so every worker
drives the same backend and endpoints) and turns batches of questions into finished
``answers.jsonl`` records by the code the single-process engine runs: against servers the batch's
questions flow (:mod:`.flow`), each on its own, and the worker's queued batches run at once, so no
batch waits for its slowest question; a model in process answers a batch together
(:func:`~winnow.evaluation.runner.answer_batch`). The driver keeps :data:`QUEUED_PER_WORKER` batches queued on each
worker, so a worker never waits for the driver, and appends each record the moment its batch comes
back (``ray.wait``).

Why this cannot lose or repeat a question: only the driver writes, and it skips an id the folder
already holds (:meth:`~winnow.evaluation.runner.EvalRun.keep`). A driver killed mid-run takes its
actors with it (they belong to its Ray job) and loses only the batches in flight; the same command
reads ``answers.jsonl`` back and asks just those again.

Joining the cluster (its token authentication included) is :mod:`winnow.ray_cluster`'s.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from types import ModuleType
from typing import Any

from ..errors import WinnowError
from ..ray_cluster import check_reachable, token_auth_mode, worker_error
from ..ray_cluster import connect as join_cluster
from ..version import __version__
from .answering import (
    answer_batch,
    answered_batch,
    default_batch_size,
    dispatch_stats,
    merged_dispatch_stats,
    model_identities,
)
from .flow import flow, questions_in_progress, server_capacity
from .runner import EvalRun
from .schema import QuestionRecord

FEATURE = "winnow eval --engine ray"
# One batch running and one waiting per worker: the worker starts the next the moment it finishes,
# and a killed driver has at most two batches per worker to ask again.
QUEUED_PER_WORKER = 2
#: Seconds the driver waits on the workers at a time: between waits a signal to stop is handled.
WAIT_SECONDS = 0.5


__all__ = ["RayEngine", "check_reachable", "connect", "token_auth_mode"]


class QuestionWorker:
    """One Ray worker: an open pipeline that answers batches of questions (wrapped by ``ray.remote``)."""

    def __init__(self, spec: Any, index_dir: str, api_key: str, cache: bool, threads: int) -> None:
        from ..pipeline import Pipeline

        self.spec = spec
        self.error = ""  # why the pipeline did not open, for the driver to report as its own error
        try:
            self.pipeline = Pipeline(spec, index_dir, api_key=api_key, cache=cache, threads=threads)
        except WinnowError as exc:
            self.error = str(exc)

    def describe(self) -> dict[str, Any]:
        """What the driver checks before it sends a question: the Winnow version and the models."""
        found = {"version": __version__, "host": socket.gethostname(), "error": self.error}
        return found if self.error else {**found, "models": model_identities(self.pipeline)}

    def answer(self, batch: Sequence[Any]) -> list[QuestionRecord | tuple[str, str]]:
        """The batch's outcomes. Against model servers its questions flow, as in one process
        (:mod:`.flow`): each asked on its own, as many in progress as fill this worker's
        ``--max-inflight``; a model in process answers the batch together."""
        capacity = server_capacity(self.pipeline)
        if capacity is None:
            return list(answer_batch(self.pipeline, self.spec, batch))
        outcomes: list[QuestionRecord | tuple[str, str]] = []
        flow(batch, lambda item: answered_batch(self.pipeline, self.spec, [item]),
             workers=questions_in_progress(capacity), keep=outcomes.extend)
        return outcomes

    def stale_cache_entries(self) -> int:
        """Cached answers this worker refused as unusable and asked again (the driver reports the sum)."""
        return sum(llm.stale_cache_entries for llm in self.pipeline.llms)

    def dispatch_stats(self) -> list[dict[str, Any]]:
        """This worker's dispatcher statistics per server-backed model (the driver sums them)."""
        return dispatch_stats(self.pipeline.llms)


def connect(address: str | None) -> ModuleType:
    """Join the Ray cluster at ``address`` (``None``: ``RAY_ADDRESS``, or a new one-machine cluster)."""
    return join_cluster(address, FEATURE)


def default_workers(ray: ModuleType) -> int:
    """One worker per live node: a worker is a client of the inference endpoints, not a model server."""
    return max(1, sum(1 for node in ray.nodes() if node.get("Alive")))


class RayEngine:
    """The driver's side: start the workers, hand out batches, keep what comes back (an
    :class:`~winnow.evaluation.engines.Engine`)."""

    def __init__(self, run: EvalRun, *, address: str | None = None, workers: int | None = None,
                 cpus_per_worker: float = 1, batch_size: int | None = None) -> None:
        if workers is not None and workers < 1:
            raise WinnowError(f"--ray-workers must be at least 1 (got {workers})")
        if cpus_per_worker <= 0:
            raise WinnowError(f"--ray-cpus-per-worker must be above 0 (got {cpus_per_worker:g})")
        if batch_size is not None and batch_size < 1:
            raise WinnowError(f"--batch-size must be at least 1 (got {batch_size})")
        self.run = run
        self.address = address
        self.workers = workers
        self.ray: Any = None  # joined at start()
        self.count = workers or 0
        self.cpus = cpus_per_worker
        spec = run.spec
        self.batch_size = batch_size or default_batch_size(spec.backend, spec.slots, spec.max_inflight)
        self.actors: list[Any] = []
        self.hosts: list[str] = []
        self.finished = False  # every batch came back: the workers' counts can be gathered

    def describe(self) -> str:
        return f" in batches of {self.batch_size}"

    def start(self, waiting: Callable[[str], AbstractContextManager[object]]) -> str:
        """Join the cluster, start the workers (each loads the index and models) and check them
        against the run; the line names the workers' hosts."""
        with waiting("joining the Ray cluster"):
            self.ray = connect(self.address)
            self.count = self.workers or default_workers(self.ray)
        with waiting(f"starting {self.count} Ray worker(s) ({self.run.spec.backend})"):
            self._start_workers()
        return f"Ray: {self.count} worker(s) on {', '.join(sorted(set(self.hosts)))}"

    def _start_workers(self) -> None:
        ray = self.ray
        cpus = ray.cluster_resources().get("CPU", 0)
        if self.count * self.cpus > cpus:  # Ray would hold the surplus workers pending, forever
            raise WinnowError(f"{self.count} Ray worker(s) of {self.cpus:g} CPU need {self.count * self.cpus:g} CPUs; "
                              f"the cluster has {cpus:g}", "give fewer --ray-workers or --ray-cpus-per-worker, or "
                                                           "add nodes")
        # SPREAD puts the workers on different nodes when there are several.
        # Against servers a worker's queued batches run at once (their questions flow, and the next
        # batch's fill the slots the last questions of the one before leave idle); a model in
        # process takes one caller, so its batches run one after the other.
        concurrency = QUEUED_PER_WORKER if self.run.spec.backend == "openai" else 1
        worker = ray.remote(num_cpus=self.cpus, max_restarts=0, scheduling_strategy="SPREAD",
                            max_concurrency=concurrency)(QuestionWorker)
        spec, index_dir = self.run.spec, str(Path(self.run.index_dir).resolve())
        threads = max(1, int(self.cpus))  # llama.cpp's CPU threads: the CPUs the worker holds
        self.actors = [worker.remote(spec, index_dir, self.run.api_key, self.run.cache, threads)
                       for _ in range(self.count)]
        try:
            described = ray.get([actor.describe.remote() for actor in self.actors])
        except ray.exceptions.RayError as exc:
            raise WinnowError(f"a Ray worker could not start: {worker_error(exc)}",
                              "every node needs this Winnow, the index folder at the same path and the models "
                              "(or the endpoints) the run uses") from exc
        for found in described:
            if found["error"]:
                raise WinnowError(f"the Ray worker on {found['host']} could not open the run: {found['error']}")
            if found["version"] != __version__:
                raise WinnowError(f"the Ray worker on {found['host']} runs Winnow {found['version']}, the driver "
                                  f"{__version__}", "install the same Winnow on every node")
            if found["models"] != described[0]["models"]:
                raise WinnowError(f"the Ray workers on {described[0]['host']} and {found['host']} loaded different "
                                  "model files", "give every node the same model files")
        self.run.check_model_identities(described[0]["models"])
        self.hosts = [found["host"] for found in described]

    def ask_all(self, pending: Sequence[Any], *, on_answer: Callable[[QuestionRecord], None] | None = None,
                on_failure: Callable[[str, str], None] | None = None) -> None:
        """Ask every pending question on the workers, ``batch_size`` at a time (default
        :func:`~winnow.evaluation.answering.default_batch_size`); append each record as its batch returns."""
        ray, batch_size = self.ray, self.batch_size
        batches = [list(pending[start:start + batch_size]) for start in range(0, len(pending), batch_size)]
        batches.reverse()  # popped from the end: asked in the run's order
        in_flight: dict[Any, tuple[Any, list[Any]]] = {}

        def send(actor: Any) -> None:
            if batches:
                batch = batches.pop()
                in_flight[actor.answer.remote(batch)] = (actor, batch)

        for _ in range(QUEUED_PER_WORKER):
            for actor in self.actors:
                send(actor)
        while in_flight:
            found, _ = ray.wait(list(in_flight), num_returns=1, timeout=WAIT_SECONDS)
            if not found:
                continue
            ready = found[0]
            actor, batch = in_flight.pop(ready)
            try:
                outcomes: list[QuestionRecord | tuple[str, str]] = ray.get(ready)  # QuestionWorker.answer's
            except ray.exceptions.RayActorError as exc:
                # A worker that died (its node lost, out of memory) fails only its batches: they are
                # recorded in errors.jsonl and asked again on resume; the other workers go on.
                reason = f"its Ray worker died: {worker_error(exc)}"
                for item in batch:
                    self.run.failed(item.id, reason, on_failure, backend=False)
                if actor in self.actors:
                    self.actors.remove(actor)
                if not self.actors:
                    raise WinnowError(f"every Ray worker has died; last: {reason}",
                                      "run the same command again to resume") from exc
                continue
            except ray.exceptions.RayError as exc:  # what would have stopped the single-process engine too
                raise WinnowError(f"a Ray worker failed: {worker_error(exc)}") from exc
            for outcome in outcomes:
                if isinstance(outcome, QuestionRecord):
                    self.run.keep(outcome, on_answer)
                else:
                    self.run.failed(*outcome, on_failure)
            send(actor)
        self.finished = True

    def meter(self) -> tuple[int, int]:
        return 0, 0  # the workers' calls are counted where they run; the bar counts finished questions

    def in_flight(self) -> int | None:
        return None

    def notes(self) -> list[str]:
        return []

    def _gathered(self, method: str) -> list[Any]:
        """What each live worker's ``method`` returns, once every batch came back (a worker still
        busy after a stop would hold the call up); a worker that died took its figures with it."""
        found = []
        for reply in ([getattr(actor, method).remote() for actor in self.actors] if self.finished else []):
            try:
                found.append(self.ray.get(reply))
            except self.ray.exceptions.RayError:
                pass  # the run already reports the dead worker's batches
        return found

    def stale_cache_entries(self) -> int:
        """Cached answers the workers refused as unusable and asked again, summed over the live ones."""
        return sum(self._gathered("stale_cache_entries"))

    def dispatch_stats(self) -> list[dict[str, Any]]:
        """Each model's dispatcher statistics, summed over the live workers."""
        per_worker = self._gathered("dispatch_stats")
        return [merged_dispatch_stats(list(model)) for model in zip(*per_worker, strict=True)] if per_worker else []

    def close(self) -> None:
        """Stop the workers and leave the cluster (a cluster this process started is shut down)."""
        if self.ray is None:
            return
        for actor in self.actors:
            self.ray.kill(actor)
        self.actors.clear()
        self.ray.shutdown()

    def __enter__(self) -> RayEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
