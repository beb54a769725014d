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
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

QUERY_SEED = 7
THREADS = 1
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


# One configuration in a fresh interpreter under /usr/bin/time -v, so its peak resident memory is
# its own: load the stored vectors (memory-mapped float16, as an index stores them), build (ANN
# kinds), then search every query in one batch for each search setting; rows go to an .npy file.
WORKER = r"""
import json, sys, time
import numpy as np
from winnow.index.ann import AnnSearcher, ann_settings, build_ann, file_name
from winnow.index.scoring import highest
from winnow.index.vectors import inner_products

vectors_path, queries_path, kind, build_json, search_json, out = sys.argv[1:7]
stored = np.load(vectors_path, mmap_mode="r")
queries = np.load(queries_path)
k = 100
report = {"rows": len(stored)}
if kind == "exact":
    rows = np.arange(len(stored))
    started = time.perf_counter()
    found = []
    for start in range(0, len(queries), 64):
        scores = inner_products(queries[start:start + 64], stored, None)
        found += [highest(rows, row, k).rows for row in scores]
    report["search_s"] = time.perf_counter() - started
    np.save(out + "-exact.npy", np.stack(found))
else:
    settings = ann_settings(kind, json.loads(build_json))
    from pathlib import Path
    path = Path(out).parent / file_name(kind)
    described = build_ann(stored, None, settings, path)
    report["build_s"] = described["seconds"]
    report["settings"] = described["settings"]
    import os
    report["file_mb"] = os.path.getsize(path) / 1e6
    report["searches"] = []
    searcher = AnnSearcher.open(path.parent, {"kind": kind, "settings": described["settings"]}, stored, None)
    for number, overrides in enumerate(json.loads(search_json)):
        searcher.tune(overrides)
        started = time.perf_counter()
        found, _ = searcher.search(queries, k)
        report["searches"].append({"overrides": overrides, "search_s": time.perf_counter() - started})
        np.save(f"{out}-{kind}-{number}.npy", found)
print(json.dumps(report))
"""


def load_vectors(work: Path, passages: int | None) -> np.ndarray:
    shards = sorted((work / "shards").glob("*.npy"))
    vectors = np.concatenate([np.load(path) for path in shards])
    return vectors[:passages] if passages else vectors


def synthetic_rows(real: np.ndarray, total: int, seed: int = 3) -> np.ndarray:
    """``real`` followed by made-up rows up to ``total``: each the normalised sum of two random real
    rows with random weights in [0.2, 1] plus Gaussian noise of norm about 0.1. Such rows lie among
    the real ones, as unseen passages of the same topics would, but they are not encodings of text:
    figures on them are labelled synthetic."""
    rng = np.random.default_rng(seed)
    extra = total - len(real)
    out = np.empty((total, real.shape[1]), dtype=np.float32)
    out[:len(real)] = real
    for start in range(0, extra, 65_536):
        n = min(65_536, extra - start)
        a, b = rng.integers(0, len(real), n), rng.integers(0, len(real), n)
        mixed = (rng.uniform(0.2, 1, (n, 1)) * real[a] + rng.uniform(0.2, 1, (n, 1)) * real[b]
                 + rng.normal(0, 0.1 / np.sqrt(real.shape[1]), (n, real.shape[1])))
        out[len(real) + start:len(real) + start + n] = mixed / np.linalg.norm(mixed, axis=1, keepdims=True)
    return out


def timed_worker(args: list[str]) -> tuple[dict[str, Any], float]:
    """Run WORKER under /usr/bin/time -v; its JSON report and peak resident memory in MB."""
    # One thread for BLAS and OpenMP (faiss): on a machine shared with other jobs, OpenMP's spinning
    # threads made IVF-PQ training 8.6x slower with 2 threads than with 1 (55.7 s against 6.5 s).
    env = {**os.environ, "OMP_NUM_THREADS": str(THREADS), "OPENBLAS_NUM_THREADS": str(THREADS),
           "MKL_NUM_THREADS": str(THREADS)}
    done = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-c", WORKER, *args], capture_output=True,
                          text=True, check=False, env=env)
    if done.returncode != 0:
        raise SystemExit(f"worker failed: {done.stderr[-3000:]}")
    peak = next(int(line.split(":")[1]) for line in done.stderr.splitlines() if "Maximum resident set size" in line)
    return json.loads(done.stdout.strip().splitlines()[-1]), peak / 1024


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(f.tolist()) & set(t.tolist())) / len(t) for f, t in zip(found, truth,
                                                                                          strict=True)]))


