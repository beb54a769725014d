"""Dense retrieval benchmark: MiniLM encoding rate, and faiss HNSW / IVF-PQ against exact search.

Not a test: it prints figures (docs/benchmarks.md records them). Two phases, each resumable:

* ``encode``: the 10,033 Wikipedia vital-article summaries (the wiki-vital corpus package) cut into
  small passages (consecutive sentences of one article, at least ``--words`` words), shuffled with a
  fixed seed so that any prefix samples every article, are embedded with all-MiniLM-L6-v2 (int8 ONNX,
  Winnow's default encoder) in shards of ``--shard`` passages written atomically under
  ``WORKDIR/shards``; a killed run resumes at the first missing shard. Queries (4-10 leading words of
  random sentences, seeded) are embedded first into ``WORKDIR/queries.npy``. Each shard's wall time
  and process CPU time go to ``WORKDIR/encode-log.jsonl``, so the rate is known per wall second and
  per CPU second (on a machine shared with other jobs the two differ a lot).
* ``ann``: the finished shards (or the first ``--passages`` rows) are searched exactly (inner
  product, numpy, float32) and through faiss HNSW and IVF-PQ built with Winnow's own ANN module
  (:mod:`winnow.index.ann`), each in a fresh process under ``/usr/bin/time -v`` for its peak
  resident memory: build time, queries/s (one batch, k = 100), recall@100 against exact, index size.
  ``--synthetic N`` adds rows made from the real ones (see :func:`synthetic_rows`) to reach N for a
  scale check; such figures are labelled synthetic.

Usage: .venv/bin/python bench/bench_dense.py encode --workdir /tmp/dense-bench [--minutes 20]
       .venv/bin/python bench/bench_dense.py ann --workdir /tmp/dense-bench [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

QUERY_SEED = 7
ORDER_SEED = 13


def small_passages(words: int) -> list[str]:
    """wiki-vital summaries cut into runs of consecutive sentences of at least ``words`` words."""
    from winnow.corpus import load_corpus, split_sentences

    texts: list[str] = []
    for passage in load_corpus("wiki-vital").passages:
        current: list[str] = []
        count = 0
        for sentence in split_sentences(passage.text):
            current.append(sentence)
            count += len(sentence.split())
            if count >= words:
                texts.append(f"{passage.title}\n{' '.join(current)}")
                current, count = [], 0
        if current:
            texts.append(f"{passage.title}\n{' '.join(current)}")
    random.Random(ORDER_SEED).shuffle(texts)
    return texts


def query_texts(count: int) -> list[str]:
    from winnow.corpus import load_corpus, split_sentences

    pool = [s for p in load_corpus("wiki-vital").passages for s in split_sentences(p.text) if len(s.split()) >= 6]
    rng = random.Random(QUERY_SEED)
    return [" ".join(rng.choice(pool).split()[:rng.randint(4, 10)]) for _ in range(count)]


def save_atomic(path: Path, array: np.ndarray) -> None:
    temp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with temp.open("wb") as handle:
        np.save(handle, array)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)


def encode(args: argparse.Namespace) -> None:
    from winnow.index.embedder import load_embedder

    work = Path(args.workdir)
    (work / "shards").mkdir(parents=True, exist_ok=True)
    texts = small_passages(args.words)
    embedder = load_embedder(threads=args.threads)
    print(f"{len(texts)} passages of >= {args.words} words, mean {np.mean([len(t.split()) for t in texts]):.1f} "
          f"words; {embedder.threads} threads", file=sys.stderr)
    if not (work / "queries.npy").exists():
        save_atomic(work / "queries.npy", embedder.embed(query_texts(args.queries)))
    deadline = time.monotonic() + args.minutes * 60
    log = (work / "encode-log.jsonl").open("a", encoding="utf-8")
    for number, start in enumerate(range(0, len(texts), args.shard)):
        path = work / "shards" / f"{number:05d}.npy"
        if path.exists():
            continue
        if time.monotonic() > deadline:
            break
        chunk = texts[start:start + args.shard]
        wall, cpu = time.perf_counter(), time.process_time()
        vectors = embedder.embed(chunk)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        save_atomic(path, vectors)
        load = os.getloadavg()[0]
        log.write(json.dumps({"shard": number, "passages": len(chunk), "wall_s": round(wall, 3),
                              "cpu_s": round(cpu, 3), "load1": load,
                              "words": int(sum(len(t.split()) for t in chunk))}) + "\n")
        log.flush()
        print(f"shard {number}: {len(chunk) / wall:.1f} passages/s wall, {len(chunk) / cpu:.1f} per CPU-second, "
              f"load {load:.1f}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    phases = parser.add_subparsers(dest="phase", required=True)
    enc = phases.add_parser("encode")
    enc.add_argument("--workdir", required=True)
    enc.add_argument("--words", type=int, default=30)
    enc.add_argument("--shard", type=int, default=512)
    enc.add_argument("--queries", type=int, default=500)
    enc.add_argument("--minutes", type=float, default=20)
    enc.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.phase == "encode":
        encode(args)


if __name__ == "__main__":
    main()
