"""``winnow eval --engine ray`` against the single-process engine (not a test: it prints figures).
Issue 16's Ray benchmark.

Starts ``bench/loadtest_server.py`` (a GPU inference server modelled as C concurrent sequences, see
there) and a one-node Ray cluster on 127.0.0.1 with one CPU per worker, then runs ``winnow eval``
of Q wiki-vital QA test questions over the 10k wiki-vital corpus (rankrag, N=20, ``--backend
openai`` against the load-test server) three ways:

* local: the single-process engine;
* ray: ``--engine ray --ray-workers W``, the same questions shared out over W workers;
* ray, killed: the same, its driver killed with SIGKILL once a third of the questions are written,
  then the same command again; counts the questions lost (selected but never written) and
  answered twice (written more than once), and checks the answers equal the uninterrupted run's.

Each run is a new run folder with the call cache off, so every run pays for every call.

Usage: .venv/bin/python bench/bench_ray.py [--questions 200] [--workers 2] [--capacity 64]
       [--loadtest bench/loadtest_server.py] [--eval-arg=--max-inflight --eval-arg=32]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from ray_head import SRC, free_port, ray_head  # noqa: E402


def winnow_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "winnow.cli", *args]


def prepare(work: Path) -> tuple[Path, Path]:
    """The wiki-vital index and the wiki-vital QA test questions, built once under ``work``."""
    index, qa = work / "wiki-index", work / "qa"
    if not (index / "manifest.json").exists():
        subprocess.run(winnow_command("index", "wiki-vital", "--out", str(index)), check=True)
    if not (qa / "test.jsonl").exists():
        subprocess.run(winnow_command("bench-data", "build", "--out", str(qa)), check=True)
    return index, qa / "test.jsonl"


def start_loadtest(script: Path, args: argparse.Namespace) -> tuple[subprocess.Popen, str]:
    port = free_port()
    server = subprocess.Popen([sys.executable, str(script), "--port", str(port), "--capacity", str(args.capacity),
                               "--base-latency", str(args.base_latency), "--prefill-rate", str(args.prefill_rate),
                               "--decode-rate", str(args.decode_rate)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            httpx.get(f"{url}/stats", timeout=1)
            return server, url
        except httpx.TransportError:
            time.sleep(0.1)
    server.terminate()
    raise RuntimeError(f"the load-test server ({script}) did not start")


def ids_written(out: Path) -> list[str]:
    path = out / "answers.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["id"] for line in path.read_text().splitlines() if line.strip()]


def answers(out: Path) -> dict[str, tuple]:
    lines = [json.loads(line) for line in (out / "answers.jsonl").read_text().splitlines() if line.strip()]
    return {r["id"]: (r["answer"], r["final"]["ids"]) for r in lines}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--capacity", type=int, default=64)
    parser.add_argument("--base-latency", type=float, default=0.25)
    parser.add_argument("--prefill-rate", type=float, default=4000.0)
    parser.add_argument("--decode-rate", type=float, default=40.0)
    parser.add_argument("--loadtest", type=Path, default=ROOT / "bench" / "loadtest_server.py")
    parser.add_argument("--eval-arg", action="append", default=[], help="passed on to every `winnow eval`")
    parser.add_argument("--work", type=Path, default=Path("/tmp/winnow-bench-ray"))
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args()
    if not args.loadtest.exists():
        sys.exit(f"{args.loadtest} not found: give the load-test server with --loadtest")
    os.environ["PYTHONPATH"] = str(SRC)
    args.work.mkdir(parents=True, exist_ok=True)
    index, queries = prepare(args.work)
    server, url = start_loadtest(args.loadtest, args)
    results: dict[str, dict] = {}
    try:
        with ray_head(cpus=args.workers) as address:
            def command(out: Path, engine: str) -> list[str]:
                extra = ["--engine", "ray", "--ray-address", address, "--ray-workers", str(args.workers)] \
                    if engine == "ray" else []
                return winnow_command("eval", "--index", str(index), "--queries", str(queries), "--out", str(out),
                                      "--method", "rankrag", "--n", "20", "--backend", "openai", "--model",
                                      "loadtest", "--base-url", f"{url}/v1", "--limit", str(args.questions),
                                      "--batch-size", str(args.batch_size), "--no-cache", *extra, *args.eval_arg)

            runs = args.work / "runs" / str(time.time_ns())
            for engine in ("local", "ray"):
                started = time.perf_counter()
                subprocess.run(command(runs / engine, engine), check=True, capture_output=True)
                wall = time.perf_counter() - started
                results[engine] = {"questions": len(ids_written(runs / engine)), "wall_seconds": round(wall, 1),
                                   "questions_per_second": round(args.questions / wall, 3)}
                print(f"{engine:6} {args.questions} questions in {wall:6.1f} s: "
                      f"{args.questions / wall:.2f} questions/s", flush=True)

            killed = runs / "ray-killed"
            driver = subprocess.Popen(command(killed, "ray"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            while len(ids_written(killed)) < args.questions // 3:
                if driver.poll() is not None:
                    raise RuntimeError("the run ended before it could be killed")
                time.sleep(0.05)
            driver.send_signal(signal.SIGKILL)
            driver.wait()
            before = len(ids_written(killed))
            subprocess.run(command(killed, "ray"), check=True, capture_output=True)
            written = ids_written(killed)
            lost = args.questions - len(set(written))
            twice = len(written) - len(set(written))
            same = answers(killed) == answers(runs / "ray")
            results["ray_killed"] = {"written_before_kill": before, "lost": lost, "answered_twice": twice,
                                     "answers_equal_uninterrupted": same}
            print(f"killed after {before} written; after the resume: {lost} lost, {twice} answered twice, "
                  f"answers {'equal to' if same else 'DIFFERENT from'} the uninterrupted run", flush=True)
    finally:
        server.terminate()
        server.wait(timeout=10)
    speedup = results["ray"]["questions_per_second"] / results["local"]["questions_per_second"]
    results["speedup"] = round(speedup, 2)
    results["settings"] = {key: (str(value) if isinstance(value, Path) else value) for key, value in vars(args).items()}
    print(f"ray / local: {speedup:.2f}x")
    if args.json_out:
        args.json_out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
