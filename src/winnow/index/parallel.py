"""A large batch of BM25 queries scored on every core: :meth:`.bm25.BM25Index.search_many` shared
between this process and worker processes.

Why processes and not threads: the pruned search (:mod:`.pruning`) is tens of small numpy calls a
query and shard, each too short for numpy to let go of the GIL, so two threads took turns at it
and ran at 0.53x one thread (2M passages in 31 shards, 1,000 queries; docs/benchmarks.md). A worker
(:mod:`.scoring_worker`) opens the same index folder once, when the first large batch comes: its
arrays are memory-mapped, so the workers and this process share one copy of the pages through the
page cache. Workers are started as ``python -m winnow.index.scoring_worker``, not by
multiprocessing: its spawn runs the caller's main script again in each worker (a script without a
``__main__`` guard would start over), and a fork could copy a lock a server's thread holds.

The queries are cut into small chunks; each worker holds at most two at once (one scoring, one
waiting), and this process scores chunks from the other end of the list meanwhile, so a batch never
waits for a worker to start and no core idles at its end. The hits come back as arrays and the
passages are read here, from their rows: the same hits to the bit as one process's (the same code
over the same files, tested). A worker that dies leaves its chunks to this process.
"""

from __future__ import annotations

import os
import pickle
import selectors
import struct
import subprocess
import sys
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from .scoring import Hits

#: The work a batch needs to be shared out, in queries (not already among the index's recent hits)
#: times passages: 128 queries at 2M passages, about a second of scoring on one core. A worker costs
#: about 0.3 s of a core to start and open the index (once per open index), so a batch over a small
#: index (1,000 queries over 10,000 passages: 0.2 s) stays in this process.
PARALLEL_MIN_WORK = 128 * 2_000_000
#: Queries per chunk: small enough that the cores finish together, large enough that sending a
#: chunk (a few hundred bytes out, its hits back) is a small part of scoring it.
CHUNK_QUERIES = 8
#: Chunks a worker holds at once: one scoring and one waiting, so it never idles between them.
CHUNKS_PER_WORKER = 2

#: A frame's length, before its pickled value.
FRAME_LENGTH = struct.Struct("<Q")

Chunk = tuple[int, list[list[str]]]  # the position of its first query in the batch, its queries
ScoreHere = Callable[[list[list[str]], int], list[Hits]]


def write_frame(stream: IO[bytes], value: Any) -> None:
    """``value`` pickled, after its length (8 bytes): a frame :func:`read_frame` reads whole."""
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(FRAME_LENGTH.pack(len(data)) + data)
    stream.flush()


def read_frame(read: Callable[[int], bytes]) -> Any:
    """The value of the next frame, reading exactly its bytes with ``read`` (EOFError: the stream ended).

    Exactly: the replies are read from the pipe itself, not a buffer that could read a second frame
    ahead, where waiting for the pipe to be readable would then wait for ever."""
    (length,) = FRAME_LENGTH.unpack(_exactly(read, FRAME_LENGTH.size))
    return pickle.loads(_exactly(read, length))


def _exactly(read: Callable[[int], bytes], size: int) -> bytes:
    parts, got = [], 0
    while got < size:
        part = read(size - got)
        if not part:
            raise EOFError("the worker's replies ended")
        parts.append(part)
        got += len(part)
    return b"".join(parts)


class ScoringWorker:
    """One worker process with the index open; chunks go out and come back in order."""

    def __init__(self, path: Path, exhaustive: bool) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", f"{__package__}.scoring_worker", str(path),
             "exhaustive" if exhaustive else "pruned"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        self.requests: IO[bytes] = self.process.stdin  # type: ignore[assignment]
        self.replies: IO[bytes] = self.process.stdout  # type: ignore[assignment]
        self.held: deque[Chunk] = deque()

    def send(self, chunk: Chunk, k: int) -> None:
        self.held.append(chunk)  # first: if the worker is gone, the chunk is among those handed back
        write_frame(self.requests, (chunk[1], k))

    def receive(self) -> tuple[int, list[Hits]]:
        """The hits of the oldest chunk held (EOFError or OSError: the worker is gone)."""
        descriptor = self.replies.fileno()
        hits: list[Hits] = read_frame(lambda size: os.read(descriptor, size))
        start, _ = self.held.popleft()
        return start, hits

    def close(self) -> None:
        """End the worker: the end of its input stops it; one that does not stop is killed."""
        for stream in (self.requests, self.replies):
            try:
                stream.close()
            except OSError:
                pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _close_all(workers: list[ScoringWorker]) -> None:
    for worker in workers:
        worker.close()
    workers.clear()


class ScoringPool:
    """``workers`` worker processes with the index at ``path`` open, and a batch shared with them."""

    def __init__(self, path: Path, *, exhaustive: bool, workers: int) -> None:
        """Start the workers (OSError: one could not be started; none is left running)."""
        self._workers: list[ScoringWorker] = []
        try:
            for _ in range(workers):
                self._workers.append(ScoringWorker(path, exhaustive))
        except OSError:
            _close_all(self._workers)
            raise
        # Ended with the index, or at the interpreter's exit.
        self._finalizer = weakref.finalize(self, _close_all, self._workers)

    @property
    def alive(self) -> bool:
        return bool(self._workers)

    def top_k(self, queries: Sequence[list[str]], k: int, score_here: ScoreHere) -> list[Hits]:
        """The hits of every query, in order (see the module notes)."""
        chunks: deque[Chunk] = deque((start, list(queries[start:start + CHUNK_QUERIES]))
                                     for start in range(0, len(queries), CHUNK_QUERIES))
        found: dict[int, list[Hits]] = {}
        with selectors.DefaultSelector() as ready:
            for worker in self._workers:
                ready.register(worker.replies, selectors.EVENT_READ, worker)
            while chunks or any(worker.held for worker in self._workers):
                for worker in list(self._workers):
                    while chunks and len(worker.held) < CHUNKS_PER_WORKER:
                        if not self._use(worker, lambda w: w.send(chunks.popleft(), k), chunks, ready):
                            break
                if chunks:
                    start, chunk = chunks.pop()
                    found[start] = score_here(chunk, k)
                timeout = 0 if chunks else None
                for key, _ in ready.select(timeout) if self._workers else []:
                    self._use(key.data, lambda w: self._keep(w.receive(), found), chunks, ready)
        return [hits for start in sorted(found) for hits in found[start]]

    @staticmethod
    def _keep(reply: tuple[int, list[Hits]], found: dict[int, list[Hits]]) -> None:
        start, hits = reply
        found[start] = hits

    def _use(self, worker: ScoringWorker, action: Callable[[ScoringWorker], Any], chunks: deque[Chunk],
             ready: selectors.BaseSelector) -> bool:
        """Do ``action`` with ``worker``; if it is gone, its chunks come back to ``chunks`` (for this
        process) and it leaves the pool. Whether it was alive."""
        try:
            action(worker)
            return True
        except (EOFError, OSError, pickle.UnpicklingError):
            ready.unregister(worker.replies)
            chunks.extend(worker.held)
            worker.held.clear()
            self._workers.remove(worker)
            worker.close()
            return False

    def close(self) -> None:
        """End the workers."""
        self._finalizer()
