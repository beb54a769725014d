"""Keeping a fast inference server full, as a user runs Winnow (not a test: it prints figures). Issue 28.

Starts ``bench/loadtest_server.py`` with C slots and a fixed time per call (``--latency``; prefill and
decode rates set so high that the latency is the whole call: 200 ms at C=64 is 320 calls/s, what a
vLLM server gives for short prompts on a small model) and runs ``winnow eval --backend openai`` of the
wiki-vital QA test questions over the 10k wiki-vital BM25 index with **no flag but --max-inflight C**
(and ``--no-cache``), once per method and per ``--ref`` (a git revision's ``src/``, exported with
``git archive``; ``.`` is this working tree), so before/after come from one invocation under the same
load.

For each run: questions, calls, wall seconds of the whole command, questions/s, calls/s, utilisation
(busy slot-seconds / (C x time)) over the server's span from first call to last (the LLM span) and
over the whole command (process start, index load, retrieval and writing included), the most calls
in slots at once, and the client's CPU ms per call (user + system of the ``winnow eval`` process and
its children, over its calls). ``--trace 0.5`` also prints, under each row, the share of the slots
busy in each half second of the LLM span (where the slots were lost: the start, a dip, the end).

Usage: .venv/bin/python bench/bench_scheduler.py [--questions 467] [--capacity 64] [--latency 0.2]
       [--methods vanilla rankrag mainrag rrr rankgpt] [--refs main .] [--repeats 1] [--trace 0.5]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_client import source_of  # noqa: E402
from bench_cluster import WIKI_VITAL_QA_TEST, LoadServer  # noqa: E402


def winnow(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "winnow.cli", *args], check=True)


def prepare_runs(args: argparse.Namespace) -> tuple[Path, Path, dict[str, Path], LoadServer]:
    """The index and questions under ``args.work``, each ref's source tree, and the load-test server
    (``args.capacity`` slots, ``args.latency`` s a call): what every comparison of refs starts from."""
    args.work.mkdir(parents=True, exist_ok=True)
    index, queries = prepare(args.work, args.questions)
    sources = {ref: source_of(ref, Path(tempfile.mkdtemp(prefix="winnow-bench-src-"))) for ref in args.refs}
    server = LoadServer(args.capacity, argparse.Namespace(base_latency=args.latency, prefill_rate=1e12,
                                                          decode_rate=1e12))
    return index, queries, sources, server


def prepare(work: Path, questions: int) -> tuple[Path, Path]:
    """The wiki-vital index and QA questions under ``work``, built once (NQ-open test questions over
    the same index when more than the 467 of the wiki-vital QA test split are asked)."""
    index, qa = work / "wiki-index", work / "qa"
    if not (index / "manifest.json").exists():
        winnow("index", "wiki-vital", "--out", str(index))
    if questions > WIKI_VITAL_QA_TEST:
        if not (qa / "nq-test.jsonl").exists():
            winnow("data", "export", "nq-test", "--out", str(qa / "nq-test.jsonl"))
        return index, qa / "nq-test.jsonl"
    if not (qa / "test.jsonl").exists():
        winnow("bench-data", "build", "--out", str(qa))
    return index, qa / "test.jsonl"


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_eval(server: LoadServer, src: Path, index: Path, queries: Path, out: Path, method: str, questions: int,
             capacity: int, trace: float | None = None) -> dict:
    server.reset()
    command = [sys.executable, "-m", "winnow.cli", "eval", "--index", str(index), "--queries", str(queries),
               "--out", str(out), "--method", method, "--backend", "openai", "--model", "loadtest",
               "--base-url", f"{server.url}/v1", "--limit", str(questions), "--max-inflight", str(capacity),
               "--no-cache", "--json"]
    cpu = children_cpu()
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(src)})
    ended = time.perf_counter()
    wall = ended - started
    cpu = children_cpu() - cpu
    if done.returncode != 0:
        raise RuntimeError(f"winnow eval failed ({done.returncode}): {done.stderr[-2000:]}")
    answered = json.loads(done.stdout)["questions"]["answered"]
    stats = server.stats(trace)
    return {"questions": answered, "calls": stats["calls"], "wall_seconds": round(wall, 2),
            "questions_per_second": round(answered / wall, 3), "calls_per_second": round(stats["calls"] / wall, 1),
            "utilisation_llm_span": stats["utilisation"],
            "utilisation_command": round(stats["busy_slot_seconds"] / (capacity * wall), 4),
            "max_in_slots": stats["max_in_slots"], "client_cpu_ms_per_call": round(1000 * cpu / stats["calls"], 2),
            "before_first_call_seconds": round(stats["first_start"] - started, 2),
            "after_last_call_seconds": round(ended - stats["last_end"], 2),
            **({"occupancy": stats["occupancy"]} if trace else {})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=WIKI_VITAL_QA_TEST)
    parser.add_argument("--capacity", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--methods", nargs="+", default=["vanilla", "rankrag", "mainrag", "rrr", "rankgpt"])
    parser.add_argument("--refs", nargs="+", default=["main", "."])
    parser.add_argument("--repeats", type=int, default=1, help="runs per row; the best is kept (shared CPU)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/winnow-bench-sched"))
    parser.add_argument("--json-out", type=Path, default=None)
    parser.add_argument("--trace", type=float, default=None, metavar="SECONDS",
                        help="print the share of slots busy per SECONDS of each kept run's LLM span")
    args = parser.parse_args()
    index, queries, sources, server = prepare_runs(args)
    load = os.getloadavg()
    print(f"C={args.capacity}, {args.latency * 1000:.0f} ms a call ({args.capacity / args.latency:.0f} calls/s at "
          f"most), {args.questions} questions, no flag but --max-inflight {args.capacity}; load average at start "
          f"{load[0]:.1f} on {os.cpu_count()} cores; best of {args.repeats}", flush=True)
    print(f"{'method':8} {'ref':>6} {'q':>5} {'calls':>6} {'wall s':>7} {'q/s':>6} {'calls/s':>8} "
          f"{'util(LLM span)':>15} {'util(command)':>14} {'max in slots':>12} {'client ms/call':>15} "
          f"{'to 1st call s':>13} {'after last s':>12}", flush=True)
    rows = []
    try:
        for method in args.methods:
            for ref, src in sources.items():
                runs = [run_eval(server, src, index, queries,
                                 args.work / "runs" / f"{method}-{ref.replace('/', '_')}-{time.time_ns()}", method,
                                 args.questions, args.capacity, args.trace) for _ in range(args.repeats)]
                row = max(runs, key=lambda r: r["utilisation_command"])
                row.update(method=method, ref=ref)
                rows.append(row)
                print(f"{method:8} {ref:>6} {row['questions']:>5} {row['calls']:>6} {row['wall_seconds']:>7.1f} "
                      f"{row['questions_per_second']:>6.2f} {row['calls_per_second']:>8.1f} "
                      f"{row['utilisation_llm_span']:>15.1%} {row['utilisation_command']:>14.1%} "
                      f"{row['max_in_slots']:>12} {row['client_cpu_ms_per_call']:>15.2f} "
                      f"{row['before_first_call_seconds']:>13.2f} {row['after_last_call_seconds']:>12.2f}", flush=True)
                if args.trace:
                    shares = " ".join(f"{share:.0%}" for share in row["occupancy"])
                    print(f"         busy per {args.trace:g} s: {shares}", flush=True)
            pair = [r for r in rows if r["method"] == method]
            if len(pair) == 2:
                print(f"         {method}: {pair[1]['ref']} / {pair[0]['ref']} questions/s = "
                      f"{pair[1]['questions_per_second'] / pair[0]['questions_per_second']:.2f}x", flush=True)
    finally:
        server.stop()
    if args.json_out:
        args.json_out.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
