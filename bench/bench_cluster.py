"""Cluster utilisation, simulated (not a test: it prints figures). Issue 16's first benchmark.

Starts ``bench/loadtest_server.py`` (a GPU server modelled as C concurrent sequences, see there)
at each capacity, and runs ``winnow eval`` of wiki-vital QA questions over the 10k wiki-vital
corpus with rankrag N=20 and mainrag N=20 against it, two ways side by side:

* old: ``--batch-size 1 --max-inflight 8``, one question at a time with at most 8 calls in flight
  (the behaviour before the batch engine and the dispatcher);
* new: ``--batch-size Q --max-inflight C`` over Q questions (Q = C by default: one batch whose
  stages each have at least C calls).

For each run: questions/s, calls, and the server's utilisation = busy slot-seconds / (C x wall
time), with wall time taken two ways: the server's span from the first call to the last (the LLM
part of the run), and the whole ``winnow eval`` command (process start, index load and retrieval
included). The speed-up is new questions/s over old.

The old path is slow by construction (8 calls at a time), so it runs on fewer questions
(``--old-questions``); questions/s is comparable across counts.

The wiki-vital QA test split holds 467 questions; a larger run (``--questions 1000``) takes NQ-open
test questions (3,610, the source wiki-vital QA was built from) over the same wiki-vital index:
the load on the server is the same, only the answers' quality means nothing there.

Usage: .venv/bin/python bench/bench_cluster.py [--questions Q] [--batch-size B] [--old-questions 2]
       [--capacities 64 256] [--methods rankrag mainrag] [--work /tmp/winnow-bench-cluster]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _winnow(*args: str) -> list[str]:
    return [sys.executable, "-m", "winnow.cli", *args]


#: Questions in the wiki-vital QA test split; beyond it the bench asks NQ-open test questions.
WIKI_VITAL_QA_TEST = 467


def prepare(work: Path) -> tuple[Path, Path]:
    """The wiki-vital index and the wiki-vital QA test questions, built once under ``work``."""
    index, qa = work / "wiki-index", work / "qa"
    if not (index / "manifest.json").exists() and not index.exists():
        subprocess.run(_winnow("index", "wiki-vital", "--out", str(index)), check=True)
    if not (qa / "test.jsonl").exists():
        subprocess.run(_winnow("bench-data", "build", "--out", str(qa)), check=True)
    if not (qa / "nq-test.jsonl").exists():
        subprocess.run(_winnow("data", "export", "nq-test", "--out", str(qa / "nq-test.jsonl")), check=True)
    return index, qa / "test.jsonl"


class LoadServer:
    def __init__(self, capacity: int, args: argparse.Namespace, extra: tuple[str, ...] = ()) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "loadtest_server.py"), "--port", str(self.port),
             "--capacity", str(capacity), "--base-latency", str(args.base_latency),
             "--prefill-rate", str(args.prefill_rate), "--decode-rate", str(args.decode_rate), *extra])
        for _ in range(200):
            try:
                httpx.get(f"{self.url}/stats", timeout=1)
                return
            except httpx.TransportError:
                time.sleep(0.1)
        raise RuntimeError("the load-test server did not start")

    def reset(self) -> None:
        httpx.post(f"{self.url}/stats/reset", timeout=10)

    def stats(self, bins: float | None = None) -> dict:
        """The server's counters; with ``bins``, also the share of slots busy per ``bins`` seconds."""
        params = {"bins": bins} if bins else None
        return httpx.get(f"{self.url}/stats", params=params, timeout=10).json()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


