"""Encoding an index's passages on a Ray cluster against one process (not a test: it prints figures).
Issue 27 item 5's benchmark.

Takes the first P wiki-vital summaries (real text, ~77 words each) into a BM25 index, then embeds
them with the packaged all-MiniLM-L6-v2 (int8 ONNX, one thread per encoder) two ways, in shards of
S passages:

* local: one process (:func:`winnow.index.add_dense_embeddings`);
* ray: a one-node Ray cluster on 127.0.0.1 with W CPUs, W workers of one CPU each
  (``ray=RayEncoding(...)``, what ``winnow index --dense --engine ray`` runs).

Prints each worker's passages per second of wall clock and per CPU-second (the comparable figure
on a shared machine), the load average before and after, whether the two indexes' embeddings agree,
and what 21M passages would take at the measured rate per worker.

Usage: .venv/bin/python bench/bench_ray_encoding.py [--passages 1200] [--workers 2] [--shard-rows 100]
       [--workdir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from ray_head import ray_head  # noqa: E402

from winnow.corpus import load_corpus  # noqa: E402
from winnow.index import add_dense_embeddings, build_bm25_index, load_embedder  # noqa: E402
from winnow.index.ray_encoding import RayEncoding, WorkerRate  # noqa: E402

WIKIPEDIA_PASSAGES = 21_015_324  # DPR's psgs_w100.tsv


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--passages", type=int, default=1200)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--shard-rows", type=int, default=100)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-ray-encoding-"))
    passages = load_corpus("wiki-vital").passages[:args.passages]
    words = np.mean([len(p.text.split()) + len(p.title.split()) for p in passages])
    print(f"{len(passages)} wiki-vital passages, {words:.1f} words each on average (title included); "
          f"shards of {args.shard_rows}; load average before: {load()}")
    bm25 = build_bm25_index(passages, work / "bm25", source="wiki-vital", source_checksum="bench", overwrite=True,
                            progress=False)

    local = shutil.copytree(bm25, work / "local", dirs_exist_ok=False)
    embedder = load_embedder(threads=1)
    started, started_cpu = time.perf_counter(), time.process_time()
    add_dense_embeddings(local, embedder=embedder, shard_rows=args.shard_rows, progress=False)
    wall, cpu = time.perf_counter() - started, time.process_time() - started_cpu
    print(f"local, 1 process, 1 thread: {wall:.1f} s wall ({len(passages) / wall:.1f} passages/s), {cpu:.1f} CPU-s "
          f"({len(passages) / cpu:.1f} passages per CPU-second)")

    rates: list[WorkerRate] = []
    with ray_head(cpus=args.workers) as address:
        shared = shutil.copytree(bm25, work / "ray")
        started = time.perf_counter()
        add_dense_embeddings(shared, embedder=embedder, shard_rows=args.shard_rows, progress=False,
                             ray=RayEncoding(address=address, workers=args.workers), rates=rates)
        total = time.perf_counter() - started
    print(f"ray, {args.workers} workers of 1 CPU: {total:.1f} s wall for the whole command (cluster join, workers "
          f"loading the encoder, embedding, assembling) = {len(passages) / total:.1f} passages/s")
    for rate in sorted(rates, key=lambda r: r.host):
        print(f"  worker {rate.host}: {rate.shards} shards, {rate.passages} passages, {rate.seconds:.1f} s embedding "
              f"= {rate.passages_per_second:.1f} passages/s; {rate.cpu_seconds:.1f} CPU-s = "
              f"{rate.passages / rate.cpu_seconds:.1f} passages per CPU-second")
    same = np.allclose(np.load(local / "dense" / "embeddings.npy").astype(np.float32),
                       np.load(shared / "dense" / "embeddings.npy").astype(np.float32), atol=2e-3)
    print(f"embeddings equal to the single process's (atol 2e-3, float16 rows): {same}")
    per_worker = np.mean([r.passages_per_second for r in rates])
    per_cpu = np.mean([r.passages / r.cpu_seconds for r in rates])
    for label, rate in (("per worker as measured", per_worker), ("per CPU-second", per_cpu)):
        hours = WIKIPEDIA_PASSAGES / rate / 3600
        print(f"21M passages at {rate:.1f} passages/s {label}: {hours:,.0f} worker-hours "
              f"= {hours / 16:,.1f} h on 16 such workers")
    print(f"load average after: {load()}")


if __name__ == "__main__":
    main()