def ann(args: argparse.Namespace) -> None:
    work = Path(args.workdir)
    real = load_vectors(work, args.passages)
    vectors = synthetic_rows(real, args.synthetic) if args.synthetic else real
    label = f"{len(real)} real" + (f" + {len(vectors) - len(real)} synthetic" if args.synthetic else "")
    queries = np.load(work / "queries.npy")
    run = work / f"ann-{len(vectors)}-t{THREADS}"
    run.mkdir(exist_ok=True)
    stored = run / "vectors.npy"
    np.save(stored, vectors.astype(np.float16))  # as an index stores them (float16 default)
    base = str(run / "out")
    results: dict[str, Any] = {"rows": len(vectors), "label": label, "queries": len(queries), "k": 100,
                               "vectors_mb": stored.stat().st_size / 1e6, "cpu": os.cpu_count(),
                               "load1": os.getloadavg()[0], "threads": THREADS}
    report, peak = timed_worker([str(stored), str(work / "queries.npy"), "exact", "{}", "[]", base])
    results["exact"] = {**report, "peak_rss_mb": peak, "qps": len(queries) / report["search_s"]}
    truth = np.load(base + "-exact.npy")
    print(f"exact: {results['exact']['qps']:.1f} q/s, peak {peak:.0f} MB", file=sys.stderr)
    for kind, build, searches in (("hnsw", json.loads(args.hnsw), json.loads(args.hnsw_search)),
                                  ("ivfpq", json.loads(args.ivfpq), json.loads(args.ivfpq_search))):
        if kind not in args.kinds.split(","):
            continue
        report, peak = timed_worker([str(stored), str(work / "queries.npy"), kind, json.dumps(build),
                                     json.dumps(searches), base])
        for number, search in enumerate(report["searches"]):
            search["recall_at_100"] = recall(np.load(f"{base}-{kind}-{number}.npy"), truth)
            search["qps"] = len(queries) / search["search_s"]
            search["speedup"] = results["exact"]["search_s"] / search["search_s"]
            print(f"{kind} {search['overrides']}: recall@100 {search['recall_at_100']:.4f}, "
                  f"{search['qps']:.1f} q/s ({search['speedup']:.1f}x exact)", file=sys.stderr)
        results[kind] = {**report, "peak_rss_mb": peak}
        print(f"{kind}: built in {report['build_s']:.1f} s, {report['file_mb']:.1f} MB, peak {peak:.0f} MB",
              file=sys.stderr)
    results["load1_after"] = os.getloadavg()[0]
    name = f"ann-{len(vectors)}-t{THREADS}-{args.kinds.replace(',', '-')}.json"
    (work / name).write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


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
    search = phases.add_parser("ann")
    search.add_argument("--workdir", required=True)
    search.add_argument("--passages", type=int, default=None, help="use only the first N real rows")
    search.add_argument("--synthetic", type=int, default=None, help="add synthetic rows up to N (labelled)")
    search.add_argument("--kinds", default="hnsw,ivfpq", help="which ANN kinds to build")
    search.add_argument("--hnsw", default="{}", help='build settings as JSON, e.g. {"M": 32}')
    search.add_argument("--hnsw-search", default='[{"efSearch": 128}, {"efSearch": 256}, {"efSearch": 512}]')
    search.add_argument("--ivfpq", default="{}")
    search.add_argument("--ivfpq-search", default='[{"nprobe": 32}, {"nprobe": 64}, {"nprobe": 128}]')
    args = parser.parse_args()
    if args.phase == "encode":
        encode(args)
    else:
        ann(args)


if __name__ == "__main__":
    main()
