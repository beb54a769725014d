"""Embedding an index's passages over a Ray cluster: one encoder per worker, shards written as they finish.

The driver (``winnow index … --dense --engine ray``, or :func:`~winnow.index.add_dense_embeddings`
given a :class:`RayEncoding`) plans the shards exactly as the single-process path does
(:func:`.embedding_shards.plan_shards`: the same ``plan.json``, shard size and digest-named files),
so a run killed either way resumes either way, and the assembled ``dense/`` is the one a single
process writes (up to the float rounding of another machine's BLAS or a GPU).

The shards still to compute become a ``ray.data`` Dataset of (shard, first row, last row, file),
mapped by a pool of ``workers`` actors (``map_batches`` over a callable class), one shard per call
and per actor at a time. Each actor loads the encoder once (the driver's preset, checked against the
driver's identity), maps the index's passage store, embeds its shard and writes it into the work
folder (whole or not at all, :mod:`winnow.atomic`); the driver hears of each shard as it finishes
(the Dataset is consumed as a stream, order not kept) and advances its progress bar. A killed driver
takes its actors with it; the shards already written are kept and the next run embeds the rest.

Every node must see the index folder and its work folder at the same path (a shared filesystem),
as ``winnow eval --engine ray`` needs the index; a worker that reads other passages there (its
shard's digest differs) is refused in one line. An actor holds ``gpus_per_worker`` GPUs when the
cluster has them and the encoder can use them (a preset run by torch; the packaged MiniLM is ONNX on
the CPU); Ray then sets ``CUDA_VISIBLE_DEVICES`` and the torch runtime finds CUDA.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import WinnowError
from ..extras import import_extra
from ..ray_cluster import connect, worker_error
from .embedding_shards import Shard, ShardRunner, shard_digest, write_shard
from .encoders import DenseEncoder, encoder_for_identity
from .store import PassageStore

FEATURE = "encoding passages on a Ray cluster (--engine ray)"
PACKAGED_PRESET = "minilm"  # ONNX Runtime on the CPU: a GPU would sit idle
ACTORS_START_SECONDS = 900  # for every worker to load its encoder (a hub model read from a cold disk)


@dataclass(frozen=True)
class RayEncoding:
    """Where and how wide to encode: the cluster's ``address`` (None: ``RAY_ADDRESS`` or a new
    local cluster), ``workers`` (None: one per GPU when encoding on GPUs, else one per
    ``cpus_per_worker`` CPUs of the cluster), and ``gpus_per_worker`` (None: 1 when the cluster has
    a GPU for every worker and the encoder runs with torch, else 0)."""

    address: str | None = None
    workers: int | None = None
    cpus_per_worker: float = 1
    gpus_per_worker: float | None = None

    def __post_init__(self) -> None:
        if self.workers is not None and self.workers < 1:
            raise WinnowError(f"--ray-workers must be at least 1 (got {self.workers})")
        if self.cpus_per_worker <= 0:
            raise WinnowError(f"--ray-cpus-per-worker must be above 0 (got {self.cpus_per_worker:g})")
        if self.gpus_per_worker is not None and self.gpus_per_worker < 0:
            raise WinnowError(f"--ray-gpus-per-worker must not be negative (got {self.gpus_per_worker:g})")


@dataclass
class WorkerRate:
    """What one worker did: shards, passages, and the wall-clock and CPU seconds its process spent
    embedding them (passages/s per worker; per CPU-second where the machine is shared)."""

    host: str
    shards: int = 0
    passages: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0

    @property
    def passages_per_second(self) -> float:
        return self.passages / self.seconds if self.seconds > 0 else 0.0


class ShardEncoder:
    """One Ray actor: an encoder and the passage store, turning shards into shard files."""

    def __init__(self, index: str, rows: int, identity: dict[str, Any], threads: int) -> None:
        self.store = PassageStore.open(Path(index), rows, "rebuild the index")
        # The driver's encoder, rebuilt from its identity (a hub preset's recorded models, sizes and
        # limits); on the CPU it uses the CPUs its actor holds, not every core of the node.
        self.encoder = encoder_for_identity(identity, threads=threads)
        mine = self.encoder.identity
        if (mine["sha256"], mine["tokenizer_sha256"]) != (identity["sha256"], identity["tokenizer_sha256"]):
            raise WinnowError(f"the Ray worker on {socket.gethostname()} loaded other encoder files than the driver "
                              f"({mine.get('package')} / {identity.get('package')})",
                              "install the same encoder packages or model files on every node")

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        host = f"{socket.gethostname()}:{os.getpid()}"  # one worker: a process on a node
        seconds, cpu = [], []
        for start, stop, path in zip(batch["start"].tolist(), batch["stop"].tolist(), batch["path"].tolist(),
                                     strict=True):
            passages = [self.store[row] for row in range(start, stop)]
            if not Path(path).name.endswith(f"-{shard_digest(passages)}.npy"):
                raise WinnowError(f"the Ray worker on {host} reads other passages at {self.store.folder} than the "
                                  "driver", "give every node the same index folder at the same path (a shared "
                                        "filesystem)")
            began, began_cpu = time.perf_counter(), time.process_time()
            vectors = self.encoder.embed_passages(passages)
            seconds.append(time.perf_counter() - began)
            cpu.append(time.process_time() - began_cpu)
            write_shard(Path(path), vectors)
        return {"shard": batch["shard"], "rows": batch["stop"] - batch["start"],
                "seconds": np.asarray(seconds, dtype=np.float64), "cpu_seconds": np.asarray(cpu, dtype=np.float64),
                "host": np.asarray([host] * len(seconds))}


def gpus_for(setting: RayEncoding, identity: dict[str, Any], cluster_gpus: float, workers: int | None) -> float:
    """GPUs per actor: the setting's, else 1 where the cluster has one for every worker and the
    encoder can run on one (not the packaged ONNX MiniLM)."""
    if setting.gpus_per_worker is not None:
        return setting.gpus_per_worker
    if identity.get("preset", PACKAGED_PRESET) == PACKAGED_PRESET or cluster_gpus < 1:
        return 0.0
    return 1.0 if workers is None or cluster_gpus >= workers else 0.0


def ray_runner(setting: RayEncoding, passages: Sequence[Any], encoder: DenseEncoder, *,
               report: Callable[[str], None] | None = None,
               rates: list[WorkerRate] | None = None) -> ShardRunner:
    """A :data:`~.embedding_shards.ShardRunner` that computes the pending shards on a Ray cluster.

    ``passages`` must be an index's :class:`PassageStore` (the workers map it from its folder).
    ``rates`` (if given) is filled with each worker's shards, passages and embedding seconds.
    """
    if not isinstance(passages, PassageStore):
        raise WinnowError("encoding on a Ray cluster reads the passages from an index's passage store",
                          "build the index first, then add embeddings to it")
    identity = encoder.identity

    def run(pending: Sequence[Shard], progress: Callable[[int], None]) -> None:
        ray = connect(setting.address, FEATURE)
        try:
            _run_on(ray, setting, passages, identity, pending, progress, report, rates)
        finally:
            ray.shutdown()

    return run


def _run_on(ray: Any, setting: RayEncoding, store: PassageStore, identity: dict[str, Any], pending: Sequence[Shard],
            progress: Callable[[int], None], report: Callable[[str], None] | None,
            rates: list[WorkerRate] | None) -> None:
    resources = ray.cluster_resources()
    cpus, cluster_gpus = float(resources.get("CPU", 0)), float(resources.get("GPU", 0))
    gpus = gpus_for(setting, identity, cluster_gpus, setting.workers)
    if setting.workers is not None:
        workers = setting.workers
    elif gpus > 0:
        workers = max(1, int(cluster_gpus // gpus))
    else:
        workers = max(1, int(cpus // setting.cpus_per_worker))
    workers = min(workers, len(pending))
    if workers * setting.cpus_per_worker > cpus or workers * gpus > cluster_gpus:
        raise WinnowError(f"{workers} Ray worker(s) of {setting.cpus_per_worker:g} CPU and {gpus:g} GPU need "
                          f"{workers * setting.cpus_per_worker:g} CPUs and {workers * gpus:g} GPUs; the cluster has "
                          f"{cpus:g} and {cluster_gpus:g}", "give fewer --ray-workers, or add nodes")
    if report is not None:
        report(f"encoding {len(pending)} shard(s) on {workers} Ray worker(s) "
               f"({setting.cpus_per_worker:g} CPU{f', {gpus:g} GPU' if gpus else ''} each)")
    data = import_extra("ray.data", "ray", FEATURE)  # Ray Data needs pyarrow and pandas: ray[data]
    context = data.DataContext.get_current()
    context.enable_progress_bars = False  # the driver's own bar counts passages
    logging.getLogger("ray.data").setLevel(logging.ERROR)  # and no note that Ray Data's bars are off
    context.print_on_execution_start = False
    # Every worker loads its encoder before the first shard is handed out, so the work is shared from
    # the start, and a worker that cannot load it (or a cluster that cannot hold it) stops the run.
    context.wait_for_min_actors_s = ACTORS_START_SECONDS
    shards = data.from_items([{"shard": s.number, "start": s.start, "stop": s.stop, "path": str(s.path)}
                                  for s in pending], override_num_blocks=len(pending))
    threads = max(1, int(setting.cpus_per_worker))
    # One shard at a time per actor: a shard is minutes of work at full size, and shards queued on a
    # busy actor would leave another idle at the end (or, while it loads its model, at the start).
    pool = data.ActorPoolStrategy(size=workers, max_tasks_in_flight_per_actor=1)
    encoded = shards.map_batches(ShardEncoder, batch_size=1, compute=pool, num_cpus=setting.cpus_per_worker,
                                 num_gpus=gpus, fn_constructor_kwargs={
                                     "index": str(store.folder.parent.resolve()), "rows": len(store),
                                     "identity": identity, "threads": threads})
    by_host: dict[str, WorkerRate] = {}
    try:
        for row in encoded.iter_rows():  # each shard as it finishes, in no particular order
            progress(int(row["rows"]))
            rate = by_host.setdefault(str(row["host"]), WorkerRate(str(row["host"])))
            rate.shards += 1
            rate.passages += int(row["rows"])
            rate.seconds += float(row["seconds"])
            rate.cpu_seconds += float(row["cpu_seconds"])
    except ray.exceptions.GetTimeoutError as exc:
        raise WinnowError(f"the {workers} Ray worker(s) did not all start in {ACTORS_START_SECONDS} s",
                          "check that the cluster has the CPUs and GPUs they ask for (`ray status`)") from exc
    except Exception as exc:  # Ray wraps what a worker raised (RayTaskError, Ray Data's UserCodeException)
        own = winnow_cause(exc)
        if own is not None:  # a worker's own one-line refusal (other encoder files, other passages)
            raise WinnowError(own.message, own.hint) from exc
        if not isinstance(exc, ray.exceptions.RayError):
            raise
        raise WinnowError(f"encoding on the Ray cluster failed: {worker_error(exc)}",
                          "the shards written so far are kept: run the same command again to resume") from exc
    if rates is not None:
        rates.extend(by_host.values())


def winnow_cause(exc: BaseException) -> WinnowError | None:
    """The WinnowError a worker raised, found among the exceptions Ray wrapped it in, else None."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        found = todo.pop()
        if found is None or id(found) in seen:
            continue
        seen.add(id(found))
        if isinstance(found, WinnowError):
            return found
        cause = getattr(found, "cause", None)
        todo.extend([cause if isinstance(cause, BaseException) else None, found.__cause__, found.__context__])
    return None
