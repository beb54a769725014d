"""How fast one Winnow process can issue LLM calls (not a test: it prints figures). Issue 28.

Starts ``bench/loadtest_server.py`` (C slots, each call holding its slot ``--latency`` seconds; the
prefill and decode rates set so high that the latency is the whole call) and, in a fresh process per
run, sends ``--calls`` choice-scoring calls (the call RankRAG, MAIN-RAG and RRR make most) through
``OpenAICompatibleBackend.choice_logprobs`` with ``--max-inflight C``. Each prompt is a distinct
~1.5 KB chat prompt, like a question with one passage.

For each run: calls/s, the client's CPU milliseconds per call (user + system time of the client
process over the calls, all its threads), the load-test server's CPU ms per call, and the server's
slot utilisation over its span. With ``--latency 0`` the server answers at once, so calls/s is the
ceiling of client and server together on this machine; at 200 ms and C=64 the server can take 320
calls/s, and the question is whether the client keeps it full.

Each ``--ref`` (a git revision, e.g. ``main``) runs the same client code from that revision's
``src/`` (exported with ``git archive``), so before/after come from one invocation on the same
load; ``.`` is this working tree.

Usage: .venv/bin/python bench/bench_client.py [--calls 3000] [--capacity 64] [--latencies 0.2 0]
       [--refs main .] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_cluster import ROOT, LoadServer  # noqa: E402

CLIENT = r"""
import json, resource, sys, time
from winnow.llm.openai_http import OpenAICompatibleBackend

url, calls, inflight = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
filler = "The passage talks about rivers, mountains and the cities built beside them. " * 18
prompts = [[{"role": "system", "content": "Judge whether the passage answers the question."},
            {"role": "user", "content": f"Question {i}: where is it?\nPassage: {filler}\nAnswer True or False."}]
           for i in range(calls)]
backend = OpenAICompatibleBackend("loadtest", base_url=url, max_inflight=inflight, timeout=60)
backend.choice_logprobs(prompts[:inflight], ["True", "False"])  # connections opened, code warm
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
cpu0, wall0 = cpu(), time.perf_counter()
scores = backend.choice_logprobs(prompts, ["True", "False"])
wall, used = time.perf_counter() - wall0, cpu() - cpu0
backend.close()
assert len(scores) == calls
print(json.dumps({"wall": wall, "cpu": used}))
"""


def process_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def source_of(ref: str, work: Path) -> Path:
    """The ``src/`` folder of git revision ``ref`` (``.``: this working tree), compiled to bytecode as
    an installed package is (``pip install`` compiles it; where PYTHONDONTWRITEBYTECODE is set, a
    source tree would otherwise be compiled again by every process, about 0.5 s of start-up)."""
    if ref == ".":
        source = ROOT / "src"
    else:
        folder = work / f"src-{ref.replace('/', '_')}"
        if not folder.exists():
            folder.mkdir(parents=True)
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "src"], check=True,
                                     capture_output=True)
            subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
        source = folder / "src"
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(source)], check=True, capture_output=True)
    return source


def run_client(server: LoadServer, src: Path, calls: int, inflight: int) -> dict:
    server.reset()
    server_cpu = process_cpu_seconds(server.process.pid)
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run([sys.executable, "-c", CLIENT, f"{server.url}/v1", str(calls), str(inflight)],
                          capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    client = json.loads(done.stdout.strip().splitlines()[-1])
    server_cpu = process_cpu_seconds(server.process.pid) - server_cpu
    stats = server.stats()
    return {"calls_per_second": calls / client["wall"], "client_cpu_ms_per_call": 1000 * client["cpu"] / calls,
            "server_cpu_ms_per_call": 1000 * server_cpu / stats["calls"], "utilisation": stats["utilisation"],
            "max_in_slots": stats["max_in_slots"], "wall": client["wall"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--capacity", type=int, default=64)
    parser.add_argument("--latencies", type=float, nargs="+", default=[0.2, 0.0])
    parser.add_argument("--refs", nargs="+", default=["main", "."])
    parser.add_argument("--repeats", type=int, default=3, help="runs per row; the best is shown (shared CPU)")
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="winnow-bench-client-"))
    sources = {ref: source_of(ref, work) for ref in args.refs}
    load = os.getloadavg()
    print(f"{args.calls} calls per run, C={args.capacity}, best of {args.repeats}; load average at start "
          f"{load[0]:.1f} on {os.cpu_count()} cores", flush=True)
    print(f"{'latency':>8} {'ref':>8} {'calls/s':>8} {'client ms/call':>15} {'server ms/call':>15} "
          f"{'utilisation':>12} {'max in slots':>13}", flush=True)
    rows = []
    for latency in args.latencies:
        server = LoadServer(args.capacity, argparse.Namespace(base_latency=latency, prefill_rate=1e12,
                                                              decode_rate=1e12))
        try:
            for ref, src in sources.items():
                runs = [run_client(server, src, args.calls, args.capacity) for _ in range(args.repeats)]
                best = max(runs, key=lambda r: r["calls_per_second"])
                best.update(latency=latency, ref=ref, runs=[round(r["calls_per_second"], 1) for r in runs])
                rows.append(best)
                print(f"{latency:>8.3f} {ref:>8} {best['calls_per_second']:>8.0f} "
                      f"{best['client_cpu_ms_per_call']:>15.2f} {best['server_cpu_ms_per_call']:>15.2f} "
                      f"{best['utilisation']:>12.1%} {best['max_in_slots']:>13}", flush=True)
        finally:
            server.stop()
    if args.json_out:
        args.json_out.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