def run_eval(server: LoadServer, index: Path, queries: Path, out: Path, method: str, questions: int,
             batch_size: int, max_inflight: int) -> dict:
    server.reset()
    command = _winnow("eval", "--index", str(index), "--queries", str(queries), "--out", str(out),
                      "--method", method, "--n", "20", "--backend", "openai", "--model", "loadtest",
                      "--base-url", f"{server.url}/v1", "--limit", str(questions), "--batch-size", str(batch_size),
                      "--max-inflight", str(max_inflight), "--no-cache", "--json")
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"winnow eval failed ({done.returncode}): {done.stderr[-2000:]}")
    answered = json.loads(done.stdout)["questions"]["answered"]
    stats = server.stats()
    capacity = stats["capacity"]
    return {"questions": answered, "calls": stats["calls"], "wall_seconds": round(wall, 2),
            "llm_span_seconds": stats["span_seconds"], "questions_per_second": round(answered / wall, 3),
            "utilisation_llm_span": stats["utilisation"],
            "utilisation_command": round(stats["busy_slot_seconds"] / (capacity * wall), 4),
            "max_in_slots": stats["max_in_slots"], "max_waiting": stats["max_waiting"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=0, help="questions for the new path (default: C, "
                                                                     "one batch that fills every slot)")
    parser.add_argument("--batch-size", type=int, default=0, help="new path's --batch-size (default: Q)")
    parser.add_argument("--old-questions", type=int, default=2, help="questions for the old path")
    parser.add_argument("--capacities", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--methods", nargs="+", default=["rankrag", "mainrag"])
    parser.add_argument("--max-inflight", type=int, default=0, help="new path (default: C)")
    # Seconds a call holds its slot: a server with hundreds of sequences in flight decodes each
    # slowly. Long enough that this 2-core machine can issue calls as fast as C slots free up.
    parser.add_argument("--base-latency", type=float, default=4.0)
    parser.add_argument("--prefill-rate", type=float, default=4000.0)
    parser.add_argument("--decode-rate", type=float, default=40.0)
    parser.add_argument("--work", type=Path, default=Path("/tmp/winnow-bench-cluster"))
    parser.add_argument("--json-out", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    os.environ.setdefault("PYTHONPATH", str(ROOT / "src"))
    args.work.mkdir(parents=True, exist_ok=True)
    index, queries = prepare(args.work)
    results = []
    print(f"{'C':>4} {'method':8} {'path':4} {'q':>4} {'calls':>6} {'wall s':>7} {'q/s':>7} {'util(LLM span)':>15} "
          f"{'util(command)':>14} {'max in slots':>12}", flush=True)
    for capacity in args.capacities:
        server = LoadServer(capacity, args)
        try:
            for method in args.methods:
                pair = {}
                new_questions = args.questions or capacity
                for path, questions, batch, inflight in (
                        ("old", args.old_questions, 1, 8),
                        ("new", new_questions, args.batch_size or new_questions, args.max_inflight or capacity)):
                    out = args.work / "runs" / f"c{capacity}-{method}-{path}-{time.time_ns()}"
                    source = queries if new_questions <= WIKI_VITAL_QA_TEST else queries.with_name("nq-test.jsonl")
                    row = run_eval(server, index, source, out, method, questions, batch, inflight)
                    row.update(queries=str(source))
                    row.update(capacity=capacity, method=method, path=path, batch_size=batch, max_inflight=inflight)
                    pair[path] = row
                    results.append(row)
                    print(f"{capacity:>4} {method:8} {path:4} {row['questions']:>4} {row['calls']:>6} "
                          f"{row['wall_seconds']:>7.1f} {row['questions_per_second']:>7.3f} "
                          f"{row['utilisation_llm_span']:>15.1%} {row['utilisation_command']:>14.1%} "
                          f"{row['max_in_slots']:>12}", flush=True)
                speedup = pair["new"]["questions_per_second"] / pair["old"]["questions_per_second"]
                pair["new"]["speedup"] = round(speedup, 1)
                print(f"     {method} at C={capacity}: new/old questions/s = {speedup:.1f}x", flush=True)
        finally:
            server.stop()
    if args.json_out:
        args.json_out.write_text(json.dumps({"settings": {k: str(v) for k, v in vars(args).items()},
                                             "runs": results}, indent=2))


if __name__ == "__main__":
    main()
