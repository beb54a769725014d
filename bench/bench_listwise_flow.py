"""A batch of RankGPT questions through the Python API against a fast server: windows in lock-step
against windows that flow question by question (issue 42, item 3). Not a test: it prints figures.

Starts ``bench/loadtest_server.py`` with C slots and a fixed time per call (200 ms at C=64 by default;
it answers a listwise prompt with a ranking, so windows really reorder) and, once per ``--ref`` (a git
revision's ``src/``; ``.`` is this working tree), in a fresh process: ``winnow.open_pipeline(index,
method="rankgpt", backend="openai", max_inflight=C)`` and ``ask_batch`` of the questions (BM25 top 20,
windows of 10 by 5, then the reader), so before and after come from one invocation under one load.

For each run: calls, the batch's wall seconds, utilisation (busy slot-seconds / (C x time)) over the
batch and over the server's span from first call to last, seconds from the process's start to its
first call, and a digest of every question's final listwise order (equal digests: the same rankings).
Then each ref's ratio to the first. The load average is printed at the start and after each run.

Usage: .venv/bin/python bench/bench_listwise_flow.py [--questions 1000] [--capacity 64] [--latency 0.2]
       [--refs main .] [--repeats 1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_cluster import LoadServer  # noqa: E402
from bench_scheduler import prepare_runs  # noqa: E402

CLIENT = r"""
import hashlib, json, sys, time
started = time.perf_counter()
import winnow
index, queries, url, capacity, limit = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
questions = [json.loads(line)["question"] for line in open(queries)][:limit]
with winnow.open_pipeline(index, method="rankgpt", backend="openai", model="loadtest", base_url=url,
                          max_inflight=capacity, cache=False) as rag:
    ready = time.perf_counter()
    answers = rag.ask_batch(questions)
    ended = time.perf_counter()
orders = [[c["id"] for c in next(s for s in a.trace.stages if s.name == "listwise").output] for a in answers]
print(json.dumps({"started": started, "ready": ready, "ended": ended,
                  "digest": hashlib.sha256(json.dumps(orders).encode()).hexdigest()[:16]}))
"""


def run_batch(server: LoadServer, src: Path, index: Path, queries: Path, capacity: int, questions: int) -> dict:
    server.reset()
    done = subprocess.run([sys.executable, "-c", CLIENT, str(index), str(queries), f"{server.url}/v1", str(capacity),
                           str(questions)], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(src)})
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    client = json.loads(done.stdout.strip().splitlines()[-1])
    stats = server.stats()
    batch = client["ended"] - client["ready"]
    return {"calls": stats["calls"], "batch_seconds": round(batch, 2),
            "utilisation_batch": round(stats["busy_slot_seconds"] / (capacity * batch), 4),
            "utilisation_llm_span": stats["utilisation"], "max_in_slots": stats["max_in_slots"],
            "to_first_call_seconds": round(stats["first_start"] - client["started"], 2),
            "digest": client["digest"], "load": round(os.getloadavg()[0], 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--capacity", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--refs", nargs="+", default=["main", "."])
    parser.add_argument("--repeats", type=int, default=1, help="runs per ref, alternating; the best is kept")
    parser.add_argument("--work", type=Path, default=Path("/tmp/winnow-bench-sched"))
    args = parser.parse_args()
    index, queries, sources, server = prepare_runs(args)
    print(f"rankgpt through ask_batch: C={args.capacity}, {args.latency * 1000:.0f} ms a call, {args.questions} "
          f"questions, max_inflight={args.capacity} and nothing else; load average at start "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; best of {args.repeats}", flush=True)
    print(f"{'ref':>8} {'calls':>6} {'batch s':>8} {'util(batch)':>12} {'util(LLM span)':>15} {'max in slots':>12} "
          f"{'to 1st call s':>13} {'load':>5} {'rankings':>17}", flush=True)
    best: dict[str, dict] = {}
    try:
        for _ in range(args.repeats):
            for ref, src in sources.items():
                row = run_batch(server, src, index, queries, args.capacity, args.questions)
                print(f"{ref:>8} {row['calls']:>6} {row['batch_seconds']:>8.2f} {row['utilisation_batch']:>12.1%} "
                      f"{row['utilisation_llm_span']:>15.1%} {row['max_in_slots']:>12} "
                      f"{row['to_first_call_seconds']:>13.2f} {row['load']:>5.1f} {row['digest']:>17}", flush=True)
                if ref not in best or row["utilisation_batch"] > best[ref]["utilisation_batch"]:
                    best[ref] = row
    finally:
        server.stop()
    first, *others = args.refs
    for ref in others:
        a, b = best[first], best[ref]
        print(f"{ref} / {first}: batch seconds {b['batch_seconds'] / a['batch_seconds']:.2f}x, utilisation "
              f"{b['utilisation_batch'] / a['utilisation_batch']:.2f}x, rankings "
              f"{'identical' if a['digest'] == b['digest'] else 'DIFFERENT'}", flush=True)


if __name__ == "__main__":
    main()
