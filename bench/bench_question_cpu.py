"""The client's CPU per question, per method (not a test: it prints figures). Issue 28.

One process asks the questions one after another through the one-question path
(:func:`winnow.evaluation.answering.answered_batch`) against ``bench/loadtest_server.py`` answering at once,
over the wiki-vital BM25 index, so the CPU of the process (user + system, every thread: retrieval,
prompts, fitting, the HTTP client, the question's record) is what the client spends per question and
per call, with no server to wait for. That cost decides how fast a client refills a server's slots
when a wave of answers comes back together (docs/benchmarks.md, "where the slots are still lost").

Usage: .venv/bin/python bench/bench_question_cpu.py [--questions 500] [--warm-up 50]
       [--methods vanilla rankrag mainrag rrr rankgpt]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_cluster import LoadServer  # noqa: E402
from bench_scheduler import prepare  # noqa: E402


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(method: str, url: str, index: Path, queries: Path, questions: int, warm_up: int) -> dict:
    from winnow.datasets import read_qa_jsonl
    from winnow.evaluation.answering import answered_batch, dispatch_stats
    from winnow.pipeline import Pipeline
    from winnow.run_spec import RunOptions, resolve_run

    spec = resolve_run(RunOptions(method=method, backend="openai", model="loadtest", base_url=(url,),
                                  max_inflight=8))
    items = read_qa_jsonl(queries)[:warm_up + questions]
    with Pipeline(spec, index, cache=False) as pipeline:
        for item in items[:warm_up]:  # caches, connections and code warm
            answered_batch(pipeline, spec, [item])
        calls = sum(found["calls"] for found in dispatch_stats(pipeline.llms))
        cpu, wall = cpu_seconds(), time.perf_counter()
        for item in items[warm_up:]:
            answered_batch(pipeline, spec, [item])
        cpu, wall = cpu_seconds() - cpu, time.perf_counter() - wall
        calls = sum(found["calls"] for found in dispatch_stats(pipeline.llms)) - calls
    asked = len(items) - warm_up
    return {"method": method, "questions": asked, "calls": calls, "cpu_ms_per_question": 1000 * cpu / asked,
            "cpu_ms_per_call": 1000 * cpu / max(1, calls), "wall_ms_per_question": 1000 * wall / asked}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=500)
    parser.add_argument("--warm-up", type=int, default=50)
    parser.add_argument("--methods", nargs="+", default=["vanilla", "rankrag", "mainrag", "rrr", "rankgpt"])
    parser.add_argument("--work", type=Path, default=Path("/tmp/winnow-bench-sched"))
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    index, queries = prepare(args.work, 1000)
    server = LoadServer(64, argparse.Namespace(base_latency=0.0, prefill_rate=1e12, decode_rate=1e12))
    print(f"{'method':8} {'questions':>9} {'calls':>7} {'CPU ms/question':>16} {'CPU ms/call':>12} "
          f"{'wall ms/question':>17}", flush=True)
    try:
        for method in args.methods:
            row = measure(method, f"{server.url}/v1", index, queries, args.questions, args.warm_up)
            print(f"{method:8} {row['questions']:>9} {row['calls']:>7} {row['cpu_ms_per_question']:>16.2f} "
                  f"{row['cpu_ms_per_call']:>12.2f} {row['wall_ms_per_question']:>17.2f}", flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
